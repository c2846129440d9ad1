/*
 * train_leak.c: a training loop that leaks 1 MiB of GPU memory per step.
 *
 * The real situation: a training script keeps a GPU tensor "for logging" (a loss, a sample of
 * activations) in a list every step and never drops it; memory creeps up until a long run dies
 * with out-of-memory hours in. Everything else here is freed each step, so the leak is the only
 * allocation site whose live bytes grow with the step count.
 *
 * Usage: train_leak [steps=20]. Prints "step N done" per step and "finished N steps" at the end.
 *
 * Per step, in this order (all on device 0, all through cudaMalloc/cudaFree, MiB = 1048576 bytes):
 *   forward()          activations of 8 MiB, 4 MiB, 2 MiB
 *   backward()         gradient of 16 MiB
 *   optimizer_step()   no allocation (uses the gradient)
 *   keep_for_logging() 1 MiB, never freed: the leak (the line marked LEAK)
 *   release_step()     frees the gradient and the 8, 4, 2 MiB activations
 * The 64 MiB weights are allocated before the loop and freed after it.
 *
 * Expected numbers, for steps = S (S = 20 by default):
 *   allocations: 1 + 5*S (101 for S=20); frees: 1 + 4*S (81); failed calls: 0.
 *   leak: S allocations of 1 MiB each, S MiB = S * 1048576 bytes (20971520 for S=20), all from
 *     the LEAK line, all live at exit; nothing else is live at exit.
 *   peak device usage: reached in the last step right after its logging buffer is allocated,
 *     when live = weights + 8 + 4 + 2 activations + 16 gradient + S logging buffers
 *     = (64 + 8 + 4 + 2 + 16 + S) MiB = (94 + S) MiB (114 MiB = 119537664 bytes for S=20).
 *     (For S = 0 the peak is the 64 MiB weights alone.)
 * The simulated device rounds to 512 bytes, so every size here is charged exactly.
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
            fprintf(stderr, "train_leak: %s failed: %d (%s)\n", #call, (int)rc_,                   \
                    cudaGetErrorName(rc_));                                                        \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

struct step_buffers {
    void *act8, *act4, *act2; /* activations */
    void *grad;               /* gradient */
};

/* The latest logging buffer; earlier ones are unreachable, as in the real bug. */
static void *last_log_buffer;

static void forward(struct step_buffers *b)
{
    CHECK(cudaMalloc(&b->act8, 8 * MiB)); /* GPUMEMPROF-ACT-8M */
    CHECK(cudaMalloc(&b->act4, 4 * MiB)); /* GPUMEMPROF-ACT-4M */
    CHECK(cudaMalloc(&b->act2, 2 * MiB)); /* GPUMEMPROF-ACT-2M */
}

static void backward(struct step_buffers *b)
{
    CHECK(cudaMalloc(&b->grad, 16 * MiB)); /* GPUMEMPROF-GRAD */
}

static void optimizer_step(void *weights, const struct step_buffers *b)
{
    /* A real optimizer launches a kernel reading b->grad and writing weights; the simulated
     * device has no kernels, so there is nothing to allocate or run here. */
    (void)weights;
    (void)b;
    CHECK(cudaDeviceSynchronize());
}

static void keep_for_logging(void)
{
    CHECK(cudaMalloc(&last_log_buffer, 1 * MiB)); /* GPUMEMPROF-LEAK */
}

static void release_step(struct step_buffers *b)
{
    CHECK(cudaFree(b->grad));
    CHECK(cudaFree(b->act2));
    CHECK(cudaFree(b->act4));
    CHECK(cudaFree(b->act8));
}

static void train_step(void *weights)
{
    struct step_buffers b;
    forward(&b);
    backward(&b);
    optimizer_step(weights, &b);
    keep_for_logging();
    release_step(&b);
}

int main(int argc, char **argv)
{
    int steps = 20;
    if (argc > 1) {
        char *end;
        long v = strtol(argv[1], &end, 10);
        if (*argv[1] == '\0' || *end != '\0' || v < 0 || v > 1000000) {
            fprintf(stderr, "usage: train_leak [steps=20]\n");
            return 1;
        }
        steps = (int)v;
    }

    void *weights;
    CHECK(cudaMalloc(&weights, 64 * MiB)); /* GPUMEMPROF-WEIGHTS */
    for (int s = 1; s <= steps; s++) {
        train_step(weights);
        printf("step %d done\n", s);
    }
    CHECK(cudaFree(weights));
    printf("finished %d steps\n", steps);
    return 0;
}
