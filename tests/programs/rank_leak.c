/*
 * rank_leak.c: one rank of a data-parallel job whose ranks leak different amounts.
 *
 * The real situation: torchrun or SLURM starts one process per GPU, each profiled into its own
 * trace (`GPUMEMPROF_OUTPUT=job.r%r.trace`); one rank loads a bigger shard and peaks higher than
 * the others, and all of them keep buffers to exit. `gpumemprof summary|peak|leaks DIR` must
 * show each rank, the highest one, and the leaking lines merged over the ranks.
 *
 * Usage: RANK=r rank_leak (r from 0 to 63; RANK unset: 0). Prints "rank r done".
 *
 * In this order, all on device 0 through cudaMalloc/cudaFree (MiB = 1048576 bytes):
 *   a 4 MiB work buffer (the WORK line), freed last;
 *   load_shard():       (r + 1) MiB, never freed (the RANK-LEAK line);
 *   init_comm_buffer(): 2 MiB, never freed (the COMMON-LEAK line);
 *   keep_stats():       1 MiB on even ranks only, never freed (the EVEN-LEAK line);
 *   the work buffer is freed.
 * Expected per rank r: allocations 3 (odd r) or 4 (even r), 1 free;
 *   peak = 4 + (r + 1) + 2 (+ 1 on even r) MiB, reached at the last allocation;
 *   live at exit = (r + 1) + 2 (+ 1 on even r) MiB.
 * For ranks 0, 1, 2: peaks 8, 8, 10 MiB; live at exit 4, 4, 6 MiB (14 MiB in 8 allocations);
 *   merged leaks: RANK-LEAK 6 MiB in 3 allocations on ranks [0, 1, 2], COMMON-LEAK 6 MiB in 3
 *   on [0, 1, 2], EVEN-LEAK 2 MiB in 2 on [0, 2].
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#define MiB ((size_t)1 << 20)

/* Exits with a message if a CUDA call fails; the call stays on the caller's line. */
#define CHECK(call)                                                                                \
    do {                                                                                           \
        cudaError_t rc_ = (call);                                                                  \
        if (rc_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "rank_leak: %s failed: %d\n", #call, (int)rc_);                        \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* Where the leaked buffers go: reachable, never freed, as a cache kept to the end would be. */
static void *kept[3];

static void load_shard(int rank)
{
    CHECK(cudaMalloc(&kept[0], (size_t)(rank + 1) * MiB)); /* GPUMEMPROF-RANK-LEAK */
}

static void init_comm_buffer(void)
{
    CHECK(cudaMalloc(&kept[1], 2 * MiB)); /* GPUMEMPROF-COMMON-LEAK */
}

static void keep_stats(void)
{
    CHECK(cudaMalloc(&kept[2], 1 * MiB)); /* GPUMEMPROF-EVEN-LEAK */
}

int main(void)
{
    const char *text = getenv("RANK");
    int rank = text ? atoi(text) : 0;
    if (rank < 0 || rank > 63) {
        fprintf(stderr, "rank_leak: RANK must be 0 to 63, not %s\n", text);
        return 1;
    }
    void *work;
    CHECK(cudaMalloc(&work, 4 * MiB)); /* GPUMEMPROF-WORK */
    load_shard(rank);
    init_comm_buffer();
    if (rank % 2 == 0)
        keep_stats();
    CHECK(cudaFree(work));
    printf("rank %d done\n", rank);
    return 0;
}
