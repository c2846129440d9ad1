/*
 * cuda_proc.c: the simulated driver's resolver, cuGetProcAddress[_v2], and its error strings.
 *
 * The resolver is how the CUDA runtime (static or shared), cudaGetDriverEntryPoint and PyTorch
 * reach the driver; it must follow the real contract, or a profiler that wraps it is tested
 * against the wrong thing:
 *   - Callers ask for a *base* name ("cuMemAlloc"); `cudaVersion` (1000 * major + 10 * minor)
 *     picks the ABI: cuMemAlloc/Free/AllocPitch/AllocHost/GetInfo give the v1 function below
 *     3020 and the _v2 export from it; cuMemHostRegister gives _v2 from 6050; cuGetProcAddress
 *     gives cuGetProcAddress_v2 from 12000 (below, the v1 without a status argument).
 *     A suffixed name ("cuMemAlloc_v2") is not a base name: not found, as in the real driver.
 *   - Stream-ordered allocation (cuMemAllocAsync, cuMemFreeAsync, cuMemAllocFromPoolAsync and
 *     cuDeviceGetDefaultMemPool) needs 11020, virtual memory management 10020, else
 *     CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT (2).
 *   - flags: CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM (2) gives the _ptsz entry point where
 *     one exists; 0 and CU_GET_PROC_ADDRESS_LEGACY_STREAM (1) the plain one; anything else ->
 *     CUDA_ERROR_INVALID_VALUE.
 *   - Not found, or hidden by SIMCUDA_HIDE (a comma list of base names, no blanks):
 *     *pfn = NULL, status CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND (1), CUDA_ERROR_NOT_FOUND (500).
 *     Found: *pfn set, status 0. status may be NULL; symbol or pfn NULL ->
 *     CUDA_ERROR_INVALID_VALUE with status untouched.
 *   - It works before cuInit, as the real one does (the runtime resolves first, then calls
 *     cuInit through what it got).
 * The entry points handed out are the library's own (linked -Bsymbolic: see cuda_sim.c), the
 * same addresses dlsym(handle, "<name>_v2") returns.
 */
#include "cuda_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define V_STREAM_ORDERED 11020 /* CUDA 11.2 */
#define V_VMM 10020            /* CUDA 10.2 */

struct entry {
    const char *name; /* the base name callers ask for */
    int since;        /* the first cudaVersion that has it */
    void *fn;         /* the entry point below v2_since */
    int v2_since;     /* 0, or the cudaVersion from which v2 replaces fn */
    void *v2;
    void *ptsz; /* the per-thread default stream entry point, or NULL */
};

#define PLAIN(f) {#f, 0, (void *)f, 0, NULL, NULL}
#define SINCE(f, version) {#f, version, (void *)f, 0, NULL, NULL}
#define VERSIONED(f, since, v2_since) {#f, since, (void *)f, v2_since, (void *)f##_v2, NULL}
#define STREAM_ORDERED(f) {#f, V_STREAM_ORDERED, (void *)f, 0, NULL, (void *)f##_ptsz}

static const struct entry entries[] = {
    PLAIN(cuInit),
    PLAIN(cuDriverGetVersion),
    PLAIN(cuDeviceGet),
    PLAIN(cuDeviceGetCount),
    PLAIN(cuDevicePrimaryCtxRetain),
    PLAIN(cuCtxSetCurrent),
    PLAIN(cuCtxGetCurrent),
    PLAIN(cuCtxGetDevice),
    PLAIN(cuCtxSynchronize),
    VERSIONED(cuMemAlloc, 0, 3020),
    VERSIONED(cuMemAllocPitch, 0, 3020),
    VERSIONED(cuMemFree, 0, 3020),
    VERSIONED(cuMemAllocHost, 0, 3020),
    VERSIONED(cuMemGetInfo, 0, 3020),
    VERSIONED(cuMemHostRegister, 0, 6050),
    PLAIN(cuMemHostUnregister),
    PLAIN(cuMemAllocManaged),
    PLAIN(cuMemHostAlloc),
    PLAIN(cuMemFreeHost),
    STREAM_ORDERED(cuMemAllocAsync),
    STREAM_ORDERED(cuMemFreeAsync),
    STREAM_ORDERED(cuMemAllocFromPoolAsync),
    SINCE(cuDeviceGetDefaultMemPool, V_STREAM_ORDERED),
    PLAIN(cuPointerGetAttribute),
    SINCE(cuMemCreate, V_VMM),
    SINCE(cuMemRelease, V_VMM),
    SINCE(cuMemAddressReserve, V_VMM),
    SINCE(cuMemAddressFree, V_VMM),
    SINCE(cuMemMap, V_VMM),
    SINCE(cuMemUnmap, V_VMM),
    SINCE(cuMemSetAccess, V_VMM),
    SINCE(cuMemGetAllocationPropertiesFromHandle, V_VMM),
    SINCE(cuMemGetAllocationGranularity, V_VMM),
    PLAIN(cuStreamCreate),
    PLAIN(cuStreamDestroy),
    PLAIN(cuGetErrorName),
    PLAIN(cuGetErrorString),
    VERSIONED(cuGetProcAddress, 0, 12000),
    PLAIN(cuDeviceGetAttribute),
    PLAIN(cuCtxPushCurrent),
    PLAIN(cuCtxPopCurrent),
    SINCE(cuMemExportToShareableHandle, V_VMM),
    SINCE(cuMemImportFromShareableHandle, V_VMM),
    SINCE(cuMemRetainAllocationHandle, V_VMM),
    PLAIN(cuMemGetAddressRange),
    PLAIN(cuStreamWriteValue32),
    PLAIN(cuMemsetD32Async),
};

/* ---- SIMCUDA_HIDE -------------------------------------------------------------------------- */

static pthread_once_t hide_once = PTHREAD_ONCE_INIT;
static char *hidden; /* ",name,name," or NULL: read once */

static void read_hide(void)
{
    const char *s = getenv("SIMCUDA_HIDE");
    if (!s || !*s)
        return;
    size_t n = strlen(s);
    char *list = malloc(n + 3);
    if (!list)
        return;
    list[0] = ',';
    memcpy(list + 1, s, n);
    list[n + 1] = ',';
    list[n + 2] = '\0';
    hidden = list;
}

static int is_hidden(const char *name)
{
    pthread_once(&hide_once, read_hide);
    if (!hidden || strchr(name, ','))
        return 0;
    size_t n = strlen(name);
    for (const char *p = strstr(hidden, name); p; p = strstr(p + 1, name))
        if (p[-1] == ',' && p[n] == ',') /* p > hidden: hidden starts with a comma */
            return 1;
    return 0;
}

/* ---- the resolver -------------------------------------------------------------------------- */

static CUresult resolve(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                        CUdriverProcAddressQueryResult *status)
{
    if (symbol == NULL || pfn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    const cuuint64_t ptds = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    if ((flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | ptds)) != 0 ||
        flags == (CU_GET_PROC_ADDRESS_LEGACY_STREAM | ptds))
        return CUDA_ERROR_INVALID_VALUE;

    const struct entry *e = NULL;
    for (size_t i = 0; i < sizeof entries / sizeof entries[0] && !e; i++)
        if (strcmp(entries[i].name, symbol) == 0)
            e = &entries[i];
    CUdriverProcAddressQueryResult result = CU_GET_PROC_ADDRESS_SUCCESS;
    if (!e || is_hidden(symbol))
        result = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    else if (cudaVersion < e->since)
        result = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    if (status)
        *status = result;
    if (result != CU_GET_PROC_ADDRESS_SUCCESS)
        return CUDA_ERROR_NOT_FOUND;

    void *fn = e->v2 && cudaVersion >= e->v2_since ? e->v2 : e->fn;
    if ((flags & ptds) && e->ptsz)
        fn = e->ptsz;
    *pfn = fn;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                        cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    return resolve(symbol, pfn, cudaVersion, flags, status);
}

SIM_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags)
{
    return resolve(symbol, pfn, cudaVersion, flags, NULL);
}

/* ---- error strings ------------------------------------------------------------------------- */

static const struct {
    CUresult code;
    const char *name;
    const char *text; /* the real driver's wording */
} errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
     "part or all of the requested memory range is already mapped"},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
     "pointer does not correspond to a registered memory region"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

/* An unknown code: *pStr = NULL and CUDA_ERROR_INVALID_VALUE, as the real driver. */
static CUresult describe(CUresult error, const char **pStr, int want_name)
{
    if (pStr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
        if (errors[i].code == error) {
            *pStr = want_name ? errors[i].name : errors[i].text;
            return CUDA_SUCCESS;
        }
    }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    return describe(error, pStr, 1);
}

SIM_EXPORT CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    return describe(error, pStr, 0);
}
