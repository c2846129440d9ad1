/*
 * ctor_alloc.c: GPU memory allocated before main() runs.
 *
 * The real situation: a C++ library with a global object whose constructor allocates a device
 * buffer (a workspace, a lookup table) during static initialisation, or a Python extension that
 * allocates when it is loaded. The allocation happens while the dynamic loader is still running
 * constructors, before main() and possibly before a profiler has finished starting; it must still
 * be recorded, with its stack.
 *
 * A constructor allocates 2 MiB with cudaMalloc (the line marked CTOR) and never frees it; main()
 * then allocates and frees 1 MiB and prints what it did.
 *
 * Expected numbers: 2 successful cudaMalloc calls (2097152 bytes from the constructor, then
 * 1048576 bytes from main), 1 successful cudaFree (the 1 MiB), no failures. Live at exit: the
 * constructor's 2 MiB, 2097152 bytes in one allocation. Peak: 3 MiB = 3145728 bytes.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#define MiB ((size_t)1 << 20)

static void *workspace; /* allocated before main, kept for the whole run */

static void die(const char *what, cudaError_t rc)
{
    fprintf(stderr, "ctor_alloc: %s failed: %d (%s)\n", what, (int)rc, cudaGetErrorName(rc));
    exit(1);
}

__attribute__((constructor)) static void allocate_workspace(void)
{
    cudaError_t rc = cudaMalloc(&workspace, 2 * MiB); /* GPUMEMPROF-CTOR */
    if (rc != cudaSuccess)
        die("cudaMalloc in constructor", rc);
}

int main(void)
{
    void *scratch;
    cudaError_t rc = cudaMalloc(&scratch, 1 * MiB); /* GPUMEMPROF-MAIN-ALLOC */
    if (rc != cudaSuccess)
        die("cudaMalloc", rc);
    rc = cudaFree(scratch);
    if (rc != cudaSuccess)
        die("cudaFree", rc);
    printf("ctor_alloc: 2 MiB allocated before main at %p is still live; "
           "1 MiB allocated and freed in main\n",
           workspace);
    return 0;
}
