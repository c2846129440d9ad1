//! `export --format csv`: the timeline as comma-separated values, one line per bucket and
//! series, in time order. A live series has a line for every bucket (a quiet bucket carries
//! its value); an NVML series only where a sample fell. Columns (docs/REPORTS.md):
//! `start_ns,end_ns,device,kind,min_bytes,max_bytes,end_bytes`. PyTorch's tensors by kind
//! of memory (`kinds::timeline`) follow each bucket's series as `tensor:parameters`, ...:
//! `max_bytes` is the kind's bytes at the moment the tensor series reached its highest in
//! that bucket (they add up to the tensor line's `max_bytes`); `min_bytes` and `end_bytes`
//! are empty.

use std::fmt::Write;

use crate::timeline::Timeline;

pub const HEADER: &str = "start_ns,end_ns,device,kind,min_bytes,max_bytes,end_bytes";

pub fn csv(t: &Timeline) -> String {
    let filled: Vec<_> = t
        .series
        .iter()
        .map(|s| (s.key.columns(), t.filled(s)))
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
        for k in &t.kinds {
            let Some(Some(bytes)) = k.buckets.get(i) else {
                continue;
            };
            for (kind, b) in crate::kinds::Kind::ALL.iter().zip(bytes) {
                let _ = writeln!(
                    out,
                    "{start},{end},{},tensor:{},,{b},",
                    k.device,
                    kind.name()
                );
            }
        }
    }
    out
}
