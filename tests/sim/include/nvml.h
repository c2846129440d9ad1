/*
 * nvml.h: gpumemprof's own minimal declarations of NVML (libnvidia-ml.so.1).
 *
 * Written from the documented API contract (signatures, type names, return codes, struct
 * layouts), not copied from NVIDIA's headers. It declares only what the simulated NVML
 * (nvml_sim.c) implements, with the real names, types, values and C linkage. As in the real
 * header, the plain names of versioned functions are macros for the exported versions
 * (nvmlInit -> nvmlInit_v2) unless NVML_NO_UNVERSIONED_FUNC_DEFS is defined.
 */
#ifndef GPUMEMPROF_SIM_NVML_H
#define GPUMEMPROF_SIM_NVML_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum nvmlReturn_enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct nvmlMemory_st {
    unsigned long long total; /* bytes */
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

/* The layout nvmlDeviceGetComputeRunningProcesses_v3 fills. */
typedef struct nvmlProcessInfo_st {
    unsigned int pid;
    unsigned long long usedGpuMemory; /* bytes */
    unsigned int gpuInstanceId;       /* 0xFFFFFFFF when the device is not MIG-partitioned */
    unsigned int computeInstanceId;   /* likewise */
} nvmlProcessInfo_t;

#define NVML_DEVICE_NAME_BUFFER_SIZE 64
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_DEVICE_UUID_BUFFER_SIZE 80
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80

nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);
const char *nvmlErrorString(nvmlReturn_t result);
nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos);

#ifndef NVML_NO_UNVERSIONED_FUNC_DEFS
#define nvmlInit nvmlInit_v2
#define nvmlDeviceGetCount nvmlDeviceGetCount_v2
#define nvmlDeviceGetHandleByIndex nvmlDeviceGetHandleByIndex_v2
#define nvmlDeviceGetComputeRunningProcesses nvmlDeviceGetComputeRunningProcesses_v3
#endif

#ifdef __cplusplus
}
#endif

#endif /* GPUMEMPROF_SIM_NVML_H */
