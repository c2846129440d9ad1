//! End to end: programs run under the shim, their traces exported with `gpumemprof export
//! --format torch-snapshot`, and the snapshot opened by an independent reader, `ptmem`
//! (PyPI, pinned in `support::PYTHON_PACKAGES`, installed on first use): the numbers its
//! summary prints, and the exact ones it computes, must be our `summary --json` and
//! `leaks --json` numbers. The programs: the training loop that leaks
//! (`examples/train_leak.c`), the job that dies of out-of-memory (`oom_final.c`) and
//! PyTorch-style expandable segments (`vmm_expandable.c`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use gpumemprof_tests::profiled::*;
use gpumemprof_tests::torch_job::snapshot_json;
use gpumemprof_tests::{python_packages, source_line_of};
use serde_json::Value;

/// Runs `name` under the shim and exports its trace; returns the trace and the snapshot.
fn exported(test: &str, name: &str, args: &[&str], exit: i32) -> (PathBuf, PathBuf) {
    let dir = scratch(test);
    let run = run_profiled(&dir, name, args, &[]);
    assert_eq!(run.output.status.code(), Some(exit), "{}", run.stderr());
    let snapshot = dir.join("snapshot.pickle");
    let out = analyzer()
        .args(["export", "--format", "torch-snapshot"])
        .arg(&run.trace)
        .arg("-o")
        .arg(&snapshot)
        .output()
        .expect("run gpumemprof");
    assert_eq!(
        out.status.code(),
        Some(0),
        "export: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (run.trace, snapshot)
}

/// Runs Python with ptmem importable; `code` gets the snapshot's path as `sys.argv[1]`
/// (and `args` after it). Panics with pip's or Python's message if ptmem is not there:
/// this test never passes without having run it.
fn python_with_ptmem(code: &str, args: &[&Path]) -> String {
    let site = python_packages();
    let out = Command::new("python3")
        .env("PYTHONPATH", &site)
        .arg("-c")
        .arg(code)
        .args(args)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "python3 with ptmem from {} failed: {}{}",
        site.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// `ptmem -s SNAPSHOT` (its command line, `ptmem.cli:run`): the summary's `label: value`
/// lines.
fn ptmem_summary(snapshot: &Path) -> BTreeMap<String, String> {
    let printed = python_with_ptmem(
        "import sys\nfrom ptmem.cli import run\nsys.argv = ['ptmem', '-s', sys.argv[1]]\nrun()",
        &[snapshot],
    );
    assert!(
        printed.contains("PyTorch Memory Snapshot Summary"),
        "not ptmem's summary:\n{printed}"
    );
    printed
        .lines()
        .filter_map(|l| l.trim().split_once(": "))
        .map(|(k, v)| (format!("{}:", k.trim()), v.trim().to_owned()))
        .collect()
}

/// The exact numbers behind ptmem's summary, from its own loader (`MemoryProfileData`).
fn ptmem_numbers(snapshot: &Path) -> Value {
    let printed = python_with_ptmem(
        "import json, math, sys\nfrom ptmem.cli import MemoryProfileData\n\
         d = MemoryProfileData(sys.argv[1])\n\
         print(json.dumps({'initial': d.initial_memory, 'peak': d.max_memory,\n\
             'final': d.timeline_memory[-1], 'events': d.max_time + 1,\n\
             'allocations': len(d.allocations),\n\
             'live': sum(1 for a in d.allocations if a.time_free == math.inf),\n\
             'allocated': sum(a.size for a in d.allocations),\n\
             'devices': sorted({a.device for a in d.allocations})}))",
        &[snapshot],
    );
    serde_json::from_str(&printed).expect("JSON")
}

/// ptmem's `fmt_bytes`: how its summary prints a byte count.
fn ptmem_bytes(n: u64) -> String {
    for (unit, threshold) in [("GB", 1u64 << 30), ("MB", 1 << 20), ("KB", 1 << 10)] {
        if n >= threshold {
            return format!("{:.1}{unit}", n as f64 / threshold as f64);
        }
    }
    format!("{n}B")
}

/// Everything ptmem says about the snapshot equals what our reports say about the trace.
fn ptmem_agrees_with_our_reports(trace: &Path, snapshot: &Path) {
    let summary = report("summary", trace, &[]);
    let leaks = report("leaks", trace, &[]);
    let t = &summary["totals"];
    let n = |v: &Value| v.as_u64().expect("an integer");
    let (allocations, frees) = (n(&t["allocations"]), n(&t["frees"]));
    let (peak, live) = (n(&t["peak_bytes"]), n(&t["live_bytes_at_end"]));
    let live_count = n(&t["live_allocations_at_end"]);
    assert_eq!(
        (live, live_count),
        (n(&leaks["total_bytes"]), n(&leaks["total_count"]))
    );

    let exact = ptmem_numbers(snapshot);
    assert_eq!(
        exact,
        serde_json::json!({"initial": 0, "peak": peak, "final": live,
            "events": allocations + frees, "allocations": allocations, "live": live_count,
            "allocated": n(&t["bytes_allocated"]), "devices": [0]}),
        "ptmem's numbers against summary {t}"
    );

    let printed = ptmem_summary(snapshot);
    let shown = |label: &str| {
        printed
            .get(label)
            .unwrap_or_else(|| panic!("ptmem printed no {label:?}: {printed:#?}"))
            .as_str()
    };
    let count = |label: &str| shown(label).replace(',', "");
    assert_eq!(shown("Before recording (initial):"), "0B");
    assert_eq!(shown("Peak:"), ptmem_bytes(peak));
    assert_eq!(shown("Final (end of recording):"), ptmem_bytes(live));
    assert_eq!(
        count("Events (alloc + free):"),
        (allocations + frees).to_string()
    );
    assert_eq!(count("Total tracked:"), allocations.to_string());
    assert_eq!(count("Still live at end:"), live_count.to_string());
    assert_eq!(
        shown("Total allocated (cumul.):"),
        ptmem_bytes(n(&t["bytes_allocated"]))
    );
    assert_eq!(shown("CUDA devices:"), "device 0");
}

fn entries<'a>(snap: &'a Value, action: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    snap["device_traces"][0]
        .as_array()
        .expect("device 0's entries")
        .iter()
        .filter(move |e| e["action"] == action)
}

/// The training loop leaks 1 MiB per step from one line: ptmem's peak, final bytes and
/// counts are ours, and the leaked blocks' innermost frame is that line.
#[test]
fn ptmem_reads_the_training_loop_with_our_peak_leak_and_counts() {
    let (trace, snapshot) = exported("torch_snapshot_train", "train_leak", &["20"], 0);
    ptmem_agrees_with_our_reports(&trace, &snapshot);

    let snap = snapshot_json(&snapshot);
    let segments = snap["segments"].as_array().expect("segments");
    let line = source_line_of("examples/train_leak.c", "GPUMEMPROF-LEAK");
    let leak_report = report("leaks", &trace, &[]);
    assert_eq!(
        segments.len() as u64,
        leak_report["total_count"].as_u64().unwrap()
    );
    for s in segments {
        let top = &s["blocks"][0]["frames"][0];
        assert_eq!(top["name"], "keep_for_logging", "{s}");
        assert_eq!(top["line"], line, "{s}");
        assert!(
            top["filename"].as_str().unwrap().ends_with("train_leak.c"),
            "{s}"
        );
        assert_eq!(s["total_size"], 1 << 20);
    }
}

/// The job that dies of out-of-memory: ptmem's numbers are ours, and the failure is one
/// `oom` entry with the request, the free memory the shim read and the requesting line.
#[test]
fn ptmem_reads_the_out_of_memory_job_and_the_failure_is_an_oom_entry() {
    let (trace, snapshot) = exported("torch_snapshot_oom", "oom_final", &[], 1);
    ptmem_agrees_with_our_reports(&trace, &snapshot);

    let failure = &report("oom", &trace, &[])["failure"];
    let snap = snapshot_json(&snapshot);
    let ooms: Vec<&Value> = entries(&snap, "oom").collect();
    assert_eq!(ooms.len(), 1, "{ooms:?}");
    assert_eq!(ooms[0]["size"], failure["size"]);
    assert_eq!(ooms[0]["device_free"], failure["mem_free_bytes"]);
    assert_eq!(ooms[0]["frames"][0]["name"], "grow_batch");
    assert_eq!(
        ooms[0]["frames"][0]["line"],
        source_line_of("tests/programs/oom_final.c", "GPUMEMPROF-OOM-REQUEST")
    );
}

/// Expandable segments: mappings are the memory (segment_map/segment_unmap around their
/// blocks, expandable segments at the end); the reservation and the handles are not, and
/// ptmem's numbers are ours.
#[test]
fn ptmem_reads_expandable_segments_as_their_mappings() {
    let (trace, snapshot) = exported("torch_snapshot_vmm", "vmm_expandable", &[], 0);
    ptmem_agrees_with_our_reports(&trace, &snapshot);

    let summary = report("summary", &trace, &[]);
    let snap = snapshot_json(&snapshot);
    let t = &summary["totals"];
    assert_eq!(
        entries(&snap, "segment_map").count() as u64,
        t["allocations"].as_u64().unwrap()
    );
    assert_eq!(
        entries(&snap, "segment_unmap").count() as u64,
        t["frees"].as_u64().unwrap()
    );
    assert_eq!(entries(&snap, "segment_alloc").count(), 0);
    let segments = snap["segments"].as_array().expect("segments");
    assert_eq!(
        segments.len() as u64,
        t["live_allocations_at_end"].as_u64().unwrap()
    );
    assert!(
        segments.iter().all(|s| s["is_expandable"] == true),
        "{segments:?}"
    );
    let mapped: u64 = segments
        .iter()
        .map(|s| s["total_size"].as_u64().unwrap())
        .sum();
    assert_eq!(mapped, t["live_bytes_at_end"].as_u64().unwrap());
}

/// PyTorch's real caching allocator (`tests/torch/caching_allocator.cpp`, see
/// `support::torch`): the snapshot holds its tensors as blocks inside the segments, as
/// PyTorch's own snapshot does, so ptmem's numbers are the allocator's (allocated peak
/// 13 MiB, 12 MiB in 4 tensors at the end, 54 tensors) and the 20 MiB segment live at the
/// end lists its 4 tensors of 3 MiB and 8 MiB inactive.
#[test]
fn pytorchs_tensors_are_blocks_inside_their_segments() {
    const MIB: u64 = 1 << 20;
    let h = gpumemprof_tests::torch::harness();
    let dir = scratch("torch_snapshot_tensors");
    let trace = dir.join("harness.trace");
    let out = preload(&mut h.command(&h.exe), &trace)
        .output()
        .expect("run the harness");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let snapshot = dir.join("snap.pickle");
    let exported = analyzer()
        .args(["export", "--format", "torch-snapshot"])
        .arg(&trace)
        .arg("-o")
        .arg(&snapshot)
        .output()
        .expect("run gpumemprof export");
    assert_eq!(exported.status.code(), Some(0), "{exported:?}");

    assert_eq!(
        ptmem_numbers(&snapshot),
        serde_json::json!({"initial": 0, "peak": 13 * MIB, "final": 12 * MIB,
            "events": 104, "allocations": 54, "live": 4, "allocated": 62 * MIB,
            "devices": [0]})
    );
    let snap = snapshot_json(&snapshot);
    let segments = snap["segments"].as_array().expect("segments");
    assert_eq!(segments.len(), 1);
    let s = &segments[0];
    assert_eq!(
        (&s["total_size"], &s["allocated_size"]),
        (&serde_json::json!(20 * MIB), &serde_json::json!(12 * MIB))
    );
    let blocks: Vec<(u64, &str)> = s["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["size"].as_u64().unwrap(), b["state"].as_str().unwrap()))
        .collect();
    let active = (3 * MIB, "active_allocated");
    assert_eq!(
        blocks,
        vec![active, active, active, active, (8 * MIB, "inactive")]
    );
    // The segments' own entries: allocated twice (20 and 2 MiB), one released by the
    // out-of-memory retry; no alloc entry for a segment.
    assert_eq!(entries(&snap, "segment_alloc").count(), 2);
    assert_eq!(entries(&snap, "segment_free").count(), 1);
    assert_eq!(entries(&snap, "alloc").count(), 54);
}

/// `export` with `args`, exit 0; returns stderr.
fn export_with(trace: &Path, out: &Path, args: &[&str]) -> String {
    let o = analyzer()
        .args(["export", "--format", "torch-snapshot", "-f"])
        .arg(trace)
        .arg("-o")
        .arg(out)
        .args(args)
        .output()
        .expect("run gpumemprof");
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "{args:?}: {stderr}");
    stderr
}

/// The trial's situation in small: a loop of 31,000 allocate/free pairs (1,000 warm-up
/// pairs and 30,000; 155,000 entries: segment_alloc, alloc, free_requested,
/// free_completed, segment_free each). By default a
/// snapshot keeps the last 100,000 entries of each device (PyTorch's `max_entries`) and
/// says what it left out; `--last 0` keeps all; `--last N` the last N; `--to` takes the
/// snapshot at that time (the segments are what was live then), `--from` starts there.
#[test]
fn a_long_trace_gives_a_snapshot_of_its_last_entries() {
    let dir = scratch("torch_snapshot_window");
    let run = run_profiled(
        &dir,
        "bench_loop",
        &["cuda", "0", "30000"],
        &[("GPUMEMPROF_NVML_MS", "0")],
    );
    assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr());
    let out = dir.join("window.pickle");

    let said = export_with(&run.trace, &out, &[]);
    assert!(
        said.contains(&format!(
            "{}: left out the first 55000 of 155000 trace entries (--last 100000 per device",
            out.display()
        )),
        "{said}"
    );
    let all = dir.join("all.pickle");
    export_with(&run.trace, &all, &["--last", "0"]);
    let (cut, whole) = (snapshot_json(&out), snapshot_json(&all));
    let (cut, whole) = (
        cut["device_traces"][0].as_array().unwrap(),
        whole["device_traces"][0].as_array().unwrap(),
    );
    assert_eq!((cut.len(), whole.len()), (100_000, 155_000));
    assert_eq!(cut[..], whole[55_000..]);

    let said = export_with(&run.trace, &out, &["--last", "7"]);
    assert!(
        said.contains("left out the first 154993 of 155000"),
        "{said}"
    );
    let seven = snapshot_json(&out);
    assert_eq!(
        seven["device_traces"][0].as_array().unwrap()[..],
        whole[154_993..]
    );

    // `--to` the training loop's peak: the snapshot is taken then, its segments exactly
    // what `peak` says was live (114 MiB in 26 allocations), no entry after it.
    let (trace, _) = exported("torch_snapshot_to", "train_leak", &["20"], 0);
    let peak = report("peak", &trace, &[]);
    let at_ns = peak["total_peak_time_ns"].as_u64().unwrap();
    let live: u64 = peak["peaks"][0]["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["count"].as_u64().unwrap())
        .sum();
    let to = format!("{:.9}", at_ns as f64 / 1e9);
    export_with(&trace, &out, &["--to", &to]);
    let then = snapshot_json(&out);
    let segments = then["segments"].as_array().unwrap();
    let bytes: u64 = segments
        .iter()
        .map(|s| s["total_size"].as_u64().unwrap())
        .sum();
    assert_eq!(
        (segments.len() as u64, bytes),
        (live, peak["total_peak_bytes"].as_u64().unwrap())
    );
    assert_eq!(bytes, 114 << 20);
    let entries = then["device_traces"][0].as_array().unwrap();
    let last_us = entries
        .iter()
        .map(|e| e["time_us"].as_u64().unwrap())
        .max()
        .unwrap();
    let first_us = entries[0]["time_us"].as_u64().unwrap();
    assert!(
        last_us - first_us <= at_ns / 1000 + 1,
        "{last_us} {first_us} {at_ns}"
    );
}
