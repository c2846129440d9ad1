//! Running a Python program of `tests/programs` on the torch package (see `torch_package`),
//! with or without the shim, and reading what it says: each line it prints that is a JSON
//! object (the programs print what PyTorch itself reports, `torch.cuda.memory_stats()` and
//! the time it was read), and PyTorch's own snapshot pickles as JSON.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::profiled::{preload, succeeded};
use crate::torch_package::package;

/// How many times a run that PyTorch aborted in the interpreter's teardown is made again
/// (three aborts in a row were seen once, with the suite's tests running side by side).
const TEARDOWN_RETRIES: usize = 4;

/// PyTorch #190489: autograd's device thread, releasing the last graph's Python objects
/// while the interpreter finalizes, is unwound through a `noexcept` frame and the process
/// aborts with "terminate called without an active exception", after the program's last
/// line. It happens without the shim too (1 run in 40 of `torch_train.py 4` on this
/// machine under load, with and without it): such a run is made again, not failed.
fn aborted_in_teardown(status: &std::process::ExitStatus, stderr: &str) -> bool {
    use std::os::unix::process::ExitStatusExt;
    const SIGABRT: i32 = 6;
    status.signal() == Some(SIGABRT)
        && stderr.contains("terminate called without an active exception")
}

/// `run()`, made again (after `clean()`) while PyTorch aborted it in the interpreter's
/// teardown, at most `TEARDOWN_RETRIES` times; `ended` gives a run's status and stderr.
pub fn again_after_teardown_abort<T>(
    script: &str,
    run: impl Fn() -> T,
    ended: impl Fn(&T) -> (std::process::ExitStatus, String),
    mut clean: impl FnMut(),
) -> T {
    let mut out = run();
    for _ in 0..TEARDOWN_RETRIES {
        let (status, stderr) = ended(&out);
        if !aborted_in_teardown(&status, &stderr) {
            break;
        }
        eprintln!("{script}: PyTorch #190489 aborted the interpreter's teardown: run again");
        clean();
        out = run();
    }
    out
}

/// One run of a program on the torch package.
pub struct Job {
    pub output: Output,
    /// The trace, when it ran under the shim.
    pub trace: Option<PathBuf>,
    /// Its JSON lines, in order.
    pub lines: Vec<Value>,
}

impl Job {
    /// `tests/programs/<script> args` with `env` added, under the shim when `trace` is
    /// given (no NVML sampling: `profiled::preload`); panics with its stderr unless it
    /// exited 0.
    pub fn run(script: &str, args: &[&str], env: &[(&str, &str)], trace: Option<&Path>) -> Job {
        Job::run_exiting(script, args, env, trace, 0)
    }

    /// `run`, for a program that must exit with `code` (a job that dies of an error); `env`
    /// is applied after the shim's variables, so it may override them.
    pub fn run_exiting(
        script: &str,
        args: &[&str],
        env: &[(&str, &str)],
        trace: Option<&Path>,
        code: i32,
    ) -> Job {
        let run = || {
            let mut cmd = package().script(script, args);
            if let Some(t) = trace {
                preload(&mut cmd, t);
            }
            cmd.envs(env.iter().copied());
            cmd.output().unwrap_or_else(|e| panic!("run {script}: {e}"))
        };
        let output = again_after_teardown_abort(
            script,
            run,
            |o| (o.status, String::from_utf8_lossy(&o.stderr).into_owned()),
            || {
                // The shim never overwrites a trace: the new run's must not go to `TRACE.1`.
                if let Some(t) = trace {
                    let _ = std::fs::remove_file(t);
                }
            },
        );
        assert_eq!(
            output.status.code(),
            Some(code),
            "{script}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let lines = String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{script}: {l}: {e}")))
            .collect();
        Job {
            output,
            trace: trace.map(Path::to_path_buf),
            lines,
        }
    }

    /// The lines whose `event` is `event`.
    pub fn events<'a>(&'a self, event: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.lines.iter().filter(move |l| l["event"] == event)
    }

    /// The one line whose `event` is `event`.
    pub fn event(&self, event: &str) -> &Value {
        let found: Vec<&Value> = self.lines.iter().filter(|l| l["event"] == event).collect();
        assert_eq!(found.len(), 1, "one {event} line in {:?}", self.lines);
        found[0]
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
}

/// A line's `stats.<key>` (a `torch.cuda.memory_stats()` figure).
pub fn stat(line: &Value, key: &str) -> u64 {
    line["stats"][key]
        .as_u64()
        .unwrap_or_else(|| panic!("no stats.{key} in {line}"))
}

/// Asserts that `ours` (a report's allocator figures) has the allocated and reserved peaks
/// of the job's line `theirs` (`torch.cuda.memory_stats()`'s `*.all.peak`).
pub fn assert_peaks_are_pytorchs(ours: &Value, theirs: &Value) {
    for (key, stat_key) in [
        ("allocated_peak_bytes", "allocated_bytes.all.peak"),
        ("reserved_peak_bytes", "reserved_bytes.all.peak"),
    ] {
        assert_eq!(ours[key].as_u64(), Some(stat(theirs, stat_key)), "{key}");
    }
}

/// A line's time (`time_ns`, CLOCK_MONOTONIC) in seconds since `trace` started, as the
/// analyzer's `--at`/`--to` take it.
pub fn trace_seconds(trace: &Path, line: &Value) -> String {
    let reader =
        gpumemprof_format::open_path(trace).unwrap_or_else(|e| panic!("{}: {e}", trace.display()));
    let start = reader.header()["start_monotonic_ns"]
        .as_u64()
        .expect("the header's start_monotonic_ns");
    let at = line["time_ns"].as_u64().expect("time_ns");
    let since = at
        .checked_sub(start)
        .expect("the line is after the trace started");
    format!("{}.{:09}", since / 1_000_000_000, since % 1_000_000_000)
}

/// A pickle of PyTorch's memory snapshot (`_dump_snapshot`, or our torch-snapshot export),
/// read with CPython's `pickle`, as JSON.
pub fn snapshot_json(pickle: &Path) -> Value {
    let out = succeeded(
        std::process::Command::new("python3")
            .arg("-c")
            .arg("import json, pickle, sys\nprint(json.dumps(pickle.load(open(sys.argv[1], 'rb')), default=str))")
            .arg(pickle),
        "python3 reading a snapshot pickle",
    );
    serde_json::from_slice(&out.stdout).expect("the snapshot as JSON")
}
