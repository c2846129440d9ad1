//! `summary`'s device memory at its peak by the library that asked for it, on a synthetic
//! trace of what a PyTorch job on CUDA 13 did on an H100: PyTorch's caching allocator
//! (`libc10_cuda.so`) held its segments, cuBLAS (`libcublas.so.13`) `cudaMalloc`ed a
//! workspace of its own, and one allocation has no stack; in `summary`'s JSON and text and
//! in the HTML report.

use std::path::Path;

use gpumemprof_format::{Record, FORMAT_VERSION};
use serde_json::{json, Value};

#[path = "checks/binary.rs"]
mod binary;
#[path = "checks/synth.rs"]
mod synth;
#[path = "checks/tempdir.rs"]
mod tempdir;

const MIB: u64 = 1 << 20;

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// The stdout of `gpumemprof ARGS -q`, which must succeed.
fn succeeds(args: &[&str]) -> String {
    let mut all = args.to_vec();
    all.push("-q");
    let out = binary::gpumemprof(&all);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Peak at 4 us: PyTorch's two segments (20 + 2 MiB), cuBLAS's 64 MiB and 1 MiB without a
/// stack; a PyTorch segment freed before the peak does not count.
#[test]
fn device_memory_at_its_peak_by_the_library_that_asked() {
    let dir = tempdir::TempDir::new("libraries", "peak");
    let (c10, cublas, cudart) = (
        0x7f00_0000_0000u64,
        0x7f10_0000_0000u64,
        0x7f20_0000_0000u64,
    );
    let header = json!({
        "format": "gpumemprof", "format_version": FORMAT_VERSION, "pid": 7,
        "argv": ["python3", "train.py"], "start_monotonic_ns": 0,
        "start_time_unix_ns": 1_700_000_000_000_000_000u64, "config": {},
        "apis": [{"id": 0, "name": "cudaMalloc"}, {"id": 1, "name": "cudaFree"}]
    });
    let trace = synth::write_trace(
        dir.join("run.trace"),
        &header,
        &[
            synth::module(c10, "/venv/site-packages/torch/lib/libc10_cuda.so"),
            synth::module(
                cublas,
                "/venv/site-packages/nvidia/cu13/lib/libcublas.so.13",
            ),
            synth::module(
                cudart,
                "/venv/site-packages/nvidia/cu13/lib/libcudart.so.13",
            ),
            Record::Stack {
                id: 1,
                frames: vec![cudart + 0x10, c10 + 0x1000],
            },
            Record::Stack {
                id: 2,
                frames: vec![cudart + 0x10, cublas + 0x2000, c10 + 0x1000],
            },
            synth::alloc(1000, 0x1000_0000, 20 * MIB, 1),
            synth::alloc(1500, 0x3000_0000, 4 * MIB, 1),
            synth::free(1800, 0x3000_0000),
            synth::alloc(2000, 0x1200_0000, 2 * MIB, 1),
            synth::alloc(3000, 0x2000_0000, 64 * MIB, 2),
            synth::alloc(4000, 0x4000_0000, MIB, 0),
            synth::end(5000),
        ],
    );
    let v: Value =
        serde_json::from_str(&succeeds(&["summary", path(&trace), "--json"])).expect("JSON");
    assert_eq!(
        v["libraries_at_peak"],
        json!([
            {"device": 0, "library": "libcublas.so.13", "bytes": 64 * MIB, "count": 1},
            {"device": 0, "library": "libc10_cuda.so", "bytes": 22 * MIB, "count": 2},
            {"device": 0, "library": null, "bytes": MIB, "count": 1}
        ])
    );
    // The HTML report has the same as a table.
    let html = dir.join("report.html");
    succeeds(&["report", path(&trace), "-o", path(&html)]);
    let html = std::fs::read_to_string(&html).expect("report.html");
    for row in [
        "<tr><td>0</td><td>libcublas.so.13</td><td class=\"num\">64.0 MiB</td><td class=\"num\">1</td></tr>",
        "<tr><td>0</td><td>libc10_cuda.so (PyTorch&#39;s allocator)</td><td class=\"num\">22.0 MiB</td><td class=\"num\">2</td></tr>",
        "<tr><td>0</td><td>no stack</td><td class=\"num\">1.0 MiB</td><td class=\"num\">1</td></tr>",
    ] {
        assert!(html.contains(row), "{row} in the HTML report");
    }
    let text = succeeds(&["summary", path(&trace)]);
    assert!(
        text.contains(
            "  device 0 at its peak, by the library that asked: libcublas.so.13 64.0 MiB, \
             libc10_cuda.so (PyTorch's allocator) 22.0 MiB, no stack 1.0 MiB\n"
        ),
        "{text}"
    );
}
