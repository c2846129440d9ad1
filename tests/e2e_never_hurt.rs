//! The profiler must never hurt the job: what went wrong under a fault injector and a
//! newcomer's setups, each run as the user ran it and held to what the job does without us.
//! Two copies of the shim in one process (a pip install's and a source build's), a file size
//! limit (`ulimit -f`) the trace reaches, a job that makes 100,000 short-lived threads, a trace
//! list that another user replaced with a symbolic link, and a bug in the shim itself.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use gpumemprof_tests::profiled::{report, scratch, trace_files};
use gpumemprof_tests::running::{run_within, Ended};
use gpumemprof_tests::torch_job::again_after_teardown_abort;
use gpumemprof_tests::torch_package::package;
use gpumemprof_tests::{program, program_command, shim_path};

/// A second copy of the shim, at another path (as a pip install's beside a source build's).
fn second_copy(dir: &Path) -> std::path::PathBuf {
    let copy = dir.join("copy").join("libgpumemprof.so");
    std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
    std::fs::copy(shim_path(), &copy).expect("copy the shim");
    copy
}

/// `LD_PRELOAD` naming both copies, the trace template in `dir`.
fn both_copies(cmd: &mut Command, dir: &Path, copy: &Path) {
    cmd.env(
        "LD_PRELOAD",
        format!("{} {}", shim_path().display(), copy.display()),
    )
    .env("GPUMEMPROF_OUTPUT", dir.join("job.%p.trace"))
    .env("GPUMEMPROF_NVML_MS", "0");
}

/// The warning the recording copy gives, once.
fn stands_down(stderr: &str, copy: &Path) {
    let line = format!(
        "another copy of the shim is loaded too ({}): it stands down",
        copy.display()
    );
    assert_eq!(stderr.matches(&line).count(), 1, "{stderr}");
}

#[test]
fn two_copies_of_the_shim_record_once_and_never_hang_pytorch() {
    let dir = scratch("never_hurt_two_copies_torch");
    let copy = second_copy(&dir);
    let run = || {
        let mut cmd = package().script("torch_train.py", &["2"]);
        both_copies(&mut cmd, &dir, &copy);
        run_within(cmd, Duration::from_secs(120))
    };
    // PyTorch's own abort in the interpreter's teardown is not ours: run again.
    let ended = again_after_teardown_abort(
        "torch_train.py",
        run,
        |e| (e.status, e.stderr.clone()),
        || {
            for t in trace_files(&dir) {
                let _ = std::fs::remove_file(t);
            }
        },
    );
    assert_eq!(ended.code(), Some(0), "{}", ended.stderr);
    stands_down(&ended.stderr, &copy);
    let traces = trace_files(&dir);
    assert_eq!(traces.len(), 1, "{traces:?}");
    // Every tensor, seen once: PyTorch's count at the program's end (its "end" line).
    let summary = report("summary", &traces[0], &[]);
    let end: serde_json::Value = (ended.stdout.lines())
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["event"] == "end")
        .expect("torch_train.py's end line");
    assert_eq!(
        summary["allocators"][0]["tensor_allocations"],
        end["stats"]["allocation.all.allocated"]
    );
}

#[test]
fn two_copies_of_the_shim_record_a_c_program_once() {
    let dir = scratch("never_hurt_two_copies_c");
    let copy = second_copy(&dir);
    let mut cmd = program_command("train_leak");
    cmd.arg("3");
    both_copies(&mut cmd, &dir, &copy);
    let ended = run_within(cmd, Duration::from_secs(60));
    assert_eq!(ended.code(), Some(0), "{}", ended.stderr);
    stands_down(&ended.stderr, &copy);
    let traces = trace_files(&dir);
    assert_eq!(traces.len(), 1, "{traces:?}");
    // train_leak 3: 3 steps leaking 1 MiB each, seen once.
    let leaks = report("leaks", &traces[0], &[]);
    assert_eq!(leaks["total_bytes"], 3 << 20);
    assert!(
        !ended.stderr.contains("no cudaGetDevice"),
        "{}",
        ended.stderr
    );
}

/// The trace reaches the file size limit: the job finishes as it would without us (no
/// SIGXFSZ), the exit line says what was written and why recording stopped, and the
/// trace says so too.
#[test]
fn a_file_size_limit_stops_recording_not_the_job() {
    let dir = scratch("never_hurt_ulimit_f");
    let trace = dir.join("loop.trace");
    // 200,000 pairs make a trace of over a megabyte; the limit is 64 KiB.
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "ulimit -f 64 && exec {} cuda 20 200000",
            program("bench_loop").display()
        ))
        .env("LD_PRELOAD", shim_path())
        .env("GPUMEMPROF_OUTPUT", &trace)
        .env("GPUMEMPROF_NVML_MS", "0");
    let ended = run_within(cmd, Duration::from_secs(120));
    assert_eq!(
        ended.code(),
        Some(0),
        "killed? {:?}\n{}",
        ended.status,
        ended.stderr
    );
    assert!(ended.stdout.contains("pairs=200000"), "{}", ended.stdout);
    assert!(std::fs::metadata(&trace).unwrap().len() <= 64 * 1024);
    let summary = report("summary", &trace, &[]);
    let t = &summary["trace"];
    assert_eq!(t["stopped"]["reason"], "file_size_limit");
    assert_eq!(t["complete"], true);
    // The exit line's count is the trace's, and the rest is said to be missing.
    let written = summary["totals"]["allocations"].as_u64().unwrap()
        + summary["totals"]["frees"].as_u64().unwrap();
    let all = 2 * (1000 + 200_000);
    let line = format!(
        "wrote {written} events to {}, then recording stopped at ",
        trace.display()
    );
    assert!(ended.stderr.contains(&line), "{line}\n{}", ended.stderr);
    assert!(
        ended.stderr.contains(&format!(
            "the file size limit (ulimit -f) was reached; {} later events are not in the trace",
            all - written
        )),
        "{}",
        ended.stderr
    );
    assert_eq!(t["events"].as_u64(), Some(written));
}

/// 100,000 threads, one after another, each allocating once: the shim's memory stays that
/// of the threads alive at once (before, every thread that ended between two drains of
/// the writer left a ring of 1 MiB behind: 25 MB of RSS here, 66 MB for 400,000).
#[test]
fn short_lived_threads_do_not_grow_the_shims_memory() {
    let hwm = |with_shim: bool, dir: &Path| {
        let mut cmd = program_command("thread_churn");
        cmd.arg("100000");
        if with_shim {
            cmd.env("LD_PRELOAD", shim_path())
                .env("GPUMEMPROF_OUTPUT", dir.join("churn.trace"))
                .env("GPUMEMPROF_NVML_MS", "0");
        }
        let ended = run_within(cmd, Duration::from_secs(300));
        assert_eq!(ended.code(), Some(0), "{}", ended.stderr);
        ended
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("vm_hwm_kib="))
            .and_then(|v| v.parse::<u64>().ok())
            .expect("vm_hwm_kib=")
    };
    let dir = scratch("never_hurt_thread_churn");
    let (plain, traced) = (hwm(false, &dir), hwm(true, &dir));
    let summary = report("summary", &dir.join("churn.trace"), &[]);
    assert_eq!(summary["totals"]["allocations"], 100_000);
    assert_eq!(summary["trace"]["dropped"], 0);
    // One 1 MiB ring per thread alive at once, the writer's block and zstd's context.
    assert!(
        traced < plain + 12 * 1024,
        "peak RSS {traced} KiB under the shim against {plain} KiB without it"
    );
}

/// `GPUMEMPROF_TRACE_LIST` names a symbolic link (another user's, planted in a shared
/// directory): the shim does not follow it, says so once, and the job and its trace go on.
#[test]
fn a_trace_list_that_is_a_symbolic_link_is_not_followed() {
    let dir = scratch("never_hurt_trace_list_link");
    let target = dir.join("not-yours.txt");
    std::fs::write(&target, "untouched\n").unwrap();
    let list = dir.join("traces.txt");
    std::os::unix::fs::symlink(&target, &list).unwrap();
    let trace = dir.join("leak.trace");
    let mut cmd = program_command("train_leak");
    cmd.arg("2")
        .env("LD_PRELOAD", shim_path())
        .env("GPUMEMPROF_OUTPUT", &trace)
        .env("GPUMEMPROF_TRACE_LIST", &list)
        .env("GPUMEMPROF_NVML_MS", "0");
    let ended = run_within(cmd, Duration::from_secs(60));
    assert_eq!(ended.code(), Some(0), "{}", ended.stderr);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched\n");
    assert_eq!(
        ended.stderr.matches("gpumemprof: warning:").count(),
        1,
        "{}",
        ended.stderr
    );
    assert!(
        ended.stderr.contains(&list.display().to_string()),
        "{}",
        ended.stderr
    );
    assert_eq!(report("leaks", &trace, &[])["total_bytes"], 2 << 20);
}

/// A Python job's own handlers under the shim's signal handlers: subprocess's vfork child
/// resets every handler before exec (in memory it shares with the job), the job installs a
/// SIGTERM handler after the shim's, and both signals still reach Python's handlers, as
/// without the shim.
#[test]
fn a_python_jobs_signal_handlers_stay_its_own() {
    let expected = "interrupted\nsigint=python\nsigterm=own\ncheckpoint\n";
    let plain = run_within(
        gpumemprof_tests::script_command("signals_kept.py"),
        Duration::from_secs(60),
    );
    assert_eq!(
        (plain.code(), plain.stdout.as_str()),
        (Some(0), expected),
        "{}",
        plain.stderr
    );
    let dir = scratch("never_hurt_python_signals");
    let trace = dir.join("signals.trace");
    let mut cmd = gpumemprof_tests::script_command("signals_kept.py");
    cmd.env("LD_PRELOAD", shim_path())
        .env("GPUMEMPROF_OUTPUT", &trace)
        .env("GPUMEMPROF_NVML_MS", "0");
    let ended = run_within(cmd, Duration::from_secs(60));
    assert_eq!(
        (ended.code(), ended.stdout.as_str()),
        (Some(0), expected),
        "{}",
        ended.stderr
    );
    let s = report("summary", &trace, &[]);
    assert_eq!(
        (&s["totals"]["allocations"], &s["totals"]["frees"]),
        (&1.into(), &1.into())
    );
}

/// `bench_loop cuda 20 PAIRS` with the shim asked to panic (`GPUMEMPROF_TEST_PANIC_AT`) and
/// `env`, run to its end as without us (it checks every call, exit 1 on a failed one, and
/// prints its count); how it ended and its trace.
fn loop_with_a_bug(
    test: &str,
    pairs: u32,
    panic_at: &str,
    env: &[(&str, &str)],
) -> (Ended, PathBuf) {
    let dir = scratch(test);
    let trace = dir.join("loop.trace");
    let mut cmd = program_command("bench_loop");
    cmd.args(["cuda", "20", &pairs.to_string()])
        .env("LD_PRELOAD", shim_path())
        .env("GPUMEMPROF_OUTPUT", &trace)
        .env("GPUMEMPROF_NVML_MS", "0")
        .env("GPUMEMPROF_TEST_PANIC_AT", panic_at)
        .envs(env.iter().copied());
    let ended = run_within(cmd, Duration::from_secs(60));
    assert_eq!(ended.code(), Some(0), "{}", ended.stderr);
    assert!(
        ended.stdout.contains(&format!("pairs={pairs}\n")),
        "{}",
        ended.stdout
    );
    (ended, trace)
}

/// The one warning line of a bug of the shim, with its place and message, and nothing of a
/// Rust panic's own output on stderr.
fn one_warning_of_a_bug(stderr: &str, panic_at: &str) {
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("gpumemprof: warning:"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].starts_with("gpumemprof: warning: internal error at shim/src/sys/faults.rs:"),
        "{}",
        warnings[0]
    );
    let ends = format!(
        ": GPUMEMPROF_TEST_PANIC_AT={panic_at} asked for this panic; recording stops here and \
         the program goes on (a bug in gpumemprof: please report it)"
    );
    assert!(warnings[0].ends_with(&ends), "{}", warnings[0]);
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{stderr}"
    );
}

/// A bug in the shim's bookkeeping (here the one `GPUMEMPROF_TEST_PANIC_AT` asks for, at
/// the fifth event): the job runs on as without us, one warning line says what happened
/// (no backtrace, nothing more for the events after it), every later call passes
/// through, and the trace holds the four events before it and says why it stops there.
#[test]
fn a_bug_in_the_shim_stops_recording_with_one_line_not_the_job() {
    let (ended, trace) = loop_with_a_bug("never_hurt_internal_error", 2000, "5", &[]);
    one_warning_of_a_bug(&ended.stderr, "5");
    // The exit line: the four events, and why the rest is not there.
    let line = format!(
        "gpumemprof: wrote 4 events to {}, then recording stopped at ",
        trace.display()
    );
    assert!(ended.stderr.contains(&line), "{line}\n{}", ended.stderr);
    assert!(
        ended.stderr.contains(
            ": the profiler met an internal error (a bug in gpumemprof: please report it); \
             what the program did after that is not in the trace"
        ),
        "{}",
        ended.stderr
    );
    let summary = report("summary", &trace, &[]);
    let t = &summary["trace"];
    assert_eq!(t["stopped"]["reason"], "internal_error");
    assert_eq!(t["complete"], true);
    assert_eq!(t["ending"]["how"], "exit");
    assert_eq!(t["events"], 4);
    assert_eq!(summary["totals"]["allocations"], 2);
    assert_eq!(summary["totals"]["frees"], 2);
    // The text report's warning names the reason in words.
    let text = gpumemprof_tests::profiled::report_text("summary", &trace, &[]);
    assert!(
        text.contains("the profiler met an internal error (a bug in gpumemprof: please report it)"),
        "{text}"
    );
}

/// A bug in the shim's writer thread (`GPUMEMPROF_TEST_PANIC_AT=writer`: it panics as it
/// drains its first events), with rings of 64 events, so the job's thread may find its
/// ring full: it must not wait for a writer that is gone. The job runs to its end as
/// without us, one warning line says what happened, and the exit handler completes the
/// trace with the events recorded before the panic and why recording stopped.
#[test]
fn a_bug_in_the_writer_never_leaves_the_job_waiting() {
    let rings = [("GPUMEMPROF_QUEUE_CAPACITY", "64")];
    let (ended, trace) = loop_with_a_bug("never_hurt_writer_error", 20000, "writer", &rings);
    one_warning_of_a_bug(&ended.stderr, "writer");
    let summary = report("summary", &trace, &[]);
    let t = &summary["trace"];
    assert_eq!(t["complete"], true);
    assert_eq!(t["stopped"]["reason"], "internal_error");
    assert_eq!(t["ending"]["how"], "exit");
    // How many events came before the panic depends on when the writer first woke; at
    // least those it drained, and pairs but for an allocation whose free came after.
    let written = t["events"].as_u64().unwrap();
    let (allocs, frees) = (
        summary["totals"]["allocations"].as_u64().unwrap(),
        summary["totals"]["frees"].as_u64().unwrap(),
    );
    assert!(written >= 1 && allocs + frees == written, "{summary}");
    assert!(allocs == frees || allocs == frees + 1, "{summary}");
    let line = format!(
        "gpumemprof: wrote {written} events to {}, then recording stopped at ",
        trace.display()
    );
    assert!(ended.stderr.contains(&line), "{line}\n{}", ended.stderr);
}
