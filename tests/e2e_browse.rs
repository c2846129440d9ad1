//! `gpumemprof browse` in a real terminal (tmux, see `tmux.rs`): traces of a C training loop,
//! a Python one and a real PyTorch job, two runs side by side (by step too), a job folder of
//! ranks, driven by keys as a user would, the screens read back; a trace that cannot be read
//! and a stdout that is not a terminal get one line and their exit codes.

use std::path::Path;
use std::process::Command;

use gpumemprof_tests::profiled::{run_profiled, scratch, succeeded};
use gpumemprof_tests::tmux::Tmux;
use gpumemprof_tests::torch_job::Job;
use gpumemprof_tests::{analyzer_path, repo_root, shim_path, sim_dir, source_line_of};

fn browse(name: &str, dir: &Path, trace: &Path, width: u16, height: u16) -> Tmux {
    Tmux::start(name, dir, &command(&[trace]), width, height)
}

/// `gpumemprof browse` of these paths.
fn command(paths: &[&Path]) -> String {
    let mut c = format!("{} browse", analyzer_path().display());
    for p in paths {
        c += &format!(" {}", p.display());
    }
    c
}

/// The tree's row of the C example's leak (`keep_for_logging`), at the end of two traces.
fn leak_row(width: u16, numbers: &str) -> String {
    let leak = c_line("GPUMEMPROF-LEAK");
    row_of(
        width,
        &format!("      · keep_for_logging at {leak}"),
        numbers,
    )
}

/// The screen's line holding `text`.
fn line_with(screen: &str, text: &str) -> String {
    (screen.lines())
        .find(|l| l.contains(text))
        .unwrap_or_else(|| panic!("no line holds {text:?}:\n{screen}"))
        .to_string()
}

/// A row of a 100-column screen: the label, then the numbers at the right edge.
fn row(label: &str, numbers: &str) -> String {
    row_of(100, label, numbers)
}

/// A row of a `width`-column screen.
fn row_of(width: u16, label: &str, numbers: &str) -> String {
    format!(
        "{label}{}{numbers}",
        " ".repeat(usize::from(width) - label.chars().count() - numbers.len())
    )
}

/// The width at which rows naming `examples/train_leak.c` by its absolute path fit whole,
/// wherever the repository was checked out: 100 columns for a 10-character root such as
/// `/work/main`, wider for a longer one (the label column gives way to the numbers).
fn c_width() -> u16 {
    let root = repo_root().display().to_string().chars().count();
    u16::try_from(90 + root.max(10)).unwrap()
}

/// `examples/train_leak.c:LINE` of the line marked `marker`, as the trace's symbols give it
/// (the absolute path the example was built from: the job ran elsewhere).
fn c_line(marker: &str) -> String {
    let file = repo_root().join("examples/train_leak.c");
    format!(
        "{}:{}",
        file.display(),
        source_line_of("examples/train_leak.c", marker)
    )
}

/// 20 steps of `examples/train_leak.c` (its header comment has the numbers): at the peak the
/// 64 MiB of weights, one step's 30 MiB and the 20 MiB kept by then; at the end the leak.
#[test]
fn a_c_training_loop_at_its_peak_its_end_and_its_leak() {
    let dir = scratch("browse_c");
    let run = run_profiled(&dir, "train_leak", &["20"], &[]);
    assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr());
    let width = c_width();
    let t = browse("c", &dir, &run.trace, width, 30);
    let s = t.wait_for("at the peak");
    assert!(line_with(&s, "▶").starts_with("▶ at the peak 0.0"), "{s}");
    assert!(line_with(&s, "▶").ends_with(" s: 114.0 MiB live"), "{s}");
    let weights = c_line("GPUMEMPROF-WEIGHTS");
    assert_eq!(
        line_with(&s, "GPU 0 device memory"),
        row_of(width, "▾ GPU 0 device memory", "114.0 MiB 100.0%       25")
    );
    assert_eq!(
        line_with(&s, &weights),
        row_of(
            width,
            &format!("  · main at {weights}"),
            "64.0 MiB  56.1%        1"
        )
    );
    // The end: the leak alone, its path open.
    t.keys(&["e"]);
    let s = t.wait_for("at the end");
    let leak = c_line("GPUMEMPROF-LEAK");
    assert_eq!(
        line_with(&s, &leak),
        row_of(
            width,
            &format!("      · keep_for_logging at {leak}"),
            "20.0 MiB 100.0%       20"
        )
    );
    // The leaks view, and a row's details.
    t.keys(&["Tab", "Tab"]);
    let s = t.wait_for(" 20.0 MiB 100.0%       20");
    assert_eq!(
        line_with(&s, &leak),
        row_of(
            width,
            &format!("  keep_for_logging at {leak}"),
            "20.0 MiB 100.0%       20"
        )
    );
    t.keys(&["Enter"]);
    let s = t.wait_for("details");
    assert!(
        s.contains("│ Leaked: 20.0 MiB in 20 allocations, still live when the trace ended"),
        "{s}"
    );
    assert!(
        s.contains("│ Over the whole trace: 20 allocations of 1.0 MiB, the first at "),
        "{s}"
    );
    assert!(
        s.contains(&format!("│   keep_for_logging at {leak}")),
        "{s}"
    );
    // Search from the tree.
    t.keys(&["Escape", "Tab", "/", "k", "e", "e", "p", "Enter"]);
    let s = t.wait_for("/keep ");
    assert!(line_with(&s, &leak).contains("keep_for_logging"), "{s}");
    // Too small a terminal says so; back at 80x24 it draws again; q quits with 0.
    t.resize(30, 10);
    t.wait_for("terminal too small");
    t.resize(80, 24);
    t.wait_for("Tree  Top sites  Leaks at end");
    t.quit();
}

/// `examples/train.py` (8 steps through ctypes): the leak at its Python line, the frames of
/// its stack in details, Python first.
#[test]
fn a_python_loop_shows_its_python_lines() {
    const EXAMPLE: &str = "examples/train.py";
    let dir = scratch("browse_python");
    let trace = dir.join("train.trace");
    let mut run = Command::new(analyzer_path());
    run.current_dir(repo_root())
        .args(["run", "-q", "-o"])
        .arg(&trace)
        .args(["--", "python3", EXAMPLE])
        .env("LD_LIBRARY_PATH", sim_dir())
        .env("STEPS", "8")
        .env_remove("LD_PRELOAD");
    succeeded(&mut run, "gpumemprof run -- python3 examples/train.py");
    let t = browse("python", &dir, &trace, 100, 30);
    let s = t.wait_for("at the peak");
    assert!(
        line_with(&s, "▶").ends_with(" s: 32.0 MiB live · device 16.0 GiB"),
        "{s}"
    );
    // Its leaks: 8 buffers of 1 MiB, from the helper that allocates them.
    t.keys(&["Tab", "Tab"]);
    let alloc = format!(
        "{EXAMPLE}:{}",
        source_line_of(EXAMPLE, "def device_alloc") + 2
    );
    let s = t.wait_for(&alloc);
    assert_eq!(
        line_with(&s, &alloc),
        row(
            &format!("  device_alloc at {alloc}"),
            "8.0 MiB 100.0%        8"
        )
    );
    // Its details: the stack, the user's lines, innermost first.
    t.keys(&["Enter"]);
    let s = t.wait_for("details");
    let kept = source_line_of(EXAMPLE, "def keep_for_logging") + 1;
    let step = source_line_of(EXAMPLE, "        self.keep_for_logging()");
    assert!(s.contains(&format!("│   device_alloc at {alloc}")), "{s}");
    assert!(
        s.contains(&format!("│   Model.keep_for_logging at {EXAMPLE}:{kept}")),
        "{s}"
    );
    assert!(
        s.contains(&format!("│   Model.step at {EXAMPLE}:{step}")),
        "{s}"
    );
    t.keys(&["Escape", "q"]);
    t.wait_for("EXIT=0");
}

/// A real PyTorch job (`tests/programs/torch_train.py`, 4 steps): at the peak, cuBLAS's
/// workspace under the autograd node that made it; at the end, the activations kept in a
/// module-level list, freed by the interpreter's teardown.
#[test]
fn a_pytorch_job_in_pytorchs_terms() {
    let dir = scratch("browse_torch");
    let trace = dir.join("train.trace");
    Job::run("torch_train.py", &["4"], &[], Some(&trace));
    let t = browse("torch", &dir, &trace, 100, 30);
    let s = t.wait_for("at the peak");
    assert!(
        line_with(&s, "▶").ends_with(" s: 39.3 MiB of tensors (reserved 42.0 MiB)"),
        "{s}"
    );
    assert_eq!(
        line_with(&s, "cuBLAS workspace"),
        row("      · cuBLAS workspace", "32.0 MiB  81.4%        1")
    );
    assert!(
        line_with(&s, "AddmmBackward0 (backward)").starts_with("  ▾ AddmmBackward0 (backward) ")
    );
    // The segments are there, closed.
    assert!(line_with(&s, "GPU 0 device memory").starts_with("▸ GPU 0 device memory "));
    // The leak: 4 activations of 32 KiB held by a module-level list until the program's
    // code finished.
    t.keys(&["Tab", "Tab"]);
    let s = t.wait_for("freed at exit");
    let forward = source_line_of("tests/programs/torch_train.py", "return self.layers(x)");
    assert_eq!(
        line_with(&s, "freed at exit"),
        row(
            &format!("  MLP.forward at tests/programs/torch_train.py:{forward} (freed at exit)"),
            "128.0 KiB 100.0%        4"
        )
    );
    t.quit();
}

/// Bad input is a line and exit 5 before the screen changes; no terminal is a line and 1.
#[test]
fn a_damaged_trace_or_no_terminal_is_one_line_and_an_exit_code() {
    let dir = scratch("browse_bad");
    let bad = dir.join("bad.trace");
    std::fs::write(&bad, b"not a trace at all").unwrap();
    let t = browse("bad", &dir, &bad, 100, 10);
    let s = t.wait_for("EXIT=");
    // One line, which the 100-column terminal wraps where the scratch path makes it long
    // (the screen is read with each row's trailing spaces trimmed).
    let line = format!(
        "gpumemprof: error: {}: not a gpumemprof trace (bad magic bytes)",
        bad.display()
    );
    let chars: Vec<char> = line.chars().collect();
    let rows: Vec<String> = (chars.chunks(100))
        .map(|r| r.iter().collect::<String>().trim_end().to_string())
        .collect();
    assert!(s.ends_with(&format!("{}\nEXIT=5", rows.join("\n"))), "{s}");
    let out = Command::new(analyzer_path())
        .arg("browse")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "gpumemprof: error: browse draws on a terminal and stdout is not one: run it in a terminal \
         (over SSH, `ssh -t`); for a file, use `gpumemprof report`\n"
    );
}

/// `browse --pid` of a job still running (`hold_memory 3`: three 4 MiB buffers, one freed,
/// the trace flushed, then it waits): the trace so far, said to be still being written; once
/// the job has freed everything and exited, the screen reads the whole trace again by
/// itself, at the moment the user had chosen (the end).
#[test]
fn a_running_job_by_its_pid_followed_until_it_ended() {
    use gpumemprof_tests::profiled::preload;
    use gpumemprof_tests::program_command;
    use gpumemprof_tests::running::Running;
    use std::time::Duration;
    let dir = scratch("browse_pid");
    let trace = dir.join("held.trace");
    let mut held = program_command("hold_memory");
    preload(held.arg("3"), &trace);
    let mut job = Running::start_holding_stdin(held);
    job.wait_for_line("ready", Duration::from_secs(30));
    let command = format!("{} browse --pid {}", analyzer_path().display(), job.pid());
    let t = Tmux::start("pid", &dir, &command, 80, 24);
    let s = t.wait_for("at the peak");
    assert!(line_with(&s, "▶").ends_with(" s: 12.0 MiB live"), "{s}");
    assert_eq!(
        line_with(&s, "read again"),
        "the trace is still being written (or its job was killed): read again as it grows"
    );
    t.keys(&["e"]);
    let s = t.wait_for("at the end");
    assert!(line_with(&s, "▶").ends_with(" s: 8.0 MiB live"), "{s}");
    assert_eq!(job.finish(Duration::from_secs(30)).code(), Some(0));
    // No key pressed: the trace grew, so it was read again, at the end still.
    let s = t.wait_for(": 0 B live");
    assert!(line_with(&s, "▶").starts_with("▶ at the end "), "{s}");
    assert!(!s.contains("read again as it grows"), "{s}");
    // r reads it again at once, what was chosen kept.
    t.keys_keeping_screen(&["r"]);
    let s = t.wait_for("? help");
    assert!(line_with(&s, "▶").ends_with(": 0 B live"), "{s}");
    t.quit();
}

/// Two runs of `examples/train_leak.c`, 10 and 20 steps, side by side: at their ends, the
/// leak is 10 MiB in one and 20 MiB in the other.
#[test]
fn two_runs_side_by_side() {
    let dir = scratch("browse_two");
    let ten = dir.join("ten");
    let twenty = dir.join("twenty");
    std::fs::create_dir_all(&ten).unwrap();
    std::fs::create_dir_all(&twenty).unwrap();
    let a = run_profiled(&ten, "train_leak", &["10"], &[]);
    let b = run_profiled(&twenty, "train_leak", &["20"], &[]);
    let width = c_width();
    let t = Tmux::start("two", &dir, &command(&[&a.trace, &b.trace]), width, 30);
    let s = t.wait_for("B at the peak");
    assert!(s.contains(": 104.0 MiB live · B at the peak "), "{s}");
    assert!(line_with(&s, "▶").ends_with(": 114.0 MiB live"), "{s}");
    t.keys(&["e"]);
    let s = t.wait_for("B at the end");
    let leak = c_line("GPUMEMPROF-LEAK");
    let head = line_with(&s, "B - A");
    assert!(
        head.ends_with("         A          B       B - A"),
        "{head}"
    );
    assert_eq!(
        line_with(&s, &leak),
        leak_row(width, "10.0 MiB   20.0 MiB   +10.0 MiB")
    );
    t.quit();
}

/// Two runs of the real PyTorch loop (`torch_train.py 3 --nvtx`, each step lasting 50 ms,
/// 25 of the traces' 2 ms time buckets: a bare step of a millisecond or two could begin and
/// end inside one), the second pausing 2 s before each step: at A's peak (its step 3, a
/// tenth of a second into its loop), B by time has not begun its steps (it would have to
/// start its loop 1.9 s sooner than A; the slow run goes first, so a cold `import torch`
/// slows it, not A); by step (`a` twice) it is in its step 3 too.
#[test]
fn two_pytorch_runs_follow_each_other_step_for_step() {
    let dir = scratch("browse_steps");
    let (a, b) = (dir.join("fast.trace"), dir.join("slow.trace"));
    let nvtx = shim_path().display().to_string();
    let env = [("NVTX_INJECTION64_PATH", nvtx.as_str())];
    Job::run(
        "torch_train.py",
        &["3", "--nvtx", "--step-time", "0.05", "--pause", "2"],
        &env,
        Some(&b),
    );
    Job::run(
        "torch_train.py",
        &["3", "--nvtx", "--step-time", "0.05"],
        &env,
        Some(&a),
    );
    let t = Tmux::start("steps", &dir, &command(&[&a, &b]), 100, 30);
    let s = t.wait_for("B at the peak");
    let a_line = line_with(&s, "▶ A at the peak");
    assert!(
        a_line.ends_with(" s (step 3/3): 39.3 MiB of tensors (reserved 42.0 MiB)"),
        "{s}"
    );
    // Away from the peak and back: B follows by time (B's own moment words, not step 3).
    t.keys(&["l", "h"]);
    let s = t.wait_for("  B at ");
    assert_eq!(line_with(&s, "▶ A at the peak"), a_line);
    let b_line = line_with(&s, "  B at ");
    assert!(b_line.contains(" (before step 1/3): "), "{s}");
    t.keys(&["a", "a"]);
    let s = t.wait_for("follows by step");
    assert_eq!(
        line_with(&s, "follows by step"),
        "the second trace follows by step (NVTX ranges)"
    );
    assert!(line_with(&s, "  B at ").contains(" s (step 3/3): "), "{s}");
    t.quit();
}

/// A job folder of three ranks of `examples/train_leak.c` (10, 20 and 15 steps, `RANK`
/// set, one trace per rank): rank 0 beside the rank that peaked highest (1), their leaks at
/// the end; `--rank 2` picks another; a rank the folder has not is one line and exit 1.
#[test]
fn a_job_folder_shows_its_first_rank_beside_the_highest() {
    let dir = scratch("browse_job");
    let job = dir.join("job");
    std::fs::create_dir_all(&job).unwrap();
    for (rank, steps) in [("0", "10"), ("1", "20"), ("2", "15")] {
        let trace = job.join(format!("train.r{rank}.trace"));
        let out = trace.display().to_string();
        let run = run_profiled(
            &dir,
            "train_leak",
            &[steps],
            &[("RANK", rank), ("GPUMEMPROF_OUTPUT", &out)],
        );
        assert_eq!(run.output.status.code(), Some(0));
    }
    let width = c_width();
    let leak = c_line("GPUMEMPROF-LEAK");
    let job_command = |rank: &str| format!("{}{rank}", command(&[&job]));
    let t = Tmux::start("job", &dir, &job_command(""), width, 30);
    let s = t.wait_for("B at the peak");
    let title = line_with(&s, "gpumemprof browse");
    assert!(title.contains(" · A: rank 0: "), "{title}");
    assert!(title.contains(" · B: rank 1: "), "{title}");
    assert_eq!(
        line_with(&s, "highest peak"),
        "B: rank 1, the highest peak of the 2 other traces (--rank N picks another)"
    );
    t.keys(&["e"]);
    let s = t.wait_for("B at the end");
    assert_eq!(
        line_with(&s, &leak),
        leak_row(width, "10.0 MiB   20.0 MiB   +10.0 MiB")
    );
    t.quit();
    let t = Tmux::start("job2", &dir, &job_command(" --rank 2"), width, 30);
    t.keys(&["e"]);
    let s = t.wait_for("B at the end");
    assert!(
        line_with(&s, "gpumemprof browse").contains(" · B: rank 2: "),
        "{s}"
    );
    assert_eq!(
        line_with(&s, &leak),
        leak_row(width, "10.0 MiB   15.0 MiB    +5.0 MiB")
    );
    t.quit();
    let t = Tmux::start("job7", &dir, &job_command(" --rank 7"), 200, 10);
    let s = t.wait_for("EXIT=");
    assert!(
        s.ends_with(&format!(
            "gpumemprof: error: {}: no trace of rank 7 beside rank 0 (A); the others are: \
             rank 1, rank 2\nEXIT=1",
            job.display()
        )),
        "{s}"
    );
}
