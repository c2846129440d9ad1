/*
 * bench_loop.c: the benchmark client, a tight allocate/free loop under a deep stack.
 *
 * The real situation: a framework's allocator called from deep inside application code (a model's
 * forward pass is easily 20 frames down), many times per second. The profiler's cost per event is
 * dominated by what it does at each call (stack capture, hashing, queueing), so it is measured
 * as nanoseconds per allocate+free pair at a fixed stack depth, against the same loop with plain
 * malloc/free as a baseline for the loop's own cost.
 *
 * Usage: bench_loop cuda|malloc [depth=20] [pairs=200000] [size=4096]
 *   cuda    cudaMalloc/cudaFree pairs (checked; any failure exits 1)
 *   malloc  malloc/free pairs
 * It recurses `depth` frames (real, non-inlined frames of recurse()), runs 1000 warm-up pairs,
 * then times `pairs` pairs with CLOCK_MONOTONIC and prints:
 *   mode=<mode> depth=<depth> size=<size>
 *   ns_per_pair=<float>
 *   pairs=<pairs>
 * Expected events in cuda mode: 1000 + pairs successful cudaMalloc and as many cudaFree, all of
 * the same size, nothing live at exit.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WARMUP_PAIRS 1000

static int use_cuda;
static size_t size = 4096;
static volatile unsigned long frames_entered; /* keeps each recursion frame from being folded */
static void *volatile sink;                   /* keeps malloc/free from being optimised away */

static void cuda_pairs(long n)
{
    for (long i = 0; i < n; i++) {
        void *p;
        cudaError_t rc = cudaMalloc(&p, size);
        if (rc == cudaSuccess)
            rc = cudaFree(p);
        if (rc != cudaSuccess) {
            fprintf(stderr, "bench_loop: cudaMalloc/cudaFree failed: %d (%s)\n", (int)rc,
                    cudaGetErrorName(rc));
            exit(1);
        }
    }
}

static void malloc_pairs(long n)
{
    for (long i = 0; i < n; i++) {
        sink = malloc(size);
        if (sink == NULL) {
            fprintf(stderr, "bench_loop: malloc failed\n");
            exit(1);
        }
        free(sink);
    }
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Runs the warm-up and the timed loop; returns nanoseconds per pair. */
static double run_loop(long pairs)
{
    void (*loop)(long) = use_cuda ? cuda_pairs : malloc_pairs;
    loop(WARMUP_PAIRS);
    double t0 = now_ns();
    loop(pairs);
    double t1 = now_ns();
    return pairs > 0 ? (t1 - t0) / (double)pairs : 0.0;
}

/* Exactly `depth` frames of recurse(); the work after the call keeps it from being a tail call. */
__attribute__((noinline)) static double recurse(int depth, long pairs)
{
    if (depth <= 1)
        return run_loop(pairs);
    double r = recurse(depth - 1, pairs);
    frames_entered++;
    return r;
}

static long arg_or(int argc, char **argv, int i, long def, long min, long max)
{
    if (argc <= i)
        return def;
    char *end;
    long v = strtol(argv[i], &end, 10);
    if (*argv[i] == '\0' || *end != '\0' || v < min || v > max) {
        fprintf(stderr, "usage: bench_loop cuda|malloc [depth=20] [pairs=200000] [size=4096]\n");
        exit(1);
    }
    return v;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "cuda") != 0 && strcmp(argv[1], "malloc") != 0)) {
        fprintf(stderr, "usage: bench_loop cuda|malloc [depth=20] [pairs=200000] [size=4096]\n");
        return 1;
    }
    use_cuda = strcmp(argv[1], "cuda") == 0;
    int depth = (int)arg_or(argc, argv, 2, 20, 0, 10000);
    long pairs = arg_or(argc, argv, 3, 200000, 0, 1000000000L);
    size = (size_t)arg_or(argc, argv, 4, 4096, 1, 1L << 30);

    double ns = depth > 0 ? recurse(depth, pairs) : run_loop(pairs);
    printf("mode=%s depth=%d size=%zu\n", argv[1], depth, size);
    printf("ns_per_pair=%.2f\n", ns);
    printf("pairs=%ld\n", pairs);
    return 0;
}
