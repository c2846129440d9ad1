//! `gpumemprof oom` on synthetic traces of named situations, written with the format
//! crate's `TraceWriter`: exact request, free memory, live bytes and sites at the failure,
//! growth over the window, transient versus final, and each cause of the hint.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gpumemprof_format::{Alloc, AllocFailed, MemKind, Record, FORMAT_VERSION};
use serde_json::{json, Value};

// Only `assert_valid` is used here.
#[allow(dead_code)]
#[path = "checks/schema.rs"]
mod schema;

const DEV: MemKind = MemKind::Device;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const S: u64 = 1_000_000_000;

#[path = "checks/synth.rs"]
mod synth;
#[path = "checks/tempdir.rs"]
mod tempdir;

use synth::{end, free, stack};
use tempdir::TempDir;

fn header() -> Value {
    json!({
        "format": "gpumemprof",
        "format_version": FORMAT_VERSION,
        "pid": 77,
        "argv": ["./train"],
        "start_monotonic_ns": 0,
        "apis": [
            {"id": 0, "name": "cudaMalloc", "family": "runtime"},
            {"id": 1, "name": "cudaFree", "family": "runtime"},
            {"id": 2, "name": "cudaMallocHost", "family": "runtime"},
            {"id": 3, "name": "cuMemCreate", "family": "driver"}
        ]
    })
}

/// Writes one block per inner vector to `dir/run.gmt`; returns its path and block ends.
fn write_blocks(dir: &TempDir, blocks: &[Vec<Record>]) -> (PathBuf, Vec<usize>) {
    synth::write_blocks(dir.join("run.gmt"), &header(), blocks)
}

fn write_trace(dir: &TempDir, records: Vec<Record>) -> PathBuf {
    write_blocks(dir, &[records]).0
}

/// A successful allocation on thread 7 by default.
fn alloc(t: u64, device: i32, kind: MemKind, address: u64, size: u64, stack: u64) -> Record {
    alloc_on(t, synth::TID, device, kind, address, size, stack)
}

fn alloc_on(
    t: u64,
    tid: u32,
    device: i32,
    kind: MemKind,
    address: u64,
    size: u64,
    stack: u64,
) -> Record {
    Record::Alloc(Alloc {
        tid,
        api: if kind == MemKind::PinnedHost { 2 } else { 0 },
        kind,
        device,
        ..synth::alloc_of(t, address, size, stack)
    })
}

/// An out-of-memory failure of `size` on device 0, thread `tid`, with the device's free
/// and total memory (`total` 0: not recorded).
fn oom(t: u64, tid: u32, size: u64, stack: u64, free: u64, total: u64) -> Record {
    failed(t, tid, DEV, size, stack, free, total, 2)
}

#[allow(clippy::too_many_arguments)]
fn failed(
    t: u64,
    tid: u32,
    kind: MemKind,
    size: u64,
    stack: u64,
    free: u64,
    total: u64,
    result: u32,
) -> Record {
    Record::AllocFailed(AllocFailed {
        tid,
        api: if kind == MemKind::PinnedHost { 2 } else { 0 },
        kind,
        result,
        mem_free: free,
        mem_total: total,
        ..synth::failed_of(t, size, stack)
    })
}

fn sample(t: u64, process_used: u64, device_used: u64, total: u64) -> Record {
    synth::sample(t, 0, process_used, device_used, total)
}

fn gpumemprof(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpumemprof"))
        .args(args)
        .output()
        .expect("run gpumemprof")
}

/// `gpumemprof oom TRACE ARGS...`'s stdout; it must exit 0.
fn oom_ok(trace: &Path, args: &[&str]) -> Vec<u8> {
    let mut all = vec!["oom", trace.to_str().expect("utf-8")];
    all.extend_from_slice(args);
    let out = gpumemprof(&all);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn oom_json(trace: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["--json"];
    args.extend_from_slice(extra);
    let v: Value = serde_json::from_slice(&oom_ok(trace, &args)).expect("JSON");
    assert_eq!(v["schema_version"], 1);
    schema::assert_valid("oom", &v);
    v
}

fn oom_text(trace: &Path, extra: &[&str]) -> String {
    String::from_utf8(oom_ok(trace, extra)).expect("utf-8")
}

/// (stack_id, bytes, count) of each entry of a JSON array of sites.
fn sites(v: &Value) -> Vec<(u64, u64, u64)> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|s| {
            (
                s["stack_id"].as_u64().unwrap(),
                s["bytes"].as_u64().unwrap(),
                s["count"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// A training run on a 16 GiB device 0: 8 GiB of weights (stack 1), a 1 GiB buffer kept
/// every second from t=4 s to t=9 s (stack 3: the leak), 512 MiB of managed memory
/// (stack 4), plus memory that must not count: 4 GiB on device 1 and 1 GiB of pinned host
/// memory. A 1 GiB request fails at 3.7 s and its retry succeeds (transient); the 2 GiB
/// request at 10 s fails with 1 GiB free and nothing makes it good (final).
fn training_run() -> Vec<Record> {
    let mut r = (1..=6).map(stack).collect::<Vec<_>>();
    r.extend([
        alloc(S, 0, DEV, 0xa000, 8 * GIB, 1),
        alloc(2 * S, 0, DEV, 0xb000, 2 * GIB, 2),
        alloc(2 * S + 1, 1, DEV, 0x1_a000, 4 * GIB, 5),
        alloc(2 * S + 2, 0, MemKind::PinnedHost, 0x2_a000, GIB, 5),
        free(3 * S, 0xb000),
        alloc(3_500_000_000, 0, MemKind::Managed, 0xc000, 512 * MIB, 4),
        oom(3_700_000_000, 9, GIB, 6, 512 * MIB, 16 * GIB),
        alloc_on(3_800_000_000, 9, 0, DEV, 0xd000, GIB, 6),
        free(3_900_000_000, 0xd000),
        failed(3_950_000_000, 7, DEV, 0, 2, 0, 0, 1), // bad argument: not an OOM
    ]);
    for i in 0..6u64 {
        r.push(alloc((4 + i) * S, 0, DEV, 0x10_0000 + i, GIB, 3));
    }
    r.extend([
        sample(9_500_000_000, 15 * GIB, 15 * GIB + 512 * MIB, 16 * GIB),
        oom(10 * S, 7, 2 * GIB, 2, GIB, 16 * GIB),
        sample(10_500_000_000, 9 * GIB, 9 * GIB, 16 * GIB), // after: not used
        // After the failure: smaller on the same thread, or as large elsewhere: still final.
        free(11 * S, 0xa000),
        alloc(11 * S + 1, 0, DEV, 0xe000, GIB, 2),
        alloc_on(11 * S + 2, 8, 0, DEV, 0xf000, 2 * GIB, 1),
        alloc(11 * S + 3, 1, DEV, 0x1_f000, 2 * GIB, 2),
        end(12 * S),
    ]);
    r
}

#[test]
fn the_final_failure_is_explained_with_exact_live_memory_sites_and_growth() {
    let dir = TempDir::new("oom", "training");
    let trace = write_trace(&dir, training_run());
    let v = oom_json(&trace, &[]);
    assert_eq!(
        v["failure_counts"],
        json!({"out_of_memory": 2, "kept": 2, "transient": 1, "final": 1,
               "other_failed_allocations": 1})
    );
    let f = &v["failure"];
    let mut request = f.clone();
    request.as_object_mut().unwrap().remove("frames");
    request.as_object_mut().unwrap().remove("site");
    // No frame is a framework's: the site is the innermost one.
    assert_eq!(f["site"], f["frames"][0]);
    assert_eq!(
        request,
        json!({"index": 1, "ordinal": 1, "time_ns": 10 * S, "api": "cudaMalloc",
               "kind": "device", "device": 0, "size": 2 * GIB, "tid": 7, "stream": 0,
               "pool": 0, "result": 2, "stack_id": 2, "mem_free_bytes": GIB,
               "mem_total_bytes": 16 * GIB, "outcome": "final", "retry": null,
               "attempts": null})
    );
    assert_eq!(f["frames"][0]["address"], "0x1002");

    let live = &v["live"];
    assert_eq!(live["kinds"], json!(["device", "managed"]));
    assert_eq!(live["device"], 0);
    assert_eq!(live["bytes"], 14 * GIB + 512 * MIB);
    assert_eq!(live["count"], 8);
    assert_eq!(
        live["by_kind"],
        json!([{"kind": "device", "bytes": 14 * GIB, "count": 7},
               {"kind": "managed", "bytes": 512 * MIB, "count": 1}])
    );
    assert_eq!(live["sites_total"], 3);
    assert_eq!(
        sites(&live["sites"]),
        vec![(1, 8 * GIB, 1), (3, 6 * GIB, 6), (4, 512 * MIB, 1)]
    );
    let largest: Vec<(u64, u64, String)> = live["largest"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["size"].as_u64().unwrap(),
                a["time_ns"].as_u64().unwrap(),
                a["address"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        largest,
        vec![
            (8 * GIB, S, "0xa000".into()),
            (GIB, 4 * S, "0x100000".into()),
            (GIB, 5 * S, "0x100001".into()),
            (GIB, 6 * S, "0x100002".into()),
            (GIB, 7 * S, "0x100003".into()),
        ]
    );

    // The window starts at 5 s: the buffers of 5, 6, 7, 8 and 9 s are the growth (an event
    // at the window's start counts).
    let g = &v["growth"];
    assert_eq!(
        (
            &g["window_ns"],
            &g["start_ns"],
            &g["bytes_at_start"],
            &g["bytes_at_failure"],
            &g["growth_bytes"]
        ),
        (
            &json!(5 * S),
            &json!(5 * S),
            &json!(9 * GIB + 512 * MIB),
            &json!(14 * GIB + 512 * MIB),
            &json!(5 * GIB)
        )
    );
    assert_eq!(g["sites"].as_array().unwrap().len(), 1);
    assert_eq!(g["sites"][0]["stack_id"], 3);
    assert_eq!(g["sites"][0]["bytes_at_start"], GIB);
    assert_eq!(g["sites"][0]["bytes_at_failure"], 6 * GIB);
    assert_eq!(g["sites"][0]["growth_bytes"], 5 * GIB);

    // NVML at 9.5 s: 15 GiB used by the process, 14 GiB of device memory tracked (the
    // sample at 10.5 s, half a second after the failure, is not the failure's).
    assert_eq!(
        v["nvml"],
        json!({"device": 0, "time_ns": 9_500_000_000u64, "at_failure": false,
               "process_used_bytes": 15 * GIB,
               "device_used_bytes": 15 * GIB + 512 * MIB, "device_total_bytes": 16 * GIB,
               "tracked_bytes": 14 * GIB, "untracked_bytes": GIB,
               "other_processes_bytes": 512 * MIB})
    );
    // 14.5 GiB live of 16 GiB is 90%: live data filled the device.
    assert_eq!(v["cause"], "live_data");
    assert!(
        v["hint"].as_str().unwrap().contains("90% of its 16.0 GiB"),
        "{}",
        v["hint"]
    );
    assert_eq!(
        v["verdict"],
        "OOM: cudaMalloc asked 2.0 GiB on device 0 with 1.0 GiB free of 16.0 GiB; \
         14.5 GiB live, 8.0 GiB of it from 0x1001; final."
    );

    // A shorter window sees only the buffer of 9 s; a zero window sees nothing grow.
    let short = oom_json(&trace, &["--window", "1.5"]);
    assert_eq!(short["growth"]["start_ns"], 8_500_000_000u64);
    assert_eq!(short["growth"]["growth_bytes"], GIB);
    assert_eq!(short["growth"]["sites"][0]["bytes_at_start"], 5 * GIB);
    let none = oom_json(&trace, &["--window", "0"]);
    assert_eq!(none["growth"]["growth_bytes"], 0);
    assert_eq!(none["growth"]["sites"], json!([]));
    // --top and --frames bound the lists.
    let top = oom_json(&trace, &["--top", "1", "--frames", "1"]);
    assert_eq!(sites(&top["live"]["sites"]), vec![(1, 8 * GIB, 1)]);
    assert_eq!(top["live"]["largest"].as_array().unwrap().len(), 1);
    assert_eq!(top["failure"]["frames"].as_array().unwrap().len(), 1);
    assert_eq!(top["live"]["sites_total"], 3);
}

#[test]
fn index_selects_the_transient_failure_and_its_retry() {
    let dir = TempDir::new("oom", "index");
    let trace = write_trace(&dir, training_run());
    let v = oom_json(&trace, &["--index", "0"]);
    let f = &v["failure"];
    assert_eq!(
        (&f["index"], &f["size"], &f["tid"]),
        (&json!(0), &json!(GIB), &json!(9))
    );
    assert_eq!(f["outcome"], "transient");
    assert_eq!(
        f["retry"],
        json!({"time_ns": 3_800_000_000u64, "api": "cudaMalloc", "kind": "device",
               "device": 0, "size": GIB, "tid": 9, "stack_id": 6, "same_thread": true})
    );
    // 512 MiB free of the 1 GiB asked, 8.5 GiB live (53%): memory the hooks did not see.
    assert_eq!(v["live"]["bytes"], 8 * GIB + 512 * MIB);
    assert_eq!(v["cause"], "untracked");
    assert_eq!(v["nvml"], Value::Null); // no sample yet at 3.7 s
    assert!(v["verdict"]
        .as_str()
        .unwrap()
        .ends_with("; transient (a 1.0 GiB allocation succeeded 0.100 s later)."));

    // Out of range: one line, exit 1.
    let out = gpumemprof(&["oom", trace.to_str().unwrap(), "--index", "2"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--index 2: the trace has 2 out-of-memory failures kept (0 to 1)"));
}

#[test]
fn the_text_report_fits_one_screen_and_leads_with_the_verdict() {
    let dir = TempDir::new("oom", "text");
    let trace = write_trace(&dir, training_run());
    let t = oom_text(&trace, &[]);
    let lines: Vec<&str> = t.lines().collect();
    assert!(lines.len() <= 40, "{} lines:\n{t}", lines.len());
    assert!(lines[0].starts_with("trace "), "{t}");
    assert!(
        lines[3].starts_with("OOM: cudaMalloc asked 2.0 GiB on device 0"),
        "{t}"
    );
    for want in [
        "failure 2 of 2 out of memory (1 transient, 1 final; --index N shows another)",
        "  cudaMalloc of 2.0 GiB (2147483648 B) device memory on device 0 at 10.000 s, thread 7, error 2 (stack 2):",
        "  device 0: 1.0 GiB free of 16.0 GiB right after the failure",
        "  NVML at 9.500 s: this process used 15.0 GiB (hooks tracked 14.0 GiB, 1.0 GiB untracked), other processes 512.0 MiB",
        "  final: no later allocation of 2.0 GiB or more of this memory succeeded, on thread 7 or from stack 2",
        "live at the failure: 14.5 GiB (15569256448 B) in 8 allocations (device 14.0 GiB, managed 512.0 MiB), 3 call sites",
        "     8.0 GiB    1 alloc  0x1001 < 0x2001",
        "     6.0 GiB   6 allocs  0x1003 < 0x2003",
        "in the 5.000 s before the failure: 9.5 GiB -> 14.5 GiB (+5.0 GiB)",
        "     +5.0 GiB  (1.0 GiB -> 6.0 GiB)  0x1003 < 0x2003",
    ] {
        assert!(lines.contains(&want), "missing {want:?} in:\n{t}");
    }
}

#[test]
fn a_transient_failure_alone_is_reported_and_a_retry_from_another_thread_needs_the_stack() {
    let dir = TempDir::new("oom", "transient");
    let trace = write_trace(
        &dir,
        vec![
            stack(1),
            alloc(S, 0, DEV, 0xa000, 3 * GIB, 1),
            oom(2 * S, 7, 2 * GIB, 1, GIB, 4 * GIB),
            free(2 * S + 10, 0xa000), // the cache is emptied...
            alloc_on(2 * S + 20, 8, 0, DEV, 0xb000, 2 * GIB, 1), // ...and the retry succeeds
        ],
    );
    let v = oom_json(&trace, &[]);
    assert_eq!(v["failure_counts"]["transient"], 1);
    assert_eq!(v["failure"]["index"], 0);
    assert_eq!(v["failure"]["outcome"], "transient");
    assert_eq!(v["failure"]["retry"]["same_thread"], false);
    assert_eq!(v["failure"]["retry"]["tid"], 8);
    // 3 GiB live of 4 GiB (75%, under 80%) with 1 GiB free: not "live data filled it".
    assert_eq!(v["cause"], "untracked");
    assert_eq!(v["trace"]["complete"], false);
}

#[test]
fn free_memory_above_the_request_is_fragmentation() {
    let dir = TempDir::new("oom", "fragmentation");
    let trace = write_trace(
        &dir,
        vec![
            alloc(S, 0, DEV, 0xa000, 10 * GIB, 0),
            oom(2 * S, 7, 3 * GIB, 0, 4 * GIB, 16 * GIB),
            end(3 * S),
        ],
    );
    let v = oom_json(&trace, &[]);
    assert_eq!(v["cause"], "fragmentation");
    assert!(v["hint"]
        .as_str()
        .unwrap()
        .starts_with("4.0 GiB was free, at least the 3.0 GiB asked"));
    assert_eq!(
        v["verdict"],
        "OOM: cudaMalloc asked 3.0 GiB on device 0 with 4.0 GiB free of 16.0 GiB; \
         10.0 GiB live, 10.0 GiB of it from calls with no stack captured; final."
    );
}

#[test]
fn a_request_larger_than_the_device_exceeds_total() {
    let dir = TempDir::new("oom", "exceeds");
    let trace = write_trace(&dir, vec![oom(S, 7, 80 * GIB, 0, 15 * GIB, 16 * GIB)]);
    let v = oom_json(&trace, &[]);
    assert_eq!(v["cause"], "exceeds_total");
    assert_eq!(v["live"]["bytes"], 0);
    assert_eq!(
        v["verdict"],
        "OOM: cudaMalloc asked 80.0 GiB on device 0 with 15.0 GiB free of 16.0 GiB; \
         nothing live; final."
    );
}

#[test]
fn without_memory_information_there_is_no_hint_but_everything_else() {
    let dir = TempDir::new("oom", "unknown");
    let trace = write_trace(
        &dir,
        vec![
            stack(1),
            alloc(S, 0, DEV, 0xa000, GIB, 1),
            oom(2 * S, 7, 2 * GIB, 1, 0, 0),
        ],
    );
    let v = oom_json(&trace, &[]);
    assert_eq!(v["failure"]["mem_free_bytes"], Value::Null);
    assert_eq!(v["failure"]["mem_total_bytes"], Value::Null);
    assert_eq!(v["cause"], "unknown");
    assert_eq!(
        v["verdict"],
        "OOM: cudaMalloc asked 2.0 GiB on device 0 (free memory not recorded); \
         1.0 GiB live, 1.0 GiB of it from 0x1001; final."
    );
    let t = oom_text(&trace, &[]);
    assert!(t.contains("  device 0: free memory not recorded\n"), "{t}");
}

#[test]
fn few_tracked_bytes_and_nvml_point_at_untracked_memory() {
    let dir = TempDir::new("oom", "untracked");
    let trace = write_trace(
        &dir,
        vec![
            alloc(S, 0, DEV, 0xa000, 2 * GIB, 0),
            sample(S + 1, 5 * GIB, 15 * GIB, 16 * GIB),
            oom(2 * S, 7, 2 * GIB, 0, GIB, 16 * GIB),
        ],
    );
    let v = oom_json(&trace, &[]);
    assert_eq!(v["cause"], "untracked");
    assert_eq!(v["nvml"]["untracked_bytes"], 3 * GIB);
    assert_eq!(v["nvml"]["other_processes_bytes"], 10 * GIB);
    assert_eq!(
        v["hint"],
        "the hooks tracked only 2.0 GiB of the 15.0 GiB in use: the rest is memory they did \
         not see (CUDA context, library workspaces, other processes, unhooked allocation \
         paths); NVML: 3.0 GiB untracked in this process, 10.0 GiB in other processes"
    );
}

/// Another thread allocates while the failing one waits for its sample: memory tracked
/// before NVML answered is not memory the hooks missed.
#[test]
fn the_sample_at_the_failure_is_set_against_the_most_tracked_while_nvml_answered() {
    let dir = TempDir::new("oom", "nvml_window");
    let mut at_failure = synth::sample(2 * S + 20, 0, 5 * GIB, 15 * GIB, 16 * GIB);
    if let Record::Sample(m) = &mut at_failure {
        m.query_ns = 100;
    }
    let trace = write_trace(
        &dir,
        vec![
            alloc(S, 0, DEV, 0xa000, 2 * GIB, 0),
            oom(2 * S, 9, 2 * GIB, 0, GIB, 16 * GIB),
            // Thread 7 (not the failing 9) between the failure and NVML's answer.
            alloc(2 * S + 10, 0, DEV, 0xb000, GIB, 0),
            at_failure,
            alloc(2 * S + 50, 0, DEV, 0xc000, GIB / 2, 0), // in the window [+20, +120]
            free(2 * S + 60, 0xc000),
            alloc(2 * S + 500, 0, DEV, 0xd000, 4 * GIB, 0), // after it
        ],
    );
    let v = oom_json(&trace, &[]);
    assert_eq!(v["nvml"]["at_failure"], true);
    assert_eq!(v["nvml"]["time_ns"], 2 * S + 20);
    assert_eq!(v["nvml"]["tracked_bytes"], 3 * GIB + GIB / 2);
    assert_eq!(v["nvml"]["untracked_bytes"], GIB + GIB / 2);
    // The failure's own figures are still the moment it failed.
    assert_eq!(v["live"]["bytes"], 2 * GIB);
}

#[test]
fn a_pinned_host_failure_counts_pinned_host_memory_only() {
    let dir = TempDir::new("oom", "pinned");
    let trace = write_trace(
        &dir,
        vec![
            alloc(S, 0, DEV, 0xa000, 5 * GIB, 0),
            alloc(S, 0, MemKind::PinnedHost, 0xb000, GIB, 0),
            alloc(S, 1, MemKind::PinnedHost, 0xc000, GIB, 0),
            failed(2 * S, 7, MemKind::PinnedHost, 1 << 62, 0, GIB, 16 * GIB, 2),
        ],
    );
    let v = oom_json(&trace, &[]);
    assert_eq!(v["live"]["kinds"], json!(["pinned_host"]));
    assert_eq!(v["live"]["device"], Value::Null);
    assert_eq!(v["live"]["bytes"], 2 * GIB);
    assert_eq!(v["cause"], "host_memory");
    assert_eq!(
        v["verdict"],
        "OOM: cudaMallocHost asked 4.0 EiB of pinned host memory; 2.0 GiB live, 2.0 GiB of it \
         from calls with no stack captured; final."
    );
}

#[test]
fn a_failed_vmm_handle_retried_by_cu_mem_create_is_transient() {
    let dir = TempDir::new("oom", "vmm");
    let trace = write_trace(
        &dir,
        vec![
            oom(S, 7, 2 * MIB, 0, MIB, 16 * GIB),
            alloc(S + 5, 0, MemKind::VmmHandle, 0x4a00_0000, 2 * MIB, 0),
        ],
    );
    let v = oom_json(&trace, &[]);
    assert_eq!(v["failure"]["outcome"], "transient");
    assert_eq!(v["failure"]["retry"]["kind"], "vmm_handle");
}

#[test]
fn no_failure_is_one_line_and_exit_0() {
    let dir = TempDir::new("oom", "none");
    let trace = write_trace(
        &dir,
        vec![
            alloc(S, 0, DEV, 0xa000, GIB, 0),
            failed(2 * S, 7, DEV, 0, 0, 0, 0, 1),
            end(3 * S),
        ],
    );
    let p = trace.to_str().unwrap();
    let t = oom_text(&trace, &[]);
    assert_eq!(
        t,
        format!("no out-of-memory failure in {p} (1 allocation call failed with other errors)\n")
    );
    let v = oom_json(&trace, &[]);
    assert_eq!(v["failure"], Value::Null);
    assert_eq!(v["live"], Value::Null);
    assert_eq!(v["growth"], Value::Null);
    assert_eq!(v["cause"], Value::Null);
    assert_eq!(v["verdict"], "no out-of-memory failure in this trace");
    assert_eq!(
        v["failure_counts"],
        json!({"out_of_memory": 0, "kept": 0, "transient": 0, "final": 0,
               "other_failed_allocations": 1})
    );
    let out = gpumemprof(&["oom", p, "--index", "0"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_killed_run_is_explained_from_its_complete_blocks() {
    let dir = TempDir::new("oom", "killed");
    let (path, ends) = write_blocks(
        &dir,
        &[
            vec![stack(1), alloc(S, 0, DEV, 0xa000, 3 * GIB, 1)],
            vec![oom(2 * S, 7, 2 * GIB, 1, 512 * MIB, 3 * GIB + 512 * MIB)],
            vec![alloc(3 * S, 0, DEV, 0xb000, GIB, 1), end(4 * S)],
        ],
    );
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..ends[2] - 3]).unwrap();
    let p = path.to_str().unwrap();
    let out = gpumemprof(&["oom", p, "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.trim_end(),
        format!(
            "gpumemprof: warning: {p}: the trace ends inside a block (the process was \
             probably killed); reporting the 2 complete blocks"
        )
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["trace"]["truncated"], true);
    assert_eq!(v["failure"]["outcome"], "final");
    assert_eq!(v["live"]["bytes"], 3 * GIB);
    assert_eq!(v["cause"], "live_data");
}

#[test]
fn bad_window_is_a_usage_error() {
    let dir = TempDir::new("oom", "usage");
    let trace = write_trace(&dir, vec![oom(S, 7, GIB, 0, 0, 0)]);
    let p = trace.to_str().unwrap();
    for bad in ["-1", "soon", "inf"] {
        assert_eq!(
            gpumemprof(&["oom", p, "--window", bad]).status.code(),
            Some(2),
            "{bad}"
        );
    }
}
