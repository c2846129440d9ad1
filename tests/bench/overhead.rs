//! The benchmark (`cargo bench -p gpumemprof-tests`): every figure BENCHMARKS.md quotes,
//! measured in one run. Not a test: it asserts nothing, it prints numbers.
//!
//! - per-pair overhead of cudaMalloc+cudaFree at call depth 20 against the simulated
//!   runtime, shim minus no shim, for GPUMEMPROF_STACKS=off and native (median of runs);
//! - trace bytes per event, for that loop and for the training-loop example;
//! - writer throughput: the shim's writer code path fed synthetic events, events/s.

use gpumemprof_tests::profiled::{decode, scratch};
use gpumemprof_tests::{program_command, shim_path};
use std::path::Path;

const RUNS: usize = 7;
const PAIRS: &str = "200000";
const DEPTH: &str = "20";

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// One run of bench_loop; returns ns per pair.
fn loop_once(stacks: Option<&str>, trace: &Path) -> f64 {
    let _ = std::fs::remove_file(trace);
    let mut cmd = program_command("bench_loop");
    cmd.args(["cuda", DEPTH, PAIRS, "4096"]);
    if let Some(mode) = stacks {
        cmd.env("LD_PRELOAD", shim_path())
            .env("GPUMEMPROF_OUTPUT", trace)
            .env("GPUMEMPROF_QUIET", "1")
            .env("GPUMEMPROF_STACKS", mode);
    }
    let out = cmd.output().expect("run bench_loop");
    assert!(
        out.status.success(),
        "bench_loop failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("ns_per_pair="))
        .and_then(|v| v.trim().parse().ok())
        .expect("bench_loop prints ns_per_pair")
}

fn events_in(trace: &Path) -> u64 {
    let (_, records) = decode(trace);
    records
        .iter()
        .filter(|r| {
            matches!(
                r,
                gpumemprof_format::Record::Alloc(_) | gpumemprof_format::Record::Free(_)
            )
        })
        .count() as u64
}

fn main() {
    let dir = scratch("bench");
    let trace = dir.join("bench.trace");
    println!(
        "gpumemprof benchmark: bench_loop cuda depth={DEPTH} pairs={PAIRS}, median of {RUNS} runs"
    );

    // Interleave the three configurations so drift in machine load hits all alike.
    let (mut base, mut off, mut native) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RUNS {
        base.push(loop_once(None, &trace));
        off.push(loop_once(Some("off"), &trace));
        native.push(loop_once(Some("native"), &trace));
    }
    let (b, o, n) = (median(base), median(off), median(native));
    println!("  no shim                       {b:8.1} ns/pair");
    println!(
        "  shim, STACKS=off              {o:8.1} ns/pair   overhead {:8.1} ns/pair",
        o - b
    );
    println!(
        "  shim, STACKS=native           {n:8.1} ns/pair   overhead {:8.1} ns/pair",
        n - b
    );

    let bytes = std::fs::metadata(&trace).map(|m| m.len()).unwrap_or(0);
    let events = events_in(&trace);
    println!(
        "  trace, bench_loop native:     {bytes} bytes / {events} events = {:.2} bytes/event",
        bytes as f64 / events as f64
    );

    let train = dir.join("train.trace");
    let out = program_command("train_leak")
        .arg("2000")
        .env("LD_PRELOAD", shim_path())
        .env("GPUMEMPROF_OUTPUT", &train)
        .env("GPUMEMPROF_QUIET", "1")
        .output()
        .expect("run train_leak");
    assert!(out.status.success());
    let bytes = std::fs::metadata(&train).map(|m| m.len()).unwrap_or(0);
    let events = events_in(&train);
    println!(
        "  trace, train_leak 2000 steps: {bytes} bytes / {events} events = {:.2} bytes/event",
        bytes as f64 / events as f64
    );

    let n = 2_000_000;
    let wpath = dir.join("writer.trace");
    let (secs, wbytes) =
        gpumemprof::bench::writer_benchmark(n, wpath.to_str().unwrap()).expect("writer benchmark");
    println!(
        "  writer: {n} events in {secs:.3} s = {:.2} M events/s ({:.2} bytes/event)",
        n as f64 / secs / 1e6,
        wbytes as f64 / n as f64
    );
}
