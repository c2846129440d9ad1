/*
 * hold_memory.c: a job that holds GPU memory while someone watches it.
 *
 * The real situation: a long training run whose memory an engineer follows from another shell
 * (`gpumemprof monitor --pid`, `gpumemprof track --pid`) while it runs. The program makes its
 * state known at a moment the test chooses: it allocates, flushes the trace so it is current on
 * disk, says so, and waits until its standard input is closed.
 *
 * Usage: hold_memory [buffers=3]. Allocates `buffers` device buffers of 4 MiB (4194304 bytes)
 * each with cudaMalloc, frees the first, calls gpumemprof_flush() (looked up with dlsym; absent
 * without the profiler), prints "ready" and flushes stdout; then reads standard input until end
 * of file, frees the other buffers and exits 0. Expected trace while it waits: `buffers`
 * allocations, 1 free, (buffers - 1) * 4 MiB live, no End record; at exit nothing is live.
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#define MiB ((size_t)1 << 20)
#define MAX_BUFFERS 64

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 3;
    if (n < 1 || n > MAX_BUFFERS) {
        fprintf(stderr, "usage: hold_memory [buffers=3] (1 to %d)\n", MAX_BUFFERS);
        return 1;
    }
    void *p[MAX_BUFFERS];
    for (int i = 0; i < n; i++) {
        if (cudaMalloc(&p[i], 4 * MiB) != cudaSuccess) { /* GPUMEMPROF-HOLD */
            fprintf(stderr, "hold_memory: cudaMalloc failed\n");
            return 1;
        }
    }
    if (cudaFree(p[0]) != cudaSuccess) {
        fprintf(stderr, "hold_memory: cudaFree failed\n");
        return 1;
    }
    int (*flush)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "gpumemprof_flush");
    if (flush)
        flush();
    printf("ready\n");
    fflush(stdout);
    while (getchar() != EOF) {
    }
    for (int i = 1; i < n; i++)
        cudaFree(p[i]);
    return 0;
}
