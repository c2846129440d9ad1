//! End to end: NVTX ranges from real NVTX clients, with the shim as their injection library
//! (`NVTX_INJECTION64_PATH`) and preloaded, and the memory grouped by range by `summary`,
//! `peak` and `leaks --by range`. The clients: `tests/programs/nvtx_ranges.c`, built here
//! against NVIDIA's nvtx3 headers (from the pinned PyPI wheel nvidia-nvtx-cu12, see
//! `support::PYTHON_PACKAGES`), and `tests/programs/nvtx_annotate.py`, using the PyPI `nvtx`
//! package. The assertions are the numbers the programs document.

#[path = "../analyzer/tests/checks/schema.rs"]
mod schema;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use gpumemprof_format::{NvtxOp, Record};
use gpumemprof_tests::profiled::*;
use gpumemprof_tests::{
    python_packages, repo_root, script_command, shim_path, sim_dir, target_dir, SIM_ENV,
};
use serde_json::{json, Value};

const MIB: u64 = 1 << 20;

/// `nvtx_ranges.c`, compiled once per test process with the nvtx3 headers (`-ldl` for
/// NVTX's loader), the way build.rs builds the other programs.
fn nvtx_ranges() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let include = python_packages().join("nvidia/nvtx/include");
        assert!(
            include.join("nvtx3/nvToolsExt.h").is_file(),
            "no nvtx3 headers under {}",
            include.display()
        );
        let dir = target_dir().join("e2e-nvtx-build");
        std::fs::create_dir_all(&dir).expect("create the build folder");
        let exe = dir.join(format!("nvtx_ranges.{}", std::process::id()));
        let root = repo_root();
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let out = Command::new(&cc)
            .args([
                "-g",
                "-O0",
                "-fno-omit-frame-pointer",
                "-pthread",
                "-Wall",
                "-Wextra",
            ])
            .arg("-I")
            .arg(root.join("tests/sim/include"))
            .arg("-I")
            .arg(&include)
            .arg("-o")
            .arg(&exe)
            .arg(root.join("tests/programs/nvtx_ranges.c"))
            .arg("-L")
            .arg(sim_dir())
            .arg(format!("-Wl,-rpath,{}", sim_dir().display()))
            .args(["-lcudart", "-ldl"])
            .output()
            .unwrap_or_else(|e| panic!("run {cc}: {e}"));
        assert!(
            out.status.success(),
            "{cc} could not build nvtx_ranges.c:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        exe
    })
}

/// Runs `cmd` with NVTX reaching the shim (and the shim preloaded), its trace at
/// `dir/<name>.trace`.
fn run_with_nvtx(mut cmd: Command, dir: &Path, name: &str, env: &[(&str, &str)]) -> Run {
    let trace = dir.join(format!("{name}.trace"));
    for var in SIM_ENV {
        cmd.env_remove(var);
    }
    cmd.env("LD_PRELOAD", shim_path())
        .env("NVTX_INJECTION64_PATH", shim_path())
        .env("GPUMEMPROF_OUTPUT", &trace)
        .envs(env.iter().copied());
    let output = cmd.output().expect("run the program");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{name}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Run { output, trace }
}

fn ranges_program(test: &str, env: &[(&str, &str)]) -> Run {
    run_with_nvtx(
        Command::new(nvtx_ranges()),
        &scratch(test),
        "nvtx_ranges",
        env,
    )
}

/// `gpumemprof CMD TRACE --by range --json`, checked against the report's schema; its
/// `by_range` object.
fn by_range(cmd: &str, trace: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["--by", "range"];
    args.extend_from_slice(extra);
    let v = report(cmd, trace, &args);
    schema::assert_valid(cmd, &v);
    v["by_range"].clone()
}

/// (range, domain, bytes, count) of a `by_range.ranges` array.
fn groups(ranges: &Value) -> Vec<(String, Option<String>, u64, u64)> {
    ranges
        .as_array()
        .expect("ranges")
        .iter()
        .map(|g| {
            (
                g["range"].as_str().expect("range").to_owned(),
                g["domain"].as_str().map(str::to_owned),
                g["bytes"].as_u64().expect("bytes"),
                g["count"].as_u64().expect("count"),
            )
        })
        .collect()
}

fn g(
    range: &str,
    domain: Option<&str>,
    mib: u64,
    count: u64,
) -> (String, Option<String>, u64, u64) {
    (range.into(), domain.map(str::to_owned), mib * MIB, count)
}

/// The program's documented numbers: each allocation belongs to the innermost range open
/// on its thread (the loader thread's 7 MiB to none, though "forward" is open on the main
/// thread); the 16 MiB of "optimizer_step" count at the peak, not at the end.
#[test]
fn nvtx3_ranges_group_memory_by_the_innermost_range_of_the_allocating_thread() {
    let run = ranges_program("nvtx_groups", &[]);

    let summary = by_range("summary", &run.trace, &[]);
    let rows: Vec<Value> = summary["ranges"]
        .as_array()
        .expect("ranges")
        .iter()
        .map(|r| {
            json!([
                r["range"],
                r["domain"],
                r["allocations"],
                r["bytes_allocated"],
                r["frees"],
                r["bytes_freed"],
                r["peak_bytes"],
                r["live_bytes_at_end"],
                r["live_allocations_at_end"]
            ])
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            json!([
                "optimizer_step",
                null,
                1,
                16 * MIB,
                1,
                16 * MIB,
                16 * MIB,
                0,
                0
            ]),
            json!([
                "forward",
                null,
                2,
                10 * MIB,
                1,
                2 * MIB,
                8 * MIB,
                8 * MIB,
                1
            ]),
            json!(["<no range>", null, 2, 8 * MIB, 0, 0, 8 * MIB, 8 * MIB, 2]),
            json!(["checkpoint", null, 1, 6 * MIB, 0, 0, 6 * MIB, 6 * MIB, 1]),
            json!(["backward", "trainer", 1, 5 * MIB, 0, 0, 5 * MIB, 5 * MIB, 1]),
            json!(["attention", null, 1, 4 * MIB, 0, 0, 4 * MIB, 4 * MIB, 1]),
            json!([
                "data_load",
                "trainer",
                1,
                3 * MIB,
                0,
                0,
                3 * MIB,
                3 * MIB,
                1
            ]),
        ]
    );
    // The stray pop closed nothing and was not recorded: NVTX returned an error for it.
    assert_eq!(
        summary["nvtx"],
        json!({"pushes": 6, "pops": 6, "starts": 1, "ends": 1, "marks": 3, "unmatched": 0})
    );

    let peak = by_range("peak", &run.trace, &[]);
    assert_eq!(peak["peak_bytes"], 50 * MIB);
    assert_eq!(
        groups(&peak["ranges"]),
        vec![
            g("optimizer_step", None, 16, 1),
            g("<no range>", None, 8, 2),
            g("forward", None, 8, 1),
            g("checkpoint", None, 6, 1),
            g("backward", Some("trainer"), 5, 1),
            g("attention", None, 4, 1),
            g("data_load", Some("trainer"), 3, 1),
        ]
    );
    // --top applies to ranges.
    assert_eq!(
        groups(&by_range("peak", &run.trace, &["--top", "2"])["ranges"]).len(),
        2
    );

    let leaks = by_range("leaks", &run.trace, &[]);
    assert_eq!(
        groups(&leaks["ranges"]),
        vec![
            g("<no range>", None, 8, 2),
            g("forward", None, 8, 1),
            g("checkpoint", None, 6, 1),
            g("backward", Some("trainer"), 5, 1),
            g("attention", None, 4, 1),
            g("data_load", Some("trainer"), 3, 1),
        ]
    );
    let total: u64 = groups(&leaks["ranges"]).iter().map(|r| r.2).sum();
    assert_eq!(total, 34 * MIB);
}

/// The Parquet export's `range` and `range_domain` columns, read by DuckDB: grouped, they
/// give `summary --by range`'s allocations and bytes for every range (null for
/// `<no range>`).
#[test]
fn parquet_rows_carry_the_range_summary_groups_by() {
    let run = ranges_program("nvtx_parquet", &[]);
    let allocations =
        gpumemprof_tests::duck::export_tables(&run.trace, &run.trace.with_file_name("tables"));
    let rows = gpumemprof_tests::duck::query(&format!(
        "SELECT coalesce(range, '<no range>'), range_domain, count(*), sum(bytes)
         FROM '{}' WHERE NOT failed GROUP BY ALL ORDER BY sum(bytes) DESC, 1",
        allocations.display()
    ));
    let summary = by_range("summary", &run.trace, &[]);
    let mut want: Vec<Vec<Value>> = summary["ranges"]
        .as_array()
        .expect("ranges")
        .iter()
        .map(|r| {
            vec![
                r["range"].clone(),
                r["domain"].clone(),
                r["allocations"].clone(),
                r["bytes_allocated"].clone(),
            ]
        })
        .collect();
    want.sort_by_key(|r| (std::cmp::Reverse(r[3].as_u64()), r[0].to_string()));
    assert_eq!(rows, want);
    assert_eq!(
        rows[0],
        vec![
            json!("optimizer_step"),
            Value::Null,
            json!(1),
            json!(16 * MIB)
        ]
    );
    assert!(rows.contains(&vec![
        json!("backward"),
        json!("trainer"),
        json!(1),
        json!(5 * MIB)
    ]));
}

/// The trace itself: every NVTX call of the main thread, in program order, with its name
/// (ASCII, wide, attribute structure, registered string) and domain, each name defined
/// before its first use; the loader thread's allocation carries another thread id.
#[test]
fn the_trace_records_each_nvtx_call_with_its_name_in_program_order() {
    let run = ranges_program("nvtx_trace", &[]);
    let (_, records) = decode(&run.trace);
    let mut names = std::collections::HashMap::new();
    let mut calls = Vec::new();
    let mut tids = std::collections::BTreeSet::new();
    for r in &records {
        match r {
            Record::NvtxString { id, text } => {
                names.insert(*id, text.clone());
            }
            Record::Nvtx(n) => {
                let name = |id: u64| match id {
                    0 => String::new(),
                    id => names
                        .get(&id)
                        .unwrap_or_else(|| panic!("string {id} used before its definition"))
                        .clone(),
                };
                tids.insert(n.tid);
                calls.push((n.op, name(n.domain), name(n.name), n.range != 0));
            }
            _ => {}
        }
    }
    let call =
        |op, domain: &str, name: &str, range| (op, domain.to_owned(), name.to_owned(), range);
    assert_eq!(
        calls,
        vec![
            call(NvtxOp::Push, "", "forward", false),
            call(NvtxOp::Push, "", "attention", false),
            call(NvtxOp::Pop, "", "", false),
            call(NvtxOp::Pop, "", "", false),
            call(NvtxOp::Mark, "", "step 1 done", false),
            call(NvtxOp::Push, "", "optimizer_step", false),
            call(NvtxOp::Pop, "", "", false),
            call(NvtxOp::Push, "trainer", "data_load", false),
            call(NvtxOp::Push, "trainer", "backward", false),
            call(NvtxOp::Pop, "trainer", "", false),
            call(NvtxOp::Pop, "trainer", "", false),
            call(NvtxOp::Start, "", "checkpoint", true),
            call(NvtxOp::End, "", "", true),
            // NULL messages: no name.
            call(NvtxOp::Mark, "", "", false),
            call(NvtxOp::Mark, "", "", false),
            call(NvtxOp::Push, "", "", false),
            call(NvtxOp::Pop, "", "", false),
        ]
    );
    assert_eq!(tids.len(), 1, "every NVTX call is the main thread's");
    let alloc_tids: std::collections::BTreeSet<u32> = records
        .iter()
        .filter_map(|r| match r {
            Record::Alloc(a) => Some(a.tid),
            _ => None,
        })
        .collect();
    assert_eq!(alloc_tids.len(), 2, "the main thread and the loader thread");
    assert!(alloc_tids.is_superset(&tids));
    // `info` counts them: the 17 calls above and the names they defined.
    let info = gpumemprof_tests::profiled::report("info", &run.trace, &[]);
    assert_eq!(info["records"]["nvtx_events"], 17);
    assert_eq!(info["records"]["nvtx_names"], names.len());
}

fn key_values(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// What NVTX returns to the program is NVTX's contract, and the same whether the shim
/// records or not: push the 0-based level it opens, pop the level it closes (per thread and
/// domain), a pop with nothing open -1, a start a range id other than 0.
#[test]
fn nvtx_return_values_are_the_same_recorded_or_disabled() {
    let want: Vec<String> = [
        "push_forward=0",
        "push_attention=1",
        "pop_attention=1",
        "pop_forward=0",
        "push_optimizer_step=0",
        "pop_optimizer_step=0",
        "stray_pop=-1",
        "push_data_load=0",
        "push_backward=1",
        "pop_backward=1",
        "pop_data_load=0",
        "checkpoint_id_nonzero=1",
        "push_null=0",
        "pop_null=0",
        &format!("live_device_bytes={}", 34 * MIB),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let recorded = ranges_program("nvtx_returns_recorded", &[]);
    assert_eq!(key_values(&recorded.output), want);
    assert!(recorded.trace.is_file());
    let disabled = ranges_program("nvtx_returns_disabled", &[("GPUMEMPROF_DISABLE", "1")]);
    assert_eq!(key_values(&disabled.output), want);
    assert!(!disabled.trace.exists(), "disabled: no trace file");
}

/// The PyPI `nvtx` package (annotate as context manager and decorator, push/pop, start/end,
/// mark, a domain): the ctypes allocations land in the ranges the script documents.
#[test]
fn the_nvtx_python_package_groups_ctypes_allocations_by_range() {
    let mut cmd = script_command("nvtx_annotate.py");
    cmd.env("PYTHONPATH", python_packages());
    let run = run_with_nvtx(cmd, &scratch("nvtx_python"), "nvtx_annotate", &[]);
    assert_eq!(
        key_values(&run.output),
        vec![
            "nvtx_enabled=1".to_string(),
            format!("live_device_bytes={}", 37 * MIB)
        ]
    );
    assert_eq!(
        groups(&by_range("leaks", &run.trace, &[])["ranges"]),
        vec![
            g("optimizer_step", None, 16, 1),
            g("forward", None, 8, 1),
            g("checkpoint", None, 6, 1),
            g("attention", Some("model"), 4, 1),
            g("load_batch", None, 2, 1),
            g("<no range>", None, 1, 1),
        ]
    );
    assert_eq!(
        by_range("summary", &run.trace, &[])["nvtx"],
        json!({"pushes": 4, "pops": 4, "starts": 1, "ends": 1, "marks": 1, "unmatched": 0})
    );
}

/// The text forms, a trace without NVTX (one group), and `--by range` on several traces
/// (a usage error).
#[test]
fn by_range_text_a_trace_without_nvtx_and_several_traces() {
    let run = ranges_program("nvtx_text", &[]);
    let text = |cmd: &str| {
        let out = analyzer()
            .args([cmd, "--by", "range"])
            .arg(&run.trace)
            .env("NO_COLOR", "1")
            .output()
            .expect("run gpumemprof");
        assert_eq!(out.status.code(), Some(0));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let leaks = text("leaks");
    assert!(
        leaks.contains("\n  #1 8.0 MiB (8388608 B) in 2 allocations: <no range>, allocated "),
        "{leaks}"
    );
    assert!(
        leaks.contains(
            "\n  #4 5.0 MiB (5242880 B) in 1 allocation: backward (domain trainer), allocated at "
        ),
        "{leaks}"
    );
    let peak = text("peak");
    assert!(
        peak.contains("all memory: peak 50.0 MiB (52428800 B) at "),
        "{peak}"
    );
    assert!(
        peak.contains("\n  #1 16.0 MiB (16777216 B) in 1 allocation: optimizer_step\n"),
        "{peak}"
    );
    let summary = text("summary");
    assert!(
        summary.contains("NVTX: 6 pushes, 6 pops, 1 start, 1 end, 3 marks; 0 closing nothing"),
        "{summary}"
    );

    // No NVTX at all: everything is `<no range>` (cudart_once keeps 4 MiB in 1 block).
    let dir = scratch("nvtx_none");
    let plain = run_profiled(&dir, "cudart_once", &[], &[]);
    assert_eq!(plain.output.status.code(), Some(0), "{}", plain.stderr());
    assert_eq!(
        groups(&by_range("leaks", &plain.trace, &[])["ranges"]),
        vec![g("<no range>", None, 4, 1)]
    );

    let out = analyzer()
        .args(["leaks", "--by", "range"])
        .arg(&plain.trace)
        .arg(&run.trace)
        .output()
        .expect("run gpumemprof");
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("--by range reads one trace file"));
}

/// A forked child records into its own trace, which defines the names it uses even when
/// the parent interned them first (the child's name cache hands out the parent's ids).
#[test]
fn a_forked_childs_trace_defines_the_names_the_parent_interned() {
    let dir = scratch("nvtx_fork");
    let template = dir.join("nvtx.%p.trace");
    let mut cmd = Command::new(nvtx_ranges());
    cmd.arg("fork");
    let run = run_with_nvtx(
        cmd,
        &dir,
        "unused",
        &[("GPUMEMPROF_OUTPUT", template.to_str().expect("utf-8 path"))],
    );
    assert_eq!(
        key_values(&run.output).last().map(String::as_str),
        Some("child_status=0")
    );
    let traces = trace_files(&dir);
    assert_eq!(traces.len(), 2, "{traces:?}");
    let leaks: Vec<_> = traces
        .iter()
        .map(|t| groups(&by_range("leaks", t, &[])["ranges"]))
        .collect();
    let child = vec![g("forward", None, 1, 1)];
    assert!(leaks.contains(&child), "{leaks:?}");
    assert!(
        leaks.iter().any(|l| l.len() == 6),
        "the parent's six ranges: {leaks:?}"
    );
}

/// The flight recorder (`GPUMEMPROF_MODE=oom`) keeps the NVTX names with its ring and
/// writes them at the out-of-memory: the dump groups by range like a full trace. With 48 MiB
/// the 6 MiB "checkpoint" allocation fails (44 MiB are live) and the program exits 1.
#[test]
fn the_flight_recorder_dump_defines_its_nvtx_names() {
    let dir = scratch("nvtx_flight_recorder");
    let trace = dir.join("oom.trace");
    let mut cmd = Command::new(nvtx_ranges());
    for var in SIM_ENV {
        cmd.env_remove(var);
    }
    let out = cmd
        .env("LD_PRELOAD", shim_path())
        .env("NVTX_INJECTION64_PATH", shim_path())
        .env("GPUMEMPROF_OUTPUT", &trace)
        .env("GPUMEMPROF_MODE", "oom")
        .env("SIMCUDA_CAPACITY", (48 * MIB).to_string())
        .output()
        .expect("run nvtx_ranges");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        groups(&by_range("leaks", &trace, &[])["ranges"]),
        vec![
            g("optimizer_step", None, 16, 1),
            g("<no range>", None, 8, 2),
            g("forward", None, 8, 1),
            g("backward", Some("trainer"), 5, 1),
            g("attention", None, 4, 1),
            g("data_load", Some("trainer"), 3, 1),
        ]
    );
}

/// `export --format chrome` of the program's trace: each NVTX call of
/// `the_trace_records_each_nvtx_call_with_its_name_in_program_order` as an event on the main
/// thread's track, at the call's time: a pushed range as a complete event ("X") written
/// when it is popped (inner ranges first), the start/end range as an async pair, marks as
/// thread instants; the domain in `args`.
#[test]
fn chrome_export_shows_each_nvtx_range_and_mark_on_the_calling_thread() {
    let run = ranges_program("nvtx_chrome", &[]);
    let (header, records) = decode(&run.trace);
    let json = run.trace.with_extension("json");
    let out = analyzer()
        .args(["export", "--format", "chrome"])
        .arg(&run.trace)
        .arg("-o")
        .arg(&json)
        .output()
        .expect("run gpumemprof export");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&std::fs::read(&json).expect("read the export"))
        .expect("the export is JSON");
    let events: Vec<&Value> = doc["traceEvents"]
        .as_array()
        .expect("traceEvents")
        .iter()
        .filter(|e| e["cat"] == "nvtx")
        .collect();

    // The NVTX calls' times and thread, and the allocations' threads, from the trace.
    let nvtx: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            Record::Nvtx(n) => Some(*n),
            _ => None,
        })
        .collect();
    assert_eq!(nvtx.len(), 17);
    let tid = nvtx[0].tid;
    let alloc_tids: std::collections::BTreeSet<u32> = records
        .iter()
        .filter_map(|r| match r {
            Record::Alloc(a) => Some(a.tid),
            _ => None,
        })
        .collect();
    assert!(alloc_tids.contains(&tid), "{tid} allocates: {alloc_tids:?}");
    let us = |i: usize| nvtx[i].time_ns as f64 / 1000.0;
    let dur = |push: usize, pop: usize| (nvtx[pop].time_ns - nvtx[push].time_ns) as f64 / 1000.0;
    let range_id = format!("{:#x}", nvtx[11].range);

    // (ph, name, domain, ts, dur or id) in the file's order.
    let got: Vec<(String, String, Value, f64, Value)> = events
        .iter()
        .map(|e| {
            assert_eq!(e["pid"], header["pid"], "{e}");
            assert_eq!(e["tid"], tid, "{e}");
            (
                e["ph"].as_str().expect("ph").to_owned(),
                e["name"].as_str().expect("name").to_owned(),
                e["args"]["domain"].clone(),
                e["ts"].as_f64().expect("ts"),
                match e["ph"].as_str() {
                    Some("X") => e["dur"].clone(),
                    Some("b" | "e") => e["id"].clone(),
                    _ => e["s"].clone(),
                },
            )
        })
        .collect();
    let ev = |ph: &str, name: &str, domain: Option<&str>, ts: f64, extra: Value| {
        (ph.to_owned(), name.to_owned(), json!(domain), ts, extra)
    };
    assert_eq!(
        got,
        vec![
            ev("X", "attention", None, us(1), json!(dur(1, 2))),
            ev("X", "forward", None, us(0), json!(dur(0, 3))),
            ev("i", "step 1 done", None, us(4), json!("t")),
            ev("X", "optimizer_step", None, us(5), json!(dur(5, 6))),
            ev("X", "backward", Some("trainer"), us(8), json!(dur(8, 9))),
            ev("X", "data_load", Some("trainer"), us(7), json!(dur(7, 10))),
            ev("b", "checkpoint", None, us(11), json!(range_id)),
            ev("e", "checkpoint", None, us(12), json!(range_id)),
            ev("i", "<unnamed>", None, us(13), json!("t")),
            ev("i", "<unnamed>", None, us(14), json!("t")),
            ev("X", "<unnamed>", None, us(15), json!(dur(15, 16))),
        ]
    );
    // Nesting: each inner range lies within its outer one.
    let within = |inner: usize, outer: usize| {
        let (i, o) = (&got[inner], &got[outer]);
        let end = |e: &(String, String, Value, f64, Value)| e.3 + e.4.as_f64().unwrap();
        o.3 <= i.3 && end(i) <= end(o)
    };
    assert!(within(0, 1), "attention within forward");
    assert!(within(4, 5), "backward within data_load");
}

/// A range's own peak (the most of its memory live at once, whenever that was) and its
/// budget in CI: "forward" held 8 + 2 MiB at once (the 2 MiB freed at once), though only
/// 8 MiB of it at the peak of all memory. `--max-range-peak` passes at 10 MiB, fails at 9
/// (exit 4, the line that broke it), and fails for a name no range has.
#[test]
fn a_ranges_own_peak_and_its_budget() {
    let run = ranges_program("nvtx_range_budget", &[]);
    let summary = by_range("summary", &run.trace, &[]);
    let peaks: Vec<(String, u64, u64)> = (summary["ranges"].as_array().unwrap().iter())
        .map(|r| {
            (
                r["range"].as_str().unwrap().to_string(),
                r["peak_bytes"].as_u64().unwrap() / MIB,
                r["range_peak_bytes"].as_u64().unwrap() / MIB,
            )
        })
        .collect();
    assert!(peaks.contains(&("forward".into(), 8, 10)), "{peaks:?}");
    assert!(
        peaks.contains(&("optimizer_step".into(), 16, 16)),
        "{peaks:?}"
    );
    assert!(peaks.contains(&("<no range>".into(), 8, 8)), "{peaks:?}");

    let gate = |budgets: &[&str]| {
        let mut cmd = gpumemprof_tests::profiled::analyzer();
        cmd.arg("summary").arg(&run.trace);
        for b in budgets {
            cmd.args(["--max-range-peak", b]);
        }
        let out = cmd.output().expect("run gpumemprof");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), stderr)
    };
    assert_eq!(gate(&["forward=10MiB", "attention=4MiB"]).0, Some(0));
    let (code, stderr) = gate(&["attention=4MiB", "forward=9MiB"]);
    assert_eq!(code, Some(4));
    assert_eq!(
        stderr,
        "gpumemprof: gate failed: range \"forward\" peak 10.0 MiB (10485760 B) exceeds \
         --max-range-peak forward=9.0 MiB (9437184 B): reduce it, or raise the limit if the \
         growth is expected\n"
    );
    let (code, stderr) = gate(&["decode=1MiB"]);
    assert_eq!(code, Some(4));
    assert!(
        stderr.contains("no NVTX range or scope named \"decode\""),
        "{stderr}"
    );
}
