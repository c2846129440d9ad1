/*
 * no_runtime.c: a process that reaches the profiler's cudaMalloc without any CUDA runtime.
 * gpumemprof-build: no-cudart (build.rs links this one without libcudart)
 *
 * The real situation: LD_PRELOAD is inherited by every process of a job, and a tool (a
 * launcher, a health check) looks up cudaMalloc in the global scope and calls it on a machine
 * or in a process where libcudart is not loaded. The profiler's export is found, but there is
 * no real function behind it: it must return the runtime's own "no driver" error
 * (cudaErrorInsufficientDriver = 35) and record nothing, never crash.
 *
 * Prints "cudaMalloc rc=<n> ptr=<p>" and "cudaFree rc=<n>", or "cudaMalloc absent" when no
 * cudaMalloc is in the global scope (no profiler, no runtime). Exits 0.
 */
#include <dlfcn.h>
#include <stdio.h>

int main(void)
{
    int (*cuda_malloc)(void **, size_t) = (int (*)(void **, size_t))dlsym(RTLD_DEFAULT, "cudaMalloc");
    int (*cuda_free)(void *) = (int (*)(void *))dlsym(RTLD_DEFAULT, "cudaFree");
    if (!cuda_malloc || !cuda_free) {
        printf("cudaMalloc absent\n");
        return 0;
    }
    void *p = (void *)0x1; /* must stay untouched: the call fails before any work */
    int rc = cuda_malloc(&p, 1 << 20);
    printf("cudaMalloc rc=%d ptr=%p\n", rc, p);
    printf("cudaFree rc=%d\n", cuda_free(p));
    return 0;
}
