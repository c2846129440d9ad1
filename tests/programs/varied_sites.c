/*
 * varied_sites.c: allocations from many call paths in turn, as a training step makes them.
 *
 * The real situation: a step of a model allocates from a hundred call paths and more, one
 * after the other, step after step (each layer's ops, the backward pass, the optimizer),
 * many of them at the same depth. A profiler that remembers only the last stack or two
 * walks most of each stack again; one that keys what it remembers by where a walk starts
 * meets each path where it left it.
 *
 * Usage: varied_sites SITES [ROUNDS=20] [DEPTH=12]
 * Site s is a path of DEPTH frames through two functions, left() and right(), chosen by the
 * bits of s (an odd site goes one frame deeper), ending in a cudaMalloc/cudaFree pair of
 * 4096 bytes. The sites run in turn, ROUNDS times, then it prints:
 *   sites=<SITES> rounds=<ROUNDS> depth=<DEPTH>
 *   ns_per_pair=<float>
 * Events: 2 * SITES * ROUNDS, nothing live at exit.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile unsigned long frames_entered; /* keeps each frame from being folded */

static void pair(void)
{
    void *p;
    if (cudaMalloc(&p, 4096) != cudaSuccess || cudaFree(p) != cudaSuccess) {
        fprintf(stderr, "varied_sites: cudaMalloc/cudaFree failed\n");
        exit(1);
    }
}

static void right(int level, int depth, unsigned site);

__attribute__((noinline)) static void left(int level, int depth, unsigned site)
{
    if (level == depth)
        pair();
    else if ((site >> level) & 1)
        right(level + 1, depth, site);
    else
        left(level + 1, depth, site);
    frames_entered++;
}

__attribute__((noinline)) static void right(int level, int depth, unsigned site)
{
    if (level == depth)
        pair();
    else if ((site >> level) & 1)
        right(level + 1, depth, site);
    else
        left(level + 1, depth, site);
    frames_entered++;
}

int main(int argc, char **argv)
{
    unsigned sites = argc > 1 ? (unsigned)atoi(argv[1]) : 64;
    int rounds = argc > 2 ? atoi(argv[2]) : 20;
    int depth = argc > 3 ? atoi(argv[3]) : 12;
    if (sites < 1 || rounds < 1 || depth < 1 || depth > 30) {
        fprintf(stderr, "usage: varied_sites SITES [ROUNDS=20] [DEPTH=12] (DEPTH 1 to 30)\n");
        return 1;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int r = 0; r < rounds; r++)
        for (unsigned s = 0; s < sites; s++)
            left(0, depth + (int)(s & 1), s >> 1);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
    printf("sites=%u rounds=%d depth=%d\n", sites, rounds, depth);
    printf("ns_per_pair=%.1f\n", ns / ((double)sites * rounds));
    return 0;
}
