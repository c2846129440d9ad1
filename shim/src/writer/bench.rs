//! The writer's benchmark entry point (for the overhead benchmark binary, not the C API).

use super::core::WriterCore;
use super::output::ZSTD_LEVEL;
use crate::capture::intern;
use crate::sys::clock;
use crate::sys::event::{Event, EventKind};
use gpumemprof_format::TraceWriter;
use std::fs::File;

/// Drives the writer's own code path (intern, reorder, encode, compress, write) with
/// `n` synthetic events of a training-loop shape, into `path`: for the benchmark only.
/// Returns the seconds spent and the bytes written.
pub fn writer_benchmark(n: usize, path: &str) -> std::io::Result<(f64, u64)> {
    let file = File::create(path)?;
    let out = TraceWriter::new(file, &serde_json::json!({"bench": true}), ZSTD_LEVEL)?;
    let start_ns = clock::now_ns();
    let (mut core, _) = WriterCore::new(out, path.to_string(), start_ns);
    // Eight call sites 20 frames deep, sizes and addresses that repeat like a training loop.
    let mut ids = [0u32; 8];
    for (site, id) in ids.iter_mut().enumerate() {
        let frames: Vec<u64> = (0..20)
            .map(|d| 0x5555_0000_0000 + (site as u64) * 0x1000 + d * 0x40)
            .collect();
        *id = intern::intern(&frames);
    }
    let t = std::time::Instant::now();
    for i in 0..n {
        let site = (i / 2) % 8;
        let alloc = i % 2 == 0;
        let ev = Event {
            time_ns: start_ns + i as u64 * 500,
            address: 0x7000_0000_0000 + ((site as u64) << 21),
            size: 1 << (12 + site),
            stack: ids[site],
            device: 0,
            api: if alloc { 1 } else { 2 },
            ..Event::new(if alloc {
                EventKind::Alloc
            } else {
                EventKind::Free
            })
        };
        core.accept(1000 + (i % 4) as u32, &ev);
        if core.pending.len() >= 4096 {
            core.define_stacks();
            core.emit(None);
        }
    }
    core.finish(0, None, None);
    let secs = t.elapsed().as_secs_f64();
    let bytes = std::fs::metadata(path)?.len();
    Ok((secs, bytes))
}
