//! Build script of gpumemprof-tests: compiles the simulated CUDA runtime and the C programs the
//! end-to-end tests run.
//!
//! * `sim/*.c` -> `$OUT_DIR/sim/libcudart.so.12` (soname `libcudart.so.12`, every `cuda*` export
//!   versioned by `sim/libcudart.map`), plus `$OUT_DIR/sim/libcudart.so` pointing at it so
//!   programs link with a plain `-lcudart`.
//! * every `tests/programs/*.c` and `examples/*.c` -> `$OUT_DIR/bin/<file stem>`, built the way a
//!   real application is (debug info, frame pointers, `-lcudart`, an rpath to the simulator);
//!   a source containing `gpumemprof-build: no-cudart` is linked without the runtime.
//!
//! `GPUMEMPROF_TEST_OUT=$OUT_DIR` is passed to the crate so `support.rs` can find them.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Sources of the simulated runtime, relative to this crate.
const SIM_SOURCES: &[&str] = &["sim/cudart_sim.c", "sim/sim_tables.c"];
const SIM_HEADERS: &[&str] = &["sim/include/cuda_runtime_api.h", "sim/sim_tables.h"];
const SIM_MAP: &str = "sim/libcudart.map";
/// Folders (relative to the repository root) whose every `.c` file is one program.
/// A program whose source contains this is linked without the simulated runtime.
const NO_CUDART_MARKER: &str = "gpumemprof-build: no-cudart";

const PROGRAM_DIRS: &[&str] = &["tests/programs", "examples"];

const WARNINGS: &[&str] = &["-Wall", "-Wextra"];
/// The simulator is optimised: it sits under every benchmark of the profiler.
const SIM_FLAGS: &[&str] = &["-shared", "-fPIC", "-O2", "-g", "-pthread"];
/// Programs look like a debug build of a real application, so stacks and lines resolve.
const PROGRAM_FLAGS: &[&str] = &["-g", "-O0", "-fno-omit-frame-pointer", "-pthread"];

fn main() {
    let crate_dir =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let sim_dir = out_dir.join("sim");
    let bin_dir = out_dir.join("bin");
    for dir in [&sim_dir, &bin_dir] {
        fs::create_dir_all(dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    }

    println!("cargo:rerun-if-changed=build.rs");
    for file in SIM_SOURCES.iter().chain(SIM_HEADERS).chain([&SIM_MAP]) {
        println!("cargo:rerun-if-changed={file}");
    }
    // The repository root, without `..`, so debug info names examples/train_leak.c plainly.
    let repo_root = crate_dir
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf();
    // A directory makes cargo rescan it, so adding a new program triggers a rebuild too.
    for dir in PROGRAM_DIRS {
        println!("cargo:rerun-if-changed={}", repo_root.join(dir).display());
    }

    let compiler = cc::Build::new().get_compiler();
    build_sim(&compiler, &crate_dir, &sim_dir);

    let programs = list_programs(&repo_root);
    for source in &programs {
        println!("cargo:rerun-if-changed={}", source.display());
    }
    // Each program is one compiler run; run them side by side.
    let failures: Vec<String> = std::thread::scope(|scope| {
        let jobs: Vec<_> = programs
            .iter()
            .map(|source| {
                let (compiler, crate_dir, sim_dir, bin_dir) =
                    (&compiler, &crate_dir, &sim_dir, &bin_dir);
                scope.spawn(move || build_program(compiler, crate_dir, sim_dir, bin_dir, source))
            })
            .collect();
        jobs.into_iter()
            .filter_map(|job| job.join().expect("compile thread panicked").err())
            .collect()
    });
    if !failures.is_empty() {
        panic!("\n{}", failures.join("\n\n"));
    }

    println!("cargo:rustc-env=GPUMEMPROF_TEST_OUT={}", out_dir.display());
}

fn build_sim(compiler: &cc::Tool, crate_dir: &Path, sim_dir: &Path) {
    let library = sim_dir.join("libcudart.so.12");
    let mut args: Vec<OsString> = Vec::new();
    args.extend(SIM_FLAGS.iter().chain(WARNINGS).map(OsString::from));
    args.push(include_flag(crate_dir));
    args.push("-Wl,-soname,libcudart.so.12".into());
    let mut map = OsString::from("-Wl,--version-script=");
    map.push(crate_dir.join(SIM_MAP));
    args.push(map);
    args.push("-o".into());
    args.push(library.clone().into());
    args.extend(
        SIM_SOURCES
            .iter()
            .map(|s| crate_dir.join(s).into_os_string()),
    );
    if let Err(message) = compile(compiler, &args, "the simulated CUDA runtime (tests/sim)") {
        panic!("\n{message}");
    }

    // The development link name, as a toolkit installs it: libcudart.so -> libcudart.so.12.
    let link = sim_dir.join("libcudart.so");
    let _ = fs::remove_file(&link);
    if std::os::unix::fs::symlink("libcudart.so.12", &link).is_err() {
        fs::copy(&library, &link)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", link.display()));
    }
}

fn build_program(
    compiler: &cc::Tool,
    crate_dir: &Path,
    sim_dir: &Path,
    bin_dir: &Path,
    source: &Path,
) -> Result<(), String> {
    let stem = source.file_stem().expect("a .c file has a stem");
    let mut args: Vec<OsString> = Vec::new();
    args.extend(PROGRAM_FLAGS.iter().chain(WARNINGS).map(OsString::from));
    args.push(include_flag(crate_dir));
    args.push("-o".into());
    args.push(bin_dir.join(stem).into());
    args.push(source.into());
    // A program that stands for a process without the CUDA runtime says so in its source.
    let text = fs::read_to_string(source).map_err(|e| format!("{}: {e}", source.display()))?;
    if text.contains(NO_CUDART_MARKER) {
        return compile(compiler, &args, &source.display().to_string());
    }
    // Libraries after the source, or a linker using --as-needed drops them.
    let mut lib_dir = OsString::from("-L");
    lib_dir.push(sim_dir);
    args.push(lib_dir);
    let mut rpath = OsString::from("-Wl,-rpath,");
    rpath.push(sim_dir);
    args.push(rpath);
    args.push("-lcudart".into());
    compile(compiler, &args, &source.display().to_string())
}

fn include_flag(crate_dir: &Path) -> OsString {
    let mut flag = OsString::from("-I");
    flag.push(crate_dir.join("sim/include"));
    flag
}

/// Every `.c` file of PROGRAM_DIRS, sorted; two programs may not share a file stem.
fn list_programs(repo_root: &Path) -> Vec<PathBuf> {
    let mut programs = Vec::new();
    for dir in PROGRAM_DIRS {
        let dir = repo_root.join(dir);
        let entries =
            fs::read_dir(&dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
        for entry in entries {
            let path = entry
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
                .path();
            if path.extension().is_some_and(|ext| ext == "c") {
                programs.push(path);
            }
        }
    }
    programs.sort();
    let mut stems: Vec<_> = programs
        .iter()
        .map(|p| p.file_stem().map(|s| s.to_owned()))
        .collect();
    stems.sort();
    if let Some(pair) = stems.windows(2).find(|pair| pair[0] == pair[1]) {
        panic!(
            "two C programs are both named {:?}: each needs its own name in $OUT_DIR/bin",
            pair[0]
        );
    }
    programs
}

/// Runs the C compiler; warnings are passed on as cargo warnings, failures come back as text.
fn compile(compiler: &cc::Tool, args: &[OsString], what: &str) -> Result<(), String> {
    let mut cmd = Command::new(compiler.path());
    cmd.envs(compiler.get_envs());
    cmd.args(args);
    let output = cmd.output().map_err(|e| {
        format!(
            "cannot run the C compiler {}: {e}",
            compiler.path().display()
        )
    })?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        return Err(format!(
            "C compiler failed ({}) building {what}\ncommand: {cmd:?}\n{stderr}",
            output.status
        ));
    }
    for line in stderr.lines() {
        println!("cargo:warning={what}: {line}");
    }
    Ok(())
}
