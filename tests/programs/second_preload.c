/*
 * second_preload.c: a second preloaded library that also exports cudaMalloc and forwards with
 * dlsym(RTLD_NEXT, "cudaMalloc"), as interposing tools (HAMi-core, vcuda, other profilers) do.
 * Loaded after gpumemprof in LD_PRELOAD, its RTLD_NEXT lookup must still find the next
 * definition in load order (the runtime's), even though the profiler overrides dlsym: a dlsym
 * override that forwards with an ordinary call would change the caller and return this library's
 * own cudaMalloc (infinite recursion) or the profiler's.
 * gpumemprof-build: shared-library link=dl
 *
 * Built as $OUT_DIR/bin/libsecond_preload.so. Each cudaMalloc call is counted and forwarded
 * unchanged (cudaErrorInsufficientDriver, 35, if there is nothing to forward to); at exit a
 * destructor prints "second_preload_calls=<n>" on stderr.
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>

static unsigned long calls;

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    static cudaError_t (*next)(void **, size_t);
    __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
    if (!next)
        next = (cudaError_t(*)(void **, size_t))dlsym(RTLD_NEXT, "cudaMalloc");
    if (!next)
        return cudaErrorInsufficientDriver;
    return next(devPtr, size);
}

__attribute__((destructor)) static void report(void)
{
    fprintf(stderr, "second_preload_calls=%lu\n", __atomic_load_n(&calls, __ATOMIC_RELAXED));
}
