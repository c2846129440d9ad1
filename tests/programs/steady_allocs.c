/*
 * steady_allocs.c: a job that allocates a little, steadily, and is killed at a moment nobody
 * chose.
 *
 * The real situation: a training loop whose GPU allocations are spread out (one small
 * allocation and free each millisecond, far too few to fill a block of the trace), so only
 * the writer's periodic flush puts them on disk; SIGKILL (a scheduler, the OOM killer) can come
 * at any time. The trace must then hold every event older than the flush interval.
 *
 * Usage: steady_allocs [MS]: every millisecond, cudaMalloc of 4096 bytes on device 0 and
 * cudaFree of it (2 events), for MS milliseconds (then exit 0), or until killed when MS is 0
 * or absent (exit 2 after 120 s, so a test that died cannot leave it running). Prints
 * "started" after the first pair. Exit 1 if a call fails.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

int main(int argc, char **argv)
{
    long long ms = argc > 1 ? atoll(argv[1]) : 0;
    long long limit = ms > 0 ? ms : 120000;
    long long start = now_ms();
    for (int i = 0; now_ms() - start < limit; i++) {
        void *p;
        if (cudaMalloc(&p, 4096) != cudaSuccess || cudaFree(p) != cudaSuccess) {
            fprintf(stderr, "steady_allocs: a CUDA call failed\n");
            return 1;
        }
        if (i == 0) {
            printf("started\n");
            fflush(stdout);
        }
        struct timespec ms1 = {0, 1000 * 1000};
        nanosleep(&ms1, NULL);
    }
    return ms > 0 ? 0 : 2;
}
