/*
 * nvml_sim.c: a simulated NVML, built as libnvidia-ml.so.1, reporting what the simulated CUDA
 * driver (cuda_sim.c) has charged in the same process. A profiler's sampler reads it from a
 * background thread to compare what it tracked with what the "GPU" says is used (the gap is the
 * context, fragmentation, memory it could not see).
 *
 * Environment, read once by the first nvmlInit_v2 (the driver's own variables, same rules):
 *   SIMCUDA_CAPACITY   total bytes per device     default 17179869184 (16 GiB), at most 1 TiB
 *   SIMCUDA_DEVICES    number of devices          default 1, 1..64
 *   SIMNVML_QUERY_US   microseconds a process query takes (a real one goes to the driver and
 *                      takes about a millisecond)   default 0, at most 10000000
 * A malformed value is reported once on stderr and nvmlInit_v2 fails with NVML_ERROR_UNKNOWN.
 *
 * Values: on every query it looks for an already loaded libcuda.so.1
 * (dlopen(..., RTLD_NOW | RTLD_NOLOAD)) and asks its test-only export simcuda_device_used(d): the
 * bytes this process has on device d, the context's SIMCUDA_CONTEXT_BYTES included. Without a
 * loaded driver that is 0. Memory info: total = capacity, used = that, free = total - used. The
 * process list has this process (getpid()) on a device only when it uses more than 0 bytes there,
 * with gpuInstanceId = computeInstanceId = 0xFFFFFFFF (not MIG-partitioned).
 *
 * Contract rules kept here (tests/sim_contract.rs checks them):
 *   Calls before nvmlInit_v2 (or after the matching number of nvmlShutdown) ->
 *   NVML_ERROR_UNINITIALIZED (1). NULL out-pointer, bad index or handle ->
 *   NVML_ERROR_INVALID_ARGUMENT (2). A string buffer too small -> NVML_ERROR_INSUFFICIENT_SIZE
 *   (7). nvmlDeviceGetComputeRunningProcesses_v3 (and the unversioned one, v1 entries of
 *   {pid, usedGpuMemory}): *infoCount smaller than the number of
 *   processes -> NVML_ERROR_INSUFFICIENT_SIZE with *infoCount set to that number (so
 *   *infoCount = 0 and infos = NULL asks for the count); else the entries and *infoCount = their
 *   number.
 *
 * Safe from any thread: it never calls a CUDA API, only simcuda_device_used (which takes the
 * driver's lock briefly). Built with -fvisibility=hidden: only SIM_EXPORT definitions are
 * exported.
 */
#define _GNU_SOURCE /* RTLD_NOLOAD */

#include "nvml.h"
#include "sim_env.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SIM_EXPORT __attribute__((visibility("default")))
#define MAX_DEVICES 64
#define DEFAULT_CAPACITY 17179869184ULL /* 16 GiB, as the driver */
#define MAX_CAPACITY 0x10000000000ULL   /* 1 TiB, as the driver */
#define NOT_MIG 0xFFFFFFFFu
#define DRIVER_VERSION "550.54.15" /* a driver of CUDA 12.4, like the simulated one */
#define DEVICE_NAME "NVIDIA Simulated GPU"

struct nvmlDevice_st {
    unsigned int index;
};

static struct nvmlDevice_st devices[MAX_DEVICES];
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int config_ok;
static unsigned long long capacity;
static unsigned int device_count;
static unsigned long long query_us;
static int init_count; /* nvmlInit_v2 minus nvmlShutdown; atomic */

static void configure(void)
{
    unsigned long long cap = 0, n = 0, us = 0;
    const char *why = "nvmlInit_v2 will fail with NVML_ERROR_UNKNOWN";
    if (sim_env_number("simnvml", "SIMCUDA_CAPACITY", DEFAULT_CAPACITY, 0, MAX_CAPACITY, why,
                       &cap) != 0 ||
        sim_env_number("simnvml", "SIMCUDA_DEVICES", 1, 1, MAX_DEVICES, why, &n) != 0 ||
        sim_env_number("simnvml", "SIMNVML_QUERY_US", 0, 0, 10000000, why, &us) != 0)
        return;
    capacity = cap;
    query_us = us;
    device_count = (unsigned int)n;
    for (unsigned int i = 0; i < device_count; i++)
        devices[i].index = i;
    config_ok = 1;
}

static int initialised(void)
{
    return __atomic_load_n(&init_count, __ATOMIC_ACQUIRE) > 0;
}

/* The device index of a handle this library gave out, or -1. */
static int index_of(nvmlDevice_t device)
{
    for (unsigned int i = 0; i < device_count; i++)
        if (device == &devices[i])
            return (int)i;
    return -1;
}

/* What the simulated driver in this process has charged on the device; 0 without one. */
static unsigned long long used_on(int index)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        return 0;
    unsigned long long (*used)(int) = (unsigned long long (*)(int))dlsym(h, "simcuda_device_used");
    unsigned long long u = used ? used(index) : 0;
    dlclose(h); /* NOLOAD still took a reference */
    return u < capacity ? u : capacity;
}

static nvmlReturn_t copy_string(char *out, unsigned int length, const char *s)
{
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t n = strlen(s) + 1;
    if (length < n)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, s, n);
    return NVML_SUCCESS;
}

#define REQUIRE_INIT()                                                                             \
    do {                                                                                           \
        if (!initialised())                                                                        \
            return NVML_ERROR_UNINITIALIZED;                                                       \
    } while (0)

SIM_EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    pthread_once(&once, configure);
    if (!config_ok)
        return NVML_ERROR_UNKNOWN;
    __atomic_add_fetch(&init_count, 1, __ATOMIC_ACQ_REL);
    return NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlShutdown(void)
{
    int n = __atomic_load_n(&init_count, __ATOMIC_ACQUIRE);
    while (n > 0)
        if (__atomic_compare_exchange_n(&init_count, &n, n - 1, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            return NVML_SUCCESS;
    return NVML_ERROR_UNINITIALIZED;
}

SIM_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    REQUIRE_INIT();
    return copy_string(version, length, DRIVER_VERSION);
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    REQUIRE_INIT();
    if (deviceCount == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = device_count;
    return NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    REQUIRE_INIT();
    if (device == NULL || index >= device_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}

/* Device d's PCI address is 0000:00:<d>.0 (the simulated runtime's cudaGetDeviceProperties
 * gives pciDomainID 0, pciBusID 0, pciDeviceID d), in NVML's or the runtime's spelling. */
SIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    REQUIRE_INIT();
    unsigned int domain = 0, bus = 0, dev = 0, function = 0;
    if (pciBusId == NULL || device == NULL ||
        sscanf(pciBusId, "%x:%x:%x.%x", &domain, &bus, &dev, &function) != 4)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (domain != 0 || bus != 0 || function != 0 || dev >= device_count)
        return NVML_ERROR_NOT_FOUND;
    *device = &devices[dev];
    return NVML_SUCCESS;
}

/* No fabric (NVLink multi-node) on the simulated devices, as an H100 PCIe answers: success,
 * with every field after `version` zero (status NVML_SUCCESS, state
 * NVML_GPU_FABRIC_STATE_NOT_SUPPORTED). The struct's size is the low 24 bits of its version. */
SIM_EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, void *info)
{
    REQUIRE_INIT();
    if (index_of(device) < 0 || info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int version;
    memcpy(&version, info, sizeof version);
    size_t size = version & 0xffffffu;
    if (size < 2 * sizeof version || size > 4096)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memset((char *)info + sizeof version, 0, size - sizeof version);
    return NVML_SUCCESS;
}

/* No NVLink on the simulated devices: every link query is NVML_ERROR_NOT_SUPPORTED. */
SIM_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                            int *type)
{
    REQUIRE_INIT();
    (void)device;
    (void)link;
    (void)type;
    return NVML_ERROR_NOT_SUPPORTED;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                            void *pci)
{
    REQUIRE_INIT();
    (void)device;
    (void)link;
    (void)pci;
    return NVML_ERROR_NOT_SUPPORTED;
}

/* The CUDA version the driver supports, as cuDriverGetVersion reports it (13.0). */
SIM_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    REQUIRE_INIT();
    if (cudaDriverVersion == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = 13000;
    return NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    REQUIRE_INIT();
    if (index_of(device) < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    return copy_string(name, length, DEVICE_NAME);
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    REQUIRE_INIT();
    int i = index_of(device);
    if (i < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    char text[NVML_DEVICE_UUID_BUFFER_SIZE];
    snprintf(text, sizeof text, "GPU-5e1a0000-0000-4000-8000-%012x", (unsigned)i);
    return copy_string(uuid, length, text);
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    REQUIRE_INIT();
    int i = index_of(device);
    if (i < 0 || memory == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long used = used_on(i);
    memory->total = capacity;
    memory->used = used;
    memory->free = capacity - used;
    return NVML_SUCCESS;
}

/* The process list's rules, both ABIs: NVML_SUCCESS with *n the entries to write (0 or 1:
 * this process, using *used bytes), or the error to return. */
static nvmlReturn_t process_list(nvmlDevice_t device, unsigned int *infoCount, int has_infos,
                                 unsigned int *n, unsigned long long *used)
{
    int i = index_of(device);
    if (i < 0 || infoCount == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (query_us > 0) {
        struct timespec t = {(time_t)(query_us / 1000000), (long)(query_us % 1000000) * 1000};
        while (nanosleep(&t, &t) != 0)
            ; /* interrupted: sleep the rest */
    }
    *used = used_on(i);
    *n = *used > 0 ? 1 : 0;
    if (*infoCount < *n) {
        *infoCount = *n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (*n > 0 && !has_infos)
        return NVML_ERROR_INVALID_ARGUMENT;
    *infoCount = *n;
    return NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                unsigned int *infoCount,
                                                                nvmlProcessInfo_t *infos)
{
    REQUIRE_INIT();
    unsigned int n;
    unsigned long long used;
    nvmlReturn_t r = process_list(device, infoCount, infos != NULL, &n, &used);
    if (r == NVML_SUCCESS && n > 0)
        infos[0] = (nvmlProcessInfo_t){(unsigned int)getpid(), used, NOT_MIG, NOT_MIG};
    return r;
}

#undef nvmlDeviceGetComputeRunningProcesses /* nvml.h maps the name to _v3; this is the old one */

/* The unversioned name is the v1 ABI: entries of {pid, usedGpuMemory}, 16 bytes each, as
 * PyTorch's out-of-memory message reads them ("Including non-PyTorch memory, this process has
 * ... memory in use."). */
struct process_info_v1 {
    unsigned int pid;
    unsigned long long usedGpuMemory;
};

SIM_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
                                                             unsigned int *infoCount,
                                                             struct process_info_v1 *infos)
{
    REQUIRE_INIT();
    unsigned int n;
    unsigned long long used;
    nvmlReturn_t r = process_list(device, infoCount, infos != NULL, &n, &used);
    if (r == NVML_SUCCESS && n > 0)
        infos[0] = (struct process_info_v1){(unsigned int)getpid(), used};
    return r;
}

SIM_EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS:
        return "Success";
    case NVML_ERROR_UNINITIALIZED:
        return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
        return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
        return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
        return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED:
        return "Already Initialized";
    case NVML_ERROR_NOT_FOUND:
        return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
        return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
        return "Driver Not Loaded";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
        return "Argument Version Mismatch";
    case NVML_ERROR_UNKNOWN:
        return "Unknown Error";
    }
    return "Unknown Error";
}
