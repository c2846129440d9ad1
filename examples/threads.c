/*
 * threads.c: many threads allocating and freeing GPU memory at once.
 *
 * The real situation: a data-loader or inference server where every worker thread allocates
 * and frees small device buffers as fast as it can. A profiler must record every event from
 * every thread, lose none, and not serialize or slow the threads down much.
 *
 * Usage: threads [threads=8] [pairs=100000] [size=4096]
 * Each thread does `pairs` cudaMalloc(size)/cudaFree pairs on device 0, checking every return
 * code; then the program checks that cudaMemGetInfo reports as much free memory as before the
 * threads started and prints "threads=T pairs=P ok".
 *
 * With THREADS_TIMING=1 in the environment it also prints, after that line, the cost of the
 * threaded phase per pair: "wall_ns_per_pair=W cpu_ns_per_pair=C" (wall time over pairs per
 * thread; the process's user+system CPU time over all pairs). The benchmark uses it to compare
 * 8 threads with 1.
 *
 * Expected numbers: threads*pairs successful cudaMalloc calls and as many successful cudaFree
 * calls (800000 each with the defaults), no failures, nothing live at exit. At most `threads`
 * blocks are live at any moment, so the peak is at most threads * size rounded up to 512.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static long pairs = 100000;
static size_t size = 4096;

/* Reports a failed CUDA call; exiting from a worker ends the whole process with status 1. */
static void die(const char *what, cudaError_t rc)
{
    fprintf(stderr, "threads: %s failed: %d (%s)\n", what, (int)rc, cudaGetErrorName(rc));
    exit(1);
}

static void *worker(void *arg)
{
    (void)arg;
    for (long i = 0; i < pairs; i++) {
        void *p = NULL;
        cudaError_t rc = cudaMalloc(&p, size);
        if (rc != cudaSuccess)
            die("cudaMalloc", rc);
        if (p == NULL) {
            fprintf(stderr, "threads: cudaMalloc returned NULL for %zu bytes\n", size);
            exit(1);
        }
        rc = cudaFree(p);
        if (rc != cudaSuccess)
            die("cudaFree", rc);
    }
    return NULL;
}

/* Parses argv[i] as a number in [min, max], or keeps the default when absent. */
static long arg_or(int argc, char **argv, int i, long def, long min, long max)
{
    if (argc <= i)
        return def;
    char *end;
    long v = strtol(argv[i], &end, 10);
    if (*argv[i] == '\0' || *end != '\0' || v < min || v > max) {
        fprintf(stderr, "usage: threads [threads=8] [pairs=100000] [size=4096]\n");
        exit(1);
    }
    return v;
}

int main(int argc, char **argv)
{
    int nthreads = (int)arg_or(argc, argv, 1, 8, 1, 1024);
    pairs = arg_or(argc, argv, 2, 100000, 0, 1000000000L);
    size = (size_t)arg_or(argc, argv, 3, 4096, 1, 1L << 30);

    /* Everything the workers allocate they free, so free memory must come back to this. */
    size_t free_before, free_after;
    cudaError_t rc = cudaMemGetInfo(&free_before, NULL);
    if (rc != cudaSuccess)
        die("cudaMemGetInfo", rc);

    struct timespec w0, w1;
    struct rusage r0, r1;
    clock_gettime(CLOCK_MONOTONIC, &w0);
    getrusage(RUSAGE_SELF, &r0);
    pthread_t *tids = calloc((size_t)nthreads, sizeof *tids);
    if (!tids) {
        fprintf(stderr, "threads: out of host memory\n");
        return 1;
    }
    for (int t = 0; t < nthreads; t++) {
        if (pthread_create(&tids[t], NULL, worker, NULL) != 0) {
            fprintf(stderr, "threads: pthread_create failed\n");
            return 1;
        }
    }
    for (int t = 0; t < nthreads; t++)
        pthread_join(tids[t], NULL);
    free(tids);
    clock_gettime(CLOCK_MONOTONIC, &w1);
    getrusage(RUSAGE_SELF, &r1);

    rc = cudaMemGetInfo(&free_after, NULL);
    if (rc != cudaSuccess)
        die("cudaMemGetInfo", rc);
    if (free_after != free_before) {
        fprintf(stderr, "threads: free memory was %zu bytes before, %zu after\n", free_before,
                free_after);
        return 1;
    }
    printf("threads=%d pairs=%ld ok\n", nthreads, pairs);
    const char *timing = getenv("THREADS_TIMING");
    if (timing && timing[0] == '1' && pairs > 0) {
        double wall = (w1.tv_sec - w0.tv_sec) * 1e9 + (w1.tv_nsec - w0.tv_nsec);
        double cpu = ((r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) + (r1.ru_stime.tv_sec - r0.ru_stime.tv_sec)) * 1e9 +
                     ((r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) + (r1.ru_stime.tv_usec - r0.ru_stime.tv_usec)) * 1e3;
        printf("wall_ns_per_pair=%.1f cpu_ns_per_pair=%.1f\n", wall / pairs, cpu / ((double)pairs * nthreads));
    }
    return 0;
}
