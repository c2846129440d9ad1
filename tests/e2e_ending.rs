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
