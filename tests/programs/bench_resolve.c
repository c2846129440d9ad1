/*
 * bench_resolve.c: the benchmark client of a runtime that resolves driver functions on every
 * call, through the driver's resolver.
 *
 * The real situation: some runtimes and bindings ask cuGetProcAddress for a function each time
 * they call it instead of keeping the answer (a lookup per call), and most of what they ask for
 * is not an allocation function. Under a profiler that wraps the resolver, each of those
 * lookups costs whatever the wrapper does to decide whether to substitute its own function.
 * gpumemprof-build: link=dl
 *
 * Usage: bench_resolve [pairs=200000]. Loads libcuda.so.1, takes cuGetProcAddress_v2 with
 * dlsym, calls cuInit(0), runs 1000 warm-up rounds, then times `pairs` rounds, each: resolve
 * "cuMemAlloc" and allocate 4096 bytes with what came back, resolve "cuCtxGetDevice" (not an
 * allocation function) and call it, resolve "cuMemFree" and free the block (all with cudaVersion
 * 12040, flags 0). Prints "ns_per_pair=<float>" and "pairs=<pairs>"; exits 1 if a call fails.
 * Expected events: 1000 + pairs cuMemAlloc_v2 and as many cuMemFree_v2, nothing live at exit.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define VERSION 12040

typedef __typeof__(cuGetProcAddress_v2) resolver_fn;

static resolver_fn *resolve;

static void *look_up(const char *name)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult status;
    if (resolve(name, &fn, VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS || !fn) {
        fprintf(stderr, "bench_resolve: cannot resolve %s\n", name);
        exit(1);
    }
    return fn;
}

static void rounds(long n)
{
    for (long i = 0; i < n; i++) {
        CUdeviceptr p;
        __typeof__(cuMemAlloc_v2) *alloc = (__typeof__(cuMemAlloc_v2) *)look_up("cuMemAlloc");
        if (alloc(&p, 4096) != CUDA_SUCCESS)
            exit(1);
        CUdevice d;
        __typeof__(cuCtxGetDevice) *device = (__typeof__(cuCtxGetDevice) *)look_up("cuCtxGetDevice");
        (void)device(&d);
        __typeof__(cuMemFree_v2) *release = (__typeof__(cuMemFree_v2) *)look_up("cuMemFree");
        if (release(p) != CUDA_SUCCESS)
            exit(1);
    }
}

int main(int argc, char **argv)
{
    long pairs = argc > 1 ? atol(argv[1]) : 200000;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    resolve = h ? (resolver_fn *)dlsym(h, "cuGetProcAddress_v2") : NULL;
    if (!resolve) {
        fprintf(stderr, "bench_resolve: no libcuda.so.1 with cuGetProcAddress_v2\n");
        return 1;
    }
    __typeof__(cuInit) *init = (__typeof__(cuInit) *)look_up("cuInit");
    if (init(0) != CUDA_SUCCESS)
        return 1;
    rounds(1000);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    rounds(pairs);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
    printf("ns_per_pair=%.1f\npairs=%ld\n", ns / pairs, pairs);
    return 0;
}
