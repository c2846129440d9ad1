/*
 * alloc_until_killed.c: a busy job that is SIGKILLed at some moment nobody chose.
 *
 * The real situation: a training loop allocating and freeing all the time, killed by the
 * scheduler (preemption, a time limit, `kill -9`) or the kernel's OOM killer, in the middle of
 * whatever it and the profiler were doing. The trace on disk must still read cleanly, and hold
 * every event older than the profiler's flush interval.
 *
 * Runs rounds r = 1, 2, 3, ... on one thread, all on device 0 with the default capacity. A
 * round is 1000 cudaMalloc of 4096 bytes; the first buffer of the round is kept, each of the
 * other 999 is freed with cudaFree right after its allocation: 1000 allocations and 999 frees
 * (1999 events) per round, and one more 4096-byte buffer live after each. After round r it
 * prints "round=r" (and flushes stdout), so once the line "round=N" has been read the process
 * has made at least N * 1000 allocations and N * 999 frees, N buffers (N * 4096 bytes) live.
 * Runs until killed; exits 2 after 120 s (so a test that died cannot leave it running forever),
 * 1 if a call fails.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define PER_ROUND 1000
#define BUFFER 4096
#define LIFETIME_S 120

int main(void)
{
    time_t start = time(NULL);
    for (unsigned long round = 1;; round++) {
        for (int j = 0; j < PER_ROUND; j++) {
            void *p;
            if (cudaMalloc(&p, BUFFER) != cudaSuccess) {
                fprintf(stderr, "alloc_until_killed: cudaMalloc failed in round %lu\n", round);
                return 1;
            }
            if (j > 0 && cudaFree(p) != cudaSuccess) {
                fprintf(stderr, "alloc_until_killed: cudaFree failed in round %lu\n", round);
                return 1;
            }
        }
        printf("round=%lu\n", round);
        fflush(stdout);
        if (time(NULL) - start > LIFETIME_S) {
            fprintf(stderr, "alloc_until_killed: nobody killed me in %d s\n", LIFETIME_S);
            return 2;
        }
    }
}
