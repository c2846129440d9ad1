//! The whole, unmodified torch package on the simulated GPU (REFERENCE.md section 12): the
//! pinned torch wheel and its pure-Python dependencies installed into `target/<profile>/
//! torch-package/site-packages`, and a stand-in for every NVIDIA library its `torch/lib/*.so` link,
//! generated from the wheel's own imports by `tests/torch/standins.py` (the simulated runtime
//! `libcudart.so.13` among them, compiled against NVIDIA's CUDA 13 headers so `cudaDeviceProp`
//! has the real layout), with the simulated driver and NVML beside them.
//!
//! `import torch` then finds a GPU: `nn.Module`s, autograd, `torch.optim`, the caching
//! allocator with its real policy, `torch.OutOfMemoryError` and PyTorch's own memory recorder
//! all run; kernels compute nothing, so tensors hold garbage, while the allocation stream is
//! PyTorch's real one. Downloaded once (about 540 MB for torch), built once per test process.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use crate::wheels::built;
use crate::{repo_root, sim_dir};

/// torch and what `import torch` needs of its dependencies (no `nvidia-*` package: the
/// stand-ins replace them), at the versions pip chose for torch 2.15.0 on CPython 3.11.
pub const PINS: &[&str] = &[
    "torch==2.15.0",
    "filelock==4.3.1",
    "typing-extensions==4.16.0",
    "sympy==1.14.0",
    "mpmath==1.4.1",
    "networkx==3.6.1",
    "jinja2==3.1.6",
    "markupsafe==3.0.4",
    "fsspec==2026.9.0",
    "numpy==2.4.6",
];

/// NVIDIA's CUDA 13 headers (the version torch 2.15 was built with).
pub const HEADER_PINS: &[&str] = &["nvidia-cuda-runtime==13.5.37", "nvidia-cuda-crt==13.5.37"];

/// Device memory of the simulated GPU the package runs on unless a test says otherwise.
pub const CAPACITY: u64 = 1 << 30;

/// The installed package and its stand-in libraries.
pub struct Package {
    /// The `site-packages` holding `torch` (put on `PYTHONPATH`).
    pub site: PathBuf,
    /// The stand-ins (`libcudart.so.13`, `libcublas.so.13`, ..., `libcuda.so.1`,
    /// `libnvidia-ml.so.1`), put on `LD_LIBRARY_PATH`.
    pub lib_dir: PathBuf,
    /// NVIDIA's CUDA 13 headers (`cuda_runtime_api.h`, ...).
    pub cuda_include: PathBuf,
}

impl Package {
    /// `torch/lib` of the installed wheel (`libc10.so`, `libc10_cuda.so`, ...).
    pub fn torch_lib(&self) -> PathBuf {
        self.site.join("torch/lib")
    }

    /// `program` on the simulated GPU of [`CAPACITY`] bytes with the package importable: the
    /// simulators' variables and any preload of the test process cleared, the stand-ins on
    /// `LD_LIBRARY_PATH`, the package on `PYTHONPATH`, and Python's warnings of the run on
    /// stderr as a user would see them.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new(program);
        for var in crate::SIM_ENV {
            cmd.env_remove(var);
        }
        cmd.env_remove("LD_PRELOAD")
            .env_remove("PYTORCH_CUDA_ALLOC_CONF")
            .env_remove("PYTORCH_ALLOC_CONF")
            .env("LD_LIBRARY_PATH", &self.lib_dir)
            .env("PYTHONPATH", &self.site)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("SIMCUDA_CAPACITY", CAPACITY.to_string());
        cmd
    }

    /// `python3 tests/programs/<script> args...` under [`Package::command`], in the
    /// repository root (so the script's paths print relative to it).
    pub fn script(&self, script: &str, args: &[&str]) -> Command {
        let path = repo_root().join("tests/programs").join(script);
        assert!(path.is_file(), "no script {}", path.display());
        let mut cmd = self.command("python3");
        cmd.arg(path).args(args).current_dir(repo_root());
        cmd
    }
}

/// The package, installed and its stand-ins built on first use (see the module comment).
pub fn package() -> &'static Package {
    static BUILT: OnceLock<Package> = OnceLock::new();
    BUILT.get_or_init(|| {
        let site = crate::wheels::installed("torch-package", PINS);
        assert!(
            site.join("torch/lib/libtorch_cuda.so").is_file(),
            "no torch/lib/libtorch_cuda.so in {}",
            site.display()
        );
        let headers =
            crate::wheels::extracted("cuda-headers", HEADER_PINS, &["nvidia/cu13/include/"]);
        let cuda_include = headers.join("nvidia/cu13/include");
        let lib_dir = crate::wheels::build_dir("torch-package");
        built(
            Command::new("python3")
                .arg(repo_root().join("tests/torch/standins.py"))
                .arg(site.join("torch/lib"))
                .arg(repo_root().join("tests/sim"))
                .arg(&cuda_include)
                .arg(&lib_dir)
                .arg(sim_dir()),
            "building the NVIDIA stand-ins for the torch package (tests/torch/standins.py)",
        );
        Package {
            site,
            lib_dir,
            cuda_include,
        }
    })
}
