/*
 * nvml_query.c: probes the simulated NVML and prints what it reports before and after this
 * process uses the GPU; tests/sim_contract.rs holds the expected values. Meant to run with
 * SIMCUDA_DEVICES=2 and SIMCUDA_CONTEXT_BYTES=67108864 (64 MiB).
 * gpumemprof-build: link=cudart,nvidia-ml
 *
 * Before the first CUDA call the runtime has not loaded libcuda.so.1 yet, so NVML sees nothing
 * (used 0, no process). Then cudaMalloc 100 MiB on device 0: NVML's used is
 * 100 MiB + the context, and this process is listed on device 0 only. The same queries from a
 * second thread give the same answers (NVML is safe off the main thread).
 *
 * Output: "<label>=<value>" lines. Exit 0 unless setup fails.
 */
#define PROGRAM "nvml_query"

#include "report.h"

#include <cuda_runtime_api.h>
#include <nvml.h>
#include <pthread.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static void rc_is(const char *label, nvmlReturn_t rc)
{
    printf("%s=%d\n", label, (int)rc);
}

/* Memory info and the process list of device `index`, printed under `label`. */
static void query(const char *label, unsigned int index)
{
    char key[96];
    nvmlDevice_t dev;
    nvmlMemory_t mem = {0, 0, 0};
    expect_rc("nvmlDeviceGetHandleByIndex_v2", nvmlDeviceGetHandleByIndex_v2(index, &dev),
              NVML_SUCCESS);
    expect_rc("nvmlDeviceGetMemoryInfo", nvmlDeviceGetMemoryInfo(dev, &mem), NVML_SUCCESS);
    snprintf(key, sizeof key, "%s.total", label);
    put_u64(key, mem.total);
    snprintf(key, sizeof key, "%s.used", label);
    put_u64(key, mem.used);
    snprintf(key, sizeof key, "%s.free", label);
    put_u64(key, mem.free);

    /* Ask for the count first, as callers do. */
    unsigned int count = 0;
    nvmlReturn_t rc = nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, NULL);
    snprintf(key, sizeof key, "%s.count_query.rc", label);
    rc_is(key, rc);
    snprintf(key, sizeof key, "%s.processes", label);
    put_u64(key, count);

    nvmlProcessInfo_t infos[4];
    count = 4;
    expect_rc("nvmlDeviceGetComputeRunningProcesses_v3",
              nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, infos), NVML_SUCCESS);
    if (count > 0) {
        snprintf(key, sizeof key, "%s.process_is_self", label);
        put_int(key, infos[0].pid == (unsigned int)getpid());
        snprintf(key, sizeof key, "%s.process_used", label);
        put_u64(key, infos[0].usedGpuMemory);
        snprintf(key, sizeof key, "%s.gpu_instance", label);
        put_hex(key, infos[0].gpuInstanceId);
    }
}

static void *from_thread(void *arg)
{
    (void)arg;
    query("thread.dev0", 0);
    return NULL;
}

int main(void)
{
    unsigned int n = 0;
    char text[NVML_DEVICE_UUID_BUFFER_SIZE];
    nvmlDevice_t dev0;

    rc_is("before_init.count", nvmlDeviceGetCount_v2(&n));
    rc_is("init", nvmlInit_v2());
    rc_is("count.rc", nvmlDeviceGetCount_v2(&n));
    put_u64("count", n);
    rc_is("handle.bad_index", nvmlDeviceGetHandleByIndex_v2(n, &dev0));
    expect_rc("nvmlDeviceGetHandleByIndex_v2", nvmlDeviceGetHandleByIndex_v2(0, &dev0),
              NVML_SUCCESS);
    rc_is("driver_version.rc", nvmlSystemGetDriverVersion(text, sizeof text));
    put_str("driver_version", text);
    rc_is("name.rc", nvmlDeviceGetName(dev0, text, sizeof text));
    put_str("name", text);
    rc_is("name.small_buffer", nvmlDeviceGetName(dev0, text, 4));
    rc_is("uuid.rc", nvmlDeviceGetUUID(dev0, text, sizeof text));
    put_str("uuid", text);
    rc_is("memory.null", nvmlDeviceGetMemoryInfo(dev0, NULL));
    rc_is("processes.null_count", nvmlDeviceGetComputeRunningProcesses_v3(dev0, NULL, NULL));

    query("before.dev0", 0);

    void *p;
    expect_rc("cudaMalloc 100 MiB", cudaMalloc(&p, 100 * MiB), cudaSuccess);
    query("after.dev0", 0);
    query("after.dev1", 1);

    pthread_t th;
    if (pthread_create(&th, NULL, from_thread, NULL) != 0 || pthread_join(th, NULL) != 0) {
        fprintf(stderr, PROGRAM ": cannot run a thread\n");
        return 1;
    }

    expect_rc("cudaFree", cudaFree(p), cudaSuccess);
    query("freed.dev0", 0);

    rc_is("shutdown", nvmlShutdown());
    rc_is("after_shutdown.count", nvmlDeviceGetCount_v2(&n));
    rc_is("shutdown.again", nvmlShutdown());
    put_str("error_string.7", nvmlErrorString(NVML_ERROR_INSUFFICIENT_SIZE));
    return 0;
}
