//! Human-readable sizes and durations for the text reports. JSON reports never use these:
//! they carry exact integers (bytes, nanoseconds).

/// Binary units, largest last. One decimal is enough to compare sizes by eye; reports
/// print the exact byte count next to the numbers that matter (peaks, leak totals).
const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];

/// `512 B`, `1.5 KiB`, `3.0 GiB`.
pub fn bytes(n: u64) -> String {
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    // Switch units before rounding would print "1024.0 KiB".
    while value >= 1023.95 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// `1.5 KiB (1536 B)`, or just `512 B` when the short form is already exact.
pub fn bytes_exact(n: u64) -> String {
    if n < 1024 {
        bytes(n)
    } else {
        format!("{} ({n} B)", bytes(n))
    }
}

/// Nanoseconds as seconds with millisecond precision: `12.345 s`.
pub fn secs(ns: u64) -> String {
    let ms = ns / 1_000_000;
    format!("{}.{:03} s", ms / 1000, ms % 1000)
}

/// `1 allocation`, `3 allocations`.
pub fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {many}")
    }
}

/// When something happened between two times: `at 1.234 s`, or `from 1.234 s to 2.000 s`
/// when the two differ as shown (times equal to the millisecond read as one).
pub fn span(first_ns: u64, last_ns: u64) -> String {
    let (a, b) = (secs(first_ns), secs(last_ns));
    if a == b {
        format!("at {a}")
    } else {
        format!("from {a} to {b}")
    }
}

/// `span` for a table column: `1.234 s`, or `1.234 s to 2.000 s`.
pub fn span_column(first_ns: u64, last_ns: u64) -> String {
    let (a, b) = (secs(first_ns), secs(last_ns));
    if a == b {
        a
    } else {
        format!("{a} to {b}")
    }
}

/// A device ordinal; the shim writes -1 when it could not tell.
pub fn device(d: i32) -> String {
    if d < 0 {
        "?".to_string()
    } else {
        d.to_string()
    }
}

/// Parses a size given on the command line: plain bytes (`1048576`), or a number (a
/// decimal fraction allowed) with a unit: `B`; `KB`, `MB`, `GB`, `TB` (powers of 1000);
/// `KiB`, `MiB`, `GiB`, `TiB` (powers of 1024). Units are case-insensitive and may follow
/// a space. A fraction of a byte is dropped (`1.5KB` is 1500, `0.3B` is 0).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = (&t[..split], t[split..].trim());
    let multiplier: u128 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => {
            return Err(format!(
                "{text:?}: unknown unit {unit:?} (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)"
            ))
        }
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits_ok = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !digits_ok(whole) || !digits_ok(fraction) {
        return Err(format!(
            "{text:?} is not a size (examples: 1048576, 512MiB, 2GB, 1.5GiB)"
        ));
    }
    let too_large = || format!("{text:?} is too large");
    // Fractions are exact up to 18 digits: sizes are integers, rounding is downwards.
    let fraction = &fraction[..fraction.len().min(18)];
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| too_large())?
    };
    let mut bytes = whole.checked_mul(multiplier).ok_or_else(too_large)?;
    if !fraction.is_empty() {
        let f: u128 = fraction.parse().map_err(|_| too_large())?;
        bytes += f * multiplier / 10u128.pow(fraction.len() as u32);
    }
    u64::try_from(bytes).map_err(|_| too_large())
}

#[cfg(test)]
mod tests {

    /// A group allocated within one millisecond reads as one time.
    #[test]
    fn spans_read_as_one_time_when_they_print_alike() {
        assert_eq!(span(12_189_012, 12_233_729), "at 0.012 s");
        assert_eq!(span(12_189_012, 13_000_000), "from 0.012 s to 0.013 s");
        assert_eq!(span(0, 0), "at 0.000 s");
        assert_eq!(span_column(12_189_012, 12_233_729), "0.012 s");
        assert_eq!(span_column(12_189_012, 13_000_000), "0.012 s to 0.013 s");
    }

    use super::*;

    #[test]
    fn sizes_parse_in_every_unit() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("512 mib"), Ok(512 << 20));
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("1.5KB"), Ok(1500));
        assert_eq!(parse_size(".5KiB"), Ok(512));
        assert_eq!(parse_size("7B"), Ok(7));
        assert_eq!(parse_size("3TiB"), Ok(3 << 40));
        assert_eq!(parse_size("16777215TiB"), Ok(16_777_215 << 40));
        assert!(parse_size("16777216TiB").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("1.2.3MB").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("5 parsecs")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(parse_size("99999999999999999999999999999999999999999").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1024), "1.0 KiB");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(1024 * 1024 - 1), "1.0 MiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
        assert_eq!(bytes(u64::MAX), "16.0 EiB");
        assert_eq!(bytes_exact(2048), "2.0 KiB (2048 B)");
        assert_eq!(bytes_exact(7), "7 B");
    }

    #[test]
    fn durations() {
        assert_eq!(secs(0), "0.000 s");
        assert_eq!(secs(1_234_567_890), "1.234 s");
        assert_eq!(secs(61_000_000_000), "61.000 s");
    }
}
