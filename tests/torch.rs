//! PyTorch's real caching allocator on the simulated GPU, for the tests that need code we
//! did not write: `libc10.so` and `libc10_cuda.so` from the pinned torch wheel, NVIDIA's
//! CUDA 13 headers from their wheels, a stand-in `libcudart.so.13` built from `tests/sim`
//! (`cudart_sim.c` and `cudart13.c`, version node `libcudart.so.13`) and the harness
//! `tests/torch/caching_allocator.cpp`, compiled against all of them.
//!
//! Everything is downloaded once, into `target/torch/` (pip, about 540 MB, of which the two
//! libraries and the headers are kept), and built once per test process. A machine that
//! cannot download them fails the test with pip's message: it never passes without running.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::wheels::built;
use crate::{repo_root, sim_dir};

/// The pinned wheels (the torch version whose allocator entry points the shim hooks).
pub const WHEELS: &[&str] = &[
    "torch==2.15.0",
    "nvidia-cuda-runtime==13.5.37",
    "nvidia-cuda-crt==13.5.37",
];

/// What the tests run.
pub struct Harness {
    /// The harness program.
    pub exe: PathBuf,
    /// The same harness as a shared library (`gpumemprof_bench_init`,
    /// `gpumemprof_reported_pairs`), for Python through ctypes.
    pub lib: PathBuf,
    /// Put this on `LD_LIBRARY_PATH`: the stand-in `libcudart.so.13`, and the simulated
    /// driver and NVML beside it.
    pub lib_dir: PathBuf,
    /// `torch/lib` of the wheel (`libc10.so`, `libc10_cuda.so`).
    pub torch_lib: PathBuf,
}

impl Harness {
    /// `program` (the harness, or Python driving its library) on the simulated GPU of
    /// 1 GiB: the simulator's variables of the test process cleared, the stand-in
    /// libraries found through `LD_LIBRARY_PATH`.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        for var in crate::SIM_ENV {
            cmd.env_remove(var);
        }
        cmd.env("LD_LIBRARY_PATH", &self.lib_dir)
            .env("SIMCUDA_CAPACITY", (1u64 << 30).to_string());
        cmd
    }
}

/// The harness, downloaded and built on first use (see the module comment).
pub fn harness() -> &'static Harness {
    static BUILT: OnceLock<Harness> = OnceLock::new();
    BUILT.get_or_init(|| {
        let root = wheels();
        let dir = crate::wheels::build_dir("torch");
        let cu13 = root.join("nvidia/cu13/include");
        let sim = repo_root().join("tests/sim");
        let (o_sim, o_13) = (dir.join("cudart_sim.o"), dir.join("cudart13.o"));
        let compile = |include: &Path, source: &str, object: &Path, what: &str| {
            built(
                Command::new("cc")
                    .args(["-c", "-fPIC", "-O1", "-g", "-I"])
                    .arg(include)
                    .arg(sim.join(source))
                    .arg("-o")
                    .arg(object),
                what,
            )
        };
        compile(
            &sim.join("include"),
            "cudart_sim.c",
            &o_sim,
            "compiling cudart_sim.c",
        );
        compile(
            &cu13,
            "cudart13.c",
            &o_13,
            "compiling cudart13.c against the CUDA 13 headers",
        );
        built(
            Command::new("cc")
                .arg("-shared")
                .arg("-o")
                .arg(dir.join("libcudart.so.13"))
                .arg("-Wl,-soname,libcudart.so.13")
                .arg(format!(
                    "-Wl,--version-script={}",
                    sim.join("libcudart13.map").display()
                ))
                .arg("-Wl,-rpath,$ORIGIN")
                .args([&o_sim, &o_13])
                .arg("-ldl"),
            "linking libcudart.so.13",
        );
        // The simulated driver the runtime dlopens, beside it, and NVML, which c10 opens
        // for expandable segments (fabric and NVLink queries).
        for lib in ["libcuda.so.1", "libnvidia-ml.so.1"] {
            std::fs::copy(sim_dir().join(lib), dir.join(lib))
                .unwrap_or_else(|e| panic!("copy the simulated {lib}: {e}"));
        }
        let torch_lib = root.join("torch/lib");
        // The harness as a program, and the same source as a library Python loads with
        // ctypes (RTLD_LOCAL, as Python loads PyTorch's extension modules and what they
        // link).
        let harness = |extra: &[&str], out: &Path, what: &str| {
            built(
                Command::new("g++")
                    .args(["-std=c++20", "-g", "-O1", "-fno-omit-frame-pointer"])
                    .args(extra)
                    .arg("-I")
                    .arg(root.join("torch/include"))
                    .arg("-I")
                    .arg(&cu13)
                    .arg("-o")
                    .arg(out)
                    .arg(repo_root().join("tests/torch/caching_allocator.cpp"))
                    .arg(format!("-L{}", torch_lib.display()))
                    .args(["-lc10_cuda", "-lc10"])
                    .arg(format!("-Wl,-rpath,{}", torch_lib.display()))
                    .arg(format!("-Wl,-rpath-link,{}", dir.display())),
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
        Harness {
            exe,
            lib,
            lib_dir: dir,
            torch_lib,
        }
    })
}

/// The extracted wheels (`torch/lib`, `torch/include`, `nvidia/cu13/include`).
fn wheels() -> PathBuf {
    // Only the two libraries and the headers: never the real libcudart of the runtime
    // wheel, which libc10_cuda.so's run path would otherwise find before ours.
    let out = crate::wheels::extracted(
        "torch",
        WHEELS,
        &[
            "torch/lib/libc10.so",
            "torch/lib/libc10_cuda.so",
            "torch/include/",
            "nvidia/cu13/include/",
        ],
    );
    assert!(
        out.join("torch/lib/libc10_cuda.so").is_file(),
        "no torch/lib/libc10_cuda.so in {WHEELS:?}"
    );
    out
}
