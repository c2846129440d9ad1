/*
 * bfc_allocator.cpp: TensorFlow's own BFC allocator (tsl::BFCAllocator of
 * libtensorflow_framework.so.2 from the pinned tensorflow wheel) over a device sub-allocator
 * that takes its regions from the simulated CUDA runtime with cudaMalloc, as TensorFlow's
 * GPU allocator takes them from its device. Built and run at test time by
 * tests/e2e_tensorflow.rs; never part of the build.
 *
 * First, staging(): a BFC allocator over pinned host memory (TensorFlow's gpu_host_bfc),
 * 3 blocks of 2 MiB allocated and freed (the HOST line), then destroyed. Its blocks are not
 * device tensors. The device allocator is then made in the very same storage (placement
 * new): the same class at the same address, a new instance.
 *
 * Then, on device 0 (made current first, as TensorFlow does before it allocates;
 * MiB = 1048576 bytes), allow_growth on, 64 MiB limit:
 *   keep_activations(): 4 tensors of 3 MiB (AllocateRaw), kept to the end (the KEEP line);
 *   scratch(): 10 tensors of 1 MiB, each freed at once (the SCRATCH line);
 *   the allocator's stats, printed as key=value: in_use (bytes_in_use), peak
 *   (peak_bytes_in_use), allocs (num_allocs);
 *   exit without freeing the kept tensors.
 * Prints done and exits 0.
 */
#include "xla/tsl/framework/bfc_allocator.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <new>
#include <memory>
#include <vector>

static constexpr size_t MiB = 1 << 20;

/* Device memory for the allocator's regions, from CUDA (TensorFlow's DeviceMemAllocator). */
class CudaSubAllocator : public tsl::SubAllocator {
  public:
    CudaSubAllocator() : tsl::SubAllocator({}, {}) {}
    void *Alloc(size_t, size_t num_bytes, size_t *bytes_received) override
    {
        void *p = nullptr;
        if (cudaMalloc(&p, num_bytes) != cudaSuccess)
            return nullptr;
        *bytes_received = num_bytes;
        return p;
    }
    void Free(void *ptr, size_t) override { cudaFree(ptr); }
    bool SupportsCoalescing() const override { return false; }
    tsl::AllocatorMemoryType GetMemoryType() const override
    {
        return tsl::AllocatorMemoryType::kDevice;
    }
};

/* Pinned host memory for the staging allocator (malloc stands in for cudaHostAlloc). */
class HostSubAllocator : public tsl::SubAllocator {
  public:
    HostSubAllocator() : tsl::SubAllocator({}, {}) {}
    void *Alloc(size_t alignment, size_t num_bytes, size_t *bytes_received) override
    {
        void *p = nullptr;
        if (posix_memalign(&p, alignment < 64 ? 64 : alignment, num_bytes) != 0)
            return nullptr;
        *bytes_received = num_bytes;
        return p;
    }
    void Free(void *ptr, size_t) override { std::free(ptr); }
    bool SupportsCoalescing() const override { return false; }
    tsl::AllocatorMemoryType GetMemoryType() const override
    {
        return tsl::AllocatorMemoryType::kHostPinned;
    }
};

/* Where both allocators live, one after the other. */
alignas(tsl::BFCAllocator) static unsigned char storage[sizeof(tsl::BFCAllocator)];
static tsl::Allocator *allocator;
/* Kept to the end, never freed: live at exit. */
static std::vector<void *> kept;

static __attribute__((noinline)) void keep_activations()
{
    for (int i = 0; i < 4; i++) {
        kept.push_back(allocator->AllocateRaw(256, 3 * MiB)); /* GPUMEMPROF-TF-KEEP */
    }
}

static __attribute__((noinline)) void scratch()
{
    for (int i = 0; i < 10; i++) {
        void *t = allocator->AllocateRaw(256, 1 * MiB); /* GPUMEMPROF-TF-SCRATCH */
        allocator->DeallocateRaw(t);
    }
}

static __attribute__((noinline)) void staging(const tsl::BFCAllocator::Options &opts)
{
    auto *host = new (storage)
        tsl::BFCAllocator(std::make_unique<HostSubAllocator>(), 16 * MiB, "gpu_host_bfc", opts);
    for (int i = 0; i < 3; i++) {
        void *b = host->AllocateRaw(256, 2 * MiB); /* GPUMEMPROF-TF-HOST */
        host->DeallocateRaw(b);
    }
    host->~BFCAllocator();
}

int main()
{
    if (cudaSetDevice(0) != cudaSuccess) {
        std::fprintf(stderr, "bfc_allocator: cudaSetDevice(0) failed\n");
        return 1;
    }
    tsl::BFCAllocator::Options opts;
    opts.allow_growth = true;
    staging(opts);
    allocator = new (storage)
        tsl::BFCAllocator(std::make_unique<CudaSubAllocator>(), 64 * MiB, "GPU_0_bfc", opts);
    keep_activations();
    scratch();
    auto s = allocator->GetStats();
    std::printf("in_use=%lld\n", (long long)s->bytes_in_use);
    std::printf("peak=%lld\n", (long long)s->peak_bytes_in_use);
    std::printf("allocs=%lld\n", (long long)s->num_allocs);
    std::printf("done\n");
    std::fflush(stdout);
    return 0;
}
