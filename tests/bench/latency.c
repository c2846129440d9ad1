/*
 * latency.c: what one dependent load costs on this machine, by the size of the table it
 * lands in (BENCHMARKS.md, "eleventh"): a random cycle through the cache lines of a table
 * on huge pages (MADV_HUGEPAGE, as capture/id_table.rs asks), followed 4,000,000 times.
 * It tells where a lookup in the shim's stack-id table stops being a cache hit: the
 * table of 200,000 stacks (varied_sites 100000) is 8 MiB of 16-byte slots.
 *
 *   cc -O2 tests/bench/latency.c -o /tmp/latency && /tmp/latency
 * prints, per table size from 1 to 32 MiB:  <MiB> MiB: <ns> ns per dependent load
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(void)
{
    srand(1);
    for (size_t mib = 1; mib <= 32; mib *= 2) {
        size_t bytes = mib << 20, lines = bytes / 64;
        uint64_t *table = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        size_t *order = malloc(lines * sizeof *order);
        if (table == MAP_FAILED || !order) {
            perror("latency");
            return 1;
        }
        madvise(table, bytes, MADV_HUGEPAGE);
        for (size_t i = 0; i < lines; i++)
            order[i] = i;
        for (size_t i = lines - 1; i > 0; i--) {
            size_t j = (size_t)rand() % (i + 1), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        /* Each line holds the address of the next line of the cycle. */
        for (size_t i = 0; i < lines; i++)
            table[order[i] * 8] = (uint64_t)(uintptr_t)&table[order[(i + 1) % lines] * 8];
        uint64_t *p = &table[order[0] * 8];
        for (size_t i = 0; i < 2 * lines; i++) /* warm: every line once, twice */
            p = (uint64_t *)(uintptr_t)*p;
        const size_t loads = 4000000;
        double t0 = now_ns();
        for (size_t i = 0; i < loads; i++)
            p = (uint64_t *)(uintptr_t)*p;
        double t1 = now_ns();
        printf("%2zu MiB: %.1f ns per dependent load%s\n", mib, (t1 - t0) / loads, p ? "" : " ");
        munmap(table, bytes);
        free(order);
    }
    return 0;
}
