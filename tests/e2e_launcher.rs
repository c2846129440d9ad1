//! End to end, the launcher: `gpumemprof run [OPTIONS] -- python3 tests/programs/launch_child.py
//! MODE` as a user starts a Python job under the profiler. The program allocates 4 MiB through
//! ctypes on the simulated runtime, then exits with a status, is killed, waits for Ctrl-C, starts
//! a worker process, or prints its environment (its header comment lists the modes). Checked: the
//! launcher exits with the program's status (128 + N for signal N), honours `-o` and prints the
//! path the shim really used, passes a SIGINT sent to the launcher alone on to the program,
//! while Ctrl-C typed at a terminal reaches the program once (`launch_tty.py`), refuses to replace
//! a trace without `-f` (or to write into a missing folder), sets exactly the documented variables
//! for each framework mode (merged with the user's own) and gives the program the signal mask it
//! would have had, records the modes in the trace header where `summary` shows the allocation
//! level, keeps the user's `LD_PRELOAD`, and lists every trace of a process tree at the end (or
//! says there is none).
//!
//! Every run is bounded (`LIMIT`): a hang kills the launcher's process group and fails the test.

#[path = "../analyzer/tests/checks/schema.rs"]
mod schema;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use gpumemprof_format::Record;
use gpumemprof_tests::profiled::{analyzer, decode, report, scratch, trace_files};
use gpumemprof_tests::running::{send_signal, Ended, Running};
use gpumemprof_tests::{repo_root, shared_library, shim_path, sim_dir, SIM_ENV};
use serde_json::{json, Value};

const MIB: u64 = 1 << 20;
/// Longest one run may take: each ends in about a second.
const LIMIT: Duration = Duration::from_secs(60);

/// Variables of the shim, the launcher and the frameworks that the caller's shell might set:
/// cleared, so they cannot change what a test sees.
const CLEARED: &[&str] = &[
    "LD_PRELOAD",
    "NVTX_INJECTION64_PATH",
    "GPUMEMPROF_OUTPUT",
    "GPUMEMPROF_QUIET",
    "GPUMEMPROF_TRACE_LIST",
    "GPUMEMPROF_FRAMEWORK_MODES",
    "GPUMEMPROF_MODE",
    "GPUMEMPROF_DISABLE",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "PYTORCH_NO_CUDA_MEMORY_CACHING",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "TF_FORCE_GPU_ALLOW_GROWTH",
    "TF_GPU_ALLOCATOR",
    "RANK",
    "LOCAL_RANK",
    "SLURM_PROCID",
];

fn script() -> PathBuf {
    repo_root().join("tests/programs/launch_child.py")
}

fn clean(cmd: &mut Command) {
    for var in SIM_ENV.iter().chain(CLEARED) {
        cmd.env_remove(var);
    }
    cmd.env("LD_LIBRARY_PATH", sim_dir());
}

/// `gpumemprof run OPTS -- python3 launch_child.py MODE...` in a clean environment.
fn launcher(opts: &[&str], mode: &[&str]) -> Command {
    let mut cmd = analyzer();
    cmd.arg("run")
        .args(opts)
        .arg("--")
        .arg("python3")
        .arg(script())
        .args(mode);
    clean(&mut cmd);
    cmd
}

/// The same program without the launcher.
fn direct(mode: &[&str]) -> Command {
    let mut cmd = Command::new("python3");
    cmd.arg(script()).args(mode);
    clean(&mut cmd);
    cmd
}

fn text(path: &Path) -> &str {
    path.to_str().expect("scratch paths are UTF-8")
}

// ---------------------------------------------------------------------------------------------
// Running with a time limit (`Running`, from the support library)

/// Runs the launcher to its end within `LIMIT`, its stdin a pipe held open until then (the
/// program's `wait` mode blocks reading it).
fn run(cmd: Command) -> Ended {
    Running::start_holding_stdin(cmd).finish(LIMIT)
}

/// The 4 MiB `cudaMalloc`s a trace recorded.
fn allocations_of_4mib(trace: &Path) -> usize {
    let (_, records) = decode(trace);
    records
        .iter()
        .filter(|r| matches!(r, Record::Alloc(a) if a.size == 4 * MIB))
        .count()
}

/// The launcher's closing lines for one trace.
fn one_trace(trace: &str) -> [String; 2] {
    [
        format!("gpumemprof: 1 trace written: {trace}"),
        format!("gpumemprof: next: gpumemprof summary {trace}"),
    ]
}

// ---------------------------------------------------------------------------------------------
// Exit status, output path, signals

#[test]
fn the_programs_exit_status_is_the_launchers() {
    let dir = scratch("launcher_exit");
    let trace = dir.join("t.trace");
    let e = run(launcher(&["-o", text(&trace)], &["exit", "7"]));
    assert_eq!(e.code(), Some(7), "{}", e.stderr);
    assert_eq!(e.stdout, "allocated\n");
    let mut want = vec![format!("gpumemprof: writing {}", text(&trace))];
    want.extend(one_trace(text(&trace)));
    assert_eq!(e.stderr.lines().collect::<Vec<_>>(), want);
    assert_eq!(allocations_of_4mib(&trace), 1);

    // Killed by a signal: 128 + 9, like a shell; the trace, created at the first allocation,
    // is still listed.
    let trace = dir.join("k.trace");
    let e = run(launcher(&["-o", text(&trace)], &["sigkill"]));
    assert_eq!(e.code(), Some(137), "{}", e.stderr);
    assert_eq!(e.stdout, "allocated\n");
    let mut want = vec![
        format!("gpumemprof: writing {}", text(&trace)),
        "gpumemprof: python3 was ended by SIGKILL (signal 9)".to_string(),
    ];
    want.extend(one_trace(text(&trace)));
    assert_eq!(e.stderr.lines().collect::<Vec<_>>(), want);
    assert!(trace.is_file());
}

/// A job that died of CUDA out-of-memory (`oom_final`): the next command is `oom`, what a
/// user asks first then; the shim's own line says so too.
#[test]
fn after_an_out_of_memory_the_next_command_is_oom() {
    let dir = scratch("launcher_oom");
    let trace = dir.join("oom.trace");
    let mut cmd = analyzer();
    cmd.args(["run", "-o", text(&trace), "--"])
        .arg(gpumemprof_tests::program("oom_final"));
    clean(&mut cmd);
    let e = run(cmd);
    assert_eq!(e.code(), Some(1), "{}", e.stderr);
    let last = e.stderr.lines().last().unwrap_or("");
    assert_eq!(
        last,
        format!(
            "gpumemprof: next: gpumemprof oom {}   (it ran out of GPU memory: what asked, what \
             held the device, from where)",
            text(&trace)
        )
    );
}

#[test]
fn a_command_that_cannot_be_found_exits_127() {
    let mut cmd = analyzer();
    cmd.args(["run", "--", "/no/such/program", "x"]);
    clean(&mut cmd);
    let e = run(cmd);
    assert_eq!(e.code(), Some(127));
    assert_eq!(
        e.stderr,
        "gpumemprof: error: cannot run /no/such/program: No such file or directory (os error 2)\n"
    );
}

#[test]
fn the_output_template_is_honoured_and_the_printed_path_is_the_shims() {
    let dir = scratch("launcher_template");
    let template = dir.join("run.%h.%p.trace");
    let e = run(launcher(&["-o", text(&template)], &["exit", "0"]));
    assert_eq!(e.code(), Some(0), "{}", e.stderr);
    let traces = trace_files(&dir);
    assert_eq!(traces.len(), 1, "{traces:?}");
    let (header, _) = decode(&traces[0]);
    // The file the shim created carries the program's own pid and host, as the launcher
    // printed them before the program had allocated anything.
    let expected = dir.join(format!(
        "run.{}.{}.trace",
        header["host"].as_str().expect("host"),
        header["pid"]
    ));
    assert_eq!(traces[0], expected);
    let mut want = vec![format!("gpumemprof: writing {}", text(&expected))];
    want.extend(one_trace(text(&expected)));
    assert_eq!(e.stderr.lines().collect::<Vec<_>>(), want);
    assert_eq!(header["config"]["output"], text(&template));
}

#[test]
fn sigint_sent_to_the_launcher_alone_reaches_the_program() {
    let dir = scratch("launcher_sigint");
    let trace = dir.join("t.trace");
    let mut r = Running::start_holding_stdin(launcher(&["-o", text(&trace)], &["wait"]));
    // The program allocated and now blocks reading stdin, which stays open.
    r.wait_for_line("ready", LIMIT);
    send_signal(r.pid(), "INT");
    // Only the launcher was signalled: the program sees SIGINT only if it was passed on.
    r.wait_for_line("saw SIGINT", LIMIT);
    let e = r.finish(LIMIT);
    assert_eq!(e.stdout, "ready\nsaw SIGINT\n");
    // Python dies of the SIGINT it did not handle: 128 + 2.
    assert_eq!(e.code(), Some(130), "{}", e.stderr);
    assert!(
        e.stderr
            .contains("gpumemprof: python3 was ended by SIGINT (signal 2)\n"),
        "{}",
        e.stderr
    );
    assert!(
        e.stderr.contains(&one_trace(text(&trace))[0]),
        "{}",
        e.stderr
    );
    assert_eq!(allocations_of_4mib(&trace), 1);
}

#[test]
fn an_existing_trace_is_replaced_only_with_f() {
    let dir = scratch("launcher_force");
    let trace = dir.join("t.trace");
    std::fs::write(&trace, "keep").expect("write the old file");
    let e = run(launcher(&["-o", text(&trace)], &["exit", "0"]));
    assert_eq!(e.code(), Some(1));
    assert_eq!(
        e.stderr,
        format!(
            "gpumemprof: error: {}: already exists; pass -f to overwrite it, or choose another path with -o\n",
            text(&trace)
        )
    );
    // The program never ran, and the file is untouched.
    assert_eq!(e.stdout, "");
    assert_eq!(std::fs::read_to_string(&trace).expect("read"), "keep");

    let e = run(launcher(&["-f", "-o", text(&trace)], &["exit", "0"]));
    assert_eq!(e.code(), Some(0), "{}", e.stderr);
    assert_eq!(allocations_of_4mib(&trace), 1);
    assert_eq!(trace_files(&dir), [trace]);

    // A folder that does not exist is refused before the program starts, too.
    let missing = dir.join("no-such-folder");
    let e = run(launcher(
        &["-o", text(&missing.join("job.%p.trace"))],
        &["exit", "0"],
    ));
    assert_eq!(e.code(), Some(1));
    assert_eq!(
        e.stderr,
        format!(
            "gpumemprof: error: {}: no such folder for the traces; create it, or choose another path with -o\n",
            text(&missing)
        )
    );
    assert_eq!(e.stdout, "");
}

#[test]
fn without_a_shim_beside_it_the_launcher_says_where_it_looked() {
    let dir = scratch("launcher_no_shim");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("create bin/");
    let copy = bin.join("gpumemprof");
    std::fs::copy(gpumemprof_tests::analyzer_path(), &copy).expect("copy the analyzer");
    let mut cmd = Command::new(&copy);
    cmd.args(["run", "--", "true"]);
    clean(&mut cmd);
    let e = run(cmd);
    assert_eq!(e.code(), Some(1));
    assert_eq!(e.stderr.lines().count(), 1, "{}", e.stderr);
    assert!(
        e.stderr.starts_with(&format!(
            "gpumemprof: error: libgpumemprof.so not found beside {} (looked in {}, ",
            copy.display(),
            bin.display()
        )),
        "{}",
        e.stderr
    );
}

// ---------------------------------------------------------------------------------------------
// The environment the program gets

/// The program's environment and its signal mask and ignored signals (its `env` mode), run
/// by `cmd`; and the launcher's stderr.
fn environment(cmd: Command) -> (BTreeMap<String, String>, String, String) {
    let e = run(cmd);
    assert_eq!(e.code(), Some(0), "{}", e.stderr);
    let mut lines = e.stdout.lines();
    let env: BTreeMap<String, String> = serde_json::from_str(lines.next().unwrap_or_default())
        .expect("the program printed its environment");
    let signals = lines.next().expect("the program printed its signal state");
    (env, signals.to_string(), e.stderr)
}

/// What the launcher changed: the variables it added or whose value differs, beside the
/// program's environment without the launcher. Panics if it removed one.
fn changes(user: &[(&str, &str)], opts: &[&str]) -> (BTreeMap<String, String>, String) {
    let mut plain = direct(&["env"]);
    let mut launched = launcher(opts, &["env"]);
    for (k, v) in user {
        plain.env(k, v);
        launched.env(k, v);
    }
    let (before, signals_before, _) = environment(plain);
    let (after, signals_after, stderr) = environment(launched);
    // The program starts with the signals blocked and ignored that it would have had without
    // the launcher (which blocks the ones it passes on while it waits).
    assert_eq!(signals_after, signals_before, "{opts:?}");
    for k in before.keys() {
        assert!(after.contains_key(k), "{opts:?}: the launcher removed {k}");
    }
    let mut changed: BTreeMap<String, String> = after
        .into_iter()
        .filter(|(k, v)| before.get(k) != Some(v))
        .collect();
    // A private file in the temporary folder, gone once the launcher has read it.
    let list = changed
        .remove("GPUMEMPROF_TRACE_LIST")
        .unwrap_or_else(|| panic!("{opts:?}: no GPUMEMPROF_TRACE_LIST"));
    assert!(!Path::new(&list).exists(), "{list} was not removed");
    (changed, stderr)
}

fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn each_framework_mode_sets_exactly_the_documented_variables() {
    let shim = shim_path().display().to_string();
    let base = [
        ("LD_PRELOAD", shim.as_str()),
        ("NVTX_INJECTION64_PATH", shim.as_str()),
        ("GPUMEMPROF_QUIET", "1"),
    ];
    // (launcher options, the variables they add to `base`)
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)]);
    let cases: [Case; 7] = [
        (&[], &[]),
        (
            &["--torch=segments"],
            &[("GPUMEMPROF_FRAMEWORK_MODES", "torch=segments")],
        ),
        (
            &["--torch=tensors"],
            &[
                ("GPUMEMPROF_FRAMEWORK_MODES", "torch=tensors"),
                ("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync"),
            ],
        ),
        (
            &["--torch=uncached"],
            &[
                ("GPUMEMPROF_FRAMEWORK_MODES", "torch=uncached"),
                ("PYTORCH_NO_CUDA_MEMORY_CACHING", "1"),
            ],
        ),
        (
            &["--jax=platform"],
            &[
                ("GPUMEMPROF_FRAMEWORK_MODES", "jax=platform"),
                ("XLA_PYTHON_CLIENT_ALLOCATOR", "platform"),
            ],
        ),
        (
            &["--tf=growth"],
            &[
                ("GPUMEMPROF_FRAMEWORK_MODES", "tf=growth"),
                ("TF_FORCE_GPU_ALLOW_GROWTH", "true"),
            ],
        ),
        (
            &["--tf=async", "-o", "/tmp/x.%p.trace"],
            &[
                ("GPUMEMPROF_FRAMEWORK_MODES", "tf=async"),
                ("TF_GPU_ALLOCATOR", "cuda_malloc_async"),
                ("GPUMEMPROF_OUTPUT", "/tmp/x.%p.trace"),
            ],
        ),
    ];
    for (opts, mode_vars) in cases {
        let (changed, stderr) = changes(&[], opts);
        let mut want = vars(&base);
        want.extend(vars(mode_vars));
        assert_eq!(changed, want, "{opts:?}");
        assert!(!stderr.contains("warning"), "{opts:?}: {stderr}");
    }
}

#[test]
fn the_users_settings_are_merged_not_clobbered() {
    let shim = shim_path().display().to_string();
    // PyTorch's configuration keeps the user's keys and gains the backend.
    let (changed, stderr) = changes(
        &[("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")],
        &["--torch=tensors"],
    );
    assert_eq!(
        changed.get("PYTORCH_CUDA_ALLOC_CONF").map(String::as_str),
        Some("expandable_segments:True,backend:cudaMallocAsync")
    );
    assert!(!stderr.contains("warning"), "{stderr}");

    // The user's preload stays, after the shim.
    let mine = shared_library("second_preload").display().to_string();
    let (changed, _) = changes(&[("LD_PRELOAD", &mine)], &[]);
    assert_eq!(changed["LD_PRELOAD"], format!("{shim}:{mine}"));

    // The user's NVTX injection and quiet setting stay; the first with one warning.
    let (changed, stderr) = changes(
        &[
            ("NVTX_INJECTION64_PATH", "/opt/nsight/libinjection.so"),
            ("GPUMEMPROF_QUIET", "0"),
        ],
        &[],
    );
    assert_eq!(changed, vars(&[("LD_PRELOAD", &shim)]));
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(
        warnings,
        ["gpumemprof: warning: NVTX_INJECTION64_PATH is already set (/opt/nsight/libinjection.so): kept, so NVTX ranges will not be recorded"]
    );
}

// ---------------------------------------------------------------------------------------------
// What the trace says about its level, and traces of a process tree

#[test]
fn the_header_and_summary_say_which_level_the_trace_sees() {
    let dir = scratch("launcher_level");
    let trace = dir.join("t.trace");
    let mut cmd = launcher(&["--torch=tensors", "-o", text(&trace)], &["exit", "0"]);
    cmd.env("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True");
    let e = run(cmd);
    assert_eq!(e.code(), Some(0), "{}", e.stderr);
    let (header, _) = decode(&trace);
    let conf = "expandable_segments:True,backend:cudaMallocAsync";
    assert_eq!(
        header["framework"],
        json!({"modes": ["torch=tensors"], "env": {"PYTORCH_CUDA_ALLOC_CONF": conf}})
    );
    let summary = report("summary", &trace, &[]);
    schema::assert_valid("summary", &summary);
    assert_eq!(summary["framework"]["modes"], json!(["torch=tensors"]));
    let level = &summary["framework"]["levels"];
    assert_eq!(level.as_array().map(Vec::len), Some(1), "{level}");
    assert_eq!(
        (
            &level[0]["framework"],
            &level[0]["level"],
            &level[0]["per_tensor"]
        ),
        (&json!("pytorch"), &json!("tensors"), &json!(true))
    );
    assert_eq!(
        level[0]["setting"],
        format!("PYTORCH_CUDA_ALLOC_CONF={conf}")
    );
    let text_report = summary_text(&trace);
    assert!(
        text_report.contains(&format!(
            "allocator level: PyTorch tensors (PYTORCH_CUDA_ALLOC_CONF={conf}): one cudaMallocAsync per tensor"
        )),
        "{text_report}"
    );
    assert!(text_report.contains("framework modes (gpumemprof run): torch=tensors\n"));
}

#[test]
fn the_level_is_shown_without_the_launcher_too() {
    let dir = scratch("launcher_level_direct");
    for (name, env, want) in [
        (
            "uncached",
            Some(("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")),
            Some("uncached"),
        ),
        ("plain", None, None),
    ] {
        let trace = dir.join(format!("{name}.trace"));
        let mut cmd = direct(&["exit", "0"]);
        cmd.env("LD_PRELOAD", shim_path())
            .env("GPUMEMPROF_OUTPUT", &trace);
        if let Some((k, v)) = env {
            cmd.env(k, v);
        }
        assert_eq!(run(cmd).code(), Some(0));
        let summary = report("summary", &trace, &[]);
        schema::assert_valid("summary", &summary);
        assert_eq!(summary["framework"]["modes"], json!([]));
        let levels: Vec<&Value> = summary["framework"]["levels"]
            .as_array()
            .expect("levels")
            .iter()
            .map(|l| &l["level"])
            .collect();
        match want {
            Some(level) => assert_eq!(levels, [&json!(level)], "{name}"),
            None => {
                assert!(levels.is_empty(), "{name}: {levels:?}");
                // No framework library was loaded: nothing to say about allocators.
                let text = summary_text(&trace);
                assert!(!text.contains("allocator level:"), "{text}");
            }
        }
    }
}

fn summary_text(trace: &Path) -> String {
    let out = analyzer()
        .arg("summary")
        .arg(trace)
        .output()
        .expect("run gpumemprof summary");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_worker_process_writes_its_own_trace_and_both_are_listed() {
    let dir = scratch("launcher_tree");
    let e = run(launcher(
        &["-o", text(&dir.join("job.%p.trace"))],
        &["spawn"],
    ));
    assert_eq!(e.code(), Some(0), "{}", e.stderr);
    let traces = trace_files(&dir);
    assert_eq!(traces.len(), 2, "{traces:?}");
    let headers: Vec<Value> = traces.iter().map(|t| decode(t).0).collect();
    for t in &traces {
        assert_eq!(allocations_of_4mib(t), 1, "{}", t.display());
    }
    // One is the program the launcher started, the other its child.
    let (parent, worker) = if headers[1]["ppid"] == headers[0]["pid"] {
        (0, 1)
    } else {
        (1, 0)
    };
    assert_eq!(headers[worker]["ppid"], headers[parent]["pid"]);
    let lines: Vec<&str> = e.stderr.lines().collect();
    let (p, w) = (text(&traces[parent]), text(&traces[worker]));
    // The parent allocates before it starts the worker, so its trace is listed first.
    assert_eq!(
        lines,
        [
            format!("gpumemprof: writing {p}"),
            "gpumemprof: 2 traces written:".to_string(),
            format!("gpumemprof:   {p}"),
            format!("gpumemprof:   {w}"),
            format!("gpumemprof: next: gpumemprof summary {p} {w}"),
        ]
    );
}

#[test]
fn ctrl_c_at_a_terminal_reaches_the_program_once() {
    let dir = scratch("launcher_tty");
    let trace = dir.join("t.trace");
    let mut cmd = Command::new("python3");
    cmd.arg(repo_root().join("tests/programs/launch_tty.py"))
        .arg(gpumemprof_tests::analyzer_path())
        .arg(script())
        .arg(&trace);
    clean(&mut cmd);
    let e = run(cmd);
    assert_eq!(e.code(), Some(0), "{}{}", e.stdout, e.stderr);
    let lines: Vec<&str> = e.stdout.lines().collect();
    // The terminal's SIGINT reached the program once (not a second time from the launcher);
    // the SIGTERM sent to the launcher alone was passed on; the program exited 0 and so did
    // the launcher.
    for want in ["SIGINT 1", "SIGTERM after 1 SIGINT", "launcher_status=0"] {
        assert!(lines.contains(&want), "no line {want:?} in:\n{}", e.stdout);
    }
    assert!(!e.stdout.contains("SIGINT 2"), "{}", e.stdout);
    assert!(
        lines.contains(&format!("gpumemprof: 1 trace written: {}", text(&trace)).as_str()),
        "{}",
        e.stdout
    );
    assert_eq!(allocations_of_4mib(&trace), 1);
}

#[test]
fn a_run_without_a_trace_says_so() {
    let dir = scratch("launcher_no_trace");
    let trace = dir.join("t.trace");
    // No GPU allocation at all.
    let e = run(launcher(&["-o", text(&trace)], &["env"]));
    assert_eq!(e.code(), Some(0), "{}", e.stderr);
    assert_eq!(
        e.stderr.lines().collect::<Vec<_>>(),
        [
            format!("gpumemprof: writing {}", text(&trace)),
            "gpumemprof: no trace written: no process of the command allocated GPU memory the shim saw".to_string(),
        ]
    );
    // The flight recorder writes a trace only at an out-of-memory failure; there is none.
    let mut cmd = launcher(&["-o", text(&trace)], &["exit", "0"]);
    cmd.env("GPUMEMPROF_MODE", "oom");
    let e = run(cmd);
    assert_eq!(e.code(), Some(0), "{}", e.stderr);
    assert_eq!(
        e.stderr.lines().last(),
        Some("gpumemprof: no trace written: no process of the command ran out of GPU memory (GPUMEMPROF_MODE=oom writes a trace only then)")
    );
    assert!(trace_files(&dir).is_empty());
}

#[test]
fn a_users_trace_list_is_kept_and_only_this_runs_lines_are_read() {
    let dir = scratch("launcher_user_list");
    let list = dir.join("traces.txt");
    std::fs::write(&list, "/earlier/run.trace\n").expect("write the list");
    let trace = dir.join("t.trace");
    let mut cmd = launcher(&["-o", text(&trace)], &["exit", "0"]);
    cmd.env("GPUMEMPROF_TRACE_LIST", &list);
    let e = run(cmd);
    assert_eq!(e.code(), Some(0), "{}", e.stderr);
    assert!(
        e.stderr
            .ends_with(&format!("{}\n", one_trace(text(&trace)).join("\n"))),
        "{}",
        e.stderr
    );
    assert_eq!(
        std::fs::read_to_string(&list).expect("the list is still there"),
        format!("/earlier/run.trace\n{}\n", text(&trace))
    );
}
