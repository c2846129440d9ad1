/*
 * unwind_gap.c: allocations under frames of a main program whose segments leave a gap
 * between them, as a program linked for pages larger than 4 KiB is laid out (the default
 * of some distributions' arm64 builds; a linker may also leave one by chance).
 *
 * gpumemprof-build: cflags=-Xlinker,-zmax-page-size=0x10000
 *
 * Its read-only segment (ELF and program headers, .eh_frame) ends in its first 4 KiB page
 * and its text starts 64 KiB in: the pages between are not mapped, and glibc's
 * `_dl_find_object` reports the text segment alone as the program's mapping.
 * Each round allocates and frees 4096 bytes under DEPTH frames of recurse().
 *
 * Usage: unwind_gap [depth=8] [rounds=20]   Prints "pairs=<n>" (events: 2*n).
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

static volatile unsigned long sink;

__attribute__((noinline)) static void alloc_pair(void)
{
    void *p;
    if (cudaMalloc(&p, 4096) != cudaSuccess || cudaFree(p) != cudaSuccess) {
        fprintf(stderr, "unwind_gap: cudaMalloc/cudaFree failed\n");
        exit(1);
    }
    sink++;
}

__attribute__((noinline)) static int recurse(int n)
{
    if (n <= 0) {
        alloc_pair();
        return 0;
    }
    int r = recurse(n - 1);
    sink++;
    return r + 1;
}

int main(int argc, char **argv)
{
    int depth = argc > 1 ? atoi(argv[1]) : 8;
    int rounds = argc > 2 ? atoi(argv[2]) : 20;
    if (depth < 0 || depth > 200 || rounds < 1) {
        fprintf(stderr, "usage: unwind_gap [depth=8] [rounds=20]\n");
        return 2;
    }
    for (int r = 0; r < rounds; r++)
        recurse(depth);
    printf("pairs=%d\n", rounds);
    return 0;
}
