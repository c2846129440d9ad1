//! The real traces checked in under `tests/corpus/` (written by the shim from the example
//! and test programs; `tests/e2e_oom.rs` has the ignored test that regenerates them) still
//! read to the same numbers: a format or analyzer change that breaks old traces fails here.
//! Every number below was read off the file once; the programs' own comments explain them.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

const MIB: u64 = 1 << 20;

fn corpus(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/corpus")
        .join(name)
}

fn report(cmd: &str, name: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_gpumemprof"))
        .arg(cmd)
        .arg(corpus(name))
        .arg("--json")
        .output()
        .expect("run gpumemprof");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{cmd} {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// (device, kind, allocations, frees, live bytes at end) per row.
fn rows(s: &Value) -> Vec<(i64, String, u64, u64, u64)> {
    s["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            (
                r["device"].as_i64().unwrap(),
                r["kind"].as_str().unwrap().to_string(),
                r["allocations"].as_u64().unwrap(),
                r["frees"].as_u64().unwrap(),
                r["live_bytes_at_end"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Checks a corpus trace's summary: (complete, truncated, events, duration), the totals,
/// (failed allocations, unknown frees, failed frees) and the rows.
fn check(
    name: &str,
    trace: (bool, bool, u64, u64),
    totals: Value,
    counters: (u64, u64, u64),
    want_rows: &[(i64, &str, u64, u64, u64)],
) {
    let s = report("summary", name);
    let t = &s["trace"];
    assert_eq!(
        (
            &t["complete"],
            &t["truncated"],
            &t["events"],
            &t["duration_ns"]
        ),
        (
            &json!(trace.0),
            &json!(trace.1),
            &json!(trace.2),
            &json!(trace.3)
        ),
        "{name}"
    );
    assert_eq!(s["totals"], totals, "{name}");
    assert_eq!(
        (
            &s["failed_allocations"],
            &s["unknown_frees"],
            &s["failed_frees"]
        ),
        (&json!(counters.0), &json!(counters.1), &json!(counters.2)),
        "{name}"
    );
    let want: Vec<(i64, String, u64, u64, u64)> = want_rows
        .iter()
        .map(|r| (r.0, r.1.to_string(), r.2, r.3, r.4))
        .collect();
    assert_eq!(rows(&s), want, "{name}");
}

#[test]
fn every_corpus_trace_is_small_and_listed_here() {
    let mut names: Vec<String> = std::fs::read_dir(corpus(""))
        .expect("tests/corpus")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "gmt"))
        })
        .map(|e| {
            let e = e.expect("entry");
            let size = e.metadata().expect("metadata").len();
            assert!(size < 16 << 10, "{:?} is {size} bytes", e.path());
            e.file_name().to_string_lossy().into_owned()
        })
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "all_apis.gmt",
            "flush_rounds_3_cut.gmt",
            "oom_final.gmt",
            "oom_retry.gmt",
            "train_leak_2.gmt"
        ]
    );
}

#[test]
fn train_leak_with_2_steps() {
    // 1 + 5*2 allocations, 1 + 4*2 frees, peak (94 + 2) MiB, 2 MiB leaked.
    check(
        "train_leak_2.gmt",
        (true, false, 20, 1_709_329),
        json!({"allocations": 11, "frees": 9, "bytes_allocated": 126 * MIB,
               "bytes_freed": 124 * MIB, "peak_bytes": 96 * MIB, "peak_time_ns": 1_663_863,
               "live_bytes_at_end": 2 * MIB, "live_allocations_at_end": 2,
               "failed_allocations": 0}),
        (0, 0, 0),
        &[(0, "device", 11, 9, 2 * MIB)],
    );
}

#[test]
fn all_apis() {
    check(
        "all_apis.gmt",
        (true, false, 53, 8_686_764),
        json!({"allocations": 16, "frees": 13, "bytes_allocated": 29_378_512u64,
               "bytes_freed": 18_892_752u64, "peak_bytes": 11 * MIB,
               "peak_time_ns": 8_597_165, "live_bytes_at_end": 10 * MIB,
               "live_allocations_at_end": 3, "failed_allocations": 16}),
        (16, 0, 8),
        &[
            (0, "device", 9, 8, 5 * MIB),
            (0, "managed", 2, 1, 3 * MIB),
            (0, "pinned_host", 3, 2, 2 * MIB),
            (1, "device", 2, 2, 0),
        ],
    );
    let o = report("oom", "all_apis.gmt");
    assert_eq!(o["failure_counts"]["out_of_memory"], 3);
    assert_eq!(o["failure"]["size"], 2u64 << 30);
}

#[test]
fn flush_rounds_cut_inside_its_last_block() {
    // 3 rounds of 3 x 64 KiB allocated and 2 freed; the end record was in the cut block.
    check(
        "flush_rounds_3_cut.gmt",
        (false, true, 15, 2_060_787),
        json!({"allocations": 9, "frees": 6, "bytes_allocated": 589_824,
               "bytes_freed": 393_216, "peak_bytes": 327_680, "peak_time_ns": 2_042_555,
               "live_bytes_at_end": 196_608, "live_allocations_at_end": 3,
               "failed_allocations": 0}),
        (0, 0, 0),
        &[(0, "device", 9, 6, 196_608)],
    );
}

#[test]
fn oom_final() {
    check(
        "oom_final.gmt",
        (true, false, 16, 1_001_719_825),
        json!({"allocations": 14, "frees": 1, "bytes_allocated": 928 * MIB,
               "bytes_freed": 32 * MIB, "peak_bytes": 928 * MIB,
               "peak_time_ns": 1_001_423_738u64, "live_bytes_at_end": 896 * MIB,
               "live_allocations_at_end": 13, "failed_allocations": 1}),
        (1, 0, 0),
        &[(0, "device", 14, 1, 896 * MIB)],
    );
    let o = report("oom", "oom_final.gmt");
    assert_eq!(o["failure"]["size"], 256 * MIB);
    assert_eq!(o["failure"]["outcome"], "final");
    assert_eq!(o["live"]["bytes"], 896 * MIB);
    assert_eq!(o["live"]["count"], 13);
    let sites: Vec<(u64, u64)> = o["live"]["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["bytes"].as_u64().unwrap(), s["count"].as_u64().unwrap()))
        .collect();
    assert_eq!(sites, vec![(512 * MIB, 1), (256 * MIB, 4), (128 * MIB, 8)]);
    // Written by a shim that reads the device's memory at a failure.
    assert_eq!(o["failure"]["mem_free_bytes"], 128 * MIB);
    assert_eq!(o["failure"]["mem_total_bytes"], 1u64 << 30);
    assert_eq!(o["cause"], "live_data");
}

#[test]
fn oom_retry() {
    check(
        "oom_retry.gmt",
        (true, false, 17, 9_462_437),
        json!({"allocations": 8, "frees": 8, "bytes_allocated": 1152 * MIB,
               "bytes_freed": 1152 * MIB, "peak_bytes": 896 * MIB, "peak_time_ns": 5_559_981,
               "live_bytes_at_end": 0, "live_allocations_at_end": 0,
               "failed_allocations": 1}),
        (1, 0, 0),
        &[(0, "device", 8, 8, 0)],
    );
    let o = report("oom", "oom_retry.gmt");
    assert_eq!(o["failure"]["outcome"], "transient");
    assert_eq!(o["failure"]["retry"]["same_thread"], true);
    assert_eq!(o["live"]["bytes"], 896 * MIB);
}
