//! What `run` suggests next: `oom` for a trace whose process ran out of GPU memory (what
//! the user asks first after an OOM), else `summary`.
//!
//! Whether it ran out is read from the trace itself, once the job is over: an allocation
//! that failed for lack of memory, where on a device with a framework's tensors only the
//! allocator's refusal counts (its failed CUDA calls before it may have been recovered
//! from), as `track` alerts it. The read stops at the first such failure.

use std::io::BufReader;
use std::path::Path;

use gpumemprof_format::{Record, TraceReader, OUT_OF_MEMORY};

use crate::replay::attempts::is_error;

/// Whether the trace at `path` holds an out-of-memory error; false when it cannot be read.
pub fn ran_out_of_memory(path: &Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let Ok(mut reader) = TraceReader::open(BufReader::new(file)) else {
        return false;
    };
    let mut tensor_devices: Vec<i32> = Vec::new();
    let mut failed_cuda = Vec::new();
    while let Ok(Some(record)) = reader.next_salvaged() {
        match record {
            Record::Tensor(t) if !tensor_devices.contains(&t.device) => {
                tensor_devices.push(t.device)
            }
            // A refusal is an error at once; a CUDA call's failure is judged at the end,
            // once every device that had tensors is known.
            Record::AllocFailed(f) if is_error(&f, true) => return true,
            Record::AllocFailed(f) if f.result == OUT_OF_MEMORY => failed_cuda.push(f),
            _ => {}
        }
    }
    (failed_cuda.iter()).any(|f| is_error(f, tensor_devices.contains(&f.device)))
}

/// The closing "next:" command for these traces (quoted for a shell), the command's own
/// process first.
pub fn command(quoted: &[String], paths: &[&str]) -> String {
    match paths.iter().position(|p| ran_out_of_memory(Path::new(p))) {
        Some(i) => format!(
            "gpumemprof oom {}   (it ran out of GPU memory: what asked, what held the device, from where)",
            quoted[i]
        ),
        None => format!("gpumemprof summary {}", quoted.join(" ")),
    }
}
