//! End to end, a simulated three-rank job: `tests/programs/rank_leak.c` runs under the shim
//! three times with RANK=0, 1, 2 and `GPUMEMPROF_OUTPUT=<dir>/job.r%r.trace`, as torchrun
//! would start it; then `gpumemprof summary|peak|leaks` read the directory and the three
//! paths. The assertions are the program's documented numbers: peaks 8, 8, 10 MiB, live at
//! exit 4, 4, 6 MiB, and the leaking lines merged over the ranks that leaked there.

#[path = "../analyzer/tests/checks/schema.rs"]
mod schema;

use std::path::Path;
use std::process::Output;

use gpumemprof_tests::profiled::{analyzer, rank_job, scratch};
use gpumemprof_tests::source_line_of;
use serde_json::{json, Value};

const MIB: u64 = 1 << 20;
const SOURCE: &str = "tests/programs/rank_leak.c";

fn gpumemprof(args: &[&str]) -> Output {
    analyzer()
        .args(args)
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR_FORCE")
        .output()
        .expect("run gpumemprof")
}

fn stderr_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn json_of(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = gpumemprof(&all);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{all:?}: {:?}",
        stderr_lines(&out)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    schema::assert_valid("ranks", &v);
    v
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 scratch path")
}

fn column(v: &Value, field: &str) -> Vec<Value> {
    v["traces"]
        .as_array()
        .expect("traces")
        .iter()
        .map(|t| t[field].clone())
        .collect()
}

/// The merged site whose innermost frame is `function` at the line marked `marker`.
fn site<'a>(v: &'a Value, function: &str, marker: &str) -> &'a Value {
    let line = source_line_of(SOURCE, marker);
    let found: Vec<&Value> = v["sites"]
        .as_array()
        .expect("sites")
        .iter()
        .filter(|s| {
            let f = &s["frames"][0];
            f["function"] == function
                && f["line"] == line
                && f["file"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("rank_leak.c"))
        })
        .collect();
    assert_eq!(found.len(), 1, "one site at {marker}: {:#}", v["sites"]);
    found[0]
}

fn numbers(s: &Value) -> Value {
    json!([s["bytes"], s["count"], s["ranks"]])
}

#[test]
fn leaks_of_a_three_rank_job_merge_the_leaking_lines_with_their_ranks() {
    let dir = scratch("ranks_leaks");
    let traces = rank_job(&dir);
    let v = json_of(&["leaks", path(&dir)]);
    assert_eq!(column(&v, "rank"), [json!(0), json!(1), json!(2)]);
    let paths: Vec<Value> = traces.iter().map(|t| json!(path(t))).collect();
    let given: Vec<Value> = column(&v, "trace")
        .iter()
        .map(|t| t["path"].clone())
        .collect();
    assert_eq!(given, paths);
    assert_eq!(
        column(&v, "peak_bytes"),
        [json!(8 * MIB), json!(8 * MIB), json!(10 * MIB)]
    );
    assert_eq!(
        column(&v, "live_bytes_at_end"),
        [json!(4 * MIB), json!(4 * MIB), json!(6 * MIB)]
    );
    assert_eq!(column(&v, "allocations"), [json!(4), json!(3), json!(4)]);
    for t in v["traces"].as_array().expect("traces") {
        assert_eq!(t["trace"]["complete"], true);
        assert!(t["host"].as_str().is_some_and(|h| !h.is_empty()), "{t}");
        let (at, end) = (
            t["peak_time_ns"].as_u64(),
            t["trace"]["duration_ns"].as_u64(),
        );
        assert!(at.is_some_and(|at| at > 0 && Some(at) <= end), "{t}");
    }
    assert_eq!(
        v["highest"],
        json!({"index": 2, "rank": 2, "peak_bytes": 10 * MIB,
               "median_peak_bytes": 8 * MIB, "above_median_bytes": 2 * MIB})
    );
    assert_eq!(v["live_bytes_at_end"], 14 * MIB);
    assert_eq!(v["live_allocations_at_end"], 8);
    assert_eq!(v["sites_total"], 3);
    let rank_leak = site(&v, "load_shard", "GPUMEMPROF-RANK-LEAK");
    assert_eq!(numbers(rank_leak), json!([6 * MIB, 3, [0, 1, 2]]));
    let common = site(&v, "init_comm_buffer", "GPUMEMPROF-COMMON-LEAK");
    assert_eq!(numbers(common), json!([6 * MIB, 3, [0, 1, 2]]));
    let even = site(&v, "keep_stats", "GPUMEMPROF-EVEN-LEAK");
    assert_eq!(numbers(even), json!([2 * MIB, 2, [0, 2]]));
    assert_eq!(v["sites"][2], *even, "the smallest site is last");

    // Three paths, in another order: the same report.
    let v3 = json_of(&[
        "leaks",
        path(&traces[2]),
        path(&traces[0]),
        path(&traces[1]),
    ]);
    assert_eq!(v3, v);
}

#[test]
fn summary_and_peak_of_the_job_name_the_highest_rank() {
    let dir = scratch("ranks_peak");
    let traces = rank_job(&dir);
    let out = gpumemprof(&["summary", path(&dir)]);
    assert_eq!(out.status.code(), Some(0), "{:?}", stderr_lines(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.starts_with("3 traces (ranks 0-2)\n"), "{text}");
    assert!(
        text.contains(
            "highest peak: rank 2, 10.0 MiB (10485760 B) at 0.0" // the time varies per run
        ),
        "{text}"
    );
    assert!(
        text.contains(", 2.0 MiB (2097152 B) above the median 8.0 MiB (8388608 B)\n"),
        "{text}"
    );
    for t in &traces {
        assert_eq!(
            text.matches(path(t)).count(),
            1,
            "one line per rank: {text}"
        );
    }
    let p = json_of(&["peak", path(&traces[0]), path(&traces[1]), path(&traces[2])]);
    assert_eq!(p["command"], "peak");
    // At each rank's peak: the work buffer, the shard, the comm buffer, the even stats.
    assert_eq!(p["sites_total"], 4);
    let work = site(&p, "main", "GPUMEMPROF-WORK");
    assert_eq!(numbers(work), json!([12 * MIB, 3, [0, 1, 2]]));
    assert_eq!(p["sites"][0], *work, "the largest site first");
    let s = json_of(&["summary", path(&dir)]);
    assert_eq!(
        (&s["sites"], &s["highest"]["rank"]),
        (&Value::Null, &json!(2))
    );
}

#[test]
fn gates_fail_when_any_rank_exceeds_and_a_bad_trace_fails_the_job() {
    let dir = scratch("ranks_gates");
    let traces = rank_job(&dir);
    let d = path(&dir);
    for (args, want) in [
        (["summary", d, "--max-peak", "10MiB"], 0),
        (["summary", d, "--max-peak", "9MiB"], 4),
        (["leaks", d, "--max-leaked", "6MiB"], 0),
        (["leaks", d, "--max-leaked", "5MiB"], 4),
    ] {
        let out = gpumemprof(&args);
        assert_eq!(
            out.status.code(),
            Some(want),
            "{args:?}: {:?}",
            stderr_lines(&out)
        );
    }
    let out = gpumemprof(&["leaks", d, "--max-leaked", "5MiB"]);
    assert_eq!(
        stderr_lines(&out),
        [format!(
            "gpumemprof: gate failed: rank 2 ({}): leaked 6.0 MiB (6291456 B) exceeds \
             --max-leaked 5.0 MiB (5242880 B): reduce it, or raise the limit if the growth \
             is expected",
            path(&traces[2])
        )]
    );
    // A rank that died before writing its header leaves a file that is no trace: in the
    // folder it is skipped with a warning, named on the command line it fails the job.
    let bad = dir.join("job.r3.trace");
    std::fs::write(&bad, b"GPUMEMPF").expect("write");
    let out = gpumemprof(&["leaks", d]);
    assert_eq!(out.status.code(), Some(0));
    let lines = stderr_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].ends_with("; skipped"), "{lines:?}");
    let mut named: Vec<&str> = traces.iter().map(|t| path(t)).collect();
    named.push(path(&bad));
    let out = gpumemprof(&[&["leaks"][..], &named].concat());
    assert_eq!(out.status.code(), Some(5));
    assert!(out.stdout.is_empty());
    let lines = stderr_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with(&format!("gpumemprof: error: {}: ", path(&bad))),
        "{lines:?}"
    );
}

/// The situation: a job folder of forked workers (one rank, each process its own
/// trace, `fork_children.c` under RANK=0) and an empty trace (a process that died before
/// writing). The empty file is skipped with one warning; the processes are named by pid,
/// not as "rank 0" four times; an empty trace alone is still an error.
#[test]
fn forked_workers_are_named_by_pid_and_an_empty_trace_is_skipped() {
    let dir = scratch("ranks_forked");
    let out = gpumemprof_tests::program_command("fork_children")
        .env("LD_PRELOAD", gpumemprof_tests::shim_path())
        .env("GPUMEMPROF_OUTPUT", dir.join("job.%p.trace"))
        .env("GPUMEMPROF_NVML_MS", "0")
        .env("RANK", "0")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let parent = out.id();
    let out = out.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let pid_of = |name: &str| -> u64 {
        let line = stdout.lines().find(|l| l.starts_with(name)).unwrap();
        line[name.len() + 1..].parse().unwrap()
    };
    let children: Vec<u64> = ["child1", "child2", "child3"].map(pid_of).to_vec();
    std::fs::write(dir.join("empty.trace"), b"").unwrap();

    let leaks = gpumemprof(&["leaks", path(&dir)]);
    assert_eq!(leaks.status.code(), Some(0), "{:?}", stderr_lines(&leaks));
    let warnings = stderr_lines(&leaks);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with(&format!(
            "gpumemprof: warning: {}: trace header is cut short",
            dir.join("empty.trace").display()
        )) && warnings[0].ends_with("; skipped"),
        "{warnings:?}"
    );
    let text = String::from_utf8_lossy(&leaks.stdout);
    let first = text.lines().next().unwrap();
    assert!(first.starts_with("4 traces (pids "), "{text}");
    let pids = |list: &[u64]| {
        list.iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    assert!(
        text.contains(&format!(
            "3.0 MiB (3145728 B) in 3 allocations (device memory), pids {}",
            pids(&children)
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("highest peak: pid {parent} of rank 0, 2.0 MiB")),
        "{text}"
    );
    assert!(!text.contains("ranks 0, 0"), "{text}");
    let v = json_of(&["leaks", path(&dir)]);
    assert_eq!(v["traces"].as_array().unwrap().len(), 4);

    let alone = dir.join("alone");
    std::fs::create_dir(&alone).unwrap();
    std::fs::write(alone.join("empty.trace"), b"").unwrap();
    let out = gpumemprof(&["summary", path(&alone)]);
    assert_eq!(out.status.code(), Some(5), "{:?}", stderr_lines(&out));
}
