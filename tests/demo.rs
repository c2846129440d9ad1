//! gpumemprof-demo: the README's first command. Runs the bundled training-loop example
//! (`examples/train_leak.c`, 1 MiB leaked per step from one line) under the profiler and
//! shows the analyzer's summary and leak report; then, if `python3` is there, the Python
//! one (`examples/train.py`, through ctypes) with the launcher, `gpumemprof run`, and ends
//! with its leak report, which names the Python line.
//!
//! It uses the simulated CUDA runtime built by this crate, unless the machine has an
//! NVIDIA GPU and a real `libcudart.so.12` that `ldconfig` knows: then the example runs
//! on the real runtime (same API, same report).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

fn real_cudart_dir() -> Option<PathBuf> {
    if !Path::new("/dev/nvidiactl").exists() || std::env::var_os("GPUMEMPROF_DEMO_SIM").is_some() {
        return None;
    }
    let out = Command::new("ldconfig").arg("-p").output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.trim_start().starts_with("libcudart.so.12 "))
        .find_map(|l| {
            l.rsplit("=> ")
                .next()
                .map(|p| Path::new(p.trim()).parent().map(Path::to_path_buf))
        })
        .flatten()
}

fn run(shown: &str, cmd: &mut Command) -> Option<i32> {
    println!("\n$ {shown}");
    match cmd.status() {
        Ok(s) => Some(s.code().unwrap_or(1)),
        Err(e) => {
            eprintln!("gpumemprof-demo: cannot run {shown}: {e}");
            None
        }
    }
}

fn main() -> ExitCode {
    let exe = std::env::current_exe().expect("own path");
    let dir = exe.parent().expect("own folder").to_path_buf();
    let shim = gpumemprof_tests::newest_shim(&dir).unwrap_or_else(|| dir.join("libgpumemprof.so"));
    let analyzer = dir.join("gpumemprof");
    for p in [&shim, &analyzer] {
        if !p.is_file() {
            eprintln!(
                "gpumemprof-demo: {} is missing: run `cargo build --release --workspace` first",
                p.display()
            );
            return ExitCode::from(1);
        }
    }
    let program = gpumemprof_tests::program("train_leak");
    let work = dir.join("demo");
    let trace = work.join("train_leak.trace");
    let _ = std::fs::create_dir_all(&work);
    // The shim never overwrites a trace; the demo owns this one, so it starts afresh.
    for entry in std::fs::read_dir(&work).into_iter().flatten().flatten() {
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with("train_leak.trace")
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }

    let cudart_dir = real_cudart_dir();
    let mut cmd = Command::new(&program);
    cmd.arg("20")
        .env("LD_PRELOAD", &shim)
        .env("GPUMEMPROF_OUTPUT", &trace);
    match &cudart_dir {
        Some(d) => {
            println!(
                "gpumemprof-demo: NVIDIA GPU found; using the real CUDA runtime in {}",
                d.display()
            );
            cmd.env("LD_LIBRARY_PATH", d);
        }
        None => println!(
            "gpumemprof-demo: no GPU here; using the simulated CUDA runtime in {}",
            gpumemprof_tests::sim_dir().display()
        ),
    }
    let shown = format!("LD_PRELOAD={} {} 20", shim.display(), program.display());
    if run(&shown, &mut cmd) != Some(0) {
        eprintln!("gpumemprof-demo: the example failed");
        return ExitCode::from(1);
    }
    let t = trace.display().to_string();
    for report in ["summary", "leaks"] {
        let code = run(
            &format!("gpumemprof {report} {t}"),
            Command::new(&analyzer).arg(report).arg(&trace),
        );
        if code != Some(0) {
            return ExitCode::from(code.unwrap_or(1).clamp(1, 255) as u8);
        }
    }

    // The same job in Python, started with the launcher.
    let python_ok = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !python_ok {
        println!("\ngpumemprof-demo: no python3 here; the Python example is skipped");
        return ExitCode::SUCCESS;
    }
    let example = gpumemprof_tests::repo_root().join("examples/train.py");
    let py_trace = work.join("train_py.trace");
    let libs = cudart_dir.unwrap_or_else(gpumemprof_tests::sim_dir);
    let mut cmd = Command::new(&analyzer);
    cmd.args(["run", "-f", "-o"])
        .arg(&py_trace)
        .args(["--", "python3"])
        .arg(&example)
        .env("LD_LIBRARY_PATH", &libs)
        .env_remove("LD_PRELOAD");
    // The line as it can be run again by hand: ctypes finds the runtime through
    // LD_LIBRARY_PATH (the simulated one here; a machine with a GPU has its own).
    let shown = format!(
        "LD_LIBRARY_PATH={} gpumemprof run -f -o {} -- python3 {}",
        libs.display(),
        py_trace.display(),
        example.display()
    );
    if run(&shown, &mut cmd) != Some(0) {
        eprintln!("gpumemprof-demo: the Python example failed");
        return ExitCode::from(1);
    }
    let code = run(
        &format!("gpumemprof leaks {}", py_trace.display()),
        Command::new(&analyzer).arg("leaks").arg(&py_trace),
    );
    if code != Some(0) {
        return ExitCode::from(code.unwrap_or(1).clamp(1, 255) as u8);
    }
    ExitCode::SUCCESS
}
