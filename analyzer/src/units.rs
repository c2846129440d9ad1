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

/// A device ordinal; the shim writes -1 when it could not tell.
pub fn device(d: i32) -> String {
    if d < 0 {
        "?".to_string()
    } else {
        d.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
