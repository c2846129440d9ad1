//! The benchmark (`cargo bench -p gpumemprof-tests`): every figure BENCHMARKS.md quotes,
//! measured in one run. Not a test: it asserts nothing, it prints numbers.
//!
//! - per-pair overhead of cudaMalloc+cudaFree at call depth 20 against the simulated
//!   runtime, shim minus no shim, for GPUMEMPROF_STACKS=off and native (median of runs);
//! - trace bytes per event, for that loop and for the training-loop example;
//! - writer throughput: the shim's writer code path fed synthetic events, events/s;
//! - heaptrack (if installed) on the same loop written with malloc, at the same depth:
//!   its per-pair overhead and ours (native stacks) as a fraction of it;
//! - threads: CPU time per pair with 1 and with 8 allocating threads, shim minus no shim;
//! - Python: the same pairs through ctypes from 20 Python frames deep
//!   (tests/programs/py_bench.py), STACKS=native and STACKS=full: what Python frames cost;
//! - the analyzer: decode and replay rates of a synthetic trace on one core, and the CLI's
//!   time and peak memory on it (`gpumemprof_analyzer::bench`); then `gpumemprof summary`
//!   of a 1 GB trace (generated on the first run and kept in `target/bench/`).

use gpumemprof_tests::profiled::scratch;
use gpumemprof_tests::{program_command, script_command, shim_path, target_dir};
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

/// One run of py_bench.py (depth 20, 100000 pairs through ctypes); ns per pair.
fn python_once(stacks: Option<&str>, trace: &Path) -> f64 {
    let _ = std::fs::remove_file(trace);
    let mut cmd = script_command("py_bench.py");
    cmd.args([DEPTH, "100000"]);
    if let Some(mode) = stacks {
        cmd.env("LD_PRELOAD", shim_path())
            .env("GPUMEMPROF_OUTPUT", trace)
            .env("GPUMEMPROF_QUIET", "1")
            .env("GPUMEMPROF_STACKS", mode);
    }
    let out = cmd.output().expect("run py_bench.py");
    assert!(
        out.status.success(),
        "py_bench.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("ns_per_pair="))
        .and_then(|v| v.trim().parse().ok())
        .expect("py_bench.py prints ns_per_pair")
}

/// One run of bench_loop in malloc mode, plain or under heaptrack; ns per pair.
fn malloc_once(heaptrack: bool, dir: &Path) -> Option<f64> {
    let bin = gpumemprof_tests::program("bench_loop");
    let mut cmd = if heaptrack {
        let mut c = std::process::Command::new("heaptrack");
        c.arg(&bin);
        c
    } else {
        std::process::Command::new(&bin)
    };
    cmd.args(["malloc", DEPTH, PAIRS, "4096"]).current_dir(dir);
    let out = cmd.output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("ns_per_pair="))
        .and_then(|v| v.trim().parse().ok())
}

/// One run of the threads example; CPU ns per pair (all threads, the writer included).
fn threads_once(threads: &str, shim: bool, trace: &Path) -> f64 {
    let _ = std::fs::remove_file(trace);
    let mut cmd = program_command("threads");
    cmd.args([threads, "100000", "4096"])
        .env("THREADS_TIMING", "1");
    if shim {
        cmd.env("LD_PRELOAD", shim_path())
            .env("GPUMEMPROF_OUTPUT", trace)
            .env("GPUMEMPROF_QUIET", "1")
            .env("GPUMEMPROF_STACKS", "off");
    }
    let out = cmd.output().expect("run threads");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .find_map(|w| w.strip_prefix("cpu_ns_per_pair="))
        .and_then(|v| v.parse().ok())
        .expect("threads prints cpu_ns_per_pair")
}

/// The alloc and free events a trace holds, and the dropped count of its end record
/// (`None` without one). Streamed: holding the records would raise the resident memory
/// the analyzer stages report afterwards.
fn events_in(trace: &Path) -> (u64, Option<u64>) {
    use gpumemprof_format::Record;
    let mut reader = gpumemprof_format::open_path(trace).expect("a trace");
    let (mut events, mut dropped) = (0, None);
    while let Some(r) = reader.next_record().expect("a valid trace") {
        match r {
            Record::Alloc(_) | Record::Free(_) => events += 1,
            Record::End(s) => dropped = Some(s.dropped),
            _ => {}
        }
    }
    (events, dropped)
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

    // The floor under those figures: what one event stamp costs here (the shim stamps
    // every event once; a pair is two events).
    let tsc = gpumemprof::sys::clock::init(gpumemprof::sys::clock::Source::Auto);
    let reps = 10_000_000u32;
    let t = std::time::Instant::now();
    let mut acc = 0u64;
    for _ in 0..reps {
        acc = acc.wrapping_add(std::hint::black_box(gpumemprof::sys::clock::now()));
    }
    std::hint::black_box(acc);
    let stamp = t.elapsed().as_nanos() as f64 / reps as f64;
    println!(
        "  one event stamp ({}):         {stamp:8.1} ns   (two per pair: {:.1} ns/pair of the overhead)",
        if tsc { "lfence+rdtsc" } else { "clock_gettime" },
        2.0 * stamp
    );

    let bytes = std::fs::metadata(&trace).map(|m| m.len()).unwrap_or(0);
    let (events, _) = events_in(&trace);
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
    let (events, _) = events_in(&train);
    println!(
        "  trace, train_leak 2000 steps: {bytes} bytes / {events} events = {:.2} bytes/event",
        bytes as f64 / events as f64
    );

    // heaptrack on the malloc loop: the yardstick of the speed issue.
    let (mut plain, mut ht) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        plain.extend(malloc_once(false, &dir));
        ht.extend(malloc_once(true, &dir));
    }
    if plain.is_empty() || ht.is_empty() {
        println!("  heaptrack: not installed (apt-get install heaptrack); comparison skipped");
    } else {
        let (p, h) = (median(plain), median(ht));
        println!(
            "  heaptrack, malloc loop:       {h:8.1} ns/pair   overhead {:8.1} ns/pair (no profiler {p:.1})",
            h - p
        );
        println!(
            "  ours (native) / heaptrack overhead: {:.2} (target <= 0.25)",
            (n - b) / (h - p)
        );
    }

    // Threads: CPU time per pair with 1 and 8 threads, with and without the shim.
    let tt = dir.join("threads.trace");
    let mut rows = Vec::new();
    for threads in ["1", "8"] {
        let (mut without, mut with) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            without.push(threads_once(threads, false, &tt));
            with.push(threads_once(threads, true, &tt));
        }
        let (w0, w1) = (median(without), median(with));
        println!(
            "  threads={threads}, STACKS=off: {w1:8.1} CPU ns/pair   overhead {:8.1} (no shim {w0:.1})",
            w1 - w0
        );
        rows.push(w1 - w0);
    }
    println!(
        "  8 threads / 1 thread overhead per pair: {:.2} (target <= 2)",
        rows[1] / rows[0]
    );
    // The last run above was 8 threads under the shim: every pair recorded?
    let (events, dropped) = events_in(&tt);
    println!(
        "  threads=8 trace: {events} of {} alloc/free events recorded, {} dropped (target 0 lost)",
        8 * 100_000 * 2,
        dropped.map_or("unknown: no end record".to_string(), |d| d.to_string())
    );

    // Python frames: the same pairs from Python through ctypes.
    let pt = dir.join("python.trace");
    let (mut plain, mut native, mut full) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..5 {
        plain.push(python_once(None, &pt));
        native.push(python_once(Some("native"), &pt));
        full.push(python_once(Some("full"), &pt));
    }
    let (p, n, f) = (median(plain), median(native), median(full));
    println!(
        "  python ctypes loop, depth {DEPTH}: no shim {p:.1}, STACKS=native {n:.1}, STACKS=full {f:.1} ns/pair"
    );
    println!(
        "  python frames cost (full - native): {:.1} ns/pair; full overhead {:.1} ns/pair",
        f - n,
        f - p
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

    // Last, as it pins this process to one core: the analyzer's replay benchmark on its
    // default synthetic trace (also `cargo bench -p gpumemprof-analyzer --bench replay`).
    let cli = gpumemprof_tests::analyzer_path();
    let opts = gpumemprof_analyzer::bench::Options {
        size: gpumemprof_analyzer::bench::DEFAULT_SIZE,
        runs: 3,
        dir: target_dir()
            .parent()
            .unwrap_or(Path::new("target"))
            .join("bench"),
        cli: cli.exists().then_some(cli),
    };
    if let Err(e) = gpumemprof_analyzer::bench::run(&opts, &mut std::io::stdout()) {
        println!("  analyzer benchmark failed: {e}");
    }
    if let Some(cli) = &opts.cli {
        if let Err(e) = one_gigabyte(cli, &opts.dir) {
            println!("  1 GB check failed: {e}");
        }
    }
}

/// The 1 GB check: `gpumemprof summary` of a 1 GB synthetic trace (generated once, then
/// kept under `target/bench/`), its wall time and peak resident memory.
fn one_gigabyte(cli: &Path, dir: &Path) -> std::io::Result<()> {
    use gpumemprof_analyzer::bench;
    let (trace, info) = bench::trace(dir, 1_000_000_000)?;
    let trace = trace.to_string_lossy();
    let s = bench::run_child(cli, &["-q", "summary", "--json", &trace])?;
    println!(
        "  1 GB trace ({} events): gpumemprof summary {:.1} s wall, {:.1} s CPU, peak RSS {} MiB (target < 60 s, < 1 GB)",
        info.events,
        s.wall_secs,
        s.cpu_secs,
        s.max_rss_kib.map_or(0, |k| k / 1024)
    );
    Ok(())
}
