//! Durations as people write them: `500ms`, `2s`, `1m`, `1h`.

use std::time::Duration;

/// Parses `<number><unit>` with unit `ms`, `s`, `m` or `h`; the number may
/// have decimals (`1.5s`), down to whole milliseconds.
pub fn parse(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .ok_or_else(|| format!("'{text}' needs a unit: ms, s, m or h (e.g. 500ms, 1.5s)"))?;
    let (number, unit) = text.split_at(split);
    let unit_ms: u128 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(format!("'{unit}' is not a unit: use ms, s, m or h")),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(fraction) || fraction.len() > 9 {
        return Err(format!(
            "'{text}' does not start with a number (e.g. 2s, 1.5s)"
        ));
    }
    let too_long = || format!("'{text}' is too long");
    let whole: u128 = whole.parse().map_err(|_| too_long())?;
    let scale = 10u128.pow(fraction.len() as u32);
    let fraction: u128 = if fraction.is_empty() {
        0
    } else {
        fraction.parse().map_err(|_| too_long())?
    };
    // Exactly, in integers: whole × unit + fraction × unit / scale.
    let fraction_ms = fraction * unit_ms;
    if !fraction_ms.is_multiple_of(scale) {
        return Err(format!("'{text}' is finer than a millisecond"));
    }
    let millis = whole
        .checked_mul(unit_ms)
        .and_then(|ms| ms.checked_add(fraction_ms / scale))
        .and_then(|ms| u64::try_from(ms).ok())
        .ok_or_else(too_long)?;
    Ok(Duration::from_millis(millis))
}

/// Writes a duration the way [`parse`] reads it.
pub fn format(d: Duration) -> String {
    let ms = d.as_millis();
    if !ms.is_multiple_of(1_000) || ms == 0 {
        format!("{ms}ms")
    } else {
        format!("{}s", ms / 1_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_parses() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn decimals_parse_down_to_whole_milliseconds() {
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1_500)));
        assert_eq!(parse("0.25m"), Ok(Duration::from_secs(15)));
        assert_eq!(parse("2.0s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse("0.001s"), Ok(Duration::from_millis(1)));
        assert!(parse("1.5ms")
            .unwrap_err()
            .contains("finer than a millisecond"));
        assert!(parse(".5s").is_err());
        assert!(parse("1.2.3s").is_err());
    }

    #[test]
    fn a_bare_number_or_unknown_unit_is_refused() {
        assert!(parse("12").is_err());
        assert!(parse("3d").is_err());
        assert!(parse("s").is_err());
        assert!(parse("-1s").is_err());
    }

    #[test]
    fn formatting_round_trips() {
        for d in [
            Duration::from_millis(1_500),
            Duration::from_secs(12),
            Duration::ZERO,
        ] {
            assert_eq!(parse(&format(d)), Ok(d));
        }
    }
}
