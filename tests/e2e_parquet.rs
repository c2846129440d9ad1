//! End to end, `gpumemprof export --format parquet`, read by DuckDB (an engine we did not
//! write): the SQL recipes of docs/REPORTS.md ("Parquet export") over the export of a
//! three-rank job give exactly what `summary`, `peak` and `leaks` say of the same traces
//! (`tests/programs/rank_leak.c`: peaks 8, 8, 10 MiB, live at exit 4, 4, 6 MiB; `summary`
//! gives the peak of all memory kinds together); over a
//! trace with a failed allocation (`oom_retry.c`), a peak below the bytes allocated and the
//! failure as a row. Then what the command refuses, and that it leaves no file behind.

use std::path::{Path, PathBuf};
use std::process::Output;

use gpumemprof_tests::duck::query;
use gpumemprof_tests::profiled::{analyzer, rank_job, report, run_profiled, scratch};
use gpumemprof_tests::source_line_of;
use serde_json::{json, Value};

const MIB: u64 = 1 << 20;

/// The recipes, as docs/REPORTS.md gives them, with `DIR` for the export's directory.
const MEMORY: &str = "SELECT * FROM 'DIR/allocations.parquet'
    WHERE NOT failed AND kind NOT IN ('address_reservation', 'vmm_handle', 'tensor')";

fn totals_sql() -> String {
    format!(
        "SELECT rank, count(*) AS allocations, sum(bytes) AS bytes_allocated,
                coalesce(sum(bytes) FILTER (WHERE free_ns IS NULL), 0) AS live_bytes_at_end
         FROM ({MEMORY}) GROUP BY rank ORDER BY rank"
    )
}

fn peak_sql() -> String {
    format!(
        "WITH memory AS ({MEMORY}),
         changes AS (
             SELECT path, rank, alloc_seq AS seq, bytes AS delta FROM memory
             UNION ALL
             SELECT path, rank, free_seq, -bytes FROM memory WHERE free_seq IS NOT NULL),
         live AS (
             SELECT path, rank, sum(delta) OVER (PARTITION BY path ORDER BY seq, delta
                                                 ROWS UNBOUNDED PRECEDING) AS live_bytes
             FROM changes)
         SELECT rank, max(live_bytes) AS peak_bytes FROM live GROUP BY path, rank ORDER BY rank"
    )
}

fn leak_sites_sql() -> String {
    format!(
        "SELECT f.function, f.file, f.line, sum(a.bytes) AS bytes, count(*) AS allocations,
                list(DISTINCT a.rank ORDER BY a.rank) AS ranks
         FROM ({MEMORY}) a
         JOIN 'DIR/frames.parquet' f ON f.path = a.path AND f.stack_id = a.stack_id
                                    AND f.depth = 0
         WHERE a.free_ns IS NULL
         GROUP BY ALL ORDER BY bytes DESC, f.line"
    )
}

fn sql_in(dir: &Path, sql: &str) -> Vec<Vec<Value>> {
    query(&sql.replace("DIR", &dir.display().to_string()))
}

fn gpumemprof(args: &[&str]) -> Output {
    analyzer().args(args).output().expect("run gpumemprof")
}

fn export(inputs: &[&Path], out: &Path, extra: &[&str]) -> Output {
    let mut cmd = analyzer();
    cmd.args(["export", "--format", "parquet"])
        .args(inputs)
        .arg("-o")
        .arg(out)
        .args(extra);
    cmd.output().expect("run gpumemprof export")
}

fn exported(inputs: &[&Path], out: &Path) -> String {
    let o = export(inputs, out, &[]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "export: {err}");
    err
}

fn n(v: u64) -> Value {
    json!(v)
}

#[test]
fn duckdb_over_a_three_rank_export_gives_the_reports_numbers() {
    let dir = scratch("parquet_ranks");
    std::fs::create_dir(dir.join("job")).unwrap();
    let traces: Vec<PathBuf> = rank_job(&dir.join("job"));
    let out = dir.join("tables");
    // The directory of traces, as a fleet would give it.
    let said = exported(&[&dir.join("job")], &out);
    assert_eq!(
        said.trim(),
        format!(
            "gpumemprof: wrote {}: 3 traces, 11 allocation rows and {} frame rows in 3 row \
             groups",
            out.display(),
            sql_in(&out, "SELECT count(*) FROM 'DIR/frames.parquet'")[0][0]
        )
    );

    // summary: allocations, bytes allocated and live at exit, per rank.
    let totals = sql_in(&out, &totals_sql());
    let mut want = Vec::new();
    for (rank, trace) in traces.iter().enumerate() {
        let s = report("summary", trace, &[]);
        let t = &s["totals"];
        want.push(vec![
            n(rank as u64),
            t["allocations"].clone(),
            t["bytes_allocated"].clone(),
            t["live_bytes_at_end"].clone(),
        ]);
    }
    assert_eq!(totals, want);
    assert_eq!(
        totals,
        vec![
            vec![n(0), n(4), n(8 * MIB), n(4 * MIB)],
            vec![n(1), n(3), n(8 * MIB), n(4 * MIB)],
            vec![n(2), n(4), n(10 * MIB), n(6 * MIB)],
        ]
    );

    // peak: the running sum in the trace's own order.
    let peaks = sql_in(&out, &peak_sql());
    let want: Vec<Vec<Value>> = traces
        .iter()
        .enumerate()
        .map(|(rank, t)| {
            let s = report("summary", t, &[]);
            vec![n(rank as u64), s["totals"]["peak_bytes"].clone()]
        })
        .collect();
    assert_eq!(peaks, want);
    assert_eq!(peaks[2], vec![n(2), n(10 * MIB)]);

    // leaks DIR: the sites merged over the ranks, top first, at the program's lines.
    let sites = sql_in(&out, &leak_sites_sql());
    let leaks = report("leaks", &dir.join("job"), &[]);
    let from_leaks: Vec<Vec<Value>> = leaks["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let f = &s["frames"][0];
            vec![
                f["function"].clone(),
                f["file"].clone(),
                f["line"].clone(),
                s["bytes"].clone(),
                s["count"].clone(),
                s["ranks"].clone(),
            ]
        })
        .collect();
    let mut sorted = from_leaks.clone();
    sorted.sort_by_key(|r| (std::cmp::Reverse(r[3].as_u64()), r[2].as_u64()));
    assert_eq!(sites, sorted);
    let line = |marker| {
        n(u64::from(source_line_of(
            "tests/programs/rank_leak.c",
            marker,
        )))
    };
    // As reports show it: relative to the ranks' working directory (the tests crate).
    let file = json!("programs/rank_leak.c");
    assert_eq!(
        sites,
        vec![
            vec![
                json!("load_shard"),
                file.clone(),
                line("GPUMEMPROF-RANK-LEAK"),
                n(6 * MIB),
                n(3),
                json!([0, 1, 2])
            ],
            vec![
                json!("init_comm_buffer"),
                file.clone(),
                line("GPUMEMPROF-COMMON-LEAK"),
                n(6 * MIB),
                n(3),
                json!([0, 1, 2])
            ],
            vec![
                json!("keep_stats"),
                file,
                line("GPUMEMPROF-EVEN-LEAK"),
                n(2 * MIB),
                n(2),
                json!([0, 2])
            ],
        ]
    );

    // processes: one row per trace, with how it ended and its header's facts.
    let processes = sql_in(
        &out,
        "SELECT rank, pid, host IS NOT NULL, len(argv), ending, exit_status, signal, complete,
                truncated, dropped, allocation_rows, start_unix_ns > 0
         FROM 'DIR/processes.parquet' ORDER BY rank",
    );
    for (rank, (row, trace)) in processes.iter().zip(&traces).enumerate() {
        let s = report("summary", trace, &[]);
        let rows = if rank == 1 { 3 } else { 4 };
        assert_eq!(
            row,
            &vec![
                n(rank as u64),
                s["trace"]["pid"].clone(),
                json!(true),
                n(1),
                json!("exit"),
                n(0),
                Value::Null,
                json!(true),
                json!(false),
                n(0),
                n(rows),
                json!(true),
            ]
        );
    }
}

#[test]
fn a_failed_allocation_is_a_row_and_the_peak_is_below_the_bytes_allocated() {
    let dir = scratch("parquet_oom");
    let run = run_profiled(&dir, "oom_retry", &[], &[("GPUMEMPROF_NVML_MS", "0")]);
    assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr());
    let out = dir.join("tables");
    exported(&[&run.trace], &out);
    let s = report("summary", &run.trace, &[]);
    // The shim's header says rank 0 for a process started without a rank variable.
    assert_eq!(
        sql_in(&out, &totals_sql()),
        vec![vec![
            n(0),
            s["totals"]["allocations"].clone(),
            s["totals"]["bytes_allocated"].clone(),
            n(0),
        ]]
    );
    assert_eq!(s["totals"]["bytes_allocated"], n(1152 * MIB));
    assert_eq!(
        sql_in(&out, &peak_sql()),
        vec![vec![n(0), s["totals"]["peak_bytes"].clone()]]
    );
    assert_eq!(s["totals"]["peak_bytes"], n(896 * MIB));
    let failed = sql_in(
        &out,
        "SELECT api, bytes, result, address, free_ns, f.function
         FROM 'DIR/allocations.parquet' a
         JOIN 'DIR/frames.parquet' f ON f.path = a.path AND f.stack_id = a.stack_id
         WHERE failed AND f.file LIKE '%oom_retry.c' ORDER BY f.depth LIMIT 1",
    );
    assert_eq!(s["failed_allocations"], n(1));
    assert_eq!(
        failed,
        vec![vec![
            json!("cudaMalloc"),
            n(256 * MIB),
            n(2),
            Value::Null,
            Value::Null,
            json!("alloc_block"),
        ]]
    );
}

#[test]
fn what_the_parquet_export_refuses_and_leaves_behind() {
    let dir = scratch("parquet_refusals");
    let run = run_profiled(&dir, "oom_retry", &[], &[("GPUMEMPROF_NVML_MS", "0")]);
    let out = dir.join("tables");
    exported(&[&run.trace], &out);
    let stderr = |o: &Output| String::from_utf8_lossy(&o.stderr).trim().to_owned();

    // The files exist: refused without -f, replaced with it.
    let again = export(&[&run.trace], &out, &[]);
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(
        stderr(&again),
        format!(
            "gpumemprof: error: {}: already exists; pass -f to overwrite it, or choose another \
             directory",
            out.join("allocations.parquet").display()
        )
    );
    assert_eq!(export(&[&run.trace], &out, &["-f"]).status.code(), Some(0));

    // stdout is not a directory.
    let o = export(&[&run.trace], Path::new("-"), &[]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "gpumemprof: error: the Parquet export is three files, not written to stdout: give a \
         directory with -o"
    );

    // Other formats read one trace.
    let csv = dir.join("t.csv");
    let o = gpumemprof(&[
        "export",
        "--format",
        "csv",
        run.trace.to_str().unwrap(),
        run.trace.to_str().unwrap(),
        "-o",
        csv.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "gpumemprof: error: 2 traces given: this format is written from one trace (only \
         --format parquet reads several)"
    );

    // A file that is not a trace, after a good one: exit 5, and no half-written table.
    let bad = dir.join("notes.trace");
    std::fs::write(&bad, "not a trace").unwrap();
    let fresh = dir.join("fresh");
    let o = export(&[&run.trace, &bad], &fresh, &[]);
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(stderr(&o).starts_with(&format!("gpumemprof: error: {}", bad.display())));
    assert_eq!(
        std::fs::read_dir(&fresh).unwrap().count(),
        0,
        "no table left"
    );
}
