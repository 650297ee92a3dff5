//! Master time: the one clock every timed rule of the master is counted on.
//!
//! The master's clock is monotonic and goes on from where the previous
//! master stopped (`STORE-4`): times in the recovered state (lock-delay
//! ends, the time stamped on each logged command) keep their meaning
//! across restarts. Only the master task reads the clock; everything else,
//! the durable core and the soft-state policy alike, is handed `now`.
//!
//! An instant is a [`Millis`]; a length of time is a [`Duration`]. Keeping
//! them apart is what stops a lease's length from being taken for the
//! moment it ends.

use std::fmt;
use std::ops::Add;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// An instant on the master's clock, in whole milliseconds.
///
/// Stored as the number of milliseconds (the store's format is that of a
/// plain integer), compared as instants, and moved only by a [`Duration`]:
///
/// ```
/// use std::time::Duration;
/// use leasehold_server::Millis;
///
/// let granted = Millis::from_millis(1_000);
/// let expires = granted + Duration::from_secs(12);
/// assert_eq!(expires.as_millis(), 13_000);
/// assert_eq!(expires.since(granted), Duration::from_secs(12));
/// assert_eq!(granted.since(expires), Duration::ZERO);
/// ```
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Millis(u64);

impl Millis {
    /// The instant the first master of a data directory started.
    pub const ZERO: Millis = Millis(0);

    /// Later than any instant a master reaches: a timer set for it never
    /// comes due.
    pub const NEVER: Millis = Millis(u64::MAX);

    /// The instant `ms` milliseconds after [`Millis::ZERO`].
    pub const fn from_millis(ms: u64) -> Millis {
        Millis(ms)
    }

    /// Milliseconds since [`Millis::ZERO`].
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// The time from `earlier` to this instant; zero if `earlier` is not
    /// earlier.
    pub fn since(self, earlier: Millis) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

/// Whole milliseconds of `d`, saturating: master time has no finer grain.
pub(crate) fn whole_millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Millis {
    type Output = Millis;

    /// Moves on by `d`, rounded down to whole milliseconds; saturates at
    /// [`Millis::NEVER`].
    fn add(self, d: Duration) -> Millis {
        Millis(self.0.saturating_add(whole_millis(d)))
    }
}

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

/// A session's lease or lock-delay: a length of time in whole
/// milliseconds, up to [`Span::MAX`] (about 49 days), in four bytes, since
/// a master keeps several for each of a million sessions. The store holds
/// it exactly as it holds a [`Duration`], so what earlier versions wrote
/// reads back alike.
///
/// ```
/// use std::time::Duration;
/// use leasehold_server::Span;
///
/// let lease = Span::from(Duration::from_millis(12_000));
/// assert_eq!(Duration::from(lease), Duration::from_secs(12));
/// assert_eq!(Span::from(Duration::from_micros(1_999)).as_millis(), 1);
/// assert_eq!(Duration::from(Span::from(Duration::MAX)), Span::MAX);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Span(u32);

impl Span {
    /// The longest span: `u32::MAX` milliseconds.
    pub const MAX: Duration = Duration::from_millis(u32::MAX as u64);

    /// Whole milliseconds.
    pub const fn as_millis(self) -> u64 {
        self.0 as u64
    }
}

impl From<Duration> for Span {
    /// Rounded down to whole milliseconds; saturates at [`Span::MAX`].
    fn from(d: Duration) -> Span {
        Span(u32::try_from(d.as_millis()).unwrap_or(u32::MAX))
    }
}

impl From<Span> for Duration {
    fn from(span: Span) -> Duration {
        Duration::from_millis(span.as_millis())
    }
}

impl Serialize for Span {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Duration::from(*self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Span {
    /// As [`Span::from`]: a longer span, which versions before spans let a
    /// server configure, reads as [`Span::MAX`] (`STORE-6`), so that a
    /// data directory holding one still opens, whether it is in a
    /// snapshot or in a command replayed from the log.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Span, D::Error> {
        Duration::deserialize(deserializer).map(Span::from)
    }
}

/// Master time `ms`, for tests that spell instants as numbers.
#[cfg(test)]
pub(crate) const fn at(ms: u64) -> Millis {
    Millis(ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode, encode};

    // STORE-6: a span is stored exactly as the Duration earlier versions
    // stored, and read back from those bytes.
    #[test]
    fn a_span_is_stored_as_a_duration_was() {
        let d = Duration::from_millis(12_345);
        assert_eq!(encode(&Span::from(d)), encode(&d));
        assert_eq!(decode::<Span>(&encode(&d)).unwrap(), Span::from(d));
    }

    // STORE-6: a lease longer than a span, which earlier versions let a
    // server configure, reads as the longest span rather than failing the
    // data directory that holds it.
    #[test]
    fn a_stored_duration_longer_than_a_span_reads_as_the_longest() {
        let long = Duration::from_secs(2000 * 3600);
        assert_eq!(
            decode::<Span>(&encode(&long)).unwrap(),
            Span::from(Span::MAX)
        );
    }
}
