//! `export --format csv`: the timeline as comma-separated values, one line per bucket and
//! series, in time order. A live series has a line for every bucket (a quiet bucket carries
//! its value); an NVML series only where a sample fell. Columns (docs/REPORTS.md):
//! `start_ns,end_ns,device,kind,min_bytes,max_bytes,end_bytes`.

use std::fmt::Write;

use crate::timeline::Timeline;

pub const HEADER: &str = "start_ns,end_ns,device,kind,min_bytes,max_bytes,end_bytes";

pub fn csv(t: &Timeline) -> String {
    let filled: Vec<_> = t
        .series
        .iter()
        .map(|s| (s.key.columns(), s.filled(t.width_ns, t.len)))
        .collect();
    let mut out = String::with_capacity(64 * t.len * filled.len().max(1));
    out.push_str(HEADER);
    out.push('\n');
    for i in 0..t.len {
        let (start, end) = (t.start_ns(i), t.start_ns(i + 1));
        for ((device, kind), buckets) in &filled {
            if let Some(b) = buckets[i] {
                // Writing to a String cannot fail.
                let _ = writeln!(
                    out,
                    "{start},{end},{device},{kind},{},{},{}",
                    b.min, b.max, b.last
                );
            }
        }
    }
    out
}
