//! How a process ended, as every report tells it: the shim records an exit status or the
//! fatal signal in the trace (tests/programs/sudden_end.c: 4 allocations, 1 free, 8 MiB live
//! in 3 allocations, then the mode's ending), and `summary`, `leaks`, `analyze` and the
//! launcher say "ended by SIGSEGV (signal 11)" and "live when the process died" instead of
//! calling a crash a clean exit.

use gpumemprof_tests::profiled::*;
use serde_json::{json, Value};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};

/// `sudden_end <mode>` under the shim; returns the trace, the wait status and stderr.
fn ended_by(mode: &str) -> (PathBuf, std::process::ExitStatus, String) {
    let dir = scratch(&format!("ending/{mode}"));
    let run = run_profiled(&dir, "sudden_end", &[mode], &[]);
    (run.trace.clone(), run.output.status, run.stderr())
}

fn text(cmd: &str, trace: &Path) -> String {
    report_text(cmd, trace, &[])
}

fn heuristics(analyze: &Value) -> Vec<String> {
    analyze["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["heuristic"].as_str().unwrap().to_string())
        .collect()
}

/// A crash (SIGSEGV), `abort()` (SIGABRT) and a scheduler's SIGTERM: each report names the
/// signal, the 8 MiB still held are "live when the process died", and `analyze` finds no
/// cleanup problem in a process that had no chance to clean up.
#[test]
fn a_process_killed_by_a_signal_is_reported_as_ended_by_that_signal() {
    for (mode, sig, name) in [
        ("segv", 11, "SIGSEGV"),
        ("abrt", 6, "SIGABRT"),
        ("term", 15, "SIGTERM"),
    ] {
        let (trace, status, stderr) = ended_by(mode);
        assert_eq!(status.signal(), Some(sig), "{mode}: {stderr}");
        let s = report("summary", &trace, &[]);
        // The shim says it wrote the trace, from its signal handler, in one line.
        let wrote = format!(
            "gpumemprof: wrote {n} events to {t}; the process is ended by {name} (signal {sig}); \
             see what it held with: gpumemprof leaks {t}",
            n = s["trace"]["events"],
            t = trace.display()
        );
        assert!(stderr.lines().any(|l| l == wrote), "{mode}: {stderr}");
        assert_eq!(s["trace"]["complete"], true, "{mode}");
        assert_eq!(
            s["trace"]["ending"],
            json!({"how": "signal", "signal": sig, "name": name}),
            "{mode}"
        );
        assert_eq!(s["totals"]["live_bytes_at_end"], 8 * 1048576, "{mode}");
        let words = format!("process ended by {name} (signal {sig})");
        assert!(text("summary", &trace).contains(&words), "{mode}");

        let leaks = text("leaks", &trace);
        assert!(
            leaks.contains("8.0 MiB (8388608 B) in 3 allocations live when the process died"),
            "{mode}: {leaks}"
        );
        assert!(!leaks.contains("live at exit"), "{mode}: {leaks}");

        let a = report("analyze", &trace, &[]);
        assert_eq!(a["trace"]["ending"]["name"], name, "{mode}");
        assert!(
            !heuristics(&a).contains(&"insufficient_cleanup".to_string()),
            "{mode}: {:?}",
            heuristics(&a)
        );
    }
}

/// `_exit(3)` (sudden_end's `_exit` mode): an exit, with its status, and the memory still
/// held at it is what the process did not free: `insufficient_cleanup` stands.
#[test]
fn an_exit_is_reported_with_its_status_and_leaves_the_cleanup_finding() {
    let (trace, status, stderr) = ended_by("_exit");
    assert_eq!(status.code(), Some(3), "{stderr}");
    let s = report("summary", &trace, &[]);
    assert_eq!(s["trace"]["ending"], json!({"how": "exit", "status": 3}));
    assert!(text("summary", &trace).contains("process exited with status 3"));
    assert!(text("leaks", &trace).contains("in 3 allocations live at exit"));
    let a = report("analyze", &trace, &[]);
    assert!(heuristics(&a).contains(&"insufficient_cleanup".to_string()));
}

/// A signal that ends the process while the writer cannot complete the trace within the
/// handler's 3 s (a stalled disk, `GPUMEMPROF_TEST_STALL_WRITER_MS`): the shim says, in one
/// line, that the trace may lack its last events, where it would have said it wrote them;
/// the process still dies of the signal, and the file reads as the incomplete trace it is.
#[test]
fn a_signal_that_ends_the_process_before_the_trace_is_complete_says_so() {
    let dir = scratch("ending/stalled_writer");
    let stall = [("GPUMEMPROF_TEST_STALL_WRITER_MS", "6000")];
    let run = run_profiled(&dir, "sudden_end", &["term"], &stall);
    let stderr = run.stderr();
    assert_eq!(run.output.status.signal(), Some(15), "{stderr}");
    let unfinished = format!(
        "gpumemprof: the process is ended by SIGTERM (signal 15) before the trace was complete: \
         {} may lack its last events",
        run.trace.display()
    );
    assert!(stderr.lines().any(|l| l == unfinished), "{stderr}");
    assert!(!stderr.contains("gpumemprof: wrote "), "{stderr}");
    let s = report("summary", &run.trace, &[]);
    assert_eq!(s["trace"]["complete"], false, "{s}");
}
