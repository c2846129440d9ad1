//! gpumemprof-cudarc-client: a Rust program that uses GPU memory through cudarc, for the
//! real-GPU suite (tests/gpu/README.md); the simulated mode runs it on tests/sim's libcuda.
//!
//! cudarc's `dynamic-loading` opens libcuda with dlopen and resolves each driver function with
//! dlsym on that handle when first called: the shim sees these calls only through its dlsym
//! override. Only driver functions the simulated libcuda also has are used.
//!
//! On device 0 (MiB = 1048576 bytes):
//!   keep_weights()  1 x 64 MiB cuMemAlloc_v2, never freed             (CUDARC-WEIGHTS)
//!   keep_async()    1 x 8 MiB cuMemAllocAsync on a new stream, never freed (CUDARC-ASYNC)
//!   step()          4 times: 16 MiB cuMemAlloc_v2, then cuMemFree_v2  (CUDARC-STEP)
//!   too_big()       cuMemAlloc_v2 of the free memory plus 64 MiB, rounded up to 2 MiB: out
//!                   of memory                                         (CUDARC-OOM)
//! Leaked at exit: 72 MiB in 2 allocations.
//!
//! Prints key=value lines: site:MARKER=BYTES/COUNT per leaking line, leaked_bytes,
//! leaked_count, driver_calls (allocations/frees per API as the trace should count them),
//! request_bytes, oom_rc, free_after. Exits 0; 1 if a call that should work fails.

use cudarc::driver::result::{self, stream::StreamKind, DriverError};
use cudarc::driver::sys;

const MIB: usize = 1 << 20;

fn must<T>(what: &str, r: Result<T, DriverError>) -> T {
    r.unwrap_or_else(|e| {
        eprintln!("cudarc-client: {what} failed: {:?}", e.0);
        std::process::exit(1)
    })
}

// Each allocating line sits in its own function, so its line survives optimisation.
#[inline(never)]
fn keep_weights() -> sys::CUdeviceptr {
    must("weights", unsafe { result::malloc_sync(64 * MIB) }) // GPUMEMPROF-CUDARC-WEIGHTS
}

#[inline(never)]
fn keep_async(stream: sys::CUstream) -> sys::CUdeviceptr {
    must("async", unsafe { result::malloc_async(stream, 8 * MIB) }) // GPUMEMPROF-CUDARC-ASYNC
}

#[inline(never)]
fn step() {
    let p = must("step", unsafe { result::malloc_sync(16 * MIB) }); // GPUMEMPROF-CUDARC-STEP
    must("free step", unsafe { result::free_sync(p) });
}

#[inline(never)]
fn too_big(bytes: usize) -> Result<sys::CUdeviceptr, DriverError> {
    unsafe { result::malloc_sync(bytes) } // GPUMEMPROF-CUDARC-OOM
}

fn main() {
    must("cuInit", result::init());
    let device = must("cuDeviceGet", result::device::get(0));
    let context = must("retain the primary context", unsafe {
        result::primary_ctx::retain(device)
    });
    must("cuCtxSetCurrent", unsafe {
        result::ctx::set_current(context)
    });

    let weights = keep_weights();
    let stream = must(
        "cuStreamCreate",
        result::stream::create(StreamKind::NonBlocking),
    );
    let kept = keep_async(stream);
    for _ in 0..4 {
        step();
    }
    let (free, _total) = must("cuMemGetInfo", result::mem_get_info());
    let request = (free + 64 * MIB).div_ceil(2 * MIB) * (2 * MIB);
    let rc = match too_big(request) {
        Ok(_) => 0,
        Err(e) => e.0 as i32,
    };
    let (free_after, _) = must("cuMemGetInfo after", result::mem_get_info());

    // The marker is split so that only the allocating line carries it whole.
    const SITE: &str = "site:GPUMEMPROF-CUDARC-";
    println!("{SITE}WEIGHTS={}/1", 64 * MIB);
    println!("{SITE}ASYNC={}/1", 8 * MIB);
    println!("leaked_bytes={}", 72 * MIB);
    println!("leaked_count=2");
    println!("driver_calls=cuMemAllocAsync:1/0,cuMemAlloc_v2:5/0,cuMemFree_v2:0/4");
    println!("request_bytes={request}");
    println!("oom_rc={rc}");
    println!("free_after={free_after}");
    let _ = (weights, kept);
}
