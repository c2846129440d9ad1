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
