//! gpumemprof-tests support library: where the end-to-end tests find what they run.
//!
//! `build.rs` compiles the simulated GPU libraries (`tests/sim`: stand-ins for `libcuda.so.1`,
//! `libcudart.so.12`, `libamdhip64.so.6` and `libnvidia-ml.so.1`) and every C program of
//! `tests/programs` and `examples` into this crate's `OUT_DIR`; the helpers here locate those,
//! the workspace's own build outputs (the preload shim and the analyzer), and the lines of
//! sources that tests refer to by marker comment rather than by line number.

pub mod duck;
pub mod profiled;
pub mod running;
pub mod tensorflow;
pub mod tmux;
pub mod torch;
pub mod torch_job;
pub mod torch_package;
pub mod wheels;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The build script's output folder: `sim/` and `bin/` live under it.
const TEST_OUT: &str = env!("GPUMEMPROF_TEST_OUT");

/// Environment variables of the simulated libraries, cleared by [`program_command`] so the
/// caller's shell cannot change a test's numbers.
pub const SIM_ENV: &[&str] = &[
    "SIMCUDA_CAPACITY",
    "SIMCUDA_DEVICES",
    "SIMCUDA_HOST_CAPACITY",
    "SIMCUDA_CONTEXT_BYTES",
    "SIMCUDA_HIDE",
    "SIMHIP_CAPACITY",
    "SIMHIP_DEVICES",
    "SIMHIP_HOST_CAPACITY",
];

/// The folder holding the simulated libraries (`libcudart.so.12`, `libcuda.so.1`,
/// `libamdhip64.so.6`, `libnvidia-ml.so.1`) and their development link names.
pub fn sim_dir() -> PathBuf {
    Path::new(TEST_OUT).join("sim")
}

/// The path of a built C program, named after its source's file stem (`"train_leak"`).
pub fn program(name: &str) -> PathBuf {
    let path = Path::new(TEST_OUT).join("bin").join(name);
    assert!(
        path.is_file(),
        "no program {name} at {}: is there a tests/programs/{name}.c or examples/{name}.c?",
        path.display()
    );
    path
}

/// A command for a built program with a clean slate: no simulator variables and no preload
/// inherited from the caller. Tests add their own `SIMCUDA_*` or `LD_PRELOAD` on top.
pub fn program_command(name: &str) -> Command {
    let mut cmd = Command::new(program(name));
    for var in SIM_ENV {
        cmd.env_remove(var);
    }
    cmd.env_remove("LD_PRELOAD");
    cmd
}

/// A shared library built from a program source marked `gpumemprof-build: shared-library`:
/// `$OUT_DIR/bin/lib<stem>.so` (`"second_preload"` -> `libsecond_preload.so`).
pub fn shared_library(stem: &str) -> PathBuf {
    let path = Path::new(TEST_OUT)
        .join("bin")
        .join(format!("lib{stem}.so"));
    assert!(
        path.is_file(),
        "no shared library lib{stem}.so at {}: is there a tests/programs/{stem}.c marked \
         shared-library?",
        path.display()
    );
    path
}

/// A command running the Python script `tests/programs/<name>` with `python3`, the way
/// [`program_command`] runs a C program: no simulator variables and no preload inherited, and
/// the simulators' folder on `LD_LIBRARY_PATH` so `ctypes.CDLL("libcudart.so.12")` finds them.
pub fn script_command(name: &str) -> Command {
    let script = repo_root().join("tests/programs").join(name);
    assert!(script.is_file(), "no script {}", script.display());
    let mut cmd = Command::new("python3");
    cmd.arg(script);
    for var in SIM_ENV {
        cmd.env_remove(var);
    }
    cmd.env_remove("LD_PRELOAD");
    cmd.env("LD_LIBRARY_PATH", sim_dir());
    cmd
}

/// The repository root (the workspace folder holding `tests/`, `examples/`, `shim/`, ...).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives one level below the repository root")
        .to_path_buf()
}

/// The 1-based number of the one line of `path_rel_to_repo` that contains `marker`.
/// Panics unless exactly one line does, so a test can never silently pick the wrong line.
pub fn source_line_of(path_rel_to_repo: &str, marker: &str) -> u32 {
    let path = repo_root().join(path_rel_to_repo);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let hits: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, line)| line.contains(marker))
        .map(|(i, _)| i + 1)
        .collect();
    match hits.as_slice() {
        [line] => u32::try_from(*line).expect("source files are shorter than 2^32 lines"),
        _ => panic!(
            "{marker:?} must be on exactly one line of {path_rel_to_repo}, found on lines {hits:?}"
        ),
    }
}

/// The cargo profile folder of the running test (`target/debug`, `target/release`, ...): the
/// folder that contains `deps/`, found from the test executable's own path.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    for dir in exe.ancestors().skip(1) {
        if dir.file_name().is_some_and(|name| name == "deps") {
            return dir.parent().expect("deps/ has a parent").to_path_buf();
        }
        if dir.join("deps").is_dir() {
            return dir.to_path_buf();
        }
    }
    panic!(
        "{} is not inside a cargo target folder (no deps/ above it)",
        exe.display()
    )
}

/// The preload library `libgpumemprof.so` of this build profile.
/// Panics with instructions if it has not been built.
pub fn shim_path() -> PathBuf {
    let dir = target_dir();
    newest_shim(&dir).unwrap_or_else(|| {
        panic!(
            "libgpumemprof.so not found in {} or its deps/: build the workspace first \
                 (cargo build --workspace, with the same profile as the tests)",
            dir.display()
        )
    })
}

/// The newer of `<dir>/libgpumemprof.so` and `<dir>/deps/libgpumemprof.so`. Cargo
/// rebuilds the one in deps/ whenever this crate (which depends on the shim) is built,
/// but copies it up to `<dir>` only when the shim itself is a build target; so the
/// top-level copy can be stale.
pub fn newest_shim(dir: &Path) -> Option<PathBuf> {
    [
        dir.join("libgpumemprof.so"),
        dir.join("deps").join("libgpumemprof.so"),
    ]
    .into_iter()
    .filter_map(|p| {
        let modified = std::fs::metadata(&p).and_then(|m| m.modified()).ok()?;
        Some((modified, p))
    })
    .max_by_key(|(modified, _)| *modified)
    .map(|(_, p)| p)
}

/// The analyzer executable `gpumemprof` of this build profile (it may not exist yet).
pub fn analyzer_path() -> PathBuf {
    target_dir().join("gpumemprof")
}

/// Third-party Python packages some tests use as independent clients and readers, pinned:
/// `ptmem` reads our PyTorch-snapshot export, `nvtx` is a real NVTX client,
/// `nvidia-nvtx-cu12` carries NVIDIA's nvtx3 C headers (compiled into a test program at test
/// time, never copied into this repository), and `duckdb` queries our Parquet export.
pub const PYTHON_PACKAGES: &[&str] = &[
    "ptmem==0.1.2",
    "nvtx==0.2.17",
    "nvidia-nvtx-cu12==12.9.79",
    "duckdb==1.4.3",
];

/// The folder holding [`PYTHON_PACKAGES`] (put it on `PYTHONPATH`), installed there with
/// `python3 -m pip install --target` on first use: the README's test command needs no
/// set-up of its own. Concurrent test processes wait on a lock file; a finished install is
/// marked by a file listing the pinned packages, so a changed pin reinstalls.
/// Panics with pip's output if the install fails (no network to PyPI, no pip).
pub fn python_packages() -> PathBuf {
    let root = target_dir().join("pydeps");
    std::fs::create_dir_all(&root).expect("create the pydeps folder");
    let lock = std::fs::File::create(root.join(".lock")).expect("create the pydeps lock file");
    lock.lock().expect("lock the pydeps folder");
    let site = root.join("site");
    let marker = root.join(".installed");
    let want = PYTHON_PACKAGES.join("\n");
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(want.as_str()) {
        return site;
    }
    let _ = std::fs::remove_dir_all(&site);
    let out = Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
        ])
        .arg("--target")
        .arg(&site)
        .args(PYTHON_PACKAGES)
        .output()
        .expect("run python3 -m pip");
    assert!(
        out.status.success(),
        "pip could not install {PYTHON_PACKAGES:?} into {}:\n{}{}",
        site.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&marker, want).expect("write the pydeps marker");
    site
}
