//! Scratch directories for unit tests, removed when dropped, so that a
//! test run leaves nothing behind in the temporary directory.

use std::ops::Deref;
use std::path::{Path, PathBuf};

/// An empty directory of its own for one test.
pub(crate) struct Scratch(PathBuf);

impl Scratch {
    /// Makes an empty directory named after `name` and this process.
    pub(crate) fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("leasehold-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("make a scratch directory");
        Scratch(dir)
    }
}

impl Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
