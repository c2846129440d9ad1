//! End-to-end tests of the checking commands (gates, diff, analyze, info, monitor, track,
//! diagnose, the telemetry export) and of the command line's manners (colour, -q, Ctrl-C,
//! exit codes). Each test writes a synthetic trace of a named situation with the format
//! crate's `TraceWriter`, runs the real binary, and checks exact numbers.

#[path = "checks/binary.rs"]
mod binary;
#[path = "checks/schema.rs"]
mod schema;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use gpumemprof_format::{Alloc, AllocFailed, MemKind, Record, FORMAT_VERSION};
use serde_json::{json, Value};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

#[path = "checks/synth.rs"]
mod synth;
#[path = "checks/tempdir.rs"]
mod tempdir;

use binary::{gpumemprof, gpumemprof_env, stderr_lines};
use synth::{alloc, end, free, stack, tensor};
use tempdir::TempDir;

fn header() -> Value {
    json!({
        "format": "gpumemprof-trace",
        "format_version": FORMAT_VERSION,
        "shim_version": "0.1.0",
        "pid": 4242,
        "ppid": 1,
        "host": "testhost",
        "rank": "3",
        "argv": ["./train", "--steps", "5"],
        "exe": "/opt/train",
        "start_time_unix_ns": 1_767_323_045_000_000_000u64,
        "start_monotonic_ns": 1000,
        "config": {"stacks": "native"},
        "env": {"RANK": "3", "WORLD_SIZE": "4", "SLURM_JOB_ID": "77"},
        "apis": [
            {"id": 0, "name": "cudaMalloc", "family": "runtime"},
            {"id": 1, "name": "cudaFree", "family": "runtime"},
            {"id": 2, "name": "cudaMallocManaged", "family": "runtime"}
        ]
    })
}

/// The bytes of a trace with one block per inner vector, and where each block ends.
fn trace_bytes(blocks: &[Vec<Record>]) -> (Vec<u8>, Vec<usize>) {
    synth::trace_bytes(&header(), blocks)
}

fn write_trace(dir: &Path, name: &str, blocks: &[Vec<Record>]) -> PathBuf {
    synth::write_blocks(dir.join(name), &header(), blocks).0
}

fn alloc_k(t: u64, kind: MemKind, address: u64, size: u64, stack: u64) -> Record {
    Record::Alloc(Alloc {
        kind,
        ..synth::alloc_of(t, address, size, stack)
    })
}

fn failed(t: u64, size: u64, mem_free: u64, mem_total: u64, stack: u64) -> Record {
    Record::AllocFailed(AllocFailed {
        mem_free,
        mem_total,
        ..synth::failed_of(t, size, stack)
    })
}

fn sample(t: u64, used: u64, total: u64) -> Record {
    synth::sample(t, 0, used, used, total)
}

/// A training loop: 64 MiB of weights (stack 1), then per step an 8 MiB activation
/// (stack 2), a 16 MiB gradient (stack 3) and, with `leak`, 1 MiB kept (stack 4); the
/// activation and gradient are freed; the weights are freed at the end.
fn training(steps: u64, leak: bool) -> Vec<Record> {
    let mut r = vec![stack(1), stack(2), stack(3), stack(4)];
    let mut t = 1_000;
    r.push(alloc(t, 0x100_0000, 64 * MIB, 1));
    for s in 0..steps {
        let base = 0x1000_0000 + s * 0x100_0000;
        t += 1_000;
        r.push(alloc(t, base, 8 * MIB, 2));
        t += 1_000;
        r.push(alloc(t, base + 0x10_0000, 16 * MIB, 3));
        if leak {
            t += 1_000;
            r.push(alloc(t, 0x9000_0000 + s * 0x1000, MIB, 4));
        }
        t += 1_000;
        r.push(free(t, base + 0x10_0000));
        t += 1_000;
        r.push(free(t, base));
    }
    t += 1_000;
    r.push(free(t, 0x100_0000));
    r.push(end(t + 1_000));
    r
}

fn code(out: &Output) -> Option<i32> {
    out.status.code()
}

/// `gpumemprof ARGS --json`: asserts exit `want`, checks the output against schema
/// `schema_name`, returns it.
fn json_of(args: &[&str], want: i32, schema_name: &str) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = gpumemprof(&all);
    assert_eq!(code(&out), Some(want), "stderr: {:?}", stderr_lines(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert!(v["schema_version"].is_u64(), "{v}");
    schema::assert_valid(schema_name, &v);
    v
}

fn text_of(args: &[&str]) -> String {
    let out = gpumemprof(args);
    assert_eq!(code(&out), Some(0), "stderr: {:?}", stderr_lines(&out));
    String::from_utf8(out.stdout).expect("utf-8")
}

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 temp path")
}

// ---- gates -------------------------------------------------------------------------

#[test]
fn size_gates_exit_4_with_one_line_naming_value_and_limit_and_still_print_the_report() {
    let dir = TempDir::new("commands", "gates");
    let trace = write_trace(&dir, "run.trace", &[training(5, true)]);
    let t = p(&trace);
    // Peak: 64 + 4 (earlier leaks) + 8 + 16 + 1 MiB in the last step = 93 MiB.
    let peak = 93 * MIB;
    for cmd in ["summary", "peak"] {
        for limit in ["93MiB", &peak.to_string(), "1GB"] {
            let out = gpumemprof(&[cmd, t, "--max-peak", limit]);
            assert_eq!(
                code(&out),
                Some(0),
                "{cmd} {limit}: {:?}",
                stderr_lines(&out)
            );
        }
        let out = gpumemprof(&[cmd, t, "--max-peak", "92MiB", "--json"]);
        assert_eq!(code(&out), Some(4));
        assert_eq!(
            stderr_lines(&out),
            vec![
                "gpumemprof: gate failed: peak 93.0 MiB (97517568 B) exceeds --max-peak 92.0 MiB \
                 (96468992 B): reduce it, or raise the limit if the growth is expected"
            ]
        );
        let v: Value = serde_json::from_slice(&out.stdout).expect("the report is still printed");
        assert_eq!(v["schema_version"], 1);
        // Decimal units: 97.6 MB < 93 MiB.
        assert_eq!(
            code(&gpumemprof(&[cmd, t, "--max-peak", "97.5MB"])),
            Some(4)
        );
        assert_eq!(
            code(&gpumemprof(&[cmd, t, "--max-peak", "97517568B"])),
            Some(0)
        );
    }
    // Leaked: 5 MiB.
    assert_eq!(
        code(&gpumemprof(&["leaks", t, "--max-leaked", "5MiB"])),
        Some(0)
    );
    let out = gpumemprof(&["leaks", t, "--max-leaked", "0"]);
    assert_eq!(code(&out), Some(4));
    assert_eq!(
        stderr_lines(&out),
        vec![
            "gpumemprof: gate failed: leaked 5.0 MiB (5242880 B) exceeds --max-leaked 0 B: \
             reduce it, or raise the limit if the growth is expected"
        ]
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("5.0 MiB (5242880 B) in 5 allocations"));
    // A size clap cannot parse is a usage error.
    let out = gpumemprof(&["leaks", t, "--max-leaked", "5 parsecs"]);
    assert_eq!(code(&out), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown unit"));
}

// ---- diff --------------------------------------------------------------------------

/// The same program twice: stack ids differ between the runs (interning order), frames
/// do not; the second run leaks 3 more MiB at one site and has one new site.
#[test]
fn diff_matches_sites_by_frames_and_shows_exactly_the_extra_leak_and_the_new_site() {
    let dir = TempDir::new("commands", "diff");
    let before = write_trace(&dir, "before.trace", &[training(5, true)]);
    let mut after_records = training(8, true);
    // Renumber the stacks: 1..4 become 11..14 (frames unchanged).
    for r in after_records.iter_mut() {
        match r {
            Record::Stack { id, .. } => {
                let frames = vec![0x1000 + *id, 0x2000 + *id];
                *r = Record::Stack {
                    id: *id + 10,
                    frames,
                };
            }
            Record::Alloc(a) => a.stack += 10,
            _ => {}
        }
    }
    let end_at = after_records.len() - 1;
    after_records.insert(end_at, stack(9));
    after_records.insert(end_at + 1, alloc(999_000, 0xa000_0000, 512, 9));
    let after = write_trace(&dir, "after.trace", &[after_records]);
    let d = json_of(&["diff", p(&before), p(&after)], 0, "diff");
    assert_eq!(d["key"], "line");
    assert_eq!(
        d["totals"]["live_bytes_at_end"],
        json!({"before": 5 * MIB, "after": 8 * MIB + 512, "delta": 3 * MIB + 512})
    );
    assert_eq!(
        d["totals"]["peak_bytes"],
        json!({"before": 93 * MIB, "after": 96 * MIB, "delta": 3 * MIB})
    );
    assert_eq!(
        d["totals"]["allocations"],
        json!({"before": 16, "after": 26, "delta": 10})
    );
    assert_eq!(
        (
            &d["changed_sites"],
            &d["new_sites"],
            &d["gone_sites"],
            &d["unchanged_sites"]
        ),
        (&json!(1), &json!(1), &json!(0), &json!(3))
    );
    let sites = d["sites"].as_array().expect("sites");
    assert_eq!(sites.len(), 2);
    assert_eq!(sites[0]["status"], "changed");
    assert_eq!(sites[0]["kind"], "device");
    assert_eq!(
        sites[0]["live_bytes_at_end"],
        json!({"before": 5 * MIB, "after": 8 * MIB, "delta": 3 * MIB})
    );
    assert_eq!(
        sites[0]["live_allocations_at_end"],
        json!({"before": 5, "after": 8, "delta": 3})
    );
    assert_eq!(
        sites[0]["peak_bytes"],
        json!({"before": 5 * MIB, "after": 8 * MIB, "delta": 3 * MIB})
    );
    assert_eq!(sites[0]["stack_ids_before"], json!([4]));
    assert_eq!(sites[0]["stack_ids_after"], json!([14]));
    assert_eq!(sites[0]["frames"][0]["address"], "0x1004");
    assert_eq!(sites[1]["status"], "new");
    assert_eq!(
        sites[1]["live_bytes_at_end"],
        json!({"before": 0, "after": 512, "delta": 512})
    );
    assert_eq!(sites[1]["stack_ids_before"], json!([]));

    // Reversed, the extra leak is a decrease and the site is gone.
    let r = json_of(&["diff", p(&after), p(&before), "--all"], 0, "diff");
    assert_eq!(
        r["totals"]["live_bytes_at_end"]["delta"],
        -(3 * MIB as i64) - 512
    );
    assert_eq!(r["gone_sites"], 1);
    assert_eq!(r["sites"].as_array().map(Vec::len), Some(5));
    assert_eq!(r["sites"][4]["status"], "unchanged");

    let t = text_of(&["diff", p(&before), p(&after)]);
    assert!(
        t.contains("live at end     5.0 MiB -> 8.0 MiB  +3.0 MiB (3146240 B)"),
        "{t}"
    );
    assert!(t.contains("1 changed, 1 new, 0 gone, 3 unchanged"), "{t}");
    assert!(
        t.contains("changed device memory: live at end +3.0 MiB (3145728 B) (5.0 MiB -> 8.0 MiB, 5 -> 8 allocations)"),
        "{t}"
    );
    // A missing AFTER is the usual error.
    let out = gpumemprof(&["diff", p(&before), p(&dir.join("nope"))]);
    assert_eq!(code(&out), Some(1));
}

// ---- analyze -----------------------------------------------------------------------

fn findings(v: &Value) -> Vec<(String, String, Value, Value, Value)> {
    v["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            (
                f["heuristic"].as_str().unwrap_or_default().to_owned(),
                f["severity"].as_str().unwrap_or_default().to_owned(),
                f["bytes"].clone(),
                f["count"].clone(),
                f["stack_id"].clone(),
            )
        })
        .collect()
}

fn f(
    h: &str,
    sev: &str,
    bytes: u64,
    count: u64,
    stack: Value,
) -> (String, String, Value, Value, Value) {
    (h.into(), sev.into(), json!(bytes), json!(count), stack)
}

#[test]
fn analyze_a_leaking_training_loop() {
    let dir = TempDir::new("commands", "analyze-leak");
    let trace = write_trace(&dir, "run.trace", &[training(5, true)]);
    let a = json_of(&["analyze", p(&trace)], 0, "analyze");
    // One finding per cause: the leaking site, which tells the row's growth; what it left
    // at exit is its own, so no cleanup finding repeats it.
    assert_eq!(
        findings(&a),
        vec![
            f("site_still_growing", "warning", 5 * MIB, 5, json!(4)),
            f("freed_only_at_shutdown", "info", 64 * MIB, 1, json!(1)),
        ]
    );
    let g = &a["findings"][0];
    assert_eq!((&g["device"], &g["kind"]), (&json!(0), &json!("device")));
    assert_eq!(
        g["evidence"],
        // The leaks were made at 4,000 ns and every 5,000 ns after (`training`).
        json!({"cycles": 5, "first_time_ns": 4_000, "last_time_ns": 24_000, "lows": 4,
               "first_low_bytes": 65 * MIB, "last_low_bytes": 68 * MIB,
               "growth_per_cycle_bytes": MIB, "growth_bytes": 3 * MIB})
    );
    assert_eq!(
        g["message"],
        "5.0 MiB (5242880 B) of device memory from one site, allocated in 5 different cycles, \
         was still live at the end (5 allocations); on device 0 device memory, its low points \
         rose from 65.0 MiB (68157440 B) to 68.0 MiB (71303168 B) over 4 cycles (1.0 MiB \
         (1048576 B) per cycle)"
    );
    assert_eq!(a["findings"][0]["frames"][0]["address"], "0x1004");
    let recs: Vec<&str> = a["recommendations"]
        .as_array()
        .expect("recommendations")
        .iter()
        .filter_map(|r| r["heuristic"].as_str())
        .collect();
    assert_eq!(recs, vec!["site_still_growing", "freed_only_at_shutdown"]);
    assert_eq!(a["summary"]["totals"]["peak_bytes"], 93 * MIB);
    assert_eq!(a["summary"]["totals"]["live_bytes_at_end"], 5 * MIB);

    // --fail-on-findings: exit 3 with one line, the report still printed.
    let out = gpumemprof(&["analyze", p(&trace), "--fail-on-findings"]);
    assert_eq!(code(&out), Some(3));
    assert_eq!(
        stderr_lines(&out),
        vec!["gpumemprof: findings: 1 finding of severity warning (--fail-on-findings)"]
    );
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(t.contains("findings: 1 warning, 1 note"), "{t}");
    assert!(
        t.contains("WARNING site still growing: 5.0 MiB (5242880 B) of device memory"),
        "{t}"
    );
    assert!(
        t.contains("recommendations:\n  - Free what these sites allocate"),
        "{t}"
    );
}

#[test]
fn analyze_a_clean_loop_finds_nothing_and_passes_the_findings_gate() {
    let dir = TempDir::new("commands", "analyze-clean");
    let mut records = training(6, false);
    // No weights: nothing is held from before the first cycle to the end.
    records.retain(|r| !matches!(r, Record::Alloc(a) if a.stack == 1));
    records.retain(|r| !matches!(r, Record::Free(f) if f.address == 0x100_0000));
    let trace = write_trace(&dir, "run.trace", &[records]);
    let a = json_of(&["analyze", p(&trace), "--fail-on-findings"], 0, "analyze");
    assert_eq!(a["findings"], json!([]));
    assert_eq!(a["recommendations"], json!([]));
    assert!(text_of(&["analyze", p(&trace)]).contains("no findings"));
}

#[test]
fn analyze_a_spike_names_the_site_holding_the_peak() {
    let dir = TempDir::new("commands", "analyze-spike");
    let mut r = vec![stack(2), stack(5)];
    let mut t = 0;
    for s in 0..4u64 {
        t += 10;
        r.push(alloc(t, 0x1000 + s, 10 * MIB, 2));
        if s == 2 {
            t += 10;
            r.push(alloc(t, 0x9000, 90 * MIB, 5));
            t += 10;
            r.push(free(t, 0x9000));
        }
        t += 10;
        r.push(free(t, 0x1000 + s));
    }
    r.push(end(t + 10));
    let trace = write_trace(&dir, "run.trace", &[r]);
    let a = json_of(&["analyze", p(&trace)], 0, "analyze");
    assert_eq!(
        findings(&a),
        vec![f("spike", "warning", 90 * MIB, 0, json!(5))]
    );
    assert_eq!(
        a["findings"][0]["evidence"],
        json!({"crests": 4, "spike_bytes": 100 * MIB, "spike_time_ns": 60,
               "typical_crest_bytes": 10 * MIB})
    );
}

#[test]
fn analyze_fragmentation_signs() {
    let dir = TempDir::new("commands", "analyze-frag");
    let mut r = vec![stack(3)];
    // 1000 allocations of 64 different sizes, each freed at once.
    for i in 0..1000u64 {
        r.push(alloc(2 * i, 0x1000, 4096 * (i % 64 + 1), 3));
        r.push(free(2 * i + 1, 0x1000));
    }
    // Failed with 3 GiB free for a 2 GiB request (fragmented); and with too little free.
    r.push(failed(5000, 2 * GIB, 3 * GIB, 16 * GIB, 3));
    r.push(failed(5001, GIB, 3 * GIB, 16 * GIB, 3));
    r.push(failed(5002, 8 * GIB, 3 * GIB, 16 * GIB, 3));
    r.push(end(6000));
    let trace = write_trace(&dir, "run.trace", &[r]);
    let a = json_of(&["analyze", p(&trace)], 0, "analyze");
    assert_eq!(
        findings(&a),
        vec![
            // The first final failure, which `gpumemprof oom` explains: 3 failures in all.
            f("out_of_memory", "warning", 2 * GIB, 3, json!(3)),
            f(
                "fragmentation_failed_with_free_memory",
                "warning",
                2 * GIB,
                2,
                json!(3)
            ),
            f("fragmentation_varied_sizes", "info", 0, 1000, Value::Null),
        ]
    );
    assert_eq!(
        a["findings"][0]["evidence"],
        json!({"requested_bytes": 2 * GIB, "failures": 3, "final_failures": 3,
               "transient_failures": 0, "live_bytes": 0, "free_bytes": 3 * GIB,
               "total_bytes": 16 * GIB})
    );
    assert_eq!(
        a["findings"][1]["evidence"],
        json!({"failures": 2, "size_bytes": 2 * GIB, "mem_free_bytes": 3 * GIB,
               "mem_total_bytes": 16 * GIB})
    );
    assert_eq!(
        a["findings"][2]["evidence"],
        json!({"allocations": 1000, "distinct_sizes": 64})
    );
}

#[test]
fn analyze_does_not_call_memory_of_a_killed_process_uncleaned() {
    let dir = TempDir::new("commands", "analyze-killed");
    let mut records = training(5, true);
    records.pop(); // no End record: the process did not exit cleanly
    let trace = write_trace(&dir, "run.trace", &[records]);
    let a = json_of(&["analyze", p(&trace)], 0, "analyze");
    let h: Vec<String> = findings(&a).into_iter().map(|x| x.0).collect();
    assert_eq!(h, vec!["site_still_growing"]);
}

// ---- info --------------------------------------------------------------------------

#[test]
fn info_of_a_trace_shows_its_header_and_api_counts() {
    let dir = TempDir::new("commands", "info");
    let mut r = training(2, true);
    r.insert(4, alloc_k(500, MemKind::Managed, 0x7000, 4096, 1));
    if let Record::Alloc(a) = &mut r[4] {
        a.api = 2;
    }
    r.insert(5, failed(600, GIB, 0, 0, 1));
    r.insert(6, sample(700, MIB, 16 * GIB));
    let trace = write_trace(&dir, "run.trace", &[r]);
    let v = json_of(&["info", p(&trace)], 0, "info-trace");
    assert_eq!(v["header"]["start_time_utc"], "2026-01-02T03:04:05Z");
    assert_eq!(v["header"]["start_monotonic_ns"], 1000);
    assert_eq!(v["header"]["rank"], "3");
    assert_eq!(
        v["header"]["env"],
        json!({"RANK": "3", "WORLD_SIZE": "4", "SLURM_JOB_ID": "77"})
    );
    assert_eq!(v["header"]["config"], json!({"stacks": "native"}));
    assert_eq!(
        v["records"],
        json!({"allocations": 8, "frees": 5, "failed_allocations": 1, "stacks": 4,
               "modules": 0, "stats": 0, "samples": 1, "end": 1, "unknown": 0,
               "python_codes": 0, "nvtx_events": 0, "nvtx_names": 0, "ending": 0, "tensors": 0,
               "stopped": 0})
    );
    assert_eq!(
        v["apis"],
        json!([
            {"id": 0, "name": "cudaMalloc", "family": "runtime", "calls": 8, "allocations": 7,
             "failed_allocations": 1, "frees": 0, "failed_frees": 0},
            {"id": 1, "name": "cudaFree", "family": "runtime", "calls": 5, "allocations": 0,
             "failed_allocations": 0, "frees": 5, "failed_frees": 0},
            {"id": 2, "name": "cudaMallocManaged", "family": "runtime", "calls": 1,
             "allocations": 1, "failed_allocations": 0, "frees": 0, "failed_frees": 0}
        ])
    );
    let t = text_of(&["info", p(&trace)]);
    assert!(
        t.contains(
            "cudaMalloc                            8           7        0          1            0"
        ),
        "{t}"
    );
    assert!(
        t.contains("environment (allow-list): RANK=3 SLURM_JOB_ID=77 WORLD_SIZE=4"),
        "{t}"
    );
}

#[test]
fn info_without_nvml_says_so_and_exits_0() {
    let dir = TempDir::new("commands", "info-nvml");
    // An empty library path: no libnvidia-ml.so.1 on this test machine's default path
    // either (it has no GPU); if one is installed the report must still be valid.
    let out = gpumemprof_env(&["info", "--json"], &[("LD_LIBRARY_PATH", p(&dir))]);
    assert_eq!(code(&out), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    schema::assert_valid("info", &v);
    if v["nvml"]["available"] == false {
        let m = v["nvml"]["message"].as_str().expect("a message");
        assert!(m.starts_with("NVML is not available ("), "{m}");
        assert!(m.contains("set LD_LIBRARY_PATH to its folder"), "{m}");
        let text = gpumemprof_env(&["info"], &[("LD_LIBRARY_PATH", p(&dir))]);
        assert_eq!(code(&text), Some(0));
        let t = String::from_utf8_lossy(&text.stdout);
        assert_eq!(t.lines().count(), 2, "{t}");
        assert!(t
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("NVML is not available")));
    }
}

// ---- monitor and track -------------------------------------------------------------

/// Device 0 of 1 GiB (from an NVML sample): usage goes to 850 MiB (83%: warning), to
/// 1000 MiB (97.66%: critical), down to 100 MiB, and up to 900 MiB (warning again).
fn thresholds_trace() -> Vec<Vec<Record>> {
    vec![
        vec![stack(1), sample(1, 0, GIB), alloc(10, 0x1000, 850 * MIB, 1)],
        vec![
            alloc(20, 0x2000_0000, 150 * MIB, 1),
            free(30, 0x1000),
            free(40, 0x2000_0000),
        ],
        vec![
            alloc(50, 0x3000, 100 * MIB, 1),
            alloc(60, 0x4000_0000, 800 * MIB, 1),
            end(70),
        ],
    ]
}

#[test]
fn track_raises_alerts_at_the_thresholds_of_the_device_size() {
    let dir = TempDir::new("commands", "track");
    let trace = write_trace(&dir, "run.trace", &thresholds_trace());
    let v = json_of(&["track", p(&trace)], 0, "track");
    let alerts: Vec<(u64, String, u64, f64)> = v["alerts"]
        .as_array()
        .expect("alerts")
        .iter()
        .map(|a| {
            (
                a["time_ns"].as_u64().unwrap_or(0),
                a["level"].as_str().unwrap_or("").to_owned(),
                a["used_bytes"].as_u64().unwrap_or(0),
                a["percent"].as_f64().unwrap_or(0.0),
            )
        })
        .collect();
    assert_eq!(
        alerts,
        vec![
            (10, "warning".into(), 850 * MIB, 83.01),
            (20, "critical".into(), 1000 * MIB, 97.66),
            (60, "warning".into(), 900 * MIB, 87.89),
        ]
    );
    assert_eq!(v["alerts_total"], 3);
    assert_eq!(
        v["devices"],
        json!([{"device": 0, "current_bytes": 900 * MIB, "current_allocations": 2,
                "peak_bytes": 1000 * MIB, "peak_time_ns": 20, "total_bytes": GIB,
                "total_source": "nvml", "current_percent": 87.89, "peak_percent": 97.66,
                "level": "warning", "nvml_process_used_bytes": 0, "allocator": null}])
    );
    assert_eq!(v["unknown_size_devices"], json!([]));
    // Higher thresholds: only the critical peak... and nothing at 99%.
    let v = json_of(
        &[
            "track",
            p(&trace),
            "--warning-threshold",
            "90",
            "--critical-threshold",
            "97.5",
        ],
        0,
        "track",
    );
    assert_eq!(v["alerts_total"], 1);
    assert_eq!(v["alerts"][0]["level"], "critical");
    let v = json_of(
        &[
            "track",
            p(&trace),
            "--warning-threshold",
            "99",
            "--critical-threshold",
            "99.5",
        ],
        0,
        "track",
    );
    assert_eq!(v["alerts_total"], 0);
    // --device-memory overrides NVML: 2 GiB makes 1000 MiB 48.83%.
    let v = json_of(&["track", p(&trace), "--device-memory", "2GiB"], 0, "track");
    assert_eq!(v["alerts_total"], 0);
    assert_eq!(v["devices"][0]["peak_percent"], 48.83);
    assert_eq!(v["devices"][0]["total_source"], "flag");

    // --fail-on-alerts: exit 3 and one line; text lists the alerts.
    let out = gpumemprof(&["track", p(&trace), "--fail-on-alerts"]);
    assert_eq!(code(&out), Some(3));
    assert_eq!(
        stderr_lines(&out),
        vec!["gpumemprof: findings: 3 alerts raised (--fail-on-alerts)"]
    );
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(
        t.contains("  0.000 s CRITICAL device 0 at 97.66% (1000.0 MiB (1048576000 B) of 1.0 GiB)"),
        "{t}"
    );
    // A critical threshold below the warning one is a usage error.
    let out = gpumemprof(&[
        "track",
        p(&trace),
        "--warning-threshold",
        "90",
        "--critical-threshold",
        "80",
    ]);
    assert_eq!(code(&out), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--critical-threshold 80 is below"));
    // Neither TRACE nor --pid.
    assert_eq!(code(&gpumemprof(&["track"])), Some(2));
}

#[test]
fn track_without_a_device_size_says_how_to_give_one() {
    let dir = TempDir::new("commands", "track-unknown");
    let trace = write_trace(&dir, "run.trace", &[training(2, false)]);
    let out = gpumemprof(&["track", p(&trace), "--json"]);
    assert_eq!(code(&out), Some(0));
    assert_eq!(
        stderr_lines(&out),
        vec![
            "gpumemprof: warning: device 0: its memory size is unknown (the trace has no NVML \
             sample or failed allocation that read it): pass --device-memory SIZE to check \
             thresholds"
        ]
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    schema::assert_valid("track", &v);
    assert_eq!(v["unknown_size_devices"], json!([0]));
    assert_eq!(v["devices"][0]["level"], "unknown");
    assert_eq!(v["devices"][0]["total_bytes"], Value::Null);
    // -q silences the warning.
    let out = gpumemprof(&["-q", "track", p(&trace)]);
    assert!(out.stderr.is_empty());
    assert!(String::from_utf8_lossy(&out.stdout).contains("device memory size unknown"));
    // A failed allocation that read the device's size is enough.
    let mut r = training(2, false);
    r.insert(5, failed(4_500, 64 * GIB, 8 * GIB, 128 * MIB, 2));
    let trace = write_trace(&dir, "failed.trace", &[r]);
    let v = json_of(&["track", p(&trace)], 0, "track");
    assert_eq!(v["devices"][0]["total_source"], "failed_allocation");
    assert_eq!(v["devices"][0]["total_bytes"], 128 * MIB);
}

/// A PyTorch job's `monitor`: PyTorch's figures from its last tensor record, and the sites
/// counted in tensors (a segment's stack says only which tensor made the allocator grow).
#[test]
fn monitor_of_a_pytorch_job_shows_allocated_and_reserved_and_tensor_sites() {
    let dir = TempDir::new("commands", "monitor-tensors");
    let records = vec![
        stack(1),
        stack(2),
        stack(3),
        // A 20 MiB segment, two tensors in it, the first freed.
        alloc(10, 0x1000_0000, 20 * MIB, 1),
        tensor(11, 0x1000_0000, 4 * MIB as i64, 4 * MIB, 20 * MIB, 2),
        tensor(12, 0x1040_0000, 2 * MIB as i64, 6 * MIB, 20 * MIB, 3),
        tensor(13, 0x1000_0000, -(4 * MIB as i64), 2 * MIB, 20 * MIB, 2),
    ];
    let trace = write_trace(&dir, "run.trace", &[records]);
    let v = json_of(&["monitor", p(&trace), "--once"], 0, "monitor");
    assert_eq!(v["level"], "tensors");
    assert_eq!(
        v["devices"][0]["allocator"],
        json!({"framework": "pytorch", "allocated_bytes": 2 * MIB,
               "allocated_peak_bytes": 6 * MIB, "reserved_bytes": 20 * MIB})
    );
    // The thresholds still read the device memory: the segment.
    assert_eq!(v["devices"][0]["current_bytes"], 20 * MIB);
    let sites: Vec<(u64, &str, u64, u64)> = (v["sites"].as_array().expect("sites").iter())
        .map(|s| {
            (
                s["stack_id"].as_u64().unwrap(),
                s["kind"].as_str().unwrap(),
                s["bytes"].as_u64().unwrap(),
                s["count"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(sites, vec![(3, "tensor", 2 * MIB, 1)]);
    let t = text_of(&["monitor", p(&trace), "--once"]);
    assert!(
        t.contains("  PyTorch: 2.0 MiB allocated now (peak 6.0 MiB), 20.0 MiB reserved\n")
            && t.contains("  #1 2.0 MiB (2097152 B) in 1 tensor (stack 3)"),
        "{t}"
    );
}

#[test]
fn monitor_once_shows_current_and_peak_per_device_top_sites_and_alerts() {
    let dir = TempDir::new("commands", "monitor-once");
    let mut blocks = thresholds_trace();
    blocks[2].pop(); // still running: no End record
    let trace = write_trace(&dir, "run.trace", &blocks);
    let out = gpumemprof(&["monitor", p(&trace), "--once", "--json", "--top", "1"]);
    assert_eq!(code(&out), Some(0), "{:?}", stderr_lines(&out));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert_eq!(text.lines().count(), 1, "one JSON line per refresh");
    let v: Value = serde_json::from_str(&text).expect("json");
    schema::assert_valid("monitor", &v);
    assert_eq!(v["trace"]["complete"], false);
    assert_eq!(v["process_running"], Value::Null);
    assert_eq!(v["devices"][0]["current_bytes"], 900 * MIB);
    assert_eq!(v["devices"][0]["peak_bytes"], 1000 * MIB);
    let frame = json!({"address": "0x1001", "module": null, "function": null, "file": null,
                       "line": null, "inlined": false, "python": false});
    assert_eq!(
        v["sites"],
        json!([{"stack_id": 1, "kind": "device", "bytes": 900 * MIB, "count": 2,
                "site": frame, "frames": [frame]}])
    );
    // No framework's tensors: the sites count the memory.
    assert_eq!(v["level"], "segments");
    assert_eq!(v["alerts_total"], 3);
    let t = text_of(&["monitor", p(&trace), "--once"]);
    assert!(
        t.contains("device 0: 900.0 MiB (943718400 B) live now in 2 allocations, peak 1000.0 MiB (1048576000 B) at 0.000 s; of 1.0 GiB (nvml): 87.89% now, 97.66% at the peak"),
        "{t}"
    );
    assert!(
        t.contains("process running, or stopped without closing the trace"),
        "{t}"
    );
    assert!(t.contains("alerts: 3 in all"), "{t}");
}

/// A writer appends blocks (one of them in two halves) while `monitor` follows the file;
/// monitor stops by itself once the End record arrives, having read each block once.
#[test]
fn monitor_follows_a_growing_trace_until_it_is_closed() {
    let dir = TempDir::new("commands", "monitor-follow");
    let (bytes, ends) = trace_bytes(&thresholds_trace());
    let path = dir.join("live.trace");
    std::fs::write(&path, &bytes[..ends[0]]).expect("write");
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpumemprof"))
        .args(["monitor", p(&path), "--json", "--interval", "0.05"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start monitor");
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .expect("open for append");
    std::thread::sleep(Duration::from_millis(300));
    let half = (ends[0] + ends[1]) / 2;
    file.write_all(&bytes[ends[0]..half]).expect("append");
    std::thread::sleep(Duration::from_millis(300));
    file.write_all(&bytes[half..ends[1]]).expect("append");
    std::thread::sleep(Duration::from_millis(300));
    file.write_all(&bytes[ends[1]..]).expect("append");
    let start = Instant::now();
    let out = loop {
        if let Some(_status) = child.try_wait().expect("wait") {
            break child.wait_with_output().expect("output");
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "monitor did not stop"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code(&out), Some(0), "{:?}", stderr_lines(&out));
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert!(lines.len() >= 3, "{} refreshes", lines.len());
    let first = &lines[0];
    assert_eq!(first["devices"][0]["current_bytes"], 850 * MIB);
    let last = lines.last().expect("a last line");
    schema::assert_valid("monitor", last);
    assert_eq!(last["trace"]["complete"], true);
    assert_eq!(last["devices"][0]["current_bytes"], 900 * MIB);
    assert_eq!(last["devices"][0]["current_allocations"], 2);
    assert_eq!(last["devices"][0]["peak_bytes"], 1000 * MIB);
    assert_eq!(last["alerts_total"], 3);
    // Block by block: after the first block, the second (shown only once complete, not
    // while half written), the third; never a state inside a block.
    let states = [850 * MIB, 0, 900 * MIB];
    let mut at = 0;
    for l in &lines {
        let now = l["devices"][0]["current_bytes"].as_u64().expect("bytes");
        let i = states
            .iter()
            .position(|&s| s == now)
            .expect("a block boundary");
        assert!(i >= at, "went back from state {at} to {i}");
        at = i;
    }
}

#[test]
fn ctrl_c_stops_following_with_exit_130() {
    let dir = TempDir::new("commands", "sigint");
    let mut blocks = thresholds_trace();
    blocks[2].pop(); // never closed: monitor would follow forever
    let trace = write_trace(&dir, "run.trace", &blocks);
    for cmd in ["monitor", "track"] {
        let mut args = vec![cmd, p(&trace), "--interval", "0.05"];
        if cmd == "track" {
            args.push("--follow");
        }
        let child = Command::new(env!("CARGO_BIN_EXE_gpumemprof"))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start");
        std::thread::sleep(Duration::from_millis(500));
        let status = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
        let out = child.wait_with_output().expect("output");
        assert_eq!(code(&out), Some(130), "{cmd}: {:?}", stderr_lines(&out));
        assert_eq!(stderr_lines(&out), vec!["gpumemprof: interrupted"], "{cmd}");
    }
}

#[test]
fn monitor_pid_of_a_process_without_a_trace_says_what_to_do() {
    let mut child = Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("start sleep");
    let pid = child.id().to_string();
    let out = gpumemprof(&["monitor", "--pid", &pid, "--once"]);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(code(&out), Some(1));
    let lines = stderr_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with(&format!(
            "gpumemprof: error: process {pid} has no gpumemprof trace"
        )),
        "{lines:?}"
    );
    assert!(
        lines[0].contains("LD_PRELOAD=libgpumemprof.so"),
        "{lines:?}"
    );
    let out = gpumemprof(&["monitor", "--pid", "4294967294", "--once"]);
    assert_eq!(code(&out), Some(1));
    assert_eq!(
        stderr_lines(&out),
        vec![
            "gpumemprof: error: no process 4294967294: is it still running? (give its trace \
             file instead of --pid)"
        ]
    );
    // TRACE and --pid together: usage.
    assert_eq!(code(&gpumemprof(&["monitor", "x", "--pid", "1"])), Some(2));
}

// ---- diagnose ----------------------------------------------------------------------

#[test]
fn diagnose_writes_a_bundle_with_a_manifest_and_refuses_a_non_empty_folder() {
    use sha2_check::sha256_hex;
    let dir = TempDir::new("commands", "diagnose");
    let trace = write_trace(&dir, "run.trace", &[training(5, true)]);
    let bundle = dir.join("bundle");
    let m = json_of(&["diagnose", p(&bundle), p(&trace)], 0, "manifest");
    let names: Vec<&str> = m["files"]
        .as_array()
        .expect("files")
        .iter()
        .filter_map(|f| f["name"].as_str())
        .collect();
    assert_eq!(
        names,
        vec![
            "run.trace",
            "summary.json",
            "peak.json",
            "leaks.json",
            "analyze.json",
            "info.json",
            "environment.json"
        ]
    );
    let mut on_disk: Vec<String> = std::fs::read_dir(&bundle)
        .expect("bundle")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    on_disk.sort();
    let mut want: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    want.push("manifest.json".into());
    want.sort();
    assert_eq!(on_disk, want);
    for f in m["files"].as_array().expect("files") {
        let bytes = std::fs::read(bundle.join(f["name"].as_str().expect("name"))).expect("read");
        assert_eq!(f["bytes"], bytes.len() as u64);
        assert_eq!(f["sha256"], sha256_hex(&bytes), "{}", f["name"]);
    }
    assert_eq!(
        std::fs::read(bundle.join("run.trace")).expect("copy"),
        std::fs::read(&trace).expect("original")
    );
    let read = |name: &str| -> Value {
        serde_json::from_slice(&std::fs::read(bundle.join(name)).expect("read")).expect("json")
    };
    let manifest = read("manifest.json");
    schema::assert_valid("manifest", &manifest);
    for (file, schema_name) in [
        ("summary.json", "summary"),
        ("peak.json", "peak"),
        ("leaks.json", "leaks"),
        ("analyze.json", "analyze"),
        ("info.json", "info-trace"),
        ("environment.json", "environment"),
    ] {
        schema::assert_valid(schema_name, &read(file));
    }
    assert_eq!(read("leaks.json")["total_bytes"], 5 * MIB);
    assert_eq!(read("summary.json")["totals"]["peak_bytes"], 93 * MIB);
    assert_eq!(
        read("analyze.json")["findings"].as_array().map(Vec::len),
        Some(2)
    );
    let env = read("environment.json");
    assert_eq!(
        env["traced_process"]["env"],
        json!({"RANK": "3", "WORLD_SIZE": "4", "SLURM_JOB_ID": "77"})
    );
    assert_eq!(env["traced_argv"], json!(["./train", "--steps", "5"]));
    // Never the analyzer's own environment.
    let text = std::fs::read_to_string(bundle.join("environment.json")).expect("read");
    assert!(!text.contains("CARGO"), "{text}");

    // Again into the same folder: refused (exit 1, one line), then allowed with -f.
    let out = gpumemprof(&["diagnose", p(&bundle), p(&trace)]);
    assert_eq!(code(&out), Some(1));
    assert_eq!(
        stderr_lines(&out),
        vec![format!(
            "gpumemprof: error: {}: the directory is not empty: pass -f to write the bundle \
             into it (files of the same names are replaced), or name a new directory",
            bundle.display()
        )]
    );
    let out = gpumemprof(&["diagnose", p(&bundle), p(&trace), "-f"]);
    assert_eq!(code(&out), Some(0), "{:?}", stderr_lines(&out));
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(t.starts_with("wrote 7 files ("), "{t}");
    assert!(
        t.contains(&format!("and manifest.json to {}:", bundle.display())),
        "{t}"
    );
    // An invalid trace: exit 5.
    let bad = dir.join("bad.trace");
    std::fs::write(&bad, b"not a trace at all").expect("write");
    let out = gpumemprof(&["diagnose", p(&dir.join("b2")), p(&bad)]);
    assert_eq!(code(&out), Some(5));
}

/// SHA-256 for checking the manifest, independent of the analyzer's crate (FIPS 180-4).
mod sha2_check {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];

    pub fn sha256_hex(data: &[u8]) -> String {
        let mut h: [u32; 8] = [
            0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
            0x5be0cd19,
        ];
        let mut msg = data.to_vec();
        let bits = (data.len() as u64).wrapping_mul(8);
        msg.push(0x80);
        while msg.len() % 64 != 56 {
            msg.push(0);
        }
        msg.extend_from_slice(&bits.to_be_bytes());
        for chunk in msg.chunks(64) {
            let mut w = [0u32; 64];
            for i in 0..16 {
                w[i] = u32::from_be_bytes([
                    chunk[4 * i],
                    chunk[4 * i + 1],
                    chunk[4 * i + 2],
                    chunk[4 * i + 3],
                ]);
            }
            for i in 16..64 {
                let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
                let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
                w[i] = w[i - 16]
                    .wrapping_add(s0)
                    .wrapping_add(w[i - 7])
                    .wrapping_add(s1);
            }
            let mut v = h;
            for i in 0..64 {
                let s1 = v[4].rotate_right(6) ^ v[4].rotate_right(11) ^ v[4].rotate_right(25);
                let ch = (v[4] & v[5]) ^ (!v[4] & v[6]);
                let t1 = v[7]
                    .wrapping_add(s1)
                    .wrapping_add(ch)
                    .wrapping_add(K[i])
                    .wrapping_add(w[i]);
                let s0 = v[0].rotate_right(2) ^ v[0].rotate_right(13) ^ v[0].rotate_right(22);
                let maj = (v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]);
                let t2 = s0.wrapping_add(maj);
                v = [
                    t1.wrapping_add(t2),
                    v[0],
                    v[1],
                    v[2],
                    v[3].wrapping_add(t1),
                    v[4],
                    v[5],
                    v[6],
                ];
            }
            for i in 0..8 {
                h[i] = h[i].wrapping_add(v[i]);
            }
        }
        h.iter().map(|x| format!("{x:08x}")).collect()
    }

    #[test]
    fn known_digests() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}

// ---- telemetry ---------------------------------------------------------------------

#[test]
fn telemetry_export_writes_one_v2_event_per_device_memory_event() {
    let dir = TempDir::new("commands", "telemetry");
    let r = vec![
        stack(1),
        sample(5, 300 * MIB, GIB),
        alloc(10, 0x1000, 8 * MIB, 1),
        alloc_k(15, MemKind::PinnedHost, 0x5000, MIB, 1),
        failed(20, 2 * GIB, 700 * MIB, GIB, 1),
        free(30, 0x1000),
        free(40, 0xdead), // unknown: no event
        end(50),
    ];
    let trace = write_trace(&dir, "run.trace", &[r]);
    let out_path = dir.join("events.jsonl");
    let out = gpumemprof(&[
        "export",
        "--format",
        "telemetry",
        p(&trace),
        "-o",
        p(&out_path),
    ]);
    assert_eq!(code(&out), Some(0), "{:?}", stderr_lines(&out));
    let text = std::fs::read_to_string(&out_path).expect("read");
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    for e in &events {
        schema::assert_valid("telemetry-event", e);
    }
    let brief: Vec<(String, i64, u64, i64, u64, Value, Value)> = events
        .iter()
        .map(|e| {
            (
                e["event_type"].as_str().unwrap_or("").to_owned(),
                e["device_id"].as_i64().unwrap_or(9),
                e["allocator_allocated_bytes"].as_u64().unwrap_or(0),
                e["allocator_change_bytes"].as_i64().unwrap_or(0),
                e["device_used_bytes"].as_u64().unwrap_or(0),
                e["device_total_bytes"].clone(),
                e["device_free_bytes"].clone(),
            )
        })
        .collect();
    let gib = json!(GIB);
    assert_eq!(
        brief,
        vec![
            (
                "sample".into(),
                0,
                0,
                0,
                300 * MIB,
                gib.clone(),
                json!(GIB - 300 * MIB)
            ),
            (
                "allocation".into(),
                0,
                8 * MIB,
                8 * MIB as i64,
                300 * MIB,
                gib.clone(),
                json!(GIB - 300 * MIB)
            ),
            (
                "allocation_failed".into(),
                0,
                8 * MIB,
                0,
                300 * MIB,
                gib.clone(),
                json!(GIB - 300 * MIB)
            ),
            (
                "deallocation".into(),
                0,
                0,
                -(8 * MIB as i64),
                300 * MIB,
                gib.clone(),
                json!(GIB - 300 * MIB)
            ),
        ]
    );
    let e = &events[1];
    assert_eq!(e["schema_version"], 2);
    assert_eq!(e["timestamp_ns"], 1_767_323_045_000_000_010u64);
    assert_eq!(e["collector"], "gpumemprof.shim");
    assert_eq!((&e["pid"], &e["host"]), (&json!(4242), &json!("testhost")));
    assert_eq!(
        (&e["job_id"], &e["rank"], &e["local_rank"], &e["world_size"]),
        (&json!("77"), &json!(3), &json!(3), &json!(4))
    );
    assert_eq!(e["context"], "cudaMalloc 8388608 bytes");
    assert_eq!(e["metadata"]["address"], "0x1000");
    assert_eq!(e["metadata"]["stack_id"], 1);
    assert_eq!(events[2]["metadata"]["mem_free_bytes"], 700 * MIB);
    assert_eq!(events[3]["context"], "cudaFree 8388608 bytes");
    // Not overwritten without -f.
    let again = gpumemprof(&[
        "export",
        "--format",
        "telemetry",
        p(&trace),
        "-o",
        p(&out_path),
    ]);
    assert_eq!(code(&again), Some(1));
    // To stdout.
    let out = gpumemprof(&["export", "--format", "telemetry", p(&trace), "-o", "-"]);
    assert_eq!(code(&out), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), text);
}

// ---- manners: colour, quiet, schemas, exit codes -------------------------------------

#[test]
fn colour_only_when_asked_for_a_terminal_and_never_with_no_color() {
    let dir = TempDir::new("commands", "colour");
    let trace = write_trace(&dir, "run.trace", &[training(5, true)]);
    let t = p(&trace);
    let esc = |out: &Output| out.stdout.contains(&0x1b);
    // Piped (as in this test): no colour.
    assert!(!esc(&gpumemprof(&["analyze", t])));
    // CLICOLOR_FORCE stands for a terminal (a pager that shows colour).
    assert!(esc(&gpumemprof_env(
        &["analyze", t],
        &[("CLICOLOR_FORCE", "1")]
    )));
    assert!(!esc(&gpumemprof_env(
        &["analyze", t],
        &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")]
    )));
    // JSON never has colour.
    assert!(!esc(&gpumemprof_env(
        &["analyze", t, "--json"],
        &[("CLICOLOR_FORCE", "1")]
    )));
    // Stderr lines too.
    let out = gpumemprof_env(
        &["leaks", t, "--max-leaked", "0"],
        &[("CLICOLOR_FORCE", "1")],
    );
    assert!(out.stderr.contains(&0x1b));
    let out = gpumemprof(&["leaks", t, "--max-leaked", "0"]);
    assert!(!out.stderr.contains(&0x1b));
}

#[test]
fn quiet_silences_warnings_but_not_errors_or_gates() {
    let dir = TempDir::new("commands", "quiet");
    let (bytes, ends) = trace_bytes(&[training(2, true), vec![end(1)]]);
    let cut = dir.join("cut.trace");
    std::fs::write(&cut, &bytes[..ends[1] - 3]).expect("write");
    let out = gpumemprof(&["summary", p(&cut)]);
    assert_eq!(stderr_lines(&out).len(), 1);
    let out = gpumemprof(&["summary", p(&cut), "-q"]);
    assert_eq!(code(&out), Some(0));
    assert!(out.stderr.is_empty());
    let out = gpumemprof(&["--quiet", "leaks", p(&cut), "--max-leaked", "1"]);
    assert_eq!(code(&out), Some(4));
    assert_eq!(stderr_lines(&out).len(), 1);
    let out = gpumemprof(&["-q", "summary", p(&dir.join("missing"))]);
    assert_eq!(code(&out), Some(1));
    assert_eq!(stderr_lines(&out).len(), 1);
}

#[test]
fn every_json_report_carries_schema_version_and_matches_its_schema() {
    let dir = TempDir::new("commands", "schemas");
    let mut r = training(3, true);
    r.insert(5, sample(2_500, 100 * MIB, GIB));
    r.insert(8, failed(4_500, 2 * GIB, 900 * MIB, GIB, 2));
    let trace = write_trace(&dir, "run.trace", &[r]);
    let t = p(&trace);
    let mut checked = Vec::new();
    for (args, name) in [
        (vec!["summary", t], "summary"),
        (vec!["peak", t], "peak"),
        (vec!["leaks", t], "leaks"),
        (vec!["diff", t, t], "diff"),
        (vec!["analyze", t], "analyze"),
        (vec!["info", t], "info-trace"),
        (vec!["track", t], "track"),
        (vec!["monitor", t, "--once"], "monitor"),
        (vec!["oom", t], "oom"),
    ] {
        let v = json_of(&args, 0, name);
        assert_eq!(v["schema_version"], 1, "{name}");
        checked.push(name.to_string());
    }
    let bundle = dir.join("b");
    let v = json_of(&["diagnose", p(&bundle), t], 0, "manifest");
    assert_eq!(v["schema_version"], 1);
    let env: Value =
        serde_json::from_slice(&std::fs::read(bundle.join("environment.json")).expect("read"))
            .expect("json");
    schema::assert_valid("environment", &env);
    assert_eq!(env["schema_version"], 1);
    let info = json_of(&["info"], 0, "info");
    assert_eq!(info["schema_version"], 1);
    checked.extend(["manifest".into(), "environment".into(), "info".into()]);
    // Telemetry lines carry the older tool's schema_version 2: see
    // telemetry_export_writes_one_v2_event_per_device_memory_event.
    checked.push("telemetry-event".into());
    for n in schema::names() {
        if !OTHER_REPORTS.contains(&n.as_str()) {
            assert!(
                checked.contains(&n),
                "no test checks docs/schemas/{n}.schema.json"
            );
        }
    }
}

/// Schemas of reports whose tests live elsewhere.
const OTHER_REPORTS: &[&str] = &[
    "ranks",  // several traces: analyzer/tests/ranks.rs
    "whatif", // needs PyTorch's tensors: tests/e2e_torch_whatif.rs
];

#[test]
fn whatif_refuses_what_it_cannot_replay_in_one_line() {
    let dir = TempDir::new("commands", "whatif");
    let trace = write_trace(&dir, "run.trace", &[training(5, true)]);
    let t = p(&trace);
    // A trace of CUDA calls alone: no PyTorch allocator to replay.
    let out = gpumemprof(&["whatif", t]);
    assert_eq!(code(&out), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no PyTorch tensors in this trace"), "{err}");
    // What PyTorch would refuse, refused as a usage error with PyTorch's reason.
    let out = gpumemprof(&["whatif", t, "--set", "max_split_size_mb:4"]);
    assert_eq!(code(&out), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("max_split_size_mb: 4 is too small, PyTorch needs at least 20"));
    assert_eq!(
        code(&gpumemprof(&["whatif", t, "--set", "colour:blue"])),
        Some(2)
    );
    assert_eq!(code(&gpumemprof(&["whatif", t, "--scale", "0"])), Some(2));
    let bad = dir.join("bad.trace");
    std::fs::write(&bad, b"GPUMEMPX garbage").expect("write");
    assert_eq!(code(&gpumemprof(&["whatif", p(&bad)])), Some(5));
}

/// `browse` draws on a terminal (tests/e2e_browse.rs drives it in one): without one it
/// says so; one trace or two, never three, and a trace or `--pid`, not both.
#[test]
fn browse_needs_a_terminal_and_one_or_two_traces() {
    let dir = TempDir::new("commands", "browse");
    let trace = write_trace(&dir, "run.trace", &[training(5, true)]);
    let t = p(&trace);
    let out = gpumemprof(&["browse", t]);
    assert_eq!(code(&out), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "gpumemprof: error: browse draws on a terminal and stdout is not one: run it in a \
         terminal (over SSH, `ssh -t`); for a file, use `gpumemprof report`\n"
    );
    assert_eq!(code(&gpumemprof(&["browse", t, t])), Some(1));
    assert_eq!(code(&gpumemprof(&["browse", t, t, t])), Some(2));
    assert_eq!(code(&gpumemprof(&["browse"])), Some(2));
    assert_eq!(code(&gpumemprof(&["browse", t, "--pid", "1"])), Some(2));
    // --rank picks among a job folder's traces: it needs a TRACE (or folder), not a pid.
    assert_eq!(code(&gpumemprof(&["browse", "--rank", "1"])), Some(2));
    assert_eq!(
        code(&gpumemprof(&["browse", "--pid", "1", "--rank", "1"])),
        Some(2)
    );
}

#[test]
fn the_exit_code_table() {
    let dir = TempDir::new("commands", "exit-codes");
    let trace = write_trace(&dir, "run.trace", &[training(5, true)]);
    let t = p(&trace);
    let bad = dir.join("bad.trace");
    std::fs::write(&bad, b"GPUMEMPX garbage").expect("write");
    assert_eq!(code(&gpumemprof(&["summary", t])), Some(0));
    assert_eq!(
        code(&gpumemprof(&["summary", p(&dir.join("none"))])),
        Some(1)
    );
    assert_eq!(code(&gpumemprof(&["summary"])), Some(2));
    assert_eq!(
        code(&gpumemprof(&["analyze", t, "--fail-on-findings"])),
        Some(3)
    );
    assert_eq!(
        code(&gpumemprof(&["leaks", t, "--max-leaked", "1MiB"])),
        Some(4)
    );
    assert_eq!(code(&gpumemprof(&["analyze", p(&bad)])), Some(5));
    // 130 is checked by ctrl_c_stops_following_with_exit_130.
}
