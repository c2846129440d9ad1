//! PyTorch's real caching allocator on the simulated GPU, for the tests that need code we
//! did not write driven from C++: `libc10.so` and `libc10_cuda.so` of the torch package (see
//! `torch_package`), its headers and NVIDIA's CUDA 13 headers, the package's stand-in
//! `libcudart.so.13`, and the harness `tests/torch/caching_allocator.cpp`, compiled against
//! all of them once per test process. A machine that cannot download the package fails the
//! test with pip's message: it never passes without running.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::repo_root;
use crate::torch_package::package;
use crate::wheels::built;

/// What the tests run.
pub struct Harness {
    /// The harness program.
    pub exe: PathBuf,
    /// The same harness as a shared library (`gpumemprof_bench_init`,
    /// `gpumemprof_reported_pairs`), for Python through ctypes.
    pub lib: PathBuf,
}

impl Harness {
    /// `program` (the harness, or Python driving its library) on the package's simulated GPU
    /// of 1 GiB, its stand-in libraries found through `LD_LIBRARY_PATH`
    /// (`torch_package::Package::command`).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        package().command(program)
    }
}

/// The harness, downloaded and built on first use (see the module comment).
pub fn harness() -> &'static Harness {
    static BUILT: OnceLock<Harness> = OnceLock::new();
    BUILT.get_or_init(|| {
        let pkg = package();
        let dir = crate::wheels::build_dir("torch");
        let torch_lib = pkg.torch_lib();
        // The harness as a program, and the same source as a library Python loads with
        // ctypes (RTLD_LOCAL, as Python loads PyTorch's extension modules and what they
        // link).
        let harness = |extra: &[&str], out: &Path, what: &str| {
            built(
                Command::new("g++")
                    .args(["-std=c++20", "-g", "-O1", "-fno-omit-frame-pointer"])
                    .args(extra)
                    .arg("-I")
                    .arg(pkg.site.join("torch/include"))
                    .arg("-I")
                    .arg(&pkg.cuda_include)
                    .arg("-o")
                    .arg(out)
                    .arg(repo_root().join("tests/torch/caching_allocator.cpp"))
                    .arg(format!("-L{}", torch_lib.display()))
                    .args(["-lc10_cuda", "-lc10"])
                    .arg(format!("-Wl,-rpath,{}", torch_lib.display()))
                    .arg(format!("-Wl,-rpath-link,{}", pkg.lib_dir.display())),
                what,
            )
        };
        let exe = dir.join("caching_allocator");
        harness(
            &[],
            &exe,
            "building tests/torch/caching_allocator.cpp against libc10_cuda.so",
        );
        let lib = dir.join("libcaching_allocator.so");
        harness(
            &["-shared", "-fPIC"],
            &lib,
            "building tests/torch/caching_allocator.cpp as a shared library",
        );
        Harness { exe, lib }
    })
}
