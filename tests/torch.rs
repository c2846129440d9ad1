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

use crate::{repo_root, sim_dir, target_dir};

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

/// The harness, downloaded and built on first use (see the module comment).
pub fn harness() -> &'static Harness {
    static BUILT: OnceLock<Harness> = OnceLock::new();
    BUILT.get_or_init(|| {
        let root = wheels();
        let dir = target_dir()
            .join("torch")
            .join(format!("build.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the torch build folder");
        let cu13 = root.join("nvidia/cu13/include");
        let sim = repo_root().join("tests/sim");
        let cc = |args: &[&std::ffi::OsStr], what: &str| {
            let out = Command::new(args[0])
                .args(&args[1..])
                .output()
                .unwrap_or_else(|e| panic!("run {:?}: {e}", args[0]));
            assert!(
                out.status.success(),
                "{what} failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let os = |s: &Path| s.as_os_str().to_owned();
        let o_sim = dir.join("cudart_sim.o");
        let o_13 = dir.join("cudart13.o");
        cc(
            &[
                "cc".as_ref(),
                "-c".as_ref(),
                "-fPIC".as_ref(),
                "-O1".as_ref(),
                "-g".as_ref(),
                "-I".as_ref(),
                &os(&sim.join("include")),
                &os(&sim.join("cudart_sim.c")),
                "-o".as_ref(),
                &os(&o_sim),
            ],
            "compiling cudart_sim.c",
        );
        cc(
            &[
                "cc".as_ref(),
                "-c".as_ref(),
                "-fPIC".as_ref(),
                "-O1".as_ref(),
                "-g".as_ref(),
                "-I".as_ref(),
                &os(&cu13),
                &os(&sim.join("cudart13.c")),
                "-o".as_ref(),
                &os(&o_13),
            ],
            "compiling cudart13.c against the CUDA 13 headers",
        );
        let map = format!(
            "-Wl,--version-script={}",
            sim.join("libcudart13.map").display()
        );
        cc(
            &[
                "cc".as_ref(),
                "-shared".as_ref(),
                "-o".as_ref(),
                &os(&dir.join("libcudart.so.13")),
                "-Wl,-soname,libcudart.so.13".as_ref(),
                map.as_ref(),
                "-Wl,-rpath,$ORIGIN".as_ref(),
                &os(&o_sim),
                &os(&o_13),
                "-ldl".as_ref(),
            ],
            "linking libcudart.so.13",
        );
        // The simulated driver the runtime dlopens, beside it, and NVML, which c10 opens
        // for expandable segments (fabric and NVLink queries).
        for lib in ["libcuda.so.1", "libnvidia-ml.so.1"] {
            std::fs::copy(sim_dir().join(lib), dir.join(lib))
                .unwrap_or_else(|e| panic!("copy the simulated {lib}: {e}"));
        }
        let torch_lib = root.join("torch/lib");
        let exe = dir.join("caching_allocator");
        let rpath = format!("-Wl,-rpath,{}", torch_lib.display());
        let rpath_link = format!("-Wl,-rpath-link,{}", dir.display());
        let lib_flag = format!("-L{}", torch_lib.display());
        cc(
            &[
                "g++".as_ref(),
                "-std=c++20".as_ref(),
                "-g".as_ref(),
                "-O1".as_ref(),
                "-fno-omit-frame-pointer".as_ref(),
                "-I".as_ref(),
                &os(&root.join("torch/include")),
                "-I".as_ref(),
                &os(&cu13),
                "-o".as_ref(),
                &os(&exe),
                &os(&repo_root().join("tests/torch/caching_allocator.cpp")),
                lib_flag.as_ref(),
                "-lc10_cuda".as_ref(),
                "-lc10".as_ref(),
                rpath.as_ref(),
                rpath_link.as_ref(),
            ],
            "building tests/torch/caching_allocator.cpp against libc10_cuda.so",
        );
        // The same source as a library Python loads with ctypes (RTLD_LOCAL, as Python loads
        // PyTorch's extension modules and what they link).
        let lib = dir.join("libcaching_allocator.so");
        cc(
            &[
                "g++".as_ref(),
                "-std=c++20".as_ref(),
                "-g".as_ref(),
                "-O1".as_ref(),
                "-fno-omit-frame-pointer".as_ref(),
                "-shared".as_ref(),
                "-fPIC".as_ref(),
                "-I".as_ref(),
                &os(&root.join("torch/include")),
                "-I".as_ref(),
                &os(&cu13),
                "-o".as_ref(),
                &os(&lib),
                &os(&repo_root().join("tests/torch/caching_allocator.cpp")),
                lib_flag.as_ref(),
                "-lc10_cuda".as_ref(),
                "-lc10".as_ref(),
                rpath.as_ref(),
                rpath_link.as_ref(),
            ],
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
