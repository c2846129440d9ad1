//! `summary`, `peak` and `leaks` over several traces of one job (one per rank), on
//! synthetic traces written with the format crate's `TraceWriter`: the per-rank lines and
//! their order, the highest rank against the median, leak sites merged across processes
//! whose libraries load at different addresses, the gates on every rank, and bad input.
//!
//! The job, per rank r (0, 1, 2), in `/opt/job/libjob.so` loaded at a different address
//! per rank (absent here, so frames read `libjob.so+0xOFFSET`):
//!   4 MiB work buffer (offset 0x200), freed last; (r + 1) MiB kept (offset 0x100);
//!   1 MiB kept on even ranks (offset 0x300).
//! Peaks 6, 6, 8 MiB; live at the end 2, 2, 4 MiB.

#[path = "checks/binary.rs"]
mod binary;
#[path = "checks/schema.rs"]
mod schema;
#[path = "checks/synth.rs"]
mod synth;
#[path = "checks/tempdir.rs"]
mod tempdir;

use std::path::{Path, PathBuf};

use binary::{gpumemprof, stderr_lines};
use gpumemprof_format::{Module, Record, FORMAT_VERSION};
use serde_json::{json, Value};
use synth::{alloc, end, free, write_trace};
use tempdir::TempDir;

const MIB: u64 = 1 << 20;
const LIB: &str = "/opt/job/libjob.so";

fn header(rank: Option<&str>, pid: u64, host: &str) -> Value {
    let mut h = json!({
        "format": "gpumemprof-trace",
        "format_version": FORMAT_VERSION,
        "shim_version": "0.1.0",
        "pid": pid,
        "host": host,
        "argv": ["./train"],
        "start_monotonic_ns": 1000,
        "apis": [
            {"id": 0, "name": "cudaMalloc", "family": "runtime"},
            {"id": 1, "name": "cudaFree", "family": "runtime"}
        ]
    });
    if let Some(r) = rank {
        h["rank"] = json!(r);
    }
    h
}

/// Rank r's records: its library at its own address, stack ids that differ per rank.
fn rank_records(r: u64, complete: bool) -> Vec<Record> {
    let bias = 0x7f00_0000_0000 + r * 0x1000_0000;
    let (keep, work, even) = (10 * r + 1, 10 * r + 2, 10 * r + 3);
    let stack = |id, offset: u64| Record::Stack {
        id,
        frames: vec![bias + offset, bias + 0x900],
    };
    let mut out = vec![
        Record::Module(Module {
            time_ns: 0,
            bias,
            start: bias,
            end: bias + 0x10000,
            path: LIB.into(),
            build_id: Vec::new(),
        }),
        stack(keep, 0x100),
        stack(work, 0x200),
        stack(even, 0x300),
        alloc(1000, 0x1000_0000, 4 * MIB, work),
        alloc(2000, 0x2000_0000, (r + 1) * MIB, keep),
    ];
    if r.is_multiple_of(2) {
        out.push(alloc(3000, 0x3000_0000, MIB, even));
    }
    out.push(free(4000, 0x1000_0000));
    if complete {
        out.push(end(5000));
    }
    out
}

/// The three ranks, named so that name order is not rank order: a = 2, b = 0, c = 1.
fn job(dir: &Path) -> Vec<PathBuf> {
    [("a.trace", 2), ("b.trace", 0), ("c.trace", 1)]
        .iter()
        .map(|&(name, r)| {
            let host = if r < 2 { "node-a" } else { "node-b" };
            let h = header(Some(&r.to_string()), 100 + r, host);
            write_trace(dir.join(name), &h, &rank_records(r, true))
        })
        .collect()
}

fn json_of(args: &[&str], want: i32, schema_name: &str) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = gpumemprof(&all);
    assert_eq!(out.status.code(), Some(want), "{:?}", stderr_lines(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    schema::assert_valid(schema_name, &v);
    v
}

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 temp path")
}

fn column(v: &Value, field: &str) -> Vec<Value> {
    v["traces"]
        .as_array()
        .expect("traces")
        .iter()
        .map(|t| t[field].clone())
        .collect()
}

#[test]
fn a_directory_gives_one_line_per_rank_in_rank_order_and_merges_leaks_across_load_addresses() {
    let dir = TempDir::new("ranks", "dir");
    let files = job(&dir);
    // Not traces: ignored in a directory (a sub-folder is not searched).
    std::fs::write(dir.join("notes.txt"), "rank 2 is slow").expect("write");
    std::fs::create_dir(dir.join("old")).expect("mkdir");
    write_trace(
        dir.join("old").join("x.trace"),
        &header(Some("9"), 9, "h"),
        &rank_records(0, true),
    );

    let v = json_of(&["leaks", p(&dir)], 0, "ranks");
    assert_eq!(v["command"], "leaks");
    let paths: Vec<Value> = [&files[1], &files[2], &files[0]]
        .iter()
        .map(|f| json!(p(f)))
        .collect();
    assert_eq!(
        column(&v, "trace")
            .iter()
            .map(|t| t["path"].clone())
            .collect::<Vec<_>>(),
        paths
    );
    assert_eq!(column(&v, "rank"), [json!(0), json!(1), json!(2)]);
    assert_eq!(
        column(&v, "host"),
        [json!("node-a"), json!("node-a"), json!("node-b")]
    );
    assert_eq!(
        column(&v, "peak_bytes"),
        [json!(6 * MIB), json!(6 * MIB), json!(8 * MIB)]
    );
    assert_eq!(
        column(&v, "peak_time_ns"),
        [json!(3000), json!(2000), json!(3000)]
    );
    assert_eq!(
        column(&v, "live_bytes_at_end"),
        [json!(2 * MIB), json!(2 * MIB), json!(4 * MIB)]
    );
    assert_eq!(column(&v, "allocations"), [json!(3), json!(2), json!(3)]);
    assert_eq!(v["traces"][2]["trace"]["pid"], 102);
    assert_eq!(
        v["highest"],
        json!({"index": 2, "rank": 2, "peak_bytes": 8 * MIB,
               "median_peak_bytes": 6 * MIB, "above_median_bytes": 2 * MIB})
    );
    assert_eq!(
        (&v["live_bytes_at_end"], &v["live_allocations_at_end"]),
        (&json!(8 * MIB), &json!(5))
    );
    assert_eq!(v["sites_total"], 2);
    let sites = v["sites"].as_array().expect("sites");
    let short: Vec<Value> = sites
        .iter()
        .map(|s| {
            json!([
                s["bytes"],
                s["count"],
                s["ranks"],
                s["trace_indexes"],
                s["kind"]
            ])
        })
        .collect();
    assert_eq!(
        short,
        [
            json!([6 * MIB, 3, [0, 1, 2], [0, 1, 2], "device"]),
            json!([2 * MIB, 2, [0, 2], [0, 2], "device"])
        ]
    );
    // The frames are rank 0's (the first trace with the site): its load address.
    assert_eq!(sites[0]["frames"][0]["address"], "0x7f0000000100");
    assert_eq!(sites[0]["frames"][0]["module"], LIB);

    // The same traces as paths, in any order, give the same report.
    let given = json_of(
        &["leaks", p(&files[2]), p(&files[0]), p(&files[1])],
        0,
        "ranks",
    );
    assert_eq!(given, v);
}

#[test]
fn the_text_report_has_a_line_per_rank_the_highest_rank_and_the_merged_sites() {
    let dir = TempDir::new("ranks", "text");
    let files = job(&dir);
    let out = gpumemprof(&["leaks", p(&dir), "--frames", "1"]);
    assert_eq!(out.status.code(), Some(0), "{:?}", stderr_lines(&out));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let row = |rank: u64, host: &str, peak: &str, at: &str, live: &str, path: &Path| {
        format!(
            "{rank:>5}  {host:<16}  {:>8}  {peak:>10}  {at:>9}  {live:>10}  {:>9}  {}",
            100 + rank,
            0,
            p(path)
        )
    };
    let want = [
        "3 traces (ranks 0-2)".to_string(),
        " rank  host                   pid        peak    peak at    live@end     events  trace"
            .to_string(),
        row(0, "node-a", "6.0 MiB", "0.000 s", "2.0 MiB", &files[1]),
        row(1, "node-a", "6.0 MiB", "0.000 s", "2.0 MiB", &files[2]),
        row(2, "node-b", "8.0 MiB", "0.000 s", "4.0 MiB", &files[0]),
        String::new(),
        "highest peak: rank 2, 8.0 MiB (8388608 B) at 0.000 s, 2.0 MiB (2097152 B) above the \
         median 6.0 MiB (6291456 B)"
            .to_string(),
        String::new(),
        "8.0 MiB (8388608 B) in 5 allocations live at the end, all traces, from 2 call sites"
            .to_string(),
        String::new(),
        "#1 6.0 MiB (6291456 B) in 3 allocations (device memory), ranks 0-2".to_string(),
        "    libjob.so+0x100".to_string(),
        String::new(),
        "#2 2.0 MiB (2097152 B) in 2 allocations (device memory), ranks 0, 2".to_string(),
        "    libjob.so+0x300".to_string(),
    ];
    assert_eq!(text.lines().collect::<Vec<_>>(), want);
}

#[test]
fn peak_merges_the_sites_at_each_ranks_peak_and_summary_has_none() {
    let dir = TempDir::new("ranks", "peak");
    job(&dir);
    let v = json_of(&["peak", p(&dir), "--top", "1"], 0, "ranks");
    assert_eq!(v["command"], "peak");
    assert_eq!(v["sites_total"], 3);
    let sites = v["sites"].as_array().expect("sites");
    assert_eq!(sites.len(), 1, "--top 1");
    assert_eq!(
        json!([sites[0]["bytes"], sites[0]["count"], sites[0]["ranks"]]),
        json!([12 * MIB, 3, [0, 1, 2]])
    );
    assert_eq!(sites[0]["frames"][0]["address"], "0x7f0000000200");
    let s = json_of(&["summary", p(&dir)], 0, "ranks");
    assert_eq!(
        (&s["command"], &s["sites"], &s["sites_total"]),
        (&json!("summary"), &Value::Null, &Value::Null)
    );
    assert_eq!(s["highest"]["rank"], 2);
}

/// Forked workers of one rank, whose files' names sort `job.1002` before `job.999`: the
/// traces are listed by pid within their rank, rows and names alike.
#[test]
fn traces_of_one_rank_are_listed_by_pid_not_by_file_name() {
    let dir = TempDir::new("ranks", "bypid");
    for pid in [1002, 999, 1005] {
        write_trace(
            dir.join(format!("job.{pid}.trace")),
            &header(Some("0"), pid, "h"),
            &rank_records(0, true),
        );
    }
    let v = json_of(&["summary", p(&dir)], 0, "ranks");
    let pids: Vec<Value> = (0..3)
        .map(|i| v["traces"][i]["trace"]["pid"].clone())
        .collect();
    assert_eq!(pids, [json!(999), json!(1002), json!(1005)]);
    let out = gpumemprof(&["summary", p(&dir)]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.starts_with("3 traces (pids 999, 1002, 1005)\n"),
        "{text}"
    );
}

#[test]
fn a_trace_without_a_rank_sorts_last_with_rank_null() {
    let dir = TempDir::new("ranks", "norank");
    let none = write_trace(
        dir.join("0-none.trace"),
        &header(None, 5, "h"),
        &rank_records(0, true),
    );
    let seven = write_trace(
        dir.join("1-seven.trace"),
        &header(Some("7"), 6, "h"),
        &rank_records(1, false),
    );
    let v = json_of(&["leaks", p(&none), p(&seven)], 0, "ranks");
    assert_eq!(column(&v, "rank"), [json!(7), Value::Null]);
    assert_eq!(v["traces"][0]["trace"]["complete"], false);
    // Both 6 MiB: the first of equals is the highest; median of two is their mean.
    assert_eq!(
        (&v["highest"]["index"], &v["highest"]["rank"]),
        (&json!(0), &json!(7))
    );
    assert_eq!(v["highest"]["above_median_bytes"], 0);
    let keep = &v["sites"][0];
    assert_eq!(
        (&keep["ranks"], &keep["trace_indexes"]),
        (&json!([7, null]), &json!([0, 1]))
    );
    let out = gpumemprof(&["summary", p(&none), p(&seven)]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // Not every trace has a rank: they are named by pid.
    assert!(text.starts_with("2 traces (pids 6, 5)\n"), "{text}");
    assert!(
        text.contains(&format!(
            "WARNING: pid 6 of rank 7 ({}) did NOT exit cleanly (live@end: live when the trace \
             stopped)\n",
            p(&seven)
        )),
        "{text}"
    );
}

#[test]
fn gates_apply_to_every_rank_and_name_the_worst() {
    let dir = TempDir::new("ranks", "gates");
    let files = job(&dir);
    let d = p(&dir);
    for (args, want) in [
        (vec!["summary", d, "--max-peak", "8MiB"], 0),
        (vec!["peak", d, "--max-peak", "8MiB"], 0),
        (vec!["leaks", d, "--max-leaked", "4MiB"], 0),
        (vec!["summary", d, "--max-peak", "7MiB"], 4),
        (vec!["leaks", d, "--max-leaked", "3MiB"], 4),
    ] {
        let out = gpumemprof(&args);
        assert_eq!(
            out.status.code(),
            Some(want),
            "{args:?}: {:?}",
            stderr_lines(&out)
        );
        assert!(
            out.stdout.starts_with(b"3 traces"),
            "the report is printed either way"
        );
    }
    let out = gpumemprof(&["peak", d, "--max-peak", "7MiB"]);
    assert_eq!(
        stderr_lines(&out),
        [format!(
            "gpumemprof: gate failed: rank 2 ({}): peak 8.0 MiB (8388608 B) exceeds --max-peak \
             7.0 MiB (7340032 B): reduce it, or raise the limit if the growth is expected",
            p(&files[0])
        )]
    );
    let out = gpumemprof(&["leaks", d, "--max-leaked", "1MiB", "--json"]);
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(
        stderr_lines(&out),
        [format!(
            "gpumemprof: gate failed: rank 2 ({}): leaked 4.0 MiB (4194304 B) exceeds \
             --max-leaked 1.0 MiB (1048576 B), and so do 2 more traces: reduce it, or raise \
             the limit if the growth is expected",
            p(&files[0])
        )]
    );
}

#[test]
fn one_bad_file_among_several_is_one_error_line_naming_it_and_nothing_else() {
    let dir = TempDir::new("ranks", "bad");
    let files = job(&dir);
    let bad = dir.join("d.trace");
    std::fs::write(&bad, b"GPUMEMPX not a trace").expect("write");
    // In the job's folder it is skipped with one warning; named, it fails the command.
    let out = gpumemprof(&["leaks", p(&dir)]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stderr_lines(&out),
        [format!(
            "gpumemprof: warning: {}: not a gpumemprof trace (bad magic bytes); skipped",
            p(&bad)
        )]
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("3 traces (ranks 0-2)\n"));
    let out = gpumemprof(&["summary", p(&files[0]), p(&bad), p(&files[1])]);
    assert_eq!(out.status.code(), Some(5));
    assert!(out.stdout.is_empty(), "no report from a bad job");
    assert_eq!(
        stderr_lines(&out),
        [format!(
            "gpumemprof: error: {}: not a gpumemprof trace (bad magic bytes)",
            p(&bad)
        )]
    );
    // A file that is missing is not a bad trace: exit 1, as for one trace.
    let missing = dir.join("gone.trace");
    let out = gpumemprof(&["peak", p(&files[0]), p(&missing)]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stderr_lines(&out).len(), 1);
    assert!(stderr_lines(&out)[0].starts_with(&format!("gpumemprof: error: {}: ", p(&missing))));
}

#[test]
fn a_directory_without_traces_exits_5_with_one_line() {
    let dir = TempDir::new("ranks", "empty");
    std::fs::write(dir.join("notes.txt"), "nothing here").expect("write");
    let out = gpumemprof(&["summary", p(&dir)]);
    assert_eq!(out.status.code(), Some(5));
    assert_eq!(
        stderr_lines(&out),
        [format!(
            "gpumemprof: error: {}: no gpumemprof trace in this directory (looked for files \
             that start with the trace magic or are named *.trace): give the folder the shim \
             wrote to (GPUMEMPROF_OUTPUT), or the traces themselves",
            p(&dir)
        )]
    );
}

#[test]
fn one_trace_file_keeps_the_single_trace_report_and_a_directory_of_one_does_not() {
    let dir = TempDir::new("ranks", "one");
    let one = write_trace(
        dir.join("r0.trace"),
        &header(Some("0"), 1, "h"),
        &rank_records(0, true),
    );
    let v = json_of(&["leaks", p(&one)], 0, "leaks");
    assert_eq!(v["total_bytes"], 2 * MIB);
    assert!(v.get("traces").is_none());
    let v = json_of(&["leaks", p(&dir)], 0, "ranks");
    assert_eq!(column(&v, "rank"), [json!(0)]);
    // A trace that starts with the magic counts whatever its name.
    std::fs::copy(&one, dir.join("job.r0.trace.1")).expect("copy");
    let v = json_of(&["summary", p(&dir)], 0, "ranks");
    assert_eq!(v["traces"].as_array().map(Vec::len), Some(2));
}
