/*
 * varied_sites.c: allocations from many call paths in turn, as a training step makes them.
 *
 * The real situation: a step of a model allocates from a hundred call paths and more, one
 * after the other, step after step (each layer's ops, the backward pass, the optimizer),
 * many of them at the same depth. A profiler that remembers only the last stack or two
 * walks most of each stack again; one that keys what it remembers by where a walk starts
 * meets each path where it left it.
 *
 * Usage: varied_sites SITES [ROUNDS=20] [DEPTH=12] [cuda|malloc]
 * Site s is a path of DEPTH frames through two functions, left() and right(), chosen by the
 * bits of s (an odd site goes one frame deeper), ending in a cudaMalloc/cudaFree pair of
 * 4096 bytes (with `malloc`: a malloc/free pair of the same size, the same program for
 * heap profilers such as heaptrack, tests/bench/varied.sh). The sites run in turn, ROUNDS
 * times, then it prints:
 *   sites=<SITES> rounds=<ROUNDS> depth=<DEPTH> api=<cuda|malloc>
 *   ns_per_pair=<float>
 * Events: 2 * SITES * ROUNDS, nothing live at exit.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile unsigned long frames_entered; /* keeps each frame from being folded */
static int use_malloc;

static void pair(void)
{
    void *p;
    if (use_malloc) {
        volatile char *q = malloc(4096);
        if (!q) {
            fprintf(stderr, "varied_sites: malloc failed\n");
            exit(1);
        }
        q[0] = 1; /* the pair is used: never folded away */
        free((void *)q);
        return;
    }
    if (cudaMalloc(&p, 4096) != cudaSuccess || cudaFree(p) != cudaSuccess) {
        fprintf(stderr, "varied_sites: cudaMalloc/cudaFree failed\n");
        exit(1);
    }
}

static void left(int level, int depth, unsigned site);
static void right(int level, int depth, unsigned site);

/* One frame's body, copied into both functions: each has its own return addresses. */
static inline __attribute__((always_inline)) void step(int level, int depth, unsigned site)
{
    if (level == depth)
        pair();
    else if ((site >> level) & 1)
        right(level + 1, depth, site);
    else
        left(level + 1, depth, site);
    frames_entered++;
}

__attribute__((noinline)) static void left(int level, int depth, unsigned site)
{
    step(level, depth, site);
}

__attribute__((noinline)) static void right(int level, int depth, unsigned site)
{
    step(level, depth, site);
}

int main(int argc, char **argv)
{
    unsigned sites = argc > 1 ? (unsigned)atoi(argv[1]) : 64;
    int rounds = argc > 2 ? atoi(argv[2]) : 20;
    int depth = argc > 3 ? atoi(argv[3]) : 12;
    const char *api = argc > 4 ? argv[4] : "cuda";
    use_malloc = strcmp(api, "malloc") == 0;
    if (sites < 1 || rounds < 1 || depth < 1 || depth > 30 ||
        (!use_malloc && strcmp(api, "cuda") != 0)) {
        fprintf(stderr,
                "usage: varied_sites SITES [ROUNDS=20] [DEPTH=12] [cuda|malloc] (DEPTH 1 to 30)\n");
        return 1;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int r = 0; r < rounds; r++)
        for (unsigned s = 0; s < sites; s++)
            left(0, depth + (int)(s & 1), s >> 1);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
    printf("sites=%u rounds=%d depth=%d api=%s\n", sites, rounds, depth, api);
    printf("ns_per_pair=%.1f\n", ns / ((double)sites * rounds));
    return 0;
}
