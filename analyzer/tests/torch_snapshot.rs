//! `gpumemprof export --format torch-snapshot` on synthetic traces of named situations,
//! loaded back with CPython's own `pickle` (what ptmem and `torch.cuda._memory_viz` use):
//! two devices, a stream-ordered allocation, an event that arrived late, expandable
//! segments mapped, unmapped and mapped again, two out-of-memory failures, and memory a GPU
//! snapshot leaves out (pinned host, an unknown device). The assertions are the exact
//! segments, blocks and trace entries; then a long run's list batching, an empty trace and
//! the command line's refusals.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gpumemprof_format::{Alloc, AllocFailed, Free, MemKind, Record, FORMAT_VERSION, FREE_RANGE};
use serde_json::{json, Value};

#[path = "checks/synth.rs"]
mod synth;
#[path = "checks/tempdir.rs"]
mod tempdir;

use tempdir::TempDir;

const MIB: u64 = 1 << 20;
/// The trace's start, ns since the Unix epoch; `time_us` counts from the epoch.
const START_NS: u64 = 1_700_000_000_000_000_000;
const T0_US: u64 = START_NS / 1000;
const MALLOC: u16 = 0;
const FREE: u16 = 1;
const MALLOC_ASYNC: u16 = 2;
const MAP: u16 = 3;
const UNMAP: u16 = 4;
const MALLOC_HOST: u16 = 5;
const RESERVE: u16 = 6;
const CREATE: u16 = 7;
const VA: u64 = 0x7400_0000_0000;

fn write_trace(dir: &Path, records: &[Record]) -> PathBuf {
    let header = json!({
        "format": "gpumemprof", "format_version": FORMAT_VERSION, "pid": 77,
        "argv": ["train.py"], "start_monotonic_ns": 0, "start_time_unix_ns": START_NS,
        "config": {},
        "apis": [{"id": MALLOC, "name": "cudaMalloc"}, {"id": FREE, "name": "cudaFree"},
                 {"id": MALLOC_ASYNC, "name": "cudaMallocAsync"}, {"id": MAP, "name": "cuMemMap"},
                 {"id": UNMAP, "name": "cuMemUnmap"}, {"id": MALLOC_HOST, "name": "cudaMallocHost"},
                 {"id": RESERVE, "name": "cuMemAddressReserve"}, {"id": CREATE, "name": "cuMemCreate"}]
    });
    synth::write_trace(dir.join("run.trace"), &header, records)
}

fn alloc(t_us: u64, api: u16, kind: MemKind, device: i32, address: u64, size: u64) -> Alloc {
    Alloc {
        tid: 1,
        api,
        kind,
        device,
        ..synth::alloc_of(t_us * 1000, address, size, 1)
    }
}

fn dev(t_us: u64, device: i32, address: u64, size: u64, stack: u64) -> Record {
    Record::Alloc(Alloc {
        stack,
        ..alloc(t_us, MALLOC, MemKind::Device, device, address, size)
    })
}

fn free(t_us: u64, api: u16, address: u64, stack: u64, flags: u8, size: u64) -> Record {
    Record::Free(Free {
        tid: 1,
        api,
        stack,
        flags,
        size,
        ..synth::free_of(t_us * 1000, address)
    })
}

fn failed(t_us: u64, size: u64, result: u32, mem_free: u64, mem_total: u64) -> Record {
    Record::AllocFailed(AllocFailed {
        tid: 1,
        result,
        mem_free,
        mem_total,
        ..synth::failed_of(t_us * 1000, size, 2)
    })
}

fn end(t_us: u64) -> Record {
    synth::end(t_us * 1000)
}

fn gpumemprof(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpumemprof"))
        .args(args)
        .output()
        .expect("run gpumemprof")
}

/// `gpumemprof export --format torch-snapshot TRACE -o OUT EXTRA...`.
fn export(trace: &Path, out: &str, extra: &[&str]) -> Output {
    let mut args = vec!["export", "--format", "torch-snapshot", p(trace), "-o", out];
    args.extend_from_slice(extra);
    gpumemprof(&args)
}

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 temp path")
}

/// Loads the pickle with CPython and runs `check` (Python statements over the loaded
/// snapshot `v` and the file's bytes `data`, printing one line); returns the line.
fn python(pickle: &Path, check: &str) -> String {
    let script = format!(
        "import json, pickle, sys\ndata = open(sys.argv[1], 'rb').read()\n\
         v = pickle.loads(data)\n{check}\n"
    );
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(pickle)
        .output()
        .expect("this test needs python3 on PATH: CPython's pickle is the reference reader");
    assert!(
        out.status.success(),
        "python3 could not read {}: {}",
        pickle.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_owned()
}

/// The snapshot as JSON (every value in it is a dict, list, string, int or bool).
fn snapshot_json(pickle: &Path) -> Value {
    serde_json::from_str(&python(pickle, "print(json.dumps(v))")).expect("JSON")
}

fn frame(address: &str) -> Value {
    // No module covers these addresses: the name is the address, the file unknown.
    json!({"name": address, "filename": "??", "line": 0})
}

fn entry(action: &str, addr: u64, size: u64, stream: u64, t_us: u64, frames: &Value) -> Value {
    json!({"action": action, "addr": addr, "size": size, "stream": stream,
           "time_us": T0_US + t_us, "frames": frames})
}

fn segment(
    device: i32,
    address: u64,
    size: u64,
    stream: u64,
    expandable: bool,
    frames: &Value,
) -> Value {
    json!({"device": device, "address": address, "total_size": size, "allocated_size": size,
           "active_size": size, "requested_size": size, "stream": stream,
           "segment_type": "large", "is_expandable": expandable, "frames": frames,
           "blocks": [{"address": address, "size": size, "requested_size": size,
                       "state": "active_allocated", "frames": frames}]})
}

/// Every allocation path the snapshot distinguishes, on two devices, checked entry by
/// entry. Device 0: cudaMalloc A (freed, from stack 3), cudaMallocAsync B on stream 0x5000
/// (live), C allocated at 2800 us but arriving after a free at 3000 us (its time stays at
/// 3000: viewers sort by time), an expandable segment (reserve 64 MiB, handle, map two
/// 2 MiB chunks, one unmap of both, map one again: live), and two out-of-memory failures
/// (free memory read, and not read) besides one failure with another error. Device 1: one
/// live allocation. Left out: a pinned host allocation and one on device -1.
#[test]
fn every_kind_of_event_becomes_the_entries_and_segments_pytorch_writes() {
    let dir = TempDir::new("torch_snapshot", "kinds");
    let records = vec![
        Record::Stack {
            id: 1,
            frames: vec![0x1000, 0x2000],
        },
        Record::Stack {
            id: 2,
            frames: vec![0x3000, 0x2000],
        },
        Record::Stack {
            id: 3,
            frames: vec![0x4000],
        },
        dev(1000, 0, 0x10000, 4096, 1),
        Record::Alloc(Alloc {
            stream: 0x5000,
            stack: 2,
            ..alloc(2000, MALLOC_ASYNC, MemKind::Device, 0, 0x20000, 8192)
        }),
        dev(2500, 1, 0x90000, 1024, 1),
        Record::Alloc(alloc(
            2600,
            MALLOC_HOST,
            MemKind::PinnedHost,
            0,
            0x7f00_0000,
            512,
        )),
        free(3000, FREE, 0x10000, 3, 0, 0),
        dev(2800, 0, 0x30000, 2048, 2),
        Record::Alloc(alloc(
            4000,
            RESERVE,
            MemKind::AddressReservation,
            0,
            VA,
            64 * MIB,
        )),
        Record::Alloc(alloc(
            4100,
            CREATE,
            MemKind::VmmHandle,
            0,
            0x4a00_0010,
            2 * MIB,
        )),
        Record::Alloc(alloc(4200, MAP, MemKind::Device, 0, VA, 2 * MIB)),
        Record::Alloc(alloc(4300, MAP, MemKind::Device, 0, VA + 2 * MIB, 2 * MIB)),
        free(4400, UNMAP, VA, 0, FREE_RANGE, 4 * MIB),
        Record::Alloc(alloc(4500, MAP, MemKind::Device, 0, VA, 2 * MIB)),
        failed(5000, 1 << 30, 2, 3 * MIB, 80 * MIB),
        failed(5100, 1 << 30, 2, 0, 0),
        failed(5200, 1 << 30, 1, 0, 0),
        dev(5300, -1, 0x50000, 100, 1),
        end(6000),
    ];
    let trace = write_trace(&dir, &records);
    let out_path = dir.join("snap.pickle");
    let out = export(&trace, p(&out_path), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        [
            format!(
                "gpumemprof: warning: a PyTorch snapshot holds GPU memory only; left out of {}: \
                 1 pinned host allocation and 1 allocation on an unknown device",
                out_path.display()
            ),
            format!(
                "gpumemprof: wrote {}: PyTorch memory snapshot, 25 trace entries on 2 devices, \
                 4 segments live at the end; open it in pytorch.org/memory_viz",
                out_path.display()
            ),
        ]
    );

    let f1 = json!([frame("0x1000"), frame("0x2000")]);
    let f2 = json!([frame("0x3000"), frame("0x2000")]);
    let f3 = json!([frame("0x4000")]);
    let mut device0 = vec![
        entry("segment_alloc", 0x10000, 4096, 0, 1000, &f1),
        entry("alloc", 0x10000, 4096, 0, 1000, &f1),
        entry("segment_alloc", 0x20000, 8192, 0x5000, 2000, &f2),
        entry("alloc", 0x20000, 8192, 0x5000, 2000, &f2),
        // The free's stack on the request and the segment, the allocation's on completion.
        entry("free_requested", 0x10000, 4096, 0, 3000, &f3),
        entry("free_completed", 0x10000, 4096, 0, 3000, &f1),
        entry("segment_free", 0x10000, 4096, 0, 3000, &f3),
        entry("segment_alloc", 0x30000, 2048, 0, 3000, &f2),
        entry("alloc", 0x30000, 2048, 0, 3000, &f2),
        entry("segment_map", VA, 2 * MIB, 0, 4200, &f1),
        entry("alloc", VA, 2 * MIB, 0, 4200, &f1),
        entry("segment_map", VA + 2 * MIB, 2 * MIB, 0, 4300, &f1),
        entry("alloc", VA + 2 * MIB, 2 * MIB, 0, 4300, &f1),
    ];
    // The unmap captured no stack: every entry of its release has the allocation's.
    for addr in [VA, VA + 2 * MIB] {
        for action in ["free_requested", "free_completed", "segment_unmap"] {
            device0.push(entry(action, addr, 2 * MIB, 0, 4400, &f1));
        }
    }
    device0.push(entry("segment_map", VA, 2 * MIB, 0, 4500, &f1));
    device0.push(entry("alloc", VA, 2 * MIB, 0, 4500, &f1));
    for (t, device_free) in [(5000, 3 * MIB), (5100, 0)] {
        device0.push(
            json!({"action": "oom", "device_free": device_free, "size": 1u64 << 30,
                            "stream": 0, "time_us": T0_US + t, "frames": f2}),
        );
    }
    let expected = json!({
        "device_traces": [device0, [
            entry("segment_alloc", 0x90000, 1024, 0, 2500, &f1),
            entry("alloc", 0x90000, 1024, 0, 2500, &f1),
        ]],
        "segments": [
            segment(0, 0x20000, 8192, 0x5000, false, &f2),
            segment(0, 0x30000, 2048, 0, false, &f2),
            segment(0, VA, 2 * MIB, 0, true, &f1),
            segment(1, 0x90000, 1024, 0, false, &f1),
        ],
    });
    assert_eq!(snapshot_json(&out_path), expected);

    // Each stack's frame list is written once and shared: the segment, its block and the
    // entries of one stack are the same list object, and its frames are in the file once.
    let shared = python(
        &out_path,
        "s = v['segments'][0]\nt = v['device_traces'][0]\n\
         print(s['frames'] is s['blocks'][0]['frames'], s['frames'] is t[2]['frames'],\n\
               t[0]['frames'] is t[1]['frames'], t[0]['frames'][1] is t[2]['frames'][1],\n\
               data.count(b'0x2000'), data.count(b'segment_alloc'))",
    );
    assert_eq!(shared, "True True True True 1 1");
}

/// A long run: more entries than one append batch (1000), on one device, all read back,
/// in time order; the allocation left live is the one segment.
#[test]
fn a_long_run_is_appended_in_batches_and_read_back_whole() {
    let dir = TempDir::new("torch_snapshot", "long");
    let mut records = vec![Record::Stack {
        id: 1,
        frames: vec![0x1000],
    }];
    for i in 0..700u64 {
        records.push(dev(10 * i + 1, 0, 0x10000 + 0x1000 * i, 4096, 1));
        records.push(free(10 * i + 5, FREE, 0x10000 + 0x1000 * i, 0, 0, 0));
    }
    records.push(dev(8000, 0, 0x90000000, 512, 1));
    records.push(end(9000));
    let trace = write_trace(&dir, &records);
    let out_path = dir.join("snap.pickle");
    let out = export(&trace, p(&out_path), &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let counted = python(
        &out_path,
        "t = v['device_traces'][0]\nfrom collections import Counter\n\
         c = Counter(e['action'] for e in t)\n\
         times = [e['time_us'] for e in t]\n\
         print(len(t), c['alloc'], c['free_completed'], times == sorted(times),\n\
               len(v['segments']), v['segments'][0]['address'])",
    );
    assert_eq!(
        counted,
        format!("{} 701 700 True 1 {}", 701 * 2 + 700 * 3, 0x90000000u64)
    );
}

/// A trace with nothing on a known GPU still gives what the viewers need: one (empty)
/// device list and no segments. Memory on a corrupt ordinal (one list per ordinal would
/// make a million lists) is left out like an unknown device's, with the warning.
#[test]
fn nothing_on_a_known_gpu_is_an_empty_snapshot_with_one_device_list() {
    let dir = TempDir::new("torch_snapshot", "empty");
    for (records, warning) in [
        (vec![end(10)], None),
        (
            vec![dev(1, 1_000_000, 0x1000, 512, 0), end(10)],
            Some("1 allocation on an unknown device"),
        ),
    ] {
        let trace = write_trace(&dir, &records);
        let out_path = dir.join("snap.pickle");
        let out = export(&trace, p(&out_path), &["-f"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert_eq!(
            stderr.lines().next().and_then(|l| l.split(": ").last()),
            Some(warning.unwrap_or(
                "PyTorch memory snapshot, 0 trace entries on 0 devices, 0 segments live at the \
                 end; open it in pytorch.org/memory_viz"
            )),
            "{stderr}"
        );
        assert_eq!(
            snapshot_json(&out_path),
            json!({"device_traces": [[]], "segments": []})
        );
    }
}

/// Refusals: no pickle to stdout, no overwriting without -f, and a file that is not a
/// trace exits 5 and writes nothing.
#[test]
fn stdout_an_existing_file_and_a_bad_trace_are_refused() {
    let dir = TempDir::new("torch_snapshot", "refusals");
    let trace = write_trace(&dir, &[dev(1, 0, 0x1000, 512, 0), end(2)]);

    let out = export(&trace, "-", &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "gpumemprof: error: a PyTorch memory snapshot (a binary pickle) is not written to \
         stdout: give a file name with -o"
    );
    assert!(out.stdout.is_empty());

    let existing = dir.join("existing.pickle");
    std::fs::write(&existing, b"keep").expect("write");
    let out = export(&trace, p(&existing), &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(std::fs::read(&existing).expect("read"), b"keep");
    let out = export(&trace, p(&existing), &["-f"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(python(&existing, "print(len(v['segments']))"), "1");

    let bad = dir.join("bad.trace");
    std::fs::write(&bad, b"not a trace at all").expect("write");
    let target = dir.join("never.pickle");
    let out = export(&bad, p(&target), &[]);
    assert_eq!(out.status.code(), Some(5));
    assert!(!target.exists());
}

/// A trace with PyTorch's tensors where a library also allocates for itself (seen on an
/// H100 with torch 2.11 and CUDA 13: cuBLAS's own 64 MiB workspace, `cudaMalloc` from
/// `libcublas.so.13`): PyTorch's snapshot has only its caching allocator's segments, so
/// ours leaves the library's allocation out, its entries too. Segment 1 (2 MiB, stack 1 in
/// `libc10_cuda.so`) holds a 512-byte tensor; segment 2 (64 MiB, stack 2 in
/// `libcublas.so.13`) is cuBLAS's.
#[test]
fn a_librarys_own_allocation_is_not_one_of_pytorchs_segments() {
    use gpumemprof_format::{Tensor, FRAMEWORK_PYTORCH};
    let dir = TempDir::new("torch_snapshot", "library");
    let (c10, cublas) = (0x7f00_0000_0000u64, 0x7f10_0000_0000u64);
    let (ours, theirs) = (0x1000_0000u64, 0x2000_0000u64);
    let trace = write_trace(
        &dir,
        &[
            synth::module(
                c10,
                "/venv/lib/python3.12/site-packages/torch/lib/libc10_cuda.so",
            ),
            synth::module(
                cublas,
                "/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublas.so.13",
            ),
            Record::Stack {
                id: 1,
                frames: vec![c10 + 0x1000],
            },
            Record::Stack {
                id: 2,
                frames: vec![cublas + 0x2000, c10 + 0x1000],
            },
            dev(1, 0, ours, 2 * MIB, 1),
            dev(2, 0, theirs, 64 * MIB, 2),
            Record::Tensor(Tensor {
                time_ns: 3000,
                tid: 1,
                framework: FRAMEWORK_PYTORCH,
                device: 0,
                address: ours,
                delta: 512,
                allocated: 512,
                reserved: 2 * MIB,
                stack: 1,
            }),
            end(10),
        ],
    );
    let out_path = dir.join("snap.pickle");
    let out = export(&trace, p(&out_path), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("2 trace entries on 1 device, 1 segment live at the end"),
        "{stderr}"
    );
    let v = snapshot_json(&out_path);
    let actions: Vec<(String, u64)> = (v["device_traces"][0].as_array().expect("entries"))
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap().to_owned(),
                e["addr"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        actions,
        [
            ("segment_alloc".to_owned(), ours),
            ("alloc".to_owned(), ours)
        ]
    );
    let segments = v["segments"].as_array().expect("segments");
    assert_eq!(segments.len(), 1);
    assert_eq!(segments[0]["address"], ours);
    let blocks: Vec<(u64, &str)> = (segments[0]["blocks"].as_array().expect("blocks"))
        .iter()
        .map(|b| (b["size"].as_u64().unwrap(), b["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        blocks,
        [(512, "active_allocated"), (2 * MIB - 512, "inactive")]
    );
}
