//! Which part of a trace an event export writes (`telemetry`, `torch-snapshot`): events
//! from `--from` to `--to` seconds, and of those the last `--last N` (as PyTorch's
//! `max_entries` keeps the last N entries of each device); and how large the output will
//! be, said before a large one is written.

/// `--from`, `--to` (ns since the trace started) and `--last`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    pub from_ns: Option<u64>,
    pub to_ns: Option<u64>,
    /// Keep only the last N of the events in the time window (per device for
    /// torch-snapshot); `None`: all.
    pub last: Option<u64>,
}

/// torch-snapshot's `--last` unless given: what pytorch.org/memory_viz still draws
/// smoothly, and the `max_entries` PyTorch's documentation suggests.
pub const TORCH_SNAPSHOT_LAST: u64 = 100_000;

/// Outputs estimated at this size or more get a line saying so before they are written.
pub const LARGE_OUTPUT_BYTES: u64 = 100 << 20;

impl Window {
    /// Whether an event at `time_ns` is inside `--from`..=`--to`.
    pub fn contains(&self, time_ns: u64) -> bool {
        self.from_ns.is_none_or(|f| time_ns >= f) && self.to_ns.is_none_or(|t| time_ns <= t)
    }

    /// Of `total` events in the time window, how many to skip (the first ones) to keep the
    /// last `--last`.
    pub fn skipped(&self, total: u64) -> u64 {
        self.last.map_or(0, |n| total.saturating_sub(n))
    }

    /// The window in words, for messages: `from 1.000 s to 2.500 s, the last 1000`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(f) = self.from_ns {
            parts.push(format!("from {}", crate::units::secs(f)));
        }
        if let Some(t) = self.to_ns {
            parts.push(format!("to {}", crate::units::secs(t)));
        }
        if let Some(n) = self.last {
            parts.push(format!("the last {n}"));
        }
        parts.join(", ")
    }
}

/// The line said before writing an output estimated at `bytes` (of `count` `what`), when
/// it is large; `None` below `LARGE_OUTPUT_BYTES`.
pub fn size_notice(bytes: u64, count: u64, what: &str) -> Option<String> {
    (bytes >= LARGE_OUTPUT_BYTES).then(|| {
        format!(
            "writing about {} ({count} {what}); --from/--to SECONDS or --last N write a part",
            crate::units::bytes(bytes)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_keeps_its_times_and_the_last_n() {
        let w = Window {
            from_ns: Some(10),
            to_ns: Some(20),
            last: Some(3),
        };
        assert!(!w.contains(9) && w.contains(10) && w.contains(20) && !w.contains(21));
        assert_eq!((w.skipped(10), w.skipped(2)), (7, 0));
        assert!(Window::default().contains(u64::MAX));
        assert_eq!(Window::default().skipped(5), 0);
        assert_eq!(size_notice(LARGE_OUTPUT_BYTES - 1, 1, "lines"), None);
        assert_eq!(
            size_notice(LARGE_OUTPUT_BYTES, 7, "lines").unwrap(),
            "writing about 100.0 MiB (7 lines); --from/--to SECONDS or --last N write a part"
        );
    }
}
