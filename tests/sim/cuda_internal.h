/*
 * cuda_internal.h: what the simulated driver's source files (cuda_sim.c, cuda_vmm.c,
 * cuda_proc.c, cuda_extras.c) share. Nothing here is exported: the library is built with -fvisibility=hidden
 * and only definitions marked SIM_EXPORT are visible.
 */
#ifndef GPUMEMPROF_SIM_CUDA_INTERNAL_H
#define GPUMEMPROF_SIM_CUDA_INTERNAL_H

#define SIMCUDA_INTERNAL /* cuda.h: the v1 declarations, not the _v2 macros */
#include "cuda.h"
#include "sim_memory.h"

#define SIM_EXPORT __attribute__((visibility("default")))

extern struct sim_memory cuda_mem;

/* CUDA_ERROR_NOT_INITIALIZED until cuInit has succeeded, else CUDA_SUCCESS. */
CUresult cuda_begin(void);
/* Returns that error from the calling function. */
#define BEGIN()                                                                                    \
    do {                                                                                           \
        CUresult begin_rc_ = cuda_begin();                                                         \
        if (begin_rc_ != CUDA_SUCCESS)                                                             \
            return begin_rc_;                                                                      \
    } while (0)

/* The device of the calling thread's current context. A thread without one gets device 0's
 * primary context made current, as the runtime would have done (it may not fit: OOM). */
CUresult cuda_bind(int *device);
int cuda_valid_device(int device);

/* cuda_extras.c: what PyTorch's driver API table asks for beyond memory. */
CUresult cuDeviceGetAttribute(int *pi, int attrib, CUdevice dev);
CUresult cuCtxPushCurrent(CUcontext ctx);
CUresult cuCtxPopCurrent(CUcontext *pctx);
CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                      int handleType, unsigned long long flags);
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                        int shHandleType);
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr);
CUresult cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr);
CUresult cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, unsigned int value,
                              unsigned int flags);
CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream);

#endif /* GPUMEMPROF_SIM_CUDA_INTERNAL_H */
