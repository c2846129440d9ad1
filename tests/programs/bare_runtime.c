/*
 * bare_runtime.c: a CUDA runtime with no way to name the current device.
 * gpumemprof-build: shared-library link=none
 *
 * The real situation: a vendor's or a test's minimal runtime (a shim of its own, an old
 * or stripped build) exports cudaMalloc, cudaFree and cudaGetDeviceCount but neither
 * cudaGetDevice nor, anywhere in the process, a driver with cuCtxGetDevice. The profiler
 * asks for the current device on every allocation: it must remember that the helper is
 * missing (one lookup, not one per event) and put the allocations on the only device,
 * saying so once.
 *
 * Memory is host memory from malloc; the device count is 1. A request over 1 TiB is refused
 * as a device would refuse it: out of memory (2), nothing allocated.
 */
#include <stdlib.h>

__attribute__((visibility("default"))) int cudaMalloc(void **ptr, size_t size)
{
    if (!ptr)
        return 1; /* cudaErrorInvalidValue */
    if (size > (size_t)1 << 40)
        return 2; /* cudaErrorMemoryAllocation */
    *ptr = malloc(size ? size : 1);
    return *ptr ? 0 : 2; /* cudaErrorMemoryAllocation */
}

__attribute__((visibility("default"))) int cudaFree(void *ptr)
{
    free(ptr);
    return 0;
}

__attribute__((visibility("default"))) int cudaGetDeviceCount(int *count)
{
    if (!count)
        return 1;
    *count = 1;
    return 0;
}
