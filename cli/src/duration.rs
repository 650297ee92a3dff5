//! Durations as people write them: `500ms`, `2s`, `1m`, `1h`.

use std::time::Duration;

/// Parses `<number><unit>` with unit `ms`, `s`, `m` or `h`.
pub fn parse(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("'{text}' needs a unit: ms, s, m or h (e.g. 500ms, 2s)"))?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("'{text}' does not start with a whole number"))?;
    let millis = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => return Err(format!("'{unit}' is not a unit: use ms, s, m or h")),
    }
    .ok_or_else(|| format!("'{text}' is too long"))?;
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
