/*
 * drv_dlsym.c: a program that loads the CUDA driver itself and looks its functions up by their
 * exported names, the way TensorFlow and JAX/XLA do (xla/tsl/cuda/cuda_stub.cc):
 * dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL), then dlsym(handle, "cuInit"),
 * dlsym(handle, "cuMemAlloc_v2"), dlsym(handle, "cuMemFree_v2"). dlsym on a handle searches
 * that library, not the global scope, so a preloaded export is skipped: a profiler sees these
 * calls only by overriding dlsym.
 * gpumemprof-build: link=dl
 *
 * In order (MiB = 1048576 bytes; addresses with the default configuration): cuInit(0);
 * cuMemAlloc_v2 6 MiB -> 0x700000000000, 10 MiB -> 0x700000600000 (kept); cuMemFree_v2 of the
 * 6 MiB one. Totals: 2 successful allocations, 1 successful free. Live at exit: 10 MiB =
 * 10485760 bytes in 1 block.
 *
 * Prints (key=value): init_rc, alloc_6mib, alloc_10mib, free_6mib, live_device_bytes.
 */
#define PROGRAM "drv_dlsym"

#include "report.h"

#include <cuda.h>
#include <dlfcn.h>

#define MiB ((size_t)1 << 20)

/* dlsym, or exit with a message. */
static void *lookup(void *h, const char *name)
{
    void *fn = dlsym(h, name);
    if (!fn) {
        fprintf(stderr, PROGRAM ": libcuda.so.1 has no %s\n", name);
        exit(1);
    }
    return fn;
}

int main(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, PROGRAM ": cannot load libcuda.so.1: %s\n", dlerror());
        return 1;
    }
    __typeof__(cuInit) *init = (__typeof__(cuInit) *)lookup(h, "cuInit");
    __typeof__(cuMemAlloc_v2) *mem_alloc = (__typeof__(cuMemAlloc_v2) *)lookup(h, "cuMemAlloc_v2");
    __typeof__(cuMemFree_v2) *mem_free = (__typeof__(cuMemFree_v2) *)lookup(h, "cuMemFree_v2");

    expect_rc("cuInit", init(0), CUDA_SUCCESS);
    put_int("init_rc", 0);
    CUdeviceptr six, ten;
    expect_rc("cuMemAlloc_v2 6 MiB", mem_alloc(&six, 6 * MiB), CUDA_SUCCESS);
    put_hex("alloc_6mib", six);
    expect_rc("cuMemAlloc_v2 10 MiB", mem_alloc(&ten, 10 * MiB), CUDA_SUCCESS);
    put_hex("alloc_10mib", ten);
    expect_rc("cuMemFree_v2 6 MiB", mem_free(six), CUDA_SUCCESS);
    put_hex("free_6mib", six);
    put_u64("live_device_bytes", 10 * MiB);
    return 0;
}
