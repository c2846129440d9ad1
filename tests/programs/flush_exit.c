/*
 * flush_exit.c: a program that asks the profiler to flush, then dies without exit handlers.
 *
 * The real situation: a job that knows it is about to do something risky (or a crash handler)
 * calls gpumemprof_flush() from include/gpumemprof.h, looked up with dlsym so the program runs
 * the same without the profiler; then the process ends with _exit(), which skips every atexit
 * handler (the profiler hooks _exit to complete its trace all the same).
 *
 * It allocates three 1 MiB device buffers, frees the first, flushes, prints the flush result
 * ("flush rc=0" under the profiler, "flush absent" without it) and calls _exit(0).
 * Expected trace: 3 allocations, 1 free, 2 MiB (2097152 bytes) live, complete (an End record).
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

int main(void)
{
    void *p[3];
    for (int i = 0; i < 3; i++) {
        if (cudaMalloc(&p[i], MiB) != cudaSuccess) {
            fprintf(stderr, "flush_exit: cudaMalloc failed\n");
            return 1;
        }
    }
    if (cudaFree(p[0]) != cudaSuccess) {
        fprintf(stderr, "flush_exit: cudaFree failed\n");
        return 1;
    }
    int (*flush)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "gpumemprof_flush");
    if (flush) {
        printf("flush rc=%d\n", flush());
    } else {
        printf("flush absent\n");
    }
    fflush(stdout);
    _exit(0);
}
