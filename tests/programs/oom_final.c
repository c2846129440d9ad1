/*
 * oom_final.c: a training step that dies of CUDA out-of-memory.
 *
 * The real situation: a job loads its weights, then each step allocates activations and keeps
 * a little history it never frees; when the batch grows, the next allocation no longer fits and
 * the framework gives up (PyTorch raises OutOfMemoryError and the process exits). The profiler
 * must then say what asked, what held the memory and which lines allocated it.
 *
 * Usage: oom_final [kill]. Device 0 has 1 GiB (SIMCUDA_CAPACITY, set by main when unset).
 * All allocations are cudaMalloc on device 0, from named functions (MiB = 1048576 bytes):
 *   load_weights()       512 MiB, one buffer                      (line marked OOM-WEIGHTS)
 *   -- sleeps 1 s, so a 0.5 s window before the failure leaves the weights out --
 *   alloc_activations()  4 buffers of 64 MiB = 256 MiB             (line marked OOM-ACT)
 *   keep_history()       8 buffers of 16 MiB = 128 MiB             (line marked OOM-HISTORY)
 *   scratch()            32 MiB, freed right away                  (line marked OOM-SCRATCH)
 *   grow_batch()         asks for 256 MiB with 1024 - 896 = 128 MiB free: out of memory (2)
 *                                                                  (line marked OOM-REQUEST)
 * At the failure: 896 MiB live in 13 allocations (weights 512, activations 256 in 4, history
 * 128 in 8); nothing is allocated after it. Prints "oom rc=2" and exits 1, as a framework does
 * after an OOM it cannot recover from. With "kill", it writes the trace so far
 * (gpumemprof_flush, looked up with dlsym) and SIGKILLs itself instead: a job killed right
 * after its OOM, whose trace has no end record.
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MiB ((size_t)1 << 20)

static void must(cudaError_t rc, const char *what)
{
    if (rc != cudaSuccess) {
        fprintf(stderr, "oom_final: %s failed: %d\n", what, (int)rc);
        exit(3);
    }
}

static void *load_weights(void)
{
    void *p;
    must(cudaMalloc(&p, 512 * MiB), "weights"); /* GPUMEMPROF-OOM-WEIGHTS */
    return p;
}

static void alloc_activations(void **act)
{
    for (int i = 0; i < 4; i++)
        must(cudaMalloc(&act[i], 64 * MiB), "activation"); /* GPUMEMPROF-OOM-ACT */
}

static void keep_history(void **hist)
{
    for (int i = 0; i < 8; i++)
        must(cudaMalloc(&hist[i], 16 * MiB), "history"); /* GPUMEMPROF-OOM-HISTORY */
}

static void scratch(void)
{
    void *p;
    must(cudaMalloc(&p, 32 * MiB), "scratch"); /* GPUMEMPROF-OOM-SCRATCH */
    must(cudaFree(p), "free scratch");
}

static cudaError_t grow_batch(void **p)
{
    return cudaMalloc(p, 256 * MiB); /* GPUMEMPROF-OOM-REQUEST */
}

int main(int argc, char **argv)
{
    setenv("SIMCUDA_CAPACITY", "1073741824", 0); /* before the first CUDA call */
    int kill_after = argc > 1 && strcmp(argv[1], "kill") == 0;
    void *act[4], *hist[8], *big = NULL;

    void *weights = load_weights();
    struct timespec second = {1, 0};
    nanosleep(&second, NULL);
    alloc_activations(act);
    keep_history(hist);
    scratch();
    cudaError_t rc = grow_batch(&big);
    printf("oom rc=%d\n", (int)rc);
    fflush(stdout);
    if (rc != cudaErrorMemoryAllocation) {
        fprintf(stderr, "oom_final: expected out of memory, got %d\n", (int)rc);
        return 3;
    }
    if (kill_after) {
        int (*flush)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "gpumemprof_flush");
        if (flush)
            flush();
        raise(SIGKILL);
    }
    (void)weights;
    return 1;
}
