//! How long a client waits before it tries again after failures (SPEC
//! `CS-2`): a ceiling of 50 ms doubling to 1 s, and a wait drawn between
//! half the ceiling and all of it.
//!
//! The draw spreads clients that failed at one instant (every session of
//! a master that crashed) over half of each step, so that they do not come
//! back to the new master in waves, all at once, a whole step apart. It is
//! a function of the client's salt and the attempt alone, so a client
//! simulated from a seed waits the same every run.

use std::time::Duration;

/// The ceiling of the first retry's wait.
pub const FIRST_RETRY: Duration = Duration::from_millis(50);

/// The ceiling the waits double up to.
pub const LONGEST_RETRY: Duration = Duration::from_secs(1);

/// The wait before retry number `attempt` (from 1) of the client named by
/// `salt` (any number that differs between clients: a session's id, a
/// connection's index): between half the step's ceiling and all of it.
///
/// ```
/// use std::time::Duration;
/// use leasehold_protocol::backoff::retry_delay;
///
/// let first = retry_delay(1, 7);
/// assert!(first >= Duration::from_millis(25) && first <= Duration::from_millis(50));
/// let late = retry_delay(9, 7);
/// assert!(late >= Duration::from_millis(500) && late <= Duration::from_secs(1));
/// // The same client waits the same at the same attempt.
/// assert_eq!(retry_delay(3, 7), retry_delay(3, 7));
/// ```
pub fn retry_delay(attempt: u32, salt: u64) -> Duration {
    let ceiling = retry_ceiling(attempt);
    let half = ceiling / 2;
    let span = (ceiling - half).as_micros() as u64;
    let drawn = mix(salt ^ u64::from(attempt).wrapping_mul(0x9e37_79b9_7f4a_7c15)) % (span + 1);
    half + Duration::from_micros(drawn)
}

/// The longest wait before retry number `attempt` (from 1).
pub fn retry_ceiling(attempt: u32) -> Duration {
    let doublings = attempt.saturating_sub(1).min(5);
    (FIRST_RETRY * (1u32 << doublings)).min(LONGEST_RETRY)
}

/// SplitMix64's finaliser: neighbouring salts draw unrelated waits.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    // CS-2
    #[test]
    fn the_ceiling_doubles_from_50_ms_to_1_s() {
        let ceilings: Vec<u64> = (1..=8)
            .map(|n| retry_ceiling(n).as_millis() as u64)
            .collect();
        assert_eq!(ceilings, [50, 100, 200, 400, 800, 1000, 1000, 1000]);
    }

    // CS-2
    #[test]
    fn every_wait_lies_between_half_its_ceiling_and_its_ceiling() {
        for attempt in 1..=10 {
            let ceiling = retry_ceiling(attempt);
            for salt in 0..1_000 {
                let wait = retry_delay(attempt, salt);
                assert!(
                    wait >= ceiling / 2 && wait <= ceiling,
                    "{wait:?} at {attempt}"
                );
            }
        }
    }

    // CS-2: a thousand clients that failed together come back spread over
    // the second half of the step, not at one instant.
    #[test]
    fn clients_that_failed_together_are_spread_over_half_the_step() {
        let ceiling = retry_ceiling(6);
        let mut tenths = [0u32; 5];
        for salt in 0..1_000u64 {
            let wait = retry_delay(6, salt);
            let tenth = ((wait - ceiling / 2).as_micros() * 10 / ceiling.as_micros()) as usize;
            tenths[tenth.min(4)] += 1;
        }
        for (i, n) in tenths.iter().enumerate() {
            assert!((120..=280).contains(n), "tenth {i} of the step: {tenths:?}");
        }
    }
}
