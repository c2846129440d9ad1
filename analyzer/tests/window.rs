//! `summary|peak|leaks --range NAME` (`window.rs`): only what was allocated while an NVTX
//! range was open, on any thread, up to its end, on a hand-made trace of the situation a
//! pytest budget meets: a test (range "pytest:test_a") that allocates on its own thread and
//! on another one, frees memory made before it, opens a range of its own inside, and leaves
//! memory live; weights made before it and memory made after it are not the test's.

use std::path::PathBuf;

use gpumemprof_format::{Alloc, Free, Nvtx, NvtxOp, Record, FORMAT_VERSION};
use serde_json::{json, Value};

#[path = "checks/binary.rs"]
mod binary;
#[path = "checks/schema.rs"]
mod schema;
#[path = "checks/synth.rs"]
mod synth;
#[path = "checks/tempdir.rs"]
mod tempdir;

use binary::{gpumemprof, stderr_lines};
use tempdir::TempDir;

const MIB: u64 = 1 << 20;

fn alloc(t: u64, tid: u32, address: u64, size: u64, stack: u64) -> Record {
    Record::Alloc(Alloc {
        tid,
        ..synth::alloc_of(t, address, size, stack)
    })
}

fn free(t: u64, tid: u32, address: u64) -> Record {
    Record::Free(Free {
        tid,
        ..synth::free_of(t, address)
    })
}

fn nvtx(t: u64, tid: u32, op: NvtxOp, name: u64) -> Record {
    Record::Nvtx(Nvtx {
        time_ns: t,
        tid,
        op,
        domain: 0,
        name,
        range: 0,
    })
}

/// The trace, in `dir`.
fn trace(dir: &TempDir) -> PathBuf {
    let header = json!({
        "format": "gpumemprof-trace", "format_version": FORMAT_VERSION, "pid": 7,
        "argv": ["pytest"], "start_monotonic_ns": 0,
        "apis": [{"id": 0, "name": "cudaMalloc"}, {"id": 1, "name": "cudaFree"}]
    });
    let (main, other) = (1, 2);
    let records = vec![
        synth::stack(1),
        synth::stack(2),
        synth::stack(3),
        synth::stack(4),
        Record::NvtxString {
            id: 1,
            text: "pytest:test_a".into(),
        },
        Record::NvtxString {
            id: 2,
            text: "inner".into(),
        },
        alloc(1_000, main, 0xa000_0000, 64 * MIB, 1), // weights, before
        alloc(1_500, main, 0xb000_0000, 2 * MIB, 1),  // before, freed inside
        nvtx(2_000, main, NvtxOp::Push, 1),
        alloc(2_100, main, 0xc000_0000, 8 * MIB, 2),
        alloc(2_200, other, 0xd000_0000, 4 * MIB, 3), // another thread, during the test
        free(2_300, main, 0xb000_0000),
        nvtx(2_350, main, NvtxOp::Push, 2),
        nvtx(2_360, main, NvtxOp::Pop, 0),
        free(2_400, main, 0xc000_0000),
        alloc(2_500, main, 0xe000_0000, MIB, 4), // left live
        nvtx(2_600, main, NvtxOp::Pop, 0),
        alloc(2_700, main, 0xf000_0000, 32 * MIB, 1), // after
        free(2_800, main, 0xa000_0000),
        free(2_900, other, 0xd000_0000),
        synth::end(3_000),
    ];
    synth::write_trace(dir.join("pytest.trace"), &header, &records)
}

fn json_of(args: &[&str], schema_name: &str) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = gpumemprof(&all);
    assert_eq!(out.status.code(), Some(0), "{:?}", stderr_lines(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    schema::assert_valid(schema_name, &v);
    v
}

#[test]
fn a_range_is_what_was_allocated_while_it_was_open_on_any_thread() {
    let dir = TempDir::new("window", "pytest");
    let t = trace(&dir);
    let t = t.to_str().unwrap();
    let range = ["--range", "pytest:test_a"];
    // The most live at once: the 8 MiB of its thread and the 4 MiB of the other.
    let peak = json_of(&[&["peak", t][..], &range].concat(), "peak");
    assert_eq!(
        peak["trace"]["window"],
        json!({"range": "pytest:test_a", "from_ns": 2000, "to_ns": 2600})
    );
    assert_eq!(peak["peaks"][0]["peak_bytes"], 12 * MIB);
    assert_eq!(peak["peaks"][0]["peak_time_ns"], 2_200);
    let sites: Vec<(u64, u64)> = (peak["peaks"][0]["sites"].as_array().unwrap().iter())
        .map(|s| {
            (
                s["stack_id"].as_u64().unwrap(),
                s["bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(sites, [(2, 8 * MIB), (3, 4 * MIB)]);
    // Left live when it closed: the other thread's 4 MiB (freed after) and the 1 MiB.
    let leaks = json_of(&[&["leaks", t][..], &range].concat(), "leaks");
    assert_eq!(
        (&leaks["total_bytes"], &leaks["total_count"]),
        (&json!(5 * MIB), &json!(2))
    );
    // Counted: its three allocations and the free of one; the free of memory made before
    // it is no unknown free.
    let summary = json_of(&[&["summary", t][..], &range].concat(), "summary");
    assert_eq!(summary["totals"]["allocations"], 3);
    assert_eq!(summary["totals"]["frees"], 1);
    assert_eq!(summary["unknown_frees"], 0);
    // The whole trace says how it ended, as it does without --range.
    assert_eq!(summary["trace"]["complete"], true);
    let text = String::from_utf8_lossy(&gpumemprof(&[&["leaks", t][..], &range].concat()).stdout)
        .into_owned();
    assert!(
        text.contains(
            "only what was allocated in range \"pytest:test_a\", open from 0.000 s to 0.000 s, on any thread"
        ) && text.contains("5.0 MiB (5242880 B) in 2 allocations live when the range closed"),
        "{text}"
    );
}

#[test]
fn a_range_the_trace_lacks_is_one_line_and_several_traces_are_a_usage_error() {
    let dir = TempDir::new("window", "errors");
    let t = trace(&dir);
    let t = t.to_str().unwrap();
    let out = gpumemprof(&["peak", t, "--range", "pytest:test_b"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr_lines(&out),
        [format!(
            "gpumemprof: error: {t}: no NVTX range or scope named \"pytest:test_b\" in the trace (see them with: gpumemprof summary {t} --by range)"
        )]
    );
    let out = gpumemprof(&["summary", t, t, "--range", "pytest:test_a"]);
    assert_eq!(out.status.code(), Some(2));
}
