/*
 * cuda_modules.c: the driver's module, kernel and link calls, which PyTorch's lazily loaded NVRTC
 * bridge (libcaffe2_nvrtc.so) links: `import torch` then `torch.cuda.init()` loads it, so every
 * name must exist. The simulated device runs no code: a module loads as an opaque handle, its
 * functions are opaque handles, a launch succeeds and computes nothing, and function attributes
 * answer as cudart_torch.c's runtime does (1024 threads per block, 48 KiB of shared memory).
 *
 *   cuModuleLoad/LoadData/LoadDataEx, cuModuleGetFunction   a fresh handle; cuModuleUnload: ok
 *   cuLinkCreate_v2/AddData_v2/Complete                       an empty image of 0 bytes
 *   cuLaunchKernel, cuLaunchCooperativeKernel                  CUDA_SUCCESS, nothing runs
 *   cuFuncGetAttribute     MAX_THREADS_PER_BLOCK 1024, SHARED_SIZE_BYTES 0, NUM_REGS 32, else 0
 *   cuFuncSetAttribute, cuFuncSetCacheConfig                  CUDA_SUCCESS
 *   cuOccupancyMaxActiveBlocksPerMultiprocessor               2048 / block size, at least 1
 *   cuTensorMapEncodeTiled                                     CUDA_SUCCESS, the map zeroed
 */
#include "cuda_internal.h"

#include <stdint.h>
#include <string.h>

#define MODULE_BASE 0x5d0000000000ULL
#define TENSOR_MAP_BYTES 128

static uintptr_t next_module = MODULE_BASE;

static void *module_handle(void)
{
    return (void *)__atomic_add_fetch(&next_module, 0x10, __ATOMIC_RELAXED);
}

static CUresult give_handle(void **out)
{
    BEGIN();
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *out = module_handle();
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuModuleLoad(void **module, const char *fname)
{
    (void)fname;
    return give_handle(module);
}

SIM_EXPORT CUresult cuModuleLoadData(void **module, const void *image)
{
    (void)image;
    return give_handle(module);
}

SIM_EXPORT CUresult cuModuleLoadDataEx(void **module, const void *image, unsigned int numOptions,
                                       void *options, void **optionValues)
{
    (void)image;
    (void)numOptions;
    (void)options;
    (void)optionValues;
    return give_handle(module);
}

SIM_EXPORT CUresult cuModuleGetFunction(void **hfunc, void *hmod, const char *name)
{
    if (hmod == NULL || name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return give_handle(hfunc);
}

SIM_EXPORT CUresult cuModuleUnload(void *hmod)
{
    BEGIN();
    return hmod == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuLinkCreate_v2(unsigned int numOptions, void *options, void **optionValues,
                                    void **stateOut)
{
    (void)numOptions;
    (void)options;
    (void)optionValues;
    return give_handle(stateOut);
}

SIM_EXPORT CUresult cuLinkAddData_v2(void *state, int type, void *data, size_t size,
                                     const char *name, unsigned int numOptions, void *options,
                                     void **optionValues)
{
    (void)type;
    (void)data;
    (void)size;
    (void)name;
    (void)numOptions;
    (void)options;
    (void)optionValues;
    BEGIN();
    return state == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuLinkComplete(void *state, void **cubinOut, size_t *sizeOut)
{
    static const char empty_image[1];
    BEGIN();
    if (state == NULL || cubinOut == NULL || sizeOut == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *cubinOut = (void *)empty_image;
    *sizeOut = 0;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuLaunchKernel(void *f, unsigned int gridDimX, unsigned int gridDimY,
                                   unsigned int gridDimZ, unsigned int blockDimX,
                                   unsigned int blockDimY, unsigned int blockDimZ,
                                   unsigned int sharedMemBytes, CUstream hStream,
                                   void **kernelParams, void **extra)
{
    (void)gridDimX;
    (void)gridDimY;
    (void)gridDimZ;
    (void)blockDimX;
    (void)blockDimY;
    (void)blockDimZ;
    (void)sharedMemBytes;
    (void)hStream;
    (void)kernelParams;
    (void)extra;
    BEGIN();
    return f == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuLaunchCooperativeKernel(void *f, unsigned int gridDimX,
                                              unsigned int gridDimY, unsigned int gridDimZ,
                                              unsigned int blockDimX, unsigned int blockDimY,
                                              unsigned int blockDimZ, unsigned int sharedMemBytes,
                                              CUstream hStream, void **kernelParams)
{
    return cuLaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                          sharedMemBytes, hStream, kernelParams, NULL);
}

/* CUfunction_attribute values (cuda.h). */
#define FUNC_MAX_THREADS_PER_BLOCK 0
#define FUNC_NUM_REGS 4

SIM_EXPORT CUresult cuFuncGetAttribute(int *pi, int attrib, void *hfunc)
{
    BEGIN();
    if (pi == NULL || hfunc == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pi = attrib == FUNC_MAX_THREADS_PER_BLOCK ? 1024 : attrib == FUNC_NUM_REGS ? 32 : 0;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuFuncSetAttribute(void *hfunc, int attrib, int value)
{
    (void)attrib;
    (void)value;
    BEGIN();
    return hfunc == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuFuncSetCacheConfig(void *hfunc, int config)
{
    (void)config;
    BEGIN();
    return hfunc == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, void *func,
                                                                 int blockSize,
                                                                 size_t dynamicSMemSize)
{
    (void)dynamicSMemSize;
    BEGIN();
    if (numBlocks == NULL || func == NULL || blockSize <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    *numBlocks = blockSize >= 2048 ? 1 : 2048 / blockSize;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuTensorMapEncodeTiled(void *tensorMap, int dataType, unsigned int rank,
                                           void *globalAddress, const void *globalDim,
                                           const void *globalStrides, const void *boxDim,
                                           const void *elementStrides, int interleave,
                                           int swizzle, int l2Promotion, int oobFill)
{
    (void)dataType;
    (void)globalAddress;
    (void)globalDim;
    (void)globalStrides;
    (void)boxDim;
    (void)elementStrides;
    (void)interleave;
    (void)swizzle;
    (void)l2Promotion;
    (void)oobFill;
    BEGIN();
    if (tensorMap == NULL || rank == 0 || rank > 5)
        return CUDA_ERROR_INVALID_VALUE;
    memset(tensorMap, 0, TENSOR_MAP_BYTES);
    return CUDA_SUCCESS;
}
