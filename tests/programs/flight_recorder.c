/*
 * flight_recorder.c: the run that GPUMEMPROF_MODE=oom (record nothing until an out-of-memory)
 * is for, and the run it must leave alone.
 *
 * The real situation: a long job profiled "just in case": nothing should reach the disk unless
 * the job runs out of device memory; if it does, the trace must say what was live at that
 * moment and what happened just before, as if it had been recording all along.
 *
 * Usage: flight_recorder <ok|oom>. Device 0 has 128 MiB (SIMCUDA_CAPACITY, set by main when
 * unset). All calls are cudaMalloc / cudaFree on device 0 (MiB = 1048576 bytes).
 *   ok:  100 allocations of 1 MiB, all 100 freed; then cudaMalloc with a NULL out-pointer, which
 *        fails with cudaErrorInvalidValue (1): a failure, but not out-of-memory. Prints
 *        "allocs=100", "frees=100", "invalid_rc=1". Never out of memory: in oom mode no trace
 *        file is created and the profiler prints nothing.
 *   oom: alloc_layers(): 100 allocations of 1 MiB, buffers 0..99 (line marked FLIGHT-ALLOC);
 *        trim(): frees, in ascending order, the 60 buffers i with i % 5 < 3, leaving the 40 with
 *        i % 5 >= 3: 40 MiB (41943040 bytes) live in 40 allocations;
 *        grow(): cudaMalloc(96 MiB) with 128 - 40 = 88 MiB free: out of memory (2), mem_free
 *        92274688, mem_total 134217728 (line marked FLIGHT-OOM);
 *        after(): cudaMalloc(4 MiB) and its cudaFree, which succeed (line marked FLIGHT-AFTER).
 *        Nothing else is freed: 40 MiB live in 40 allocations at the end. Prints "allocs=100",
 *        "frees=60", "live_bytes=41943040", "oom_rc=2", "after_rc=0".
 * Exit status 0; 1 if a call returns something other than documented.
 * Expected trace in oom mode: replays to 40 MiB live in 40 allocations (all from FLIGHT-ALLOC)
 * at the failure, then the 4 MiB allocation and its free, then 40 MiB in 40 at the end; with a
 * ring of at least 161 events, every one of the 100 allocations and 60 frees.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB ((size_t)1 << 20)
#define LAYERS 100

static void *layer[LAYERS];

static void expect(cudaError_t got, cudaError_t want, const char *what)
{
    if (got != want) {
        fprintf(stderr, "flight_recorder: %s returned %d, expected %d\n", what, (int)got, (int)want);
        exit(1);
    }
}

static void alloc_layers(void)
{
    for (int i = 0; i < LAYERS; i++)
        expect(cudaMalloc(&layer[i], MiB), cudaSuccess, "cudaMalloc(1 MiB)"); /* GPUMEMPROF-FLIGHT-ALLOC */
}

static int trim(void)
{
    int freed = 0;
    for (int i = 0; i < LAYERS; i++) {
        if (i % 5 < 3) {
            expect(cudaFree(layer[i]), cudaSuccess, "cudaFree");
            freed++;
        }
    }
    return freed;
}

static cudaError_t grow(void)
{
    void *p = NULL;
    return cudaMalloc(&p, 96 * MiB); /* GPUMEMPROF-FLIGHT-OOM */
}

static cudaError_t after(void)
{
    void *p;
    cudaError_t rc = cudaMalloc(&p, 4 * MiB); /* GPUMEMPROF-FLIGHT-AFTER */
    if (rc == cudaSuccess)
        rc = cudaFree(p);
    return rc;
}

int main(int argc, char **argv)
{
    setenv("SIMCUDA_CAPACITY", "134217728", 0); /* before the first CUDA call */
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "ok") == 0) {
        alloc_layers();
        for (int i = 0; i < LAYERS; i++)
            expect(cudaFree(layer[i]), cudaSuccess, "cudaFree");
        cudaError_t rc = cudaMalloc(NULL, MiB);
        expect(rc, cudaErrorInvalidValue, "cudaMalloc(NULL)");
        printf("allocs=%d\nfrees=%d\ninvalid_rc=%d\n", LAYERS, LAYERS, (int)rc);
        return 0;
    }
    if (strcmp(mode, "oom") == 0) {
        alloc_layers();
        int freed = trim();
        printf("allocs=%d\nfrees=%d\nlive_bytes=%zu\n", LAYERS, freed, (size_t)(LAYERS - freed) * MiB);
        cudaError_t rc = grow();
        expect(rc, cudaErrorMemoryAllocation, "cudaMalloc(96 MiB)");
        printf("oom_rc=%d\n", (int)rc);
        rc = after();
        expect(rc, cudaSuccess, "cudaMalloc(4 MiB) after the failure");
        printf("after_rc=%d\n", (int)rc);
        return 0;
    }
    fprintf(stderr, "usage: flight_recorder ok|oom\n");
    return 1;
}
