/*
 * caching_allocator.cpp: PyTorch's own CUDA caching allocator (libc10_cuda.so of the pinned
 * torch wheel), driven as PyTorch drives it, on the simulated runtime (libcudart.so.13 from
 * tests/sim). Built and run at test time by tests/torch_real.rs; never part of the build.
 *
 * In order, on device 0 (MiB = 1048576 bytes), every tensor a DataPtr from the allocator's
 * allocate(), as a Tensor's storage holds it:
 *   init(1);
 *   keep_activations(): 4 tensors of 3 MiB, kept to the end (the KEEP line): one 20 MiB
 *     segment, the 4 blocks inside it;
 *   scratch(): 50 tensors of 1 MiB, each dropped at once (the SCRATCH line): a 2 MiB
 *     segment, its block reused 50 times;
 *   the allocator's stats, printed as key=value: allocated, allocated_peak, reserved,
 *     reserved_peak, allocations (allocation.all.allocated), frees (allocation.all.freed);
 *   a 64 GiB request (the OOM line), which runs PyTorch's release-and-retry path and
 *     throws c10::OutOfMemoryError: its message is printed as oom=<first line>;
 *   the stats again, as after_oom_*: the OOM's retry released the empty 2 MiB segment;
 *   exit without dropping the 4 kept tensors (the KEEP tensors are live at exit).
 * Exits 0 and prints done.
 *
 * First, what libtorch_cuda.so's CUDA hooks would set up (torch_cuda_init below).
 *
 * With PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True the same run maps physical chunks
 * into one reserved range (cuMemAddressReserve, cuMemCreate, cuMemMap through the driver's
 * entry points) instead of calling cudaMalloc for segments.
 *
 * With the argument `streams`, instead, after init(1) and keep_activations():
 *   side_stream(): a 1 MiB tensor (the SIDE line; a new 2 MiB segment) used on a side stream
 *     (recordStream), then dropped: the allocator frees its block only once the side
 *     stream's event has completed, at its next allocation or emptyCache;
 *   emptyCache(): the block freed, the empty 2 MiB segment is released (cudaFree);
 *   the stats, as key=value (as above); exit with the 4 kept tensors live.
 *
 * With the arguments `bench PAIRS DEPTH` it times the allocator's hot path instead: PAIRS
 * allocate+free pairs of a 4 KiB tensor, DEPTH calls deep, after a warm-up; prints
 * ns_per_pair=<wall ns per pair> (tests/bench/torch.sh, BENCHMARKS.md). Built as a shared
 * library, gpumemprof_bench_init() and gpumemprof_bench_pairs(n) let Python drive the same
 * loop through ctypes, so each event's stack has Python frames.
 */
#include <c10/core/Allocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using c10::cuda::CUDACachingAllocator::get;

static constexpr size_t MiB = 1 << 20;

/* A cache kept to the end, never destroyed: its tensors are live at exit. */
static std::vector<c10::DataPtr> *kept = new std::vector<c10::DataPtr>();

static __attribute__((noinline)) void keep_activations()
{
    for (int i = 0; i < 4; i++) {
        kept->push_back(get()->allocate(3 * MiB)); /* GPUMEMPROF-TORCH-KEEP */
    }
}

static __attribute__((noinline)) void scratch()
{
    for (int i = 0; i < 50; i++) {
        c10::DataPtr t = get()->allocate(1 * MiB); /* GPUMEMPROF-TORCH-SCRATCH */
        (void)t;
    }
}

/* What libtorch_cuda.so's CUDA hooks set up when PyTorch initialises CUDA, and c10 needs:
 * the primary-context check (without it c10 refuses to switch devices: emptyCache, stream
 * pools) and the peer-access cache (expandable segments ask it about fabric handles). */
namespace c10::cuda::_internal {
C10_CUDA_API void setHasPrimaryContext(bool (*func)(DeviceIndex));
}
namespace c10::cuda::detail {
C10_CUDA_API void init_p2p_access_cache(int64_t num_devices);
}

static bool has_primary_context(c10::DeviceIndex)
{
    return true;
}

static void torch_cuda_init()
{
    c10::cuda::_internal::setHasPrimaryContext(has_primary_context);
    c10::cuda::detail::init_p2p_access_cache(1);
}

static __attribute__((noinline)) void side_stream()
{
    c10::DataPtr t = get()->allocate(1 * MiB); /* GPUMEMPROF-TORCH-SIDE */
    c10::cuda::CUDACachingAllocator::recordStream(t, c10::cuda::getStreamFromPool());
}

static void stats(const char *prefix)
{
    auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
    const size_t all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    std::printf("%sallocated=%lld\n", prefix, (long long)s.allocated_bytes[all].current);
    std::printf("%sallocated_peak=%lld\n", prefix, (long long)s.allocated_bytes[all].peak);
    std::printf("%sreserved=%lld\n", prefix, (long long)s.reserved_bytes[all].current);
    std::printf("%sreserved_peak=%lld\n", prefix, (long long)s.reserved_bytes[all].peak);
    std::printf("%sallocations=%lld\n", prefix, (long long)s.allocation[all].allocated);
    std::printf("%sfrees=%lld\n", prefix, (long long)s.allocation[all].freed);
}

static __attribute__((noinline)) void too_big()
{
    try {
        c10::DataPtr t = get()->allocate(64ull << 30); /* GPUMEMPROF-TORCH-OOM */
        std::printf("oom=none\n");
    } catch (const c10::OutOfMemoryError &e) {
        std::string what = e.what();
        std::printf("oom=%s\n", what.substr(0, what.find('\n')).c_str());
    }
}

static __attribute__((noinline)) void pairs(long n)
{
    for (long i = 0; i < n; i++) {
        c10::DataPtr t = get()->allocate(4096);
        (void)t;
    }
}

/* `depth` frames of recursion, then the loop: stacks as deep as a framework's. */
static __attribute__((noinline)) long nested(int depth, long n)
{
    if (depth > 0) {
        long r = nested(depth - 1, n);
        __asm__ volatile("" ::: "memory"); /* not a tail call */
        return r;
    }
    pairs(n);
    return n;
}

static int bench(long n, int depth)
{
    nested(depth, n / 10 + 1); /* warm-up: the segment, the unwind caches */
    auto t0 = std::chrono::steady_clock::now();
    nested(depth, n);
    auto t1 = std::chrono::steady_clock::now();
    double ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
    std::printf("ns_per_pair=%.1f\n", ns / (double)n);
    return 0;
}

extern "C" __attribute__((visibility("default"))) void gpumemprof_bench_init()
{
    torch_cuda_init();
    c10::cuda::CUDACachingAllocator::init(1);
}

extern "C" __attribute__((visibility("default"))) long gpumemprof_bench_pairs(long n)
{
    pairs(n);
    return n;
}

/* What torch.profiler's memory profiling installs: c10's reportMemoryUsageToProfiler hands
 * every block to it. Counting them shows whether PyTorch's own function still runs. */
struct CountingReporter : public c10::MemoryReportingInfoBase {
    long calls = 0;
    void reportMemoryUsage(void *, int64_t, size_t, size_t, c10::Device) override { calls++; }
    bool memoryProfilingEnabled() const override { return true; }
};

/* `n` pairs with a memory reporter installed; returns the blocks it was told of (2 n). */
extern "C" __attribute__((visibility("default"))) long gpumemprof_reported_pairs(long n)
{
    auto reporter = std::make_shared<CountingReporter>();
    c10::DebugInfoGuard guard(c10::DebugInfoKind::PROFILER_STATE, reporter);
    pairs(n);
    return reporter->calls;
}

int main(int argc, char **argv)
{
    torch_cuda_init();
    c10::cuda::CUDACachingAllocator::init(1);
    if (argc == 4 && std::strcmp(argv[1], "bench") == 0) {
        return bench(std::atol(argv[2]), std::atoi(argv[3]));
    }
    if (argc == 2 && std::strcmp(argv[1], "streams") == 0) {
        keep_activations();
        side_stream();
        c10::cuda::CUDACachingAllocator::emptyCache();
        stats("");
        std::printf("done\n");
        return 0;
    }
    keep_activations();
    scratch();
    stats("");
    too_big();
    stats("after_oom_");
    std::printf("done\n");
    std::fflush(stdout);
    return 0;
}
