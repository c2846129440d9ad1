/*
 * nvidia_libs.c: the hand-written part of the stand-ins for the NVIDIA libraries the torch
 * package links besides the runtime (cuBLAS, cuBLASLt, cuDNN, cuFFT, CUPTI, cuSOLVER, cuSPARSE,
 * cuSPARSELt, cuFile, NVRTC, NVSHMEM, NCCL). tests/torch/standins.py links this file into each of
 * them beside the generated weak stubs (every other function: success, nothing done); the
 * version script of each library exports only its own names, so a definition here for another
 * library stays local and unused. No NVIDIA header is needed: the types are the ABI's.
 *
 * What torch relies on, answered as the real libraries answer on an idle sm_90 device:
 *   cublasLtMatmulAlgoGetHeuristic  one algorithm, needing no workspace (so torch's fused
 *                                   Linear path runs, as on a GPU, instead of its fallback)
 *   version queries                 the versions torch 2.15 (CUDA 13.2) was built against
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* cublasLtMatmulHeuristicResult_t: the algorithm (64 bytes), workspaceSize, state, wavesCount,
 * reserved[4]. */
struct heuristic_result {
    uint64_t algo[8];
    size_t workspace_size;
    int state;
    float waves_count;
    int reserved[4];
};

int cublasLtMatmulAlgoGetHeuristic(void *handle, void *operation, void *a, void *b, void *c,
                                   void *d, void *preference, int requested,
                                   struct heuristic_result *results, int *returned)
{
    (void)handle;
    (void)operation;
    (void)a;
    (void)b;
    (void)c;
    (void)d;
    (void)preference;
    if (requested < 1 || !results || !returned) {
        return 7; /* CUBLAS_STATUS_INVALID_VALUE */
    }
    memset(&results[0], 0, sizeof results[0]);
    results[0].waves_count = 1.0f;
    *returned = 1;
    return 0;
}

size_t cudnnGetVersion(void)
{
    return 91000;
}

size_t cudnnGetCudartVersion(void)
{
    return 13020;
}

int cublasGetVersion_v2(void *handle, int *version)
{
    (void)handle;
    if (!version) {
        return 7;
    }
    *version = 130200;
    return 0;
}

int ncclGetVersion(int *version)
{
    if (!version) {
        return 4; /* ncclInvalidArgument */
    }
    *version = 22800;
    return 0;
}

/* ---- NCCL: a communicator that knows its size and rank ------------------------------------ */
/*
 * Enough for torch.distributed's `nccl` backend with one process per rank: a communicator made
 * by ncclCommInitRank[Config] remembers nranks and rank; collectives succeed at once (device
 * memory holds no bytes on the simulated GPU, so there is nothing to move); the async error is
 * always ncclSuccess. ncclGetUniqueId hands out a fixed id (the ranks exchange it through
 * torch's store anyway). ncclMemAlloc/ncclMemFree are not stood in for: torch only uses them
 * when asked to (NCCL's own allocator for symmetric memory).
 */
#include <stdlib.h>

struct standin_comm {
    int nranks;
    int rank;
};

struct nccl_unique_id {
    char internal[128];
};

int ncclGetUniqueId(struct nccl_unique_id *id)
{
    if (!id) {
        return 4;
    }
    memset(id, 0, sizeof *id);
    memcpy(id->internal, "gpumemprof-nccl-standin", 23);
    return 0;
}

static int comm_init(struct standin_comm **comm, int nranks, int rank)
{
    if (!comm || nranks < 1 || rank < 0 || rank >= nranks) {
        return 4;
    }
    struct standin_comm *c = malloc(sizeof *c);
    if (!c) {
        return 1; /* ncclUnhandledCudaError stands in for "out of host memory" */
    }
    c->nranks = nranks;
    c->rank = rank;
    *comm = c;
    return 0;
}

int ncclCommInitRank(struct standin_comm **comm, int nranks, struct nccl_unique_id id, int rank)
{
    (void)id;
    return comm_init(comm, nranks, rank);
}

int ncclCommInitRankConfig(struct standin_comm **comm, int nranks, struct nccl_unique_id id,
                           int rank, void *config)
{
    (void)id;
    (void)config;
    return comm_init(comm, nranks, rank);
}

int ncclCommCount(const struct standin_comm *comm, int *count)
{
    if (!comm || !count) {
        return 4;
    }
    *count = comm->nranks;
    return 0;
}

int ncclCommUserRank(const struct standin_comm *comm, int *rank)
{
    if (!comm || !rank) {
        return 4;
    }
    *rank = comm->rank;
    return 0;
}

int ncclCommGetAsyncError(struct standin_comm *comm, int *asyncError)
{
    if (!comm || !asyncError) {
        return 4;
    }
    *asyncError = 0;
    return 0;
}

int ncclCommDestroy(struct standin_comm *comm)
{
    free(comm);
    return 0;
}

int ncclCommAbort(struct standin_comm *comm)
{
    free(comm);
    return 0;
}

const char *ncclGetErrorString(int result)
{
    return result == 0 ? "no error" : "unhandled error";
}

const char *ncclGetLastError(struct standin_comm *comm)
{
    (void)comm;
    return "";
}
