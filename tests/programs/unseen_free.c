/*
 * unseen_free.c: frees device memory the profiler never saw being allocated.
 *
 * The real situation: one library reaches the runtime through dlsym on libcudart's own handle
 * (as TensorFlow, JAX and Python ctypes do), which an LD_PRELOAD export does not intercept;
 * another part of the program frees that memory with an ordinary cudaFree. The profiler sees a
 * successful free of an address it does not know: it must record it (the analyzer counts an
 * "unknown free") and never crash.
 *
 * It allocates 1 MiB with the ordinary cudaMalloc and frees it (seen), then allocates 2 MiB
 * through dlsym(libcudart handle, "cudaMalloc") and frees it with the ordinary cudaFree.
 * Expected under the profiler today: 1 allocation, 1 matched free, 1 unknown free, nothing live.
 * Prints "ok" and exits 0.
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>

int main(void)
{
    void *seen, *unseen;
    if (cudaMalloc(&seen, 1 << 20) != cudaSuccess || cudaFree(seen) != cudaSuccess) {
        fprintf(stderr, "unseen_free: ordinary CUDA calls failed\n");
        return 1;
    }
    void *h = dlopen("libcudart.so.12", RTLD_NOW | RTLD_NOLOAD);
    if (!h) {
        fprintf(stderr, "unseen_free: libcudart.so.12 is not loaded: %s\n", dlerror());
        return 1;
    }
    cudaError_t (*real_malloc)(void **, size_t) = (cudaError_t(*)(void **, size_t))dlsym(h, "cudaMalloc");
    if (!real_malloc || real_malloc(&unseen, 2 << 20) != cudaSuccess) {
        fprintf(stderr, "unseen_free: cudaMalloc through the library handle failed\n");
        return 1;
    }
    if (cudaFree(unseen) != cudaSuccess) {
        fprintf(stderr, "unseen_free: cudaFree of the unseen pointer failed\n");
        return 1;
    }
    dlclose(h);
    printf("ok\n");
    return 0;
}
