//! The Python package as a user gets it: the wheel built from this checkout by pip (PEP 517,
//! setuptools-rust: `pyproject.toml`), installed into a fresh virtual environment, and a job
//! profiled from that install alone: `gpumemprof run` finds the shim inside the installed
//! package, and `gpumemprof summary` reads the trace. One version for the crates and the
//! package. Needs pip to reach PyPI for the build backend (as the torch tests need it for
//! their wheels): without it the test fails with pip's message, never passes unrun.

use std::path::Path;
use std::process::{Command, Output};

use gpumemprof_tests::profiled::scratch;
use gpumemprof_tests::{repo_root, sim_dir, SIM_ENV};
use serde_json::Value;

const VERSION: &str = env!("CARGO_PKG_VERSION");
const MIB: u64 = 1 << 20;

fn ok(cmd: &mut Command, what: &str) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn the_wheel_installs_a_working_gpumemprof_into_a_fresh_virtual_environment() {
    let dir = scratch("wheel");
    let dist = dir.join("dist");
    // The wheel, as `pip wheel .` builds it from a checkout.
    ok(
        Command::new("python3")
            .args([
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "--disable-pip-version-check",
                "-q",
            ])
            .arg("-w")
            .arg(&dist)
            .arg(repo_root()),
        "pip wheel",
    );
    let wheel = dist.join(format!("gpumemprof-{VERSION}-cp38-abi3-linux_x86_64.whl"));
    assert!(wheel.is_file(), "no {}", wheel.display());
    // A fresh virtual environment with nothing but the wheel.
    let venv = dir.join("venv");
    ok(
        Command::new("python3").arg("-m").arg("venv").arg(&venv),
        "python3 -m venv",
    );
    let bin = venv.join("bin");
    ok(
        Command::new(bin.join("pip"))
            .args(["install", "--no-deps", "--disable-pip-version-check", "-q"])
            .arg(&wheel),
        "pip install the wheel",
    );
    let gpumemprof = bin.join("gpumemprof");
    let version = ok(
        Command::new(&gpumemprof).arg("--version"),
        "gpumemprof --version",
    );
    assert_eq!(stdout(&version), format!("gpumemprof {VERSION}"));
    let python = bin.join("python");
    let shim = ok(
        Command::new(&python).args([
            "-c",
            "import gpumemprof; print(gpumemprof.__version__); print(gpumemprof.shim_path())",
        ]),
        "import gpumemprof",
    );
    let lines: Vec<String> = stdout(&shim).lines().map(str::to_owned).collect();
    assert_eq!(lines[0], VERSION);
    let shim = Path::new(&lines[1]);
    assert!(
        shim.starts_with(&venv) && shim.is_file(),
        "{}",
        shim.display()
    );
    let module = ok(
        Command::new(&python).args(["-m", "gpumemprof", "--version"]),
        "python -m",
    );
    assert_eq!(stdout(&module), format!("gpumemprof {VERSION}"));

    // A Python job profiled from the install: 4 MiB from the simulated runtime.
    let trace = dir.join("job.trace");
    let mut run = Command::new(&gpumemprof);
    run.arg("run")
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(&python)
        .arg(repo_root().join("tests/programs/launch_child.py"))
        .args(["exit", "0"]);
    for var in SIM_ENV
        .iter()
        .chain(["LD_PRELOAD", "GPUMEMPROF_OUTPUT"].iter())
    {
        run.env_remove(var);
    }
    run.env("LD_LIBRARY_PATH", sim_dir());
    let ran = ok(&mut run, "gpumemprof run");
    let said = String::from_utf8_lossy(&ran.stderr);
    assert!(
        said.contains(&format!("1 trace written: {}", trace.display())),
        "{said}"
    );
    let summary = ok(
        Command::new(&gpumemprof)
            .arg("summary")
            .arg(&trace)
            .arg("--json"),
        "gpumemprof summary",
    );
    let s: Value = serde_json::from_slice(&summary.stdout).expect("summary JSON");
    assert_eq!(s["totals"]["allocations"], 1);
    assert_eq!(s["totals"]["peak_bytes"], 4 * MIB);
}
