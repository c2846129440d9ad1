/*
 * nvtx_ranges.c: a training step annotated with NVTX, the way PyTorch, Megatron and NeMo
 * annotate theirs, allocating inside and outside its ranges. It uses NVIDIA's own header-only
 * NVTX v3 client (nvtx3/nvToolsExt.h): run with NVTX_INJECTION64_PATH naming the profiler, the
 * first NVTX call loads it and every later call reaches it.
 *
 * gpumemprof-build: by-test (tests/e2e_nvtx.rs compiles it against the nvtx3 headers of the
 * PyPI wheel nvidia-nvtx-cu12, with -ldl for NVTX's loader)
 *
 * In order (MiB = 1048576 bytes), on the main thread unless said otherwise:
 *   cudaMalloc 1 MiB, in no range (kept);
 *   push "forward":  cudaMalloc 8 MiB (kept); cudaMalloc 2 MiB, freed at once;
 *     another thread, in no range of its own, cudaMalloc 7 MiB (kept) and ends (joined);
 *     push "attention" (nested): cudaMalloc 4 MiB (kept); pop; pop "forward";
 *   mark "step 1 done";
 *   push L"optimizer_step" (wide): cudaMalloc 16 MiB (kept until the end); pop;
 *   one pop too many (nothing is open: NVTX's error value, no crash);
 *   domain "trainer": push (attributes, ASCII) "data_load": cudaMalloc 3 MiB (kept);
 *     push (attributes, registered string) "backward": cudaMalloc 5 MiB (kept); pop; pop;
 *   start "checkpoint": cudaMalloc 6 MiB (kept); end it;
 *   NULL where a string or attributes go: nvtxMarkA(NULL), nvtxMarkEx(NULL),
 *     nvtxRangePushEx(NULL) and its pop (no crash; a mark and a range without a name);
 *   cudaFree of the 16 MiB block (in no range).
 * Peak (just before that last free): 1+8+7+4+16+3+5+6 = 50 MiB; live at exit 34 MiB.
 * With the argument "fork", the parent then flushes its trace (gpumemprof_flush, looked up
 * with dlsym: every name is written by then), and a forked child pushes "forward" again (a
 * name the parent defined), allocates 1 MiB in it (kept) and leaves with _exit(0); the
 * parent waits for it.
 *
 * Prints (key=value) what NVTX returned: push_forward, push_attention, pop_attention,
 * pop_forward, push_optimizer_step, pop_optimizer_step, stray_pop, push_data_load,
 * push_backward, pop_backward, pop_data_load, checkpoint_id_nonzero, push_null, pop_null;
 * and live_device_bytes
 * (the parent's); with "fork", also child_status (its exit status, 0).
 */
#define PROGRAM "nvtx_ranges"

#include "report.h"

#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static void *alloc(size_t bytes)
{
    void *p = NULL;
    expect_rc("cudaMalloc", cudaMalloc(&p, bytes), cudaSuccess);
    return p;
}

static void *loader_thread(void *unused)
{
    (void)unused;
    alloc(7 * MiB); /* no range is open on this thread */
    return NULL;
}

static nvtxEventAttributes_t attributes(void)
{
    nvtxEventAttributes_t a;
    memset(&a, 0, sizeof a);
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    return a;
}

int main(int argc, char **argv)
{
    alloc(1 * MiB);

    put_int("push_forward", nvtxRangePushA("forward"));
    alloc(8 * MiB);
    expect_rc("cudaFree 2 MiB", cudaFree(alloc(2 * MiB)), cudaSuccess);
    pthread_t loader;
    if (pthread_create(&loader, NULL, loader_thread, NULL) != 0 || pthread_join(loader, NULL) != 0) {
        fprintf(stderr, "%s: cannot run the loader thread\n", PROGRAM);
        return 1;
    }
    put_int("push_attention", nvtxRangePushA("attention"));
    alloc(4 * MiB);
    put_int("pop_attention", nvtxRangePop());
    put_int("pop_forward", nvtxRangePop());

    nvtxMarkA("step 1 done");

    put_int("push_optimizer_step", nvtxRangePushW(L"optimizer_step"));
    void *optimizer_state = alloc(16 * MiB);
    put_int("pop_optimizer_step", nvtxRangePop());
    put_int("stray_pop", nvtxRangePop());

    nvtxDomainHandle_t trainer = nvtxDomainCreateA("trainer");
    nvtxEventAttributes_t data_load = attributes();
    data_load.messageType = NVTX_MESSAGE_TYPE_ASCII;
    data_load.message.ascii = "data_load";
    put_int("push_data_load", nvtxDomainRangePushEx(trainer, &data_load));
    alloc(3 * MiB);
    nvtxEventAttributes_t backward = attributes();
    backward.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    backward.message.registered = nvtxDomainRegisterStringA(trainer, "backward");
    put_int("push_backward", nvtxDomainRangePushEx(trainer, &backward));
    alloc(5 * MiB);
    put_int("pop_backward", nvtxDomainRangePop(trainer));
    put_int("pop_data_load", nvtxDomainRangePop(trainer));

    nvtxRangeId_t checkpoint = nvtxRangeStartA("checkpoint");
    put_int("checkpoint_id_nonzero", checkpoint != 0);
    alloc(6 * MiB);
    nvtxRangeEnd(checkpoint);

    nvtxMarkA(NULL);
    nvtxMarkEx(NULL);
    put_int("push_null", nvtxRangePushEx(NULL));
    put_int("pop_null", nvtxRangePop());

    expect_rc("cudaFree 16 MiB", cudaFree(optimizer_state), cudaSuccess);
    put_u64("live_device_bytes", 34 * MiB);

    if (argc > 1 && strcmp(argv[1], "fork") == 0) {
        int (*flush)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "gpumemprof_flush");
        if (flush) {
            flush();
        }
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) {
            nvtxRangePushA("forward");
            alloc(1 * MiB);
            nvtxRangePop();
            _exit(0);
        }
        int status = -1;
        if (child < 0 || waitpid(child, &status, 0) != child) {
            fprintf(stderr, "%s: fork or waitpid failed\n", PROGRAM);
            return 1;
        }
        put_int("child_status", status);
    }
    return 0;
}
