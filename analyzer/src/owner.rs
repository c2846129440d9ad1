//! Which library asked for an allocation: the innermost native frame of its stack in a known
//! module outside what every allocation passes through on its way to the memory (the CUDA
//! and HIP runtimes and drivers, the profiler's hooks). PyTorch's caching allocator is
//! `libc10_cuda`; a library that allocates for itself (CUDA 13's cuBLAS workspace,
//! NCCL's buffers) has its own frame there.

use std::path::Path;

/// What an allocator's call passes through on its way to the memory, never the allocator.
const CALLEES: &[&str] = &["libcudart", "libcuda.", "libamdhip64", "libgpumemprof"];

/// The file name of the module that asked, from a stack's native modules, innermost first
/// (`Symbolizer::native_modules`); `None` when no frame says (no stack captured, or only
/// frames in unknown modules or the runtimes).
pub fn asking_library<'a>(modules: impl IntoIterator<Item = Option<&'a str>>) -> Option<&'a str> {
    fn name(m: &str) -> &str {
        Path::new(m)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or(m)
    }
    (modules.into_iter().flatten().map(name)).find(|n| !CALLEES.iter().any(|c| n.starts_with(c)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_innermost_caller_outside_the_runtimes_and_the_hooks_asked() {
        let cudart = Some("/v/nvidia/cu13/lib/libcudart.so.13");
        let shim = Some("/opt/gpumemprof/libgpumemprof.so");
        let cublas = Some("/v/nvidia/cu13/lib/libcublas.so.13");
        let c10 = Some("/v/torch/lib/libc10_cuda.so");
        assert_eq!(
            asking_library([shim, cudart, None, c10]),
            Some("libc10_cuda.so")
        );
        assert_eq!(
            asking_library([cudart, cublas, c10]),
            Some("libcublas.so.13")
        );
        assert_eq!(
            asking_library([Some("/usr/lib/libcuda.so.1"), Some("/w/train")]),
            Some("train")
        );
        assert_eq!(asking_library([shim, cudart, None]), None);
    }
}
