//! End to end: the trace survives the ways a profiled process really ends. An out-of-memory
//! followed at once by SIGKILL, a SIGKILL at any moment, fatal signals (with the program's own
//! handler or without), an uncaught C++ exception, `_exit`; frees made by exit handlers after the
//! profiler's; fork with busy threads; and the flight-recorder mode (`GPUMEMPROF_MODE=oom`) that
//! writes nothing until the first out-of-memory.
//!
//! Every run is bounded (`LIMIT`, two minutes for the fork storm): a hang is killed with its
//! whole process group and fails the test. Runs that check what a completion path wrote use
//! `GPUMEMPROF_FLUSH_MS=60000`, so the periodic flush cannot have written it instead. Each
//! program's header comment gives the numbers asserted here; the plain run (without the shim) is
//! checked too where it is cheap, so a failure points at the shim, not at the program.

use gpumemprof_format::{Alloc, AllocFailed, Free, MemKind, Record};
use gpumemprof_tests::profiled::*;
use gpumemprof_tests::running::{run_within, send_signal, Running};
use gpumemprof_tests::{program_command, shim_path, sim_dir, source_line_of};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const MIB: u64 = 1 << 20;
/// Longest one run may take: every program here ends in well under a second or two.
const LIMIT: Duration = Duration::from_secs(60);
/// Only the behaviour under test can have written the events: no periodic flush happens.
const NO_PERIODIC_FLUSH: (&str, &str) = ("GPUMEMPROF_FLUSH_MS", "60000");

// Signal numbers as Linux defines them (the same on x86-64 and aarch64).
const SIGINT: i32 = 2;
const SIGABRT: i32 = 6;
const SIGBUS: i32 = 7;
const SIGKILL: i32 = 9;
const SIGSEGV: i32 = 11;
const SIGTERM: i32 = 15;

// ---------------------------------------------------------------------------------------------
// Running programs (with a time limit: `Running` and `run_within`, from the support library)

fn plain(name: &str, args: &[&str]) -> Command {
    let mut cmd = program_command(name);
    cmd.args(args);
    cmd
}

/// `name args` with the shim preloaded, writing `trace` (a path or a `%p` template).
fn under_shim(name: &str, args: &[&str], trace: &Path, env: &[(&str, &str)]) -> Command {
    let mut cmd = plain(name, args);
    cmd.env("LD_PRELOAD", shim_path())
        .env("GPUMEMPROF_OUTPUT", trace);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

// ---------------------------------------------------------------------------------------------
// Reading traces

/// The events of a trace, by type, in file order.
#[derive(Default)]
struct Tally {
    allocs: Vec<Alloc>,
    frees: Vec<Free>,
    failed: Vec<AllocFailed>,
    end: bool,
}

/// Allocations readable from a trace's bytes (0 if the header is not written yet).
fn allocations_in(bytes: &[u8]) -> u64 {
    let Ok(mut r) = gpumemprof_format::TraceReader::open(bytes) else {
        return 0;
    };
    let mut n = 0;
    while let Ok(Some(rec)) = r.next_record() {
        if matches!(rec, Record::Alloc(_)) {
            n += 1;
        }
    }
    n
}

fn tally<'a>(records: impl IntoIterator<Item = &'a Record>) -> Tally {
    let mut t = Tally::default();
    for r in records {
        match r {
            Record::Alloc(a) => t.allocs.push(*a),
            Record::Free(f) => t.frees.push(*f),
            Record::AllocFailed(f) => t.failed.push(*f),
            Record::End(_) => t.end = true,
            _ => {}
        }
    }
    t
}

fn sizes(allocs: &[Alloc]) -> Vec<u64> {
    allocs.iter().map(|a| a.size).collect()
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// The pid in a trace named `<prefix>.<pid>.trace`.
fn pid_in_name(path: &Path) -> u32 {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    stem.rsplit('.')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in the name of {}", path.display()))
}

// ---------------------------------------------------------------------------------------------
// 1. An out-of-memory is on disk before the call returns

/// What tests/programs/oom_then_sigkill.c documents, decoded from the file its SIGKILL left.
fn check_oom_then_sigkill(trace: &Path, what: &str) {
    let (header, records, _cut) = decode_cut(trace);
    let malloc = api_id(&header, "cudaMalloc");
    let t = tally(&records);
    assert_eq!(
        sizes(&t.allocs),
        vec![8 * MIB, 8 * MIB, 8 * MIB, 8 * MIB, 16 * MIB],
        "{what}: every allocation before the failure"
    );
    for a in &t.allocs {
        assert_eq!(
            (a.api, a.kind, a.device),
            (malloc, MemKind::Device, 0),
            "{what}"
        );
    }
    assert_eq!(t.frees.len(), 1, "{what}: the one free");
    assert_eq!(
        (t.frees[0].address, t.frees[0].result),
        (t.allocs[4].address, 0),
        "{what}: the free is of the 16 MiB buffer"
    );
    assert_eq!(t.failed.len(), 1, "{what}: the failure itself");
    let f = &t.failed[0];
    assert_eq!(
        (f.api, f.kind, f.device, f.size, f.result),
        (malloc, MemKind::Device, 0, 40 * MIB, 2),
        "{what}"
    );
    assert_eq!(
        (f.mem_free, f.mem_total),
        (32 * MIB, 64 * MIB),
        "{what}: the device's free and total memory at the failure"
    );
    assert!(!t.end, "{what}: SIGKILL leaves no End record");
    let last_event = records
        .iter()
        .rposition(|r| {
            matches!(
                r,
                Record::Alloc(_) | Record::Free(_) | Record::AllocFailed(_)
            )
        })
        .expect("events");
    assert!(
        matches!(records[last_event], Record::AllocFailed(_)),
        "{what}: the failure is the last event"
    );
}

#[test]
fn an_oom_is_in_the_file_before_the_failing_call_returns_even_if_sigkill_follows() {
    let ended = run_within(plain("oom_then_sigkill", &[]), LIMIT);
    assert_eq!(ended.status.signal(), Some(SIGKILL), "{}", ended.stderr);
    let expected = "allocs=5\nfrees=1\nlive_bytes=33554432\nasking=41943040\n";
    assert_eq!(ended.stdout, expected);

    // Repeated: the writer may be anywhere in its cycle when the failure comes.
    for round in 0..10 {
        let dir = scratch(&format!("crash_oom_kill/{round}"));
        let trace = dir.join("oom_then_sigkill.trace");
        let ended = run_within(
            under_shim("oom_then_sigkill", &[], &trace, &[NO_PERIODIC_FLUSH]),
            LIMIT,
        );
        assert_eq!(
            ended.status.signal(),
            Some(SIGKILL),
            "round {round}: {}",
            ended.stderr
        );
        assert_eq!(ended.stdout, expected);
        check_oom_then_sigkill(&trace, &format!("round {round}"));
        if round == 0 {
            let s = report("summary", &trace, &[]);
            assert_eq!(s["trace"]["complete"], false);
            assert_eq!(s["failed_allocations"], 1);
            assert_eq!(s["unknown_frees"], 0);
            assert_eq!(s["totals"]["live_bytes_at_end"], 32 * MIB);
            let oom = report("oom", &trace, &[]);
            assert_eq!(oom["failure"]["size"], 40 * MIB);
            assert_eq!(oom["failure"]["mem_free_bytes"], 32 * MIB);
            assert_eq!(oom["failure"]["mem_total_bytes"], 64 * MIB);
            assert_eq!(oom["live"]["bytes"], 32 * MIB);
            assert_eq!(oom["live"]["count"], 4);
        }
    }
}

#[test]
fn the_flight_recorders_oom_trace_is_in_the_file_before_the_failing_call_returns() {
    // GPUMEMPROF_MODE=oom writes its whole trace at the failure; the default ring holds all
    // seven events, so the file is the same as in full mode.
    for round in 0..3 {
        let dir = scratch(&format!("crash_oom_kill_flight/{round}"));
        let trace = dir.join("oom_then_sigkill.trace");
        let ended = run_within(
            under_shim(
                "oom_then_sigkill",
                &[],
                &trace,
                &[NO_PERIODIC_FLUSH, ("GPUMEMPROF_MODE", "oom")],
            ),
            LIMIT,
        );
        assert_eq!(
            ended.status.signal(),
            Some(SIGKILL),
            "round {round}: {}",
            ended.stderr
        );
        check_oom_then_sigkill(&trace, &format!("oom mode, round {round}"));
    }
}

// ---------------------------------------------------------------------------------------------
// 2. SIGKILL at any moment

#[test]
fn a_sigkill_at_any_moment_leaves_a_readable_trace_with_every_event_already_flushed() {
    let mut p = Running::start(plain("alloc_until_killed", &[]));
    p.wait_for_line("round=1", LIMIT);
    p.kill();
    assert_eq!(p.finish(LIMIT).status.signal(), Some(SIGKILL));

    // (flush interval in ms, rounds seen before the kill): each round is 1000 allocations and
    // 999 frees. The test waits until the periodic flush has put those rounds in the file
    // (read while the program runs; no timing is assumed), then kills the program wherever it
    // and the writer are: every event the file held must still read, and the rest of the
    // file must be a readable prefix of the history.
    let cases: &[(u64, u64)] = &[(100, 5), (20, 1), (20, 12), (50, 3), (250, 2), (10, 30)];
    for (i, &(flush_ms, rounds)) in cases.iter().enumerate() {
        let what = format!("flush {flush_ms} ms, killed after round {rounds}");
        let dir = scratch(&format!("crash_any_moment/{i}"));
        let trace = dir.join("alloc_until_killed.trace");
        let flush = flush_ms.to_string();
        let mut run = Running::start(under_shim(
            "alloc_until_killed",
            &[],
            &trace,
            &[("GPUMEMPROF_FLUSH_MS", &flush)],
        ));
        run.wait_for_line(&format!("round={rounds}"), LIMIT);
        let deadline = std::time::Instant::now() + LIMIT;
        let seen = loop {
            // A snapshot of the file as it is now: decoding the live file would chase a
            // writer that appends faster than a debug-build reader reads.
            let bytes = std::fs::read(&trace).unwrap_or_default();
            let n = allocations_in(&bytes);
            if n >= rounds * 1000 {
                break n;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: the periodic flush never wrote the first {rounds} rounds ({n} allocations)"
            );
            std::thread::sleep(Duration::from_millis(flush_ms));
        };
        run.kill();
        let ended = run.finish(LIMIT);
        assert_eq!(
            ended.status.signal(),
            Some(SIGKILL),
            "{what}: {}",
            ended.stderr
        );

        let (_, records, cut) = decode_cut(&trace);
        let t = tally(&records);
        assert!(
            t.allocs.len() as u64 >= seen,
            "{what}: {} allocations in the trace, {seen} were there before the kill",
            t.allocs.len()
        );
        assert!(
            t.frees.len() as u64 >= rounds * 999,
            "{what}: {} frees in the trace",
            t.frees.len()
        );
        assert!(t.allocs.iter().all(|a| a.size == 4096), "{what}");
        assert!(!t.end, "{what}: SIGKILL leaves no End record");

        // What was written is a prefix of the history: it replays without an unknown free.
        let s = report("summary", &trace, &[]);
        assert_eq!(s["trace"]["complete"], false, "{what}");
        assert_eq!(s["trace"]["truncated"], cut, "{what}");
        assert_eq!(s["unknown_frees"], 0, "{what}");
        assert_eq!(s["totals"]["allocations"], t.allocs.len() as u64, "{what}");
        assert_eq!(s["totals"]["frees"], t.frees.len() as u64, "{what}");
        assert_eq!(
            s["totals"]["live_allocations_at_end"],
            (t.allocs.len() - t.frees.len()) as u64,
            "{what}"
        );
    }
}

// How much a SIGKILL loses is a matter of time, so it is measured, not asserted:
// `tests/bench/lost_window.py` (BENCHMARKS.md, "lost window"); the schedule that bounds it
// (blocks every half flush interval) is unit-tested in shim/src/writer/run.rs.

// ---------------------------------------------------------------------------------------------
// 3. Fatal signals, the program's own handler, an uncaught exception, _exit

const SUDDEN_END_FACTS: &str = "allocs=4\nfrees=1\nlive_bytes=8388608\n";

/// What tests/programs/sudden_end.c documents for every mode: the four allocations, the
/// free, and the End record the profiler wrote before the process ended.
fn check_completed(trace: &Path, what: &str) {
    let (_, records) = decode(trace);
    let t = tally(&records);
    assert!(
        t.end,
        "{what}: no End record: the trace was not completed before the process ended"
    );
    assert_eq!(
        sizes(&t.allocs),
        vec![MIB, 2 * MIB, 3 * MIB, 4 * MIB],
        "{what}"
    );
    assert_eq!(t.frees.len(), 1, "{what}");
    assert_eq!(
        t.frees[0].address, t.allocs[1].address,
        "{what}: the 2 MiB buffer"
    );
    let s = report("summary", trace, &[]);
    assert_eq!(s["trace"]["complete"], true, "{what}");
    assert_eq!(s["trace"]["dropped"], 0, "{what}");
    assert_eq!(s["totals"]["allocations"], 4, "{what}");
    assert_eq!(s["totals"]["frees"], 1, "{what}");
    assert_eq!(s["totals"]["live_bytes_at_end"], 8 * MIB, "{what}");
    assert_eq!(s["totals"]["live_allocations_at_end"], 3, "{what}");
    assert_eq!(s["unknown_frees"], 0, "{what}");
}

/// `sudden_end <mode>` dies of `signal` with and without the shim, and the shim completed
/// the trace first. Repeated: the writer may be anywhere in its cycle when the signal comes.
fn dies_of(mode: &str, signal: i32) {
    dies_of_printing(mode, signal, "");
}

/// `dies_of`, the program printing `more` after the facts.
fn dies_of_printing(mode: &str, signal: i32, more: &str) {
    let expected = format!("{SUDDEN_END_FACTS}ending={mode}\n{more}");
    let p = run_within(plain("sudden_end", &[mode]), LIMIT);
    assert_eq!(
        p.status.signal(),
        Some(signal),
        "plain {mode}: {}",
        p.stderr
    );
    assert_eq!(p.stdout, expected, "plain {mode}");

    for round in 0..5 {
        let what = format!("{mode}, round {round}");
        let dir = scratch(&format!("crash_signal/{mode}/{round}"));
        let trace = dir.join("sudden_end.trace");
        let run = run_within(
            under_shim("sudden_end", &[mode], &trace, &[NO_PERIODIC_FLUSH]),
            LIMIT,
        );
        assert_eq!(
            (run.status.signal(), run.status.code()),
            (Some(signal), None),
            "{what}: the process must still die of its signal; stderr:\n{}",
            run.stderr
        );
        assert_eq!(run.stdout, expected, "{what}");
        check_completed(&trace, &what);
    }
}

#[test]
fn sigterm_completes_the_trace_then_kills_the_process() {
    dies_of("term", SIGTERM);
}

#[test]
fn sigint_completes_the_trace_then_kills_the_process() {
    dies_of("int", SIGINT);
}

#[test]
fn sighup_completes_the_trace_then_kills_the_process() {
    dies_of("hup", 1);
}

#[test]
fn sigquit_completes_the_trace_then_kills_the_process() {
    dies_of("quit", 3);
}

#[test]
fn abort_completes_the_trace_then_the_process_dies_of_sigabrt() {
    dies_of("abrt", SIGABRT);
}

#[test]
fn a_null_write_completes_the_trace_then_the_process_dies_of_sigsegv() {
    dies_of("segv", SIGSEGV);
}

#[test]
fn a_write_past_a_mapped_files_end_completes_the_trace_then_the_process_dies_of_sigbus() {
    dies_of("bus", SIGBUS);
}

#[test]
fn a_stack_overflow_completes_the_trace_then_the_process_dies_of_sigsegv() {
    // No handler of the program's and no room on the thread's stack: the shim's handler
    // runs on the alternate stack it gave the thread.
    dies_of("overflow", SIGSEGV);
}

#[test]
fn sigpipes_default_action_completes_the_trace_then_kills_the_process() {
    dies_of("pipe", 13);
}

#[test]
fn sigusr1s_default_action_completes_the_trace_then_kills_the_process() {
    dies_of("usr1", 10);
}

/// A handler installed after the shim's, which resets the default action and raises the
/// signal again (a crash handler's last step): the program's handler runs, sees its own
/// action when it asks, and the trace is completed before the default action ends it.
#[test]
fn a_later_handler_that_raises_again_with_the_default_action_completes_the_trace() {
    dies_of_printing("reraise", SIGTERM, "query=own\nhandled\n");
}

#[test]
fn sigterm_and_sigint_sent_from_outside_complete_the_trace_then_kill_the_process() {
    for (name, signal) in [("TERM", SIGTERM), ("INT", SIGINT)] {
        let expected = format!("{SUDDEN_END_FACTS}ending=wait\nready\n");
        if signal == SIGTERM {
            let mut p = Running::start(plain("sudden_end", &["wait"]));
            p.wait_for_line("ready", LIMIT);
            send_signal(p.pid(), name);
            let ended = p.finish(LIMIT);
            assert_eq!(ended.status.signal(), Some(signal));
            assert_eq!(ended.stdout, expected);
        }
        let dir = scratch(&format!("crash_signal/outside_{name}"));
        let trace = dir.join("sudden_end.trace");
        let mut run = Running::start(under_shim(
            "sudden_end",
            &["wait"],
            &trace,
            &[NO_PERIODIC_FLUSH],
        ));
        run.wait_for_line("ready", LIMIT);
        send_signal(run.pid(), name);
        let ended = run.finish(LIMIT);
        assert_eq!(
            (ended.status.signal(), ended.status.code()),
            (Some(signal), None),
            "SIG{name} from outside: {}",
            ended.stderr
        );
        assert_eq!(ended.stdout, expected);
        check_completed(&trace, &format!("SIG{name} from outside"));
    }
}

#[test]
fn the_programs_own_sigterm_handler_runs_after_the_trace_is_completed() {
    let expected = format!("{SUDDEN_END_FACTS}ending=chain\nhandled\n");
    let p = run_within(plain("sudden_end", &["chain"]), LIMIT);
    assert_eq!(p.status.code(), Some(7), "{}", p.stderr);
    assert_eq!(p.stdout, expected);

    for round in 0..3 {
        let dir = scratch(&format!("crash_signal/chain/{round}"));
        let trace = dir.join("sudden_end.trace");
        let run = run_within(
            under_shim("sudden_end", &["chain"], &trace, &[NO_PERIODIC_FLUSH]),
            LIMIT,
        );
        assert_eq!(
            run.status.code(),
            Some(7),
            "round {round}: the program's handler decides the exit status: {:?}\n{}",
            run.status,
            run.stderr
        );
        assert_eq!(
            run.stdout, expected,
            "round {round}: the program's handler ran"
        );
        check_completed(&trace, &format!("own SIGTERM handler, round {round}"));
    }
}

#[test]
fn an_uncaught_cpp_exception_completes_the_trace_then_the_process_dies_of_sigabrt() {
    let bin = sim_dir()
        .parent()
        .expect("the build output folder")
        .join("bin/sudden_end_throw");
    if !bin.is_file() {
        eprintln!(
            "note: {} was not built (no C++ compiler when the tests were built): skipped",
            bin.display()
        );
        return;
    }
    let expected = format!("{SUDDEN_END_FACTS}ending=throw\n");
    let p = run_within(plain("sudden_end_throw", &[]), LIMIT);
    assert_eq!(p.status.signal(), Some(SIGABRT), "{}", p.stderr);
    assert_eq!(p.stdout, expected);
    assert!(p.stderr.contains("step failed"), "{}", p.stderr);

    let dir = scratch("crash_throw");
    let trace = dir.join("sudden_end_throw.trace");
    let run = run_within(
        under_shim("sudden_end_throw", &[], &trace, &[NO_PERIODIC_FLUSH]),
        LIMIT,
    );
    assert_eq!(
        (run.status.signal(), run.status.code()),
        (Some(SIGABRT), None),
        "{}",
        run.stderr
    );
    assert_eq!(run.stdout, expected);
    assert!(run.stderr.contains("step failed"), "{}", run.stderr);
    check_completed(&trace, "uncaught exception");
}

#[test]
fn underscore_exit_and_underscore_capital_exit_complete_the_trace_first() {
    for mode in ["_exit", "_Exit"] {
        let expected = format!("{SUDDEN_END_FACTS}ending={mode}\n");
        let p = run_within(plain("sudden_end", &[mode]), LIMIT);
        assert_eq!(p.status.code(), Some(3), "plain {mode}: {}", p.stderr);
        assert_eq!(p.stdout, expected);

        for round in 0..3 {
            let what = format!("{mode}, round {round}");
            let dir = scratch(&format!("crash_exit/{mode}/{round}"));
            let trace = dir.join("sudden_end.trace");
            let run = run_within(
                under_shim("sudden_end", &[mode], &trace, &[NO_PERIODIC_FLUSH]),
                LIMIT,
            );
            assert_eq!(run.status.code(), Some(3), "{what}: {}", run.stderr);
            assert_eq!(run.stdout, expected, "{what}");
            check_completed(&trace, &what);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 4. Frees after the final flush

/// Runs test program `name` without and then under the shim: both exit 0 and print
/// `expected`. Returns the trace.
fn same_output_under_the_shim(name: &str, expected: &str) -> PathBuf {
    let p = run_within(plain(name, &[]), LIMIT);
    assert_eq!(p.status.code(), Some(0), "{}", p.stderr);
    assert_eq!(p.stdout, expected);

    let trace = scratch(&format!("crash_{name}")).join(format!("{name}.trace"));
    let run = run_within(under_shim(name, &[], &trace, &[]), LIMIT);
    assert_eq!(run.status.code(), Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, expected);
    trace
}

#[test]
fn frees_made_by_an_exit_handler_that_runs_after_the_profilers_are_recorded() {
    let trace = same_output_under_the_shim("late_free", "allocs=2\nlate_frees=2\n");

    let leaks = report("leaks", &trace, &[]);
    assert_eq!(leaks["trace"]["complete"], true);
    assert_eq!(leaks["total_bytes"], 0, "both buffers were freed at exit");
    assert_eq!(leaks["total_count"], 0);
    let s = report("summary", &trace, &[]);
    assert_eq!(s["totals"]["allocations"], 2);
    assert_eq!(s["totals"]["frees"], 2);
    assert_eq!(s["unknown_frees"], 0);
    assert_eq!(s["failed_frees"], 0);
}

#[test]
fn frees_made_by_a_thread_exit_destructor_after_the_ring_is_retired_are_recorded() {
    let trace = same_output_under_the_shim("thread_exit_free", "threads=3 exit_frees=3\n");

    let (_, records) = decode(&trace);
    let t = tally(&records);
    assert!(t.end);
    let mut got = sizes(&t.allocs);
    got.sort_unstable();
    assert_eq!(
        got,
        vec![4096, 4096, 4096, 1 << 20, 2 << 20, 2 << 20, 2 << 20]
    );
    assert_eq!(t.frees.len(), 7);
    // Each 2 MiB block is freed by its own thread, whose ring was retired by then.
    let big: Vec<&Alloc> = t.allocs.iter().filter(|a| a.size == 2 << 20).collect();
    let tids: std::collections::BTreeSet<u32> = big.iter().map(|a| a.tid).collect();
    assert_eq!(tids.len(), 3, "three threads");
    for a in big {
        let f = t
            .frees
            .iter()
            .find(|f| f.address == a.address && f.time_ns > a.time_ns);
        assert_eq!(f.map(|f| f.tid), Some(a.tid), "{:#x}", a.address);
    }
    let s = report("summary", &trace, &[]);
    assert_eq!(s["totals"]["live_bytes_at_end"], 0);
    assert_eq!(s["unknown_frees"], 0);
    assert_eq!(s["trace"]["dropped"], 0);
}

// ---------------------------------------------------------------------------------------------
// 5. fork

/// The parent's trace of fork_stress: only its threads' 4096-byte pairs, complete.
fn check_fork_stress_parent(trace: &Path, what: &str) {
    let (_, records) = decode(trace);
    let t = tally(&records);
    assert!(t.end, "{what}: the parent's trace is complete");
    assert!(!t.allocs.is_empty(), "{what}: the threads' allocations");
    assert!(
        t.allocs.iter().all(|a| a.size == 4096),
        "{what}: a child's 1 MiB allocation is in the parent's trace"
    );
    assert_eq!(t.allocs.len(), t.frees.len(), "{what}: every pair");
    let s = report("summary", trace, &[]);
    assert_eq!(s["unknown_frees"], 0, "{what}");
    assert_eq!(s["trace"]["dropped"], 0, "{what}");
    assert_eq!(s["totals"]["live_bytes_at_end"], 0, "{what}");
}

/// Runs fork_stress with `forks` forks and `GPUMEMPROF_FORK=fork`, checks it ended well;
/// returns the trace folder and the parent's trace path.
fn run_fork_stress(test: &str, forks: u32, fork: &str) -> (PathBuf, PathBuf) {
    let dir = scratch(test);
    let template = dir.join("t.%p.trace");
    let n = forks.to_string();
    let mut run = Running::start(under_shim(
        "fork_stress",
        &[&n],
        &template,
        &[("GPUMEMPROF_FORK", fork)],
    ));
    let parent = run.pid();
    let ended = run.finish(Duration::from_secs(120));
    assert_eq!(ended.status.code(), Some(0), "{}", ended.stderr);
    assert_eq!(
        ended.stdout,
        format!("threads=4\nforks={forks}\nchildren_ok={forks}\n")
    );
    let parent_trace = dir.join(format!("t.{parent}.trace"));
    (dir, parent_trace)
}

#[test]
fn forking_1000_times_while_4_threads_allocate_never_hangs() {
    let (dir, parent_trace) = run_fork_stress("crash_fork_storm", 1000, "off");
    assert_eq!(
        trace_files(&dir),
        vec![parent_trace.clone()],
        "GPUMEMPROF_FORK=off: the children write nothing"
    );
    check_fork_stress_parent(&parent_trace, "fork off");
}

#[test]
fn forking_50_times_in_trace_mode_while_4_threads_allocate_gives_each_child_its_own_trace() {
    let (dir, parent_trace) = run_fork_stress("crash_fork_storm_trace", 50, "trace");
    let traces = trace_files(&dir);
    assert_eq!(
        traces.len(),
        51,
        "the parent's and 50 children's: {traces:?}"
    );
    assert!(traces.contains(&parent_trace));
    check_fork_stress_parent(&parent_trace, "fork trace");
    for child in traces.iter().filter(|p| **p != parent_trace) {
        let what = child.display().to_string();
        let (header, records) = decode(child);
        assert_eq!(header["pid"], pid_in_name(child), "{what}");
        let t = tally(&records);
        assert_eq!(
            sizes(&t.allocs),
            vec![MIB],
            "{what}: only the child's own allocation, none of the parent's threads'"
        );
        assert_eq!(t.frees.len(), 1, "{what}");
        assert_eq!(t.frees[0].address, t.allocs[0].address, "{what}");
        assert!(t.end, "{what}: _exit completes the child's trace");
    }
}

/// A parent and 200 workers forked at once, each recording: every line the shims print on
/// the shared stderr is whole (each is one `write(2)`), one "recording" and one "wrote" line
/// per process.
#[test]
fn workers_forked_at_once_print_whole_stderr_lines() {
    let dir = scratch("crash_fork_at_once");
    let template = dir.join("t.%p.trace");
    let mut cmd = under_shim("fork_at_once", &["200"], &template, &[]);
    cmd.env_remove("GPUMEMPROF_QUIET");
    let ended = Running::start(cmd).finish(Duration::from_secs(120));
    let failed: Vec<&str> = (ended.stderr.lines())
        .filter(|l| !l.starts_with("gpumemprof: "))
        .collect();
    assert_eq!(
        (ended.status.code(), ended.stdout.as_str(), failed),
        (Some(0), "children_ok=200\n", vec![]),
        "the program's own lines, and how each child that failed ended"
    );
    let (mut recording, mut wrote) = (0, 0);
    for line in ended.stderr.lines() {
        let path = |rest: &str| rest.starts_with(dir.to_str().unwrap()) && rest.ends_with(".trace");
        if let Some(rest) = line.strip_prefix("gpumemprof: recording GPU allocations of pid ") {
            let (pid, to) = rest.split_once(" to ").expect(line);
            assert!(
                pid.parse::<u32>().is_ok() && path(to),
                "a mixed line: {line:?}"
            );
            recording += 1;
        } else if let Some(rest) = line.strip_prefix("gpumemprof: wrote ") {
            let (events, rest) = rest.split_once(" events to ").expect(line);
            let (to, leaks) = rest
                .split_once("; see what leaked with: gpumemprof leaks ")
                .expect(line);
            assert!(
                events.parse::<u64>().is_ok() && path(to) && to == leaks,
                "a mixed line: {line:?}"
            );
            wrote += 1;
        } else {
            panic!(
                "a line no process printed whole: {line:?}\nstderr:\n{}",
                ended.stderr
            );
        }
    }
    assert_eq!((recording, wrote), (201, 201), "{}", ended.stderr);
    assert_eq!(trace_files(&dir).len(), 201);
}

/// Runs fork_children with `fork` (None: GPUMEMPROF_FORK unset); returns the parent's pid,
/// the children's pids (in order) and the trace folder.
fn run_fork_children(test: &str, fork: Option<&str>) -> (u32, Vec<u32>, PathBuf) {
    let dir = scratch(test);
    let template = dir.join("t.%p.trace");
    let env: Vec<(&str, &str)> = fork.map(|f| ("GPUMEMPROF_FORK", f)).into_iter().collect();
    let mut cmd = under_shim("fork_children", &[], &template, &env);
    if fork.is_none() {
        cmd.env_remove("GPUMEMPROF_FORK");
    }
    let mut run = Running::start(cmd);
    let parent = run.pid();
    let ended = run.finish(LIMIT);
    assert_eq!(ended.status.code(), Some(0), "{}", ended.stderr);
    let mut children = Vec::new();
    for i in 1..=4 {
        let key = format!("child{i}=");
        let line = ended
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix(&key))
            .unwrap_or_else(|| panic!("no {key} line in:\n{}", ended.stdout));
        children.push(line.parse().expect("a pid"));
    }
    let expected: String = children
        .iter()
        .enumerate()
        .map(|(i, pid)| format!("child{}={pid}\n", i + 1))
        .chain(["children_ok=4\n".to_string()])
        .collect();
    assert_eq!(ended.stdout, expected);

    let parent_trace = dir.join(format!("t.{parent}.trace"));
    let s = report("summary", &parent_trace, &[]);
    assert_eq!(s["trace"]["complete"], true);
    assert_eq!(s["totals"]["allocations"], 1, "only the parent's own");
    assert_eq!(s["totals"]["bytes_allocated"], 2 * MIB);
    assert_eq!(s["totals"]["frees"], 1);
    assert_eq!(s["totals"]["live_bytes_at_end"], 0);
    (parent, children, dir)
}

#[test]
fn forked_children_that_allocate_write_their_own_traces() {
    let p = run_plain("fork_children", &[], &[]);
    assert_eq!(p.status.code(), Some(0));

    // GPUMEMPROF_FORK=trace is the default: unset and explicit behave the same.
    for (test, fork) in [
        ("crash_fork_children/default", None),
        ("crash_fork_children/trace", Some("trace")),
    ] {
        let (parent, children, dir) = run_fork_children(test, fork);
        let mut expected: Vec<PathBuf> = std::iter::once(parent)
            .chain(children[..3].iter().copied())
            .map(|pid| dir.join(format!("t.{pid}.trace")))
            .collect();
        expected.sort();
        assert_eq!(
            trace_files(&dir),
            expected,
            "{test}: the parent's and children 1-3's; child 4 made no CUDA call"
        );
        for &pid in &children[..3] {
            let trace = dir.join(format!("t.{pid}.trace"));
            let what = format!("{test}: child {pid}");
            assert_eq!(mode_of(&trace), 0o600, "{what}");
            let (header, records) = decode(&trace);
            assert_eq!(header["pid"], pid, "{what}");
            let t = tally(&records);
            assert_eq!(
                sizes(&t.allocs),
                vec![MIB],
                "{what}: exactly its own allocation"
            );
            assert!(t.frees.is_empty(), "{what}");
            assert!(t.end, "{what}: a normal exit completes the child's trace");
            let leaks = report("leaks", &trace, &[]);
            assert_eq!(leaks["total_bytes"], MIB, "{what}");
            assert_eq!(leaks["total_count"], 1, "{what}");
        }
    }
}

#[test]
fn with_fork_off_forked_children_record_nothing() {
    let (parent, _, dir) = run_fork_children("crash_fork_children/off", Some("off"));
    assert_eq!(
        trace_files(&dir),
        vec![dir.join(format!("t.{parent}.trace"))],
        "only the parent's trace"
    );
}

// ---------------------------------------------------------------------------------------------
// 6. Flight-recorder mode

#[test]
fn the_flight_recorder_creates_no_file_and_prints_nothing_without_an_oom() {
    let expected = "allocs=100\nfrees=100\ninvalid_rc=1\n";
    let p = run_within(plain("flight_recorder", &["ok"]), LIMIT);
    assert_eq!(p.status.code(), Some(0), "{}", p.stderr);
    assert_eq!(p.stdout, expected);

    let dir = scratch("crash_flight_ok");
    let trace = dir.join("flight_recorder.trace");
    let run = run_within(
        under_shim(
            "flight_recorder",
            &["ok"],
            &trace,
            &[("GPUMEMPROF_MODE", "oom")],
        ),
        LIMIT,
    );
    assert_eq!(run.status.code(), Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, expected);
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(
        left.is_empty(),
        "no file without an out-of-memory: {left:?}"
    );
    assert!(
        shim_lines(&run.stderr).is_empty(),
        "nothing printed without a file:\n{}",
        run.stderr
    );
}

/// flight_recorder oom under GPUMEMPROF_MODE=oom (plus `env`). `ring`: the ring's size when
/// it is smaller than the program's 161 events before the failure, None when it holds them all.
fn check_flight_recorder(test: &str, env: &[(&str, &str)], ring: Option<usize>) {
    const SRC: &str = "tests/programs/flight_recorder.c";
    let expected = "allocs=100\nfrees=60\nlive_bytes=41943040\noom_rc=2\nafter_rc=0\n";
    let dir = scratch(test);
    let trace = dir.join("flight_recorder.trace");
    let mut env = env.to_vec();
    env.push(("GPUMEMPROF_MODE", "oom"));
    let run = run_within(under_shim("flight_recorder", &["oom"], &trace, &env), LIMIT);
    assert_eq!(run.status.code(), Some(0), "{test}: {}", run.stderr);
    assert_eq!(run.stdout, expected, "{test}");
    assert_eq!(mode_of(&trace), 0o600, "{test}");
    let path = trace.display().to_string();
    assert!(
        shim_lines(&run.stderr).iter().any(|l| l.contains(&path)),
        "{test}: the start line names the file once it exists:\n{}",
        run.stderr
    );
    // What was live at the failure, whatever the ring held of it: 40 buffers.
    assert!(
        run.stderr.contains(&format!(
            "to {path} (40 allocations live at the failure); recording goes on"
        )),
        "{test}:\n{}",
        run.stderr
    );

    let (_, records) = decode(&trace);
    let at = records
        .iter()
        .position(|r| matches!(r, Record::AllocFailed(_)))
        .unwrap_or_else(|| panic!("{test}: no failure in the trace"));
    let (before, after) = (tally(&records[..at]), tally(&records[at + 1..]));
    let Record::AllocFailed(f) = &records[at] else {
        unreachable!()
    };
    assert_eq!(
        (f.size, f.result, f.device, f.mem_free, f.mem_total),
        (96 * MIB, 2, 0, 88 * MIB, 128 * MIB),
        "{test}: the failure"
    );
    assert!(before.allocs.iter().all(|a| a.size == MIB), "{test}");
    assert_eq!(
        before.allocs.len() as i64 - before.frees.len() as i64,
        40,
        "{test}: the events before the failure replay to the 40 live buffers"
    );
    match ring {
        None => assert_eq!(
            (before.allocs.len(), before.frees.len()),
            (100, 60),
            "{test}: the ring held the whole history"
        ),
        Some(n) => {
            assert!(
                before.frees.len() <= n,
                "{test}: {} frees, from a ring of {n}",
                before.frees.len()
            );
            assert!(
                before.allocs.len() <= 40 + n,
                "{test}: {} allocations: the live 40 and at most the ring's {n}",
                before.allocs.len()
            );
        }
    }
    assert_eq!(
        sizes(&after.allocs),
        vec![4 * MIB],
        "{test}: recorded normally after the failure"
    );
    assert_eq!(after.frees.len(), 1, "{test}");
    assert_eq!(after.frees[0].address, after.allocs[0].address, "{test}");
    assert!(after.failed.is_empty() && after.end, "{test}");

    let s = report("summary", &trace, &[]);
    assert_eq!(s["trace"]["complete"], true, "{test}");
    assert_eq!(s["failed_allocations"], 1, "{test}");
    assert_eq!(s["unknown_frees"], 0, "{test}");
    assert_eq!(s["totals"]["live_bytes_at_end"], 40 * MIB, "{test}");
    assert_eq!(s["totals"]["live_allocations_at_end"], 40, "{test}");

    let line = u64::from(source_line_of(SRC, "GPUMEMPROF-FLIGHT-ALLOC"));
    let oom = report("oom", &trace, &[]);
    assert_eq!(oom["failure"]["size"], 96 * MIB, "{test}");
    assert_eq!(oom["failure"]["mem_free_bytes"], 88 * MIB, "{test}");
    assert_eq!(oom["failure"]["mem_total_bytes"], 128 * MIB, "{test}");
    assert_eq!(
        oom["live"]["bytes"],
        40 * MIB,
        "{test}: live just before the failure"
    );
    assert_eq!(oom["live"]["count"], 40, "{test}");
    let sites = oom["live"]["sites"].as_array().expect("live sites");
    assert_eq!(sites.len(), 1, "{test}: {sites:#?}");
    assert_eq!(
        (&sites[0]["bytes"], &sites[0]["count"]),
        (&Value::from(40 * MIB), &Value::from(40)),
        "{test}"
    );
    let top = &sites[0]["frames"][0];
    assert_eq!(
        (&top["function"], &top["line"]),
        (&Value::from("alloc_layers"), &Value::from(line)),
        "{test}: the live set keeps its stacks: {top}"
    );

    let leaks = report("leaks", &trace, &[]);
    assert_eq!(leaks["total_bytes"], 40 * MIB, "{test}");
    assert_eq!(leaks["total_count"], 40, "{test}");
}

#[test]
fn the_flight_recorder_at_the_first_oom_writes_the_live_set_and_the_last_16_events() {
    check_flight_recorder(
        "crash_flight_ring16",
        &[("GPUMEMPROF_OOM_RING", "16")],
        Some(16),
    );
}

#[test]
fn the_flight_recorder_with_its_default_ring_writes_the_whole_history_at_the_first_oom() {
    let p = run_within(plain("flight_recorder", &["oom"]), LIMIT);
    assert_eq!(p.status.code(), Some(0), "{}", p.stderr);
    assert_eq!(
        p.stdout,
        "allocs=100\nfrees=60\nlive_bytes=41943040\noom_rc=2\nafter_rc=0\n"
    );
    check_flight_recorder("crash_flight_default", &[], None);
}

// ---------------------------------------------------------------------------------------------
// 7. Files (mode 0600 and a symlink at `<path>.1` are checked in e2e_robustness.rs)

#[test]
fn a_dangling_symlink_at_the_trace_path_is_not_followed() {
    let dir = scratch("crash_dangling_symlink");
    let trace = dir.join("late_free.trace");
    let target = dir.join("not-here");
    std::os::unix::fs::symlink(&target, &trace).unwrap();
    let run = run_within(under_shim("late_free", &[], &trace, &[]), LIMIT);
    assert_eq!(run.status.code(), Some(0), "{}", run.stderr);
    assert!(!target.exists(), "the shim created the symlink's target");
    assert!(std::fs::symlink_metadata(&trace)
        .unwrap()
        .file_type()
        .is_symlink());
    let used = dir.join("late_free.trace.1");
    assert_eq!(mode_of(&used), 0o600);
    assert_eq!(report("leaks", &used, &[])["total_count"], 0);
}
