//! Gives memory freed after a burst back to the operating system.
//!
//! glibc's allocator keeps what is freed in its arenas for reuse, so a
//! master that served a burst (replies queued up to their budgets, many
//! connections at once) would otherwise keep its peak footprint until it
//! exits. After connections end, at most once per [`TRIM_DELAY`], the
//! master asks the allocator to hand free pages back.

use crate::config::TRIM_DELAY;
use tokio::time::Instant;

/// When the next trim is due, if one is.
#[derive(Debug, Default)]
pub(crate) struct Trim {
    due: Option<Instant>,
}

impl Trim {
    /// A connection ended at `now`: what it held is free now.
    pub(crate) fn connection_ended(&mut self, now: Instant) {
        self.due.get_or_insert(now + TRIM_DELAY);
    }

    /// Resolves when a trim is due; never when none is.
    pub(crate) async fn due(&self) {
        match self.due {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }

    /// Gives free memory back. On the accept loop's task, not the master's,
    /// so leases never wait for it; and not on a blocking thread, which
    /// would make runs in simulated time differ from one to the next.
    pub(crate) fn run(&mut self) {
        self.due = None;
        give_back_free_memory();
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn give_back_free_memory() {
    // SAFETY: malloc_trim only walks the allocator's own structures, under
    // its locks; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn give_back_free_memory() {}
