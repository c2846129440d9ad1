//! End to end on the real thing: the Python package's pytest plugin
//! (python/gpumemprof/pytest_plugin.py) runs `tests/programs/pytest_budgets.py` with a real
//! pytest on the unmodified torch package (see `torch_package`): `pytest --gpumemprof` as
//! typed starts the session again under the shim, budgets met pass, budgets broken fail
//! with the size and the lines that allocated it, a test without a marker is not measured,
//! and `--gpumemprof-trace DIR` keeps the failing tests' traces. The package is laid out as
//! pip installs it (its Python files and the shim side by side).

use std::path::{Path, PathBuf};
use std::process::Command;

use gpumemprof_tests::profiled::{report, scratch};
use gpumemprof_tests::torch_package::package;
use gpumemprof_tests::{analyzer_path, repo_root, shim_path, source_line_of, wheels};

const SCRIPT: &str = "tests/programs/pytest_budgets.py";

/// pytest and what it needs, pure-Python wheels.
const PYTEST_PINS: &[&str] = &[
    "pytest==8.3.5",
    "pluggy==1.5.0",
    "iniconfig==2.0.0",
    "packaging==24.2",
];

/// The package as an install lays it out: python/gpumemprof/*.py and the shim beside them.
fn installed_package(dir: &Path) -> PathBuf {
    let site = dir.join("site");
    let package = site.join("gpumemprof");
    std::fs::create_dir_all(&package).expect("create the package folder");
    for entry in std::fs::read_dir(repo_root().join("python/gpumemprof")).expect("list python/") {
        let path = entry.expect("an entry").path();
        if path.extension().is_some_and(|e| e == "py") {
            std::fs::copy(&path, package.join(path.file_name().unwrap())).expect("copy");
        }
    }
    std::fs::copy(shim_path(), package.join("libgpumemprof.abi3.so")).expect("copy the shim");
    site
}

/// `python3 -m pytest -p gpumemprof.pytest_plugin ARGS pytest_budgets.py` on the torch
/// package, the package laid out in `dir`, from the repository root (so paths print
/// relative to it), without the shim: the plugin preloads it.
fn pytest(dir: &Path, args: &[&str]) -> Command {
    let site = installed_package(dir);
    let pytest = wheels::installed("pytest-wheels", PYTEST_PINS);
    let torch = package();
    let mut cmd = torch.command("python3");
    let path = [&torch.site, &site, &pytest].map(|p| p.display().to_string());
    cmd.current_dir(repo_root())
        .args(["-m", "pytest", "-p", "gpumemprof.pytest_plugin"])
        .args(args)
        .args(["-p", "no:cacheprovider", "-q", "-rf", SCRIPT])
        .env("PYTHONPATH", path.join(":"))
        .env("GPUMEMPROF_ANALYZER", analyzer_path())
        .env("GPUMEMPROF_OUTPUT", dir.join("session.%p.trace"));
    cmd
}

#[test]
fn budgets_are_kept_and_broken_with_the_lines_that_allocated() {
    let dir = scratch("pytest_plugin");
    let keep = dir.join("kept");
    let keep_arg = keep.to_str().expect("a UTF-8 path");
    let out = pytest(&dir, &["--gpumemprof", "--gpumemprof-trace", keep_arg])
        .output()
        .expect("run pytest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("2 failed, 3 passed"), "{stdout}");
    let line = |marker: &str| source_line_of(SCRIPT, marker);
    let over = format!(
        "Test was limited to 16.0 MiB of GPU memory but its tensors peaked at 24.0 MiB; at the peak:\n\
         \x20 - 16.0 MiB in 1 tensor from test_over_budget at {SCRIPT}:{}\n\
         \x20 - 8.0 MiB in 1 tensor from test_over_budget at {SCRIPT}:{}",
        line("# BIG"),
        line("# SMALL")
    );
    assert!(stdout.contains(&over), "{stdout}");
    let leak = format!(
        "Test was limited to 1.0 MiB of GPU memory left live but left 4.0 MiB in 1 tensor:\n\
         \x20 - 4.0 MiB in 1 tensor from test_leaks_a_tensor at {SCRIPT}:{}",
        line("# LEAK")
    );
    assert!(stdout.contains(&leak), "{stdout}");
    // The failing tests' traces were kept, and each reads as the session's trace then.
    let mut kept: Vec<String> = std::fs::read_dir(&keep)
        .expect("the kept traces")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    kept.sort();
    let stem = SCRIPT.replace('/', "_");
    assert_eq!(
        kept,
        [
            format!("{stem}__test_leaks_a_tensor.trace"),
            format!("{stem}__test_over_budget.trace")
        ]
    );
    let peak = report(
        "peak",
        &keep.join(&kept[1]),
        &["--range", &format!("pytest:{SCRIPT}::test_over_budget")],
    );
    assert_eq!(peak["peaks"][0]["peak_bytes"], 24 << 20);
    // The test without a marker made 128 MiB, in no budget's report: it was not measured.
    assert!(!stdout.contains("128.0 MiB"), "{stdout}");
}

/// `GPUMEMPROF_DISABLE=1`: the shim records nothing, so nothing is measured; the tests run
/// and pass, each marked one with a warning that its budget was not checked. `--gpumemprof`
/// comes from `PYTEST_ADDOPTS` here, as from an ini file's `addopts`.
#[test]
fn with_the_shim_disabled_budgets_are_not_checked_and_it_says_so() {
    let dir = scratch("pytest_plugin_disabled");
    let out = pytest(&dir, &[])
        .env("PYTEST_ADDOPTS", "--gpumemprof")
        .env("GPUMEMPROF_DISABLE", "1")
        .output()
        .expect("run pytest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("5 passed, 4 warnings"), "{stdout}");
    assert_eq!(
        stdout
            .matches("the test's GPU memory budget was not checked")
            .count(),
        4,
        "{stdout}"
    );
}
