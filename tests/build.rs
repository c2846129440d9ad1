//! Build script of gpumemprof-tests: compiles the simulated GPU libraries and the C programs the
//! end-to-end tests run.
//!
//! * `sim/` -> four libraries in `$OUT_DIR/sim/`, each with its development link name beside it
//!   (`libcuda.so -> libcuda.so.1`) so programs link with a plain `-lcuda`:
//!   - `libcuda.so.1`, the driver (`cuda_sim.c`, `cuda_vmm.c`, `cuda_proc.c`, `cuda_extras.c`, `cuda_modules.c` and the memory
//!     model `sim_memory.c`, `sim_vmm.c`, `sim_tables.c`);
//!   - `libcudart.so.12`, the runtime (`cudart_sim.c`), every `cuda*` export versioned by
//!     `sim/libcudart.map`; it reaches the driver only by `dlopen`, found through its
//!     `$ORIGIN` run path;
//!   - `libamdhip64.so.6`, HIP (`hip_sim.c` and the same memory model, its own state);
//!   - `libnvidia-ml.so.1`, NVML (`nvml_sim.c`), reading the driver loaded in the same process.
//!
//!   The driver, HIP and NVML are built with hidden visibility and `-Bsymbolic`: only their API
//!   is exported, and nothing inside them binds to their own exports through the PLT.
//! * every `tests/programs/*.c` and `examples/*.c` -> `$OUT_DIR/bin/<file stem>`, built the way a
//!   real application is (debug info, frame pointers, an rpath to the simulators). A
//!   `tests/programs/*.cpp` is built the same way by the C++ compiler, with `-lstdc++`; where no
//!   C++ compiler runs, it is skipped with a warning (its test then has no program to run). A source
//!   chooses its libraries with a marker `gpumemprof-build: link=<list>`, a comma list of
//!   `cudart`, `cuda`, `amdhip64`, `nvidia-ml`, `dl` or `none` (default `cudart`;
//!   `gpumemprof-build: no-cudart` means `link=dl`). A source whose marker also says
//!   `shared-library` is built with `-shared -fPIC` as `$OUT_DIR/bin/lib<stem>.so`; one that
//!   says `cflags=<comma list>` gets those compiler flags after the usual ones (so
//!   `cflags=-O2,-fomit-frame-pointer` builds it the way a release build of a library is).
//!   One that says `by-test` is not built here: its test compiles it (it needs headers that
//!   only exist once the test has installed them, like nvtx3's).
//!
//! Libraries compile side by side, then programs side by side.
//! `GPUMEMPROF_TEST_OUT=$OUT_DIR` is passed to the crate so `support.rs` can find them.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One simulated library: sources relative to this crate, extra compiler/linker flags.
struct SimLibrary {
    /// The file name, which is also its soname.
    soname: &'static str,
    /// The development link name (`libcuda.so`).
    link_name: &'static str,
    sources: &'static [&'static str],
    flags: &'static [&'static str],
    /// A version script (relative to this crate), if its exports carry versions.
    version_script: Option<&'static str>,
    /// Libraries, after the sources.
    libs: &'static [&'static str],
}

/// Hidden by default, exports marked in the source; internal references bind locally.
const HIDDEN: &[&str] = &["-fvisibility=hidden", "-Wl,-Bsymbolic"];

const MODEL: [&str; 3] = ["sim/sim_memory.c", "sim/sim_vmm.c", "sim/sim_tables.c"];

const SIM_LIBRARIES: &[SimLibrary] = &[
    SimLibrary {
        soname: "libcuda.so.1",
        link_name: "libcuda.so",
        sources: &[
            "sim/cuda_sim.c",
            "sim/cuda_vmm.c",
            "sim/cuda_proc.c",
            "sim/cuda_extras.c",
            "sim/cuda_modules.c",
            MODEL[0],
            MODEL[1],
            MODEL[2],
        ],
        flags: HIDDEN,
        version_script: None,
        libs: &[],
    },
    SimLibrary {
        soname: "libcudart.so.12",
        link_name: "libcudart.so",
        sources: &["sim/cudart_sim.c"],
        // dlopen("libcuda.so.1") searches the caller's run path: the driver beside it.
        flags: &["-Wl,-rpath,$ORIGIN"],
        version_script: Some("sim/libcudart.map"),
        libs: &["-ldl"],
    },
    SimLibrary {
        soname: "libamdhip64.so.6",
        link_name: "libamdhip64.so",
        sources: &["sim/hip_sim.c", MODEL[0], MODEL[1], MODEL[2]],
        flags: HIDDEN,
        version_script: None,
        libs: &[],
    },
    SimLibrary {
        soname: "libnvidia-ml.so.1",
        link_name: "libnvidia-ml.so",
        sources: &["sim/nvml_sim.c"],
        flags: HIDDEN,
        version_script: None,
        libs: &["-ldl"],
    },
];

/// Folders (relative to the repository root) whose every `.c` (or `.cpp`) file is one program.
const PROGRAM_DIRS: &[&str] = &["tests/programs", "examples"];
/// The marker a program's source uses to choose how it is built.
const BUILD_MARKER: &str = "gpumemprof-build:";

const WARNINGS: &[&str] = &["-Wall", "-Wextra"];
/// The simulators are optimised: they sit under every benchmark of the profiler.
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
    // Every file of sim/ (sources, headers, the version script) and the folders themselves.
    for path in files_under(&crate_dir.join("sim")) {
        println!("cargo:rerun-if-changed={}", path.display());
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
    let failures = in_parallel(SIM_LIBRARIES, |library| {
        build_sim(&compiler, &crate_dir, &sim_dir, library)
    });
    if !failures.is_empty() {
        panic!("\n{}", failures.join("\n\n"));
    }

    let mut programs = list_programs(&repo_root);
    let cxx = cc::Build::new().cpp(true).get_compiler();
    if programs.iter().any(|p| is_cpp(p)) && !runs(&cxx) {
        println!(
            "cargo:warning=no C++ compiler runs ({}): the tests/programs/*.cpp programs are not built",
            cxx.path().display()
        );
        programs.retain(|p| !is_cpp(p));
    }
    for source in &programs {
        println!("cargo:rerun-if-changed={}", source.display());
    }
    let failures = in_parallel(&programs, |source| {
        let compiler = if is_cpp(source) { &cxx } else { &compiler };
        build_program(compiler, &crate_dir, &sim_dir, &bin_dir, source)
    });
    if !failures.is_empty() {
        panic!("\n{}", failures.join("\n\n"));
    }

    println!("cargo:rustc-env=GPUMEMPROF_TEST_OUT={}", out_dir.display());
}

/// Runs `job` on every item on its own thread (each is one compiler run); the failures.
fn in_parallel<T: Sync>(items: &[T], job: impl Fn(&T) -> Result<(), String> + Sync) -> Vec<String> {
    std::thread::scope(|scope| {
        let job = &job;
        let jobs: Vec<_> = items
            .iter()
            .map(|item| scope.spawn(move || job(item)))
            .collect();
        jobs.into_iter()
            .filter_map(|j| j.join().expect("compile thread panicked").err())
            .collect()
    })
}

fn build_sim(
    compiler: &cc::Tool,
    crate_dir: &Path,
    sim_dir: &Path,
    library: &SimLibrary,
) -> Result<(), String> {
    let file = sim_dir.join(library.soname);
    let mut args: Vec<OsString> = Vec::new();
    args.extend(SIM_FLAGS.iter().chain(WARNINGS).map(OsString::from));
    args.extend(library.flags.iter().map(OsString::from));
    args.push(include_flag(crate_dir));
    let mut sim_include = OsString::from("-I");
    sim_include.push(crate_dir.join("sim"));
    args.push(sim_include);
    args.push(format!("-Wl,-soname,{}", library.soname).into());
    if let Some(script) = library.version_script {
        let mut flag = OsString::from("-Wl,--version-script=");
        flag.push(crate_dir.join(script));
        args.push(flag);
    }
    args.push("-o".into());
    args.push(file.clone().into());
    args.extend(
        library
            .sources
            .iter()
            .map(|s| crate_dir.join(s).into_os_string()),
    );
    args.extend(library.libs.iter().map(OsString::from));
    compile(
        compiler,
        &args,
        &format!("the simulated {} (tests/sim)", library.soname),
    )?;

    // The development link name, as a toolkit installs it: libcuda.so -> libcuda.so.1.
    let link = sim_dir.join(library.link_name);
    let _ = fs::remove_file(&link);
    if std::os::unix::fs::symlink(library.soname, &link).is_err() {
        fs::copy(&file, &link).map_err(|e| format!("cannot create {}: {e}", link.display()))?;
    }
    Ok(())
}

/// How a program's source asks to be built.
#[derive(Debug, PartialEq)]
struct BuildSpec {
    shared_library: bool,
    /// Linker flags of the chosen libraries (`-lcudart`); empty for `none`.
    libs: Vec<&'static str>,
    /// Whether it needs `-L`/rpath to the simulators (everything but `none`).
    sim_path: bool,
    /// Extra compiler flags (`cflags=`), after PROGRAM_FLAGS so they override them.
    cflags: Vec<String>,
    /// `by-test`: the test that runs it compiles it; not built here.
    by_test: bool,
}

/// Reads every `gpumemprof-build:` marker of a source: its words up to the first that is not a
/// directive (the rest of the line is prose).
fn build_spec(text: &str) -> Result<BuildSpec, String> {
    let mut spec = BuildSpec {
        shared_library: false,
        libs: vec!["-lcudart"],
        sim_path: true,
        cflags: Vec::new(),
        by_test: false,
    };
    for line in text.lines() {
        let Some((_, rest)) = line.split_once(BUILD_MARKER) else {
            continue;
        };
        for word in rest.split_whitespace() {
            if word == "shared-library" {
                spec.shared_library = true;
            } else if word == "by-test" {
                spec.by_test = true;
            } else if let Some(list) = word.strip_prefix("cflags=") {
                spec.cflags
                    .extend(list.split(',').filter(|f| !f.is_empty()).map(String::from));
            } else if word == "no-cudart" {
                spec.libs = vec!["-ldl"];
            } else if let Some(list) = word.strip_prefix("link=") {
                spec.libs.clear();
                spec.sim_path = true;
                for name in list.split(',') {
                    match name {
                        "cudart" => spec.libs.push("-lcudart"),
                        "cuda" => spec.libs.push("-lcuda"),
                        "amdhip64" => spec.libs.push("-lamdhip64"),
                        "nvidia-ml" => spec.libs.push("-lnvidia-ml"),
                        "dl" => spec.libs.push("-ldl"),
                        "none" => spec.sim_path = false,
                        other => {
                            return Err(format!(
                                "unknown library {other:?} in {BUILD_MARKER} link={list} \
                                 (known: cudart, cuda, amdhip64, nvidia-ml, dl, none)"
                            ))
                        }
                    }
                }
                if !spec.sim_path && !spec.libs.is_empty() {
                    return Err(format!("link=none cannot be combined: link={list}"));
                }
            } else {
                break;
            }
        }
    }
    Ok(spec)
}

fn build_program(
    compiler: &cc::Tool,
    crate_dir: &Path,
    sim_dir: &Path,
    bin_dir: &Path,
    source: &Path,
) -> Result<(), String> {
    let what = source.display().to_string();
    let stem = source
        .file_stem()
        .expect("a program source has a stem")
        .to_string_lossy();
    let text = fs::read_to_string(source).map_err(|e| format!("{what}: {e}"))?;
    let spec = build_spec(&text).map_err(|e| format!("{what}: {e}"))?;
    if spec.by_test {
        return Ok(());
    }

    let mut args: Vec<OsString> = Vec::new();
    args.extend(PROGRAM_FLAGS.iter().chain(WARNINGS).map(OsString::from));
    args.extend(spec.cflags.iter().map(OsString::from));
    let output = if spec.shared_library {
        args.push("-shared".into());
        args.push("-fPIC".into());
        bin_dir.join(format!("lib{stem}.so"))
    } else {
        bin_dir.join(&*stem)
    };
    args.push(include_flag(crate_dir));
    args.push("-o".into());
    args.push(output.into());
    args.push(source.into());
    // Libraries after the source, or a linker using --as-needed drops them.
    if spec.sim_path {
        let mut lib_dir = OsString::from("-L");
        lib_dir.push(sim_dir);
        args.push(lib_dir);
        let mut rpath = OsString::from("-Wl,-rpath,");
        rpath.push(sim_dir);
        args.push(rpath);
    }
    args.extend(spec.libs.iter().map(OsString::from));
    if is_cpp(source) {
        args.push("-lstdc++".into());
    }
    compile(compiler, &args, &what)
}

fn is_cpp(source: &Path) -> bool {
    source.extension().is_some_and(|ext| ext == "cpp")
}

/// Whether `compiler --version` runs and succeeds.
fn runs(compiler: &cc::Tool) -> bool {
    Command::new(compiler.path())
        .envs(compiler.get_envs())
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn include_flag(crate_dir: &Path) -> OsString {
    let mut flag = OsString::from("-I");
    flag.push(crate_dir.join("sim/include"));
    flag
}

/// Every file below `dir` (recursively) and `dir`'s folders themselves, sorted.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = vec![dir.to_path_buf()];
    let entries =
        fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
            .path();
        if path.is_dir() {
            found.extend(files_under(&path));
        } else {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// Every `.c` and `.cpp` file of PROGRAM_DIRS, sorted; two programs may not share a file stem.
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
            if path
                .extension()
                .is_some_and(|ext| ext == "c" || ext == "cpp")
            {
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
