//! Sizes and durations as people write them on command lines, and as the
//! tools print them.

use std::time::Duration;

/// `4096`, `64K`, `1M`, `4G`, `1T`: powers of 1024 (`KiB`, `MB` and the
/// like mean the same). Zero is not a size.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(digits_end);
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(format!("{s:?}: unknown unit (use K, M, G or T)")),
    };
    let n: u64 = digits.parse().map_err(|_| format!("{s:?} is not a size (like 4096, 64K, 1M, 4G)"))?;
    match n.checked_mul(1 << shift) {
        Some(0) => Err(format!("{s:?}: a size must be more than 0")),
        Some(v) => Ok(v),
        None => Err(format!("{s:?} is out of range")),
    }
}

/// `300`, `300s`, `5m`, `1h`, `500ms`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(t.len());
    let (number, unit) = t.split_at(digits_end);
    let n: f64 = number.parse().map_err(|_| format!("{s:?} is not a duration (like 300s, 5m, 1h)"))?;
    let secs = match unit.trim() {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("{s:?}: unknown unit (use ms, s, m or h)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{s:?} is out of range"))
}

/// Sizes for people: 1.5 GiB, 4 KiB.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 { format!("{v:.0} {}", UNITS[u]) } else { format!("{v:.1} {}", UNITS[u]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("1KiB"), Ok(1024));
        assert_eq!(parse_size("2 MB"), Ok(2 << 20));
        assert_eq!(parse_size("256G"), Ok(256 << 30));
        for bad in ["0", "0M", "1X", "M", "99999999999T", ""] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert_eq!(human_bytes(1536 << 20), "1.5 GiB");
        assert_eq!(human_bytes(4096), "4 KiB");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("300"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("5 parsecs").is_err() && parse_duration("").is_err() && parse_duration("-1s").is_err());
    }
}
