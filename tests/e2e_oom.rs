//! End to end: C programs that hit CUDA out-of-memory, run under the shim on the simulated
//! runtime; `gpumemprof oom` must name what asked, what held the memory and which lines
//! allocated it, with exact numbers.
//!
//! The device's free and total memory at the failure come from the shim (`mem_free` and
//! `mem_total` of the failure record). Where the trace has them (`mem_total > 0`) they are
//! checked exactly, with the cause and verdict that follow from them; where it does not,
//! the tests check the "not recorded" form instead and print a note on stderr.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;

use gpumemprof_tests::profiled::*;
use gpumemprof_tests::{repo_root, source_line_of};
use serde_json::{json, Value};

// Only `assert_valid` is used here.
#[allow(dead_code)]
#[path = "../analyzer/tests/checks/schema.rs"]
mod schema;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// `gpumemprof oom TRACE --json EXTRA...`, checked against docs/schemas/oom.schema.json.
fn oom_report(trace: &Path, extra: &[&str]) -> Value {
    let v = report("oom", trace, extra);
    schema::assert_valid("oom", &v);
    v
}

/// The line of the frame at `depth` (0 = innermost) of a JSON stack.
fn line_at(frames: &Value, depth: usize) -> u64 {
    frames[depth]["line"].as_u64().unwrap_or(0)
}

/// `(line of the frame at depth, bytes, count)` of each site of a JSON list, in order.
fn sites_by_line(sites: &Value, depth: usize) -> Vec<(u64, u64, u64)> {
    sites
        .as_array()
        .expect("sites")
        .iter()
        .map(|s| {
            (
                line_at(&s["frames"], depth),
                s["bytes"].as_u64().unwrap(),
                s["count"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn is_frame(frame: &Value, function: &str, file_suffix: &str, line: u32) -> bool {
    // Reports show sources relative to the program's working directory, the tests crate.
    let suffix = file_suffix.strip_prefix("tests/").unwrap_or(file_suffix);
    frame["function"] == function
        && frame["file"].as_str().is_some_and(|f| f.ends_with(suffix))
        && frame["line"] == line
}

/// True (and a note on stderr) when the failure does not carry the device's memory
/// information, i.e. the shim did not record it.
fn mem_info_missing(test: &str, failure: &Value) -> bool {
    let missing = failure["mem_total_bytes"].is_null();
    if missing {
        eprintln!(
            "note: {test}: the trace does not record free/total memory at the failure \
             (mem_total = 0); the checks of mem_free/mem_total, cause and verdict that \
             depend on it were replaced by the \"not recorded\" form"
        );
    }
    missing
}

fn oom_text(trace: &Path, extra: &[&str]) -> String {
    report_text("oom", trace, extra)
}

/// The checks shared by the exiting and the killed run of `oom_final`.
fn check_oom_final(test: &str, v: &Value) {
    const SRC: &str = "tests/programs/oom_final.c";
    let at = |marker: &str| source_line_of(SRC, marker);
    assert_eq!(
        v["failure_counts"],
        json!({"out_of_memory": 1, "kept": 1, "transient": 0, "final": 1,
               "other_failed_allocations": 0})
    );
    let f = &v["failure"];
    assert_eq!(
        (
            &f["api"],
            &f["kind"],
            &f["device"],
            &f["size"],
            &f["result"]
        ),
        (
            &json!("cudaMalloc"),
            &json!("device"),
            &json!(0),
            &json!(256 * MIB),
            &json!(2)
        )
    );
    assert_eq!(f["outcome"], "final");
    assert!(
        is_frame(
            &f["frames"][0],
            "grow_batch",
            SRC,
            at("GPUMEMPROF-OOM-REQUEST")
        ),
        "{}",
        f["frames"]
    );
    assert_eq!(f["frames"][1]["function"], "main");

    let live = &v["live"];
    assert_eq!(live["bytes"], 896 * MIB);
    assert_eq!(live["count"], 13);
    assert_eq!(live["sites_total"], 3);
    assert_eq!(
        sites_by_line(&live["sites"], 0),
        vec![
            (u64::from(at("GPUMEMPROF-OOM-WEIGHTS")), 512 * MIB, 1),
            (u64::from(at("GPUMEMPROF-OOM-ACT")), 256 * MIB, 4),
            (u64::from(at("GPUMEMPROF-OOM-HISTORY")), 128 * MIB, 8),
        ]
    );
    assert_eq!(live["sites"][0]["frames"][0]["function"], "load_weights");
    let largest: Vec<u64> = live["largest"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["size"].as_u64().unwrap())
        .collect();
    assert_eq!(
        largest,
        vec![512 * MIB, 64 * MIB, 64 * MIB, 64 * MIB, 64 * MIB]
    );

    // The whole run is shorter than the default 5 s window: everything live grew in it.
    let g = &v["growth"];
    assert_eq!(
        (&g["bytes_at_start"], &g["growth_bytes"]),
        (&json!(0), &json!(896 * MIB))
    );
    assert_eq!(g["sites"].as_array().unwrap().len(), 3);

    let weights = format!(
        "896.0 MiB live, 512.0 MiB of it from load_weights (oom_final.c:{}); final.",
        at("GPUMEMPROF-OOM-WEIGHTS")
    );
    if mem_info_missing(test, f) {
        assert_eq!(v["cause"], "unknown");
        assert_eq!(
            v["verdict"],
            format!(
                "OOM: cudaMalloc asked 256.0 MiB on device 0 (free memory not recorded); {weights}"
            )
        );
    } else {
        // 1 GiB - 896 MiB free; 896 MiB is 87% of the device: live data filled it.
        assert_eq!(f["mem_free_bytes"], 128 * MIB);
        assert_eq!(f["mem_total_bytes"], GIB);
        assert_eq!(v["cause"], "live_data");
        assert_eq!(
            v["verdict"],
            format!(
                "OOM: cudaMalloc asked 256.0 MiB on device 0 with 128.0 MiB free of 1.0 GiB; \
                 {weights}"
            )
        );
    }
}

#[test]
fn a_run_that_dies_of_oom_is_explained_down_to_its_lines() {
    let dir = scratch("oom_final");
    let run = run_profiled(&dir, "oom_final", &[], &[]);
    assert_eq!(run.output.status.code(), Some(1), "{}", run.stderr());
    assert_eq!(run.stdout(), "oom rc=2\n");

    let v = oom_report(&run.trace, &[]);
    assert_eq!(v["trace"]["complete"], true);
    check_oom_final("oom_final", &v);

    // `track` raises a critical alert for the failure itself, below any threshold: 896 MiB
    // of the 1 GiB device is 87.5%, a warning by usage.
    let t = report("track", &run.trace, &[]);
    let alerts: Vec<(&str, &str, u64, u64)> = (t["alerts"].as_array().unwrap().iter())
        .map(|a| {
            (
                a["level"].as_str().unwrap(),
                a["cause"].as_str().unwrap(),
                a["requested_bytes"].as_u64().unwrap(),
                a["used_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        alerts,
        [
            ("warning", "threshold", 0, 896 * MIB),
            ("critical", "out_of_memory", 256 * MIB, 896 * MIB)
        ]
    );
    let text = report_text("track", &run.trace, &[]);
    assert!(
        text.contains(
            "CRITICAL device 0: out of memory: 256.0 MiB (268435456 B) asked for with 896.0 MiB \
             (939524096 B) in use; see why with: gpumemprof oom"
        ),
        "{text}"
    );

    // The weights came 1 s before the rest: a 0.5 s window sees only the step's growth.
    let w = oom_report(&run.trace, &["--window", "0.5"]);
    let g = &w["growth"];
    assert_eq!(g["window_ns"], 500_000_000);
    assert_eq!(
        (
            &g["bytes_at_start"],
            &g["bytes_at_failure"],
            &g["growth_bytes"]
        ),
        (&json!(512 * MIB), &json!(896 * MIB), &json!(384 * MIB))
    );
    let src = "tests/programs/oom_final.c";
    let grew: Vec<(u64, i64)> = g["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                line_at(&s["frames"], 0),
                s["growth_bytes"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        grew,
        vec![
            (
                u64::from(source_line_of(src, "GPUMEMPROF-OOM-ACT")),
                256 * MIB as i64
            ),
            (
                u64::from(source_line_of(src, "GPUMEMPROF-OOM-HISTORY")),
                128 * MIB as i64
            ),
        ]
    );

    // One screen, verdict first.
    let t = oom_text(&run.trace, &[]);
    assert!(t.lines().count() <= 40, "{t}");
    assert_eq!(t.lines().nth(3), v["verdict"].as_str(), "{t}");
    assert!(t.contains("grow_batch at "), "{t}");
}

#[test]
fn a_run_killed_right_after_its_oom_is_explained_from_what_was_written() {
    let dir = scratch("oom_final_kill");
    let run = run_profiled(&dir, "oom_final", &["kill"], &[]);
    assert_eq!(run.output.status.signal(), Some(9), "{}", run.stderr());
    let v = oom_report(&run.trace, &[]);
    assert_eq!(v["trace"]["complete"], false);
    check_oom_final("oom_final kill", &v);
}

#[test]
fn an_oom_that_a_cache_flush_and_retry_recovers_from_is_transient() {
    const SRC: &str = "tests/programs/oom_retry.c";
    let at = |marker: &str| u64::from(source_line_of(SRC, marker));
    let dir = scratch("oom_retry");
    let run = run_profiled(&dir, "oom_retry", &[], &[]);
    assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr());
    assert_eq!(run.stdout(), "retry ok\n");

    let v = oom_report(&run.trace, &[]);
    assert_eq!(
        v["failure_counts"],
        json!({"out_of_memory": 1, "kept": 1, "transient": 1, "final": 0,
               "other_failed_allocations": 0})
    );
    let f = &v["failure"];
    assert_eq!(
        (&f["size"], &f["outcome"]),
        (&json!(256 * MIB), &json!("transient"))
    );
    // Both calls go through alloc_block; its caller tells the try from the retry.
    assert_eq!(f["frames"][0]["function"], "alloc_block");
    assert_eq!(line_at(&f["frames"], 1), at("GPUMEMPROF-OOM-TRY"));
    let retry = &f["retry"];
    assert_eq!(
        (&retry["api"], &retry["size"], &retry["same_thread"]),
        (&json!("cudaMalloc"), &json!(256 * MIB), &json!(true))
    );
    assert_ne!(retry["stack_id"], f["stack_id"]);

    assert_eq!(v["live"]["bytes"], 896 * MIB);
    assert_eq!(v["live"]["count"], 7);
    assert_eq!(
        sites_by_line(&v["live"]["sites"], 1),
        vec![
            (at("GPUMEMPROF-OOM-CACHE"), 768 * MIB, 6),
            (at("GPUMEMPROF-OOM-LOAD"), 128 * MIB, 1)
        ]
    );
    let verdict = v["verdict"].as_str().unwrap();
    assert!(
        verdict.contains("; 896.0 MiB live, 768.0 MiB of it from alloc_block (oom_retry.c:"),
        "{verdict}"
    );
    assert!(
        verdict.contains("; transient (a 256.0 MiB allocation succeeded "),
        "{verdict}"
    );
    if !mem_info_missing("oom_retry", f) {
        assert_eq!(f["mem_free_bytes"], 128 * MIB);
        assert_eq!(v["cause"], "live_data");
    }
}

#[test]
fn all_apis_three_ooms_are_each_explained() {
    const SRC: &str = "tests/programs/all_apis.c";
    let dir = scratch("oom_all_apis");
    let run = run_profiled(&dir, "all_apis", &[], &[]);
    assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr());

    // The counts documented at the top of all_apis.c: 3 out-of-memory failures (none
    // retried), 13 failed calls with other errors.
    let v = oom_report(&run.trace, &[]);
    assert_eq!(
        v["failure_counts"],
        json!({"out_of_memory": 3, "kept": 3, "transient": 0, "final": 3,
               "other_failed_allocations": 13})
    );
    // By default the first final failure: cudaMalloc of 2 GiB with 1 MiB live.
    let f = &v["failure"];
    assert_eq!(
        (&f["index"], &f["api"], &f["kind"], &f["size"]),
        (
            &json!(0),
            &json!("cudaMalloc"),
            &json!("device"),
            &json!(2 * GIB)
        )
    );
    assert_eq!(f["frames"][0]["function"], "plain_device_memory");
    assert_eq!(
        (&v["live"]["bytes"], &v["live"]["count"]),
        (&json!(MIB), &json!(1))
    );
    let first = source_line_of(SRC, "cudaMalloc(&a, 1 * MiB)");
    assert!(
        is_frame(
            &v["live"]["sites"][0]["frames"][0],
            "plain_device_memory",
            SRC,
            first
        ),
        "{}",
        v["live"]["sites"]
    );
    if !mem_info_missing("all_apis", f) {
        assert_eq!(f["mem_total_bytes"], GIB);
        assert_eq!(f["mem_free_bytes"], GIB - MIB);
        assert_eq!(v["cause"], "exceeds_total");
    }

    // The managed request competes with device and managed memory of device 0.
    let m = oom_report(&run.trace, &["--index", "1"]);
    assert_eq!(
        (&m["failure"]["api"], &m["failure"]["kind"]),
        (&json!("cudaMallocManaged"), &json!("managed"))
    );
    assert_eq!(
        m["live"]["by_kind"],
        json!([{"kind": "device", "bytes": MIB, "count": 1},
               {"kind": "managed", "bytes": 4 * MIB, "count": 2}])
    );

    // The pinned host request: only pinned host memory counts, and device memory does not apply.
    let h = oom_report(&run.trace, &["--index", "2"]);
    assert_eq!(
        (&h["failure"]["api"], &h["failure"]["size"]),
        (&json!("cudaMallocHost"), &json!(1u64 << 62))
    );
    assert_eq!(
        (&h["live"]["bytes"], &h["live"]["count"]),
        (&json!(MIB), &json!(1))
    );
    assert_eq!(h["cause"], "host_memory");
    assert_eq!(h["nvml"], Value::Null);
}

/// Rewrites the traces checked in under `tests/corpus/` (read by the analyzer's fuzz and
/// corpus tests). Run by hand after a format change that old traces must not follow:
/// `cargo test -p gpumemprof-tests --test e2e_oom -- --ignored`; then update the numbers in
/// `analyzer/tests/corpus.rs`.
#[test]
#[ignore]
fn regenerate_corpus() {
    let corpus = repo_root().join("tests/corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    let dir = scratch("corpus");
    let runs: BTreeMap<&str, (&str, &[&str])> = [
        ("train_leak_2", ("train_leak", &["2"][..])),
        ("all_apis", ("all_apis", &[][..])),
        ("oom_final", ("oom_final", &[][..])),
        ("oom_retry", ("oom_retry", &[][..])),
        ("flush_rounds_3", ("flush_rounds", &["3"][..])),
    ]
    .into();
    for (name, (program, args)) in runs {
        let run = run_profiled(&dir, program, args, &[]);
        assert!(run.trace.is_file(), "{name}: {}", run.stderr());
        let mut bytes = std::fs::read(&run.trace).unwrap();
        if name == "flush_rounds_3" {
            // Killed while writing its last block: cut the file inside it.
            bytes.truncate(bytes.len() - 7);
            std::fs::write(corpus.join("flush_rounds_3_cut.gmt"), &bytes).unwrap();
        } else {
            std::fs::write(corpus.join(format!("{name}.gmt")), &bytes).unwrap();
        }
    }
}

/// The situation: a run that died of out-of-memory, seen through the general commands.
/// The shim's exit line points at `gpumemprof oom`; `analyze` leads with the failure (the
/// `oom` report's verdict and numbers); `report` prints the verdict in its out-of-memory
/// section; `diagnose` bundles `oom.json`, the `oom` report itself.
#[test]
fn the_general_commands_carry_the_oom_verdict() {
    let dir = scratch("oom_general");
    let run = run_profiled(&dir, "oom_final", &[], &[]);
    assert_eq!(run.output.status.code(), Some(1), "{}", run.stderr());
    let path = run.trace.display().to_string();
    let stderr = run.stderr();
    let last = shim_lines(&stderr)
        .last()
        .copied()
        .unwrap_or_default()
        .to_string();
    assert!(
        last.starts_with("gpumemprof: wrote ")
            && last.ends_with(&format!(
                " events to {path}; 1 allocation failed for lack of memory: see why with: \
                 gpumemprof oom {path}"
            )),
        "{stderr}"
    );
    let oom = oom_report(&run.trace, &[]);
    let verdict = oom["verdict"].as_str().unwrap();

    let analyze = report("analyze", &run.trace, &[]);
    schema::assert_valid("analyze", &analyze);
    let f = &analyze["findings"][0];
    assert_eq!(f["heuristic"], "out_of_memory");
    assert_eq!(f["severity"], "warning");
    assert_eq!(f["message"], verdict);
    assert_eq!(f["bytes"], oom["failure"]["size"]);
    assert_eq!(f["count"], 1);
    assert_eq!(f["evidence"]["requested_bytes"], oom["failure"]["size"]);
    assert_eq!(f["evidence"]["live_bytes"], oom["live"]["bytes"]);
    assert_eq!(f["frames"], oom["failure"]["frames"]);
    assert_eq!(analyze["recommendations"][0]["heuristic"], "out_of_memory");
    let text = report_text("analyze", &run.trace, &[]);
    assert!(
        text.contains(&format!("WARNING out of memory: {verdict}")),
        "{text}"
    );

    let html = dir.join("report.html");
    let out = analyzer()
        .arg("report")
        .arg(&run.trace)
        .arg("-o")
        .arg(&html)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let html = std::fs::read_to_string(&html).unwrap();
    let section = &html[html.find("<section id=\"oom\">").unwrap()..];
    assert!(
        section.contains("<p class=\"verdict\"><strong>OOM: cudaMalloc asked ")
            && section.contains(&format!("<code>gpumemprof oom {path}</code>")),
        "{section}"
    );

    let bundle = dir.join("bundle");
    let out = analyzer()
        .arg("diagnose")
        .arg(&bundle)
        .arg(&run.trace)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let bundled: Value =
        serde_json::from_slice(&std::fs::read(bundle.join("oom.json")).unwrap()).unwrap();
    schema::assert_valid("oom", &bundled);
    assert_eq!(bundled["verdict"], verdict);
    assert_eq!(bundled["failure"], oom["failure"]);
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(bundle.join("manifest.json")).unwrap()).unwrap();
    assert!(
        manifest["files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["name"] == "oom.json"),
        "{manifest}"
    );
}
