//! The one list of hooked functions, and what is derived from it without the hooks
//! themselves: the `Api` id written into the trace, each function's family (runtime,
//! driver, HIP), the header's `apis` table and the README's coverage table.
//!
//! `hook_list!(m)` hands the whole list to the macro `m`. This file expands it into the
//! ids and the table below; `hooks/mod.rs` expands the same list into the exported
//! overrides, the wrappers handed out by `dlsym` and the resolver, and the slots of the
//! real functions. The signatures and handlers are tokens here: only `hooks/` resolves
//! them, so this layer imports nothing of the hooks.

/// Hands every hooked function to the macro `$m`, in table order (ids follow it; new
/// entries go at the end).
macro_rules! hook_list {
    ($m:ident) => {
        $m! {
            Runtime fn cudaMalloc(p: *mut *mut c_void, size: usize) -> c_int,
                missing = CUDART_MISSING, handler = alloc::malloc::<DEVICE>, role = "device allocation";
            Runtime fn cudaFree(ptr: *mut c_void) -> c_int,
                missing = CUDART_MISSING, handler = alloc::free, role = "free (device, managed)";
            Runtime fn cudaMallocAsync(p: *mut *mut c_void, size: usize, stream: Stream) -> c_int,
                missing = CUDART_MISSING, handler = alloc::malloc_async, role = "stream-ordered device allocation";
            Runtime fn cudaMallocAsync_ptsz(p: *mut *mut c_void, size: usize, stream: Stream) -> c_int,
                missing = CUDART_MISSING, handler = alloc::malloc_async, role = "stream-ordered device allocation (per-thread default stream)";
            Runtime fn cudaFreeAsync(ptr: *mut c_void, stream: Stream) -> c_int,
                missing = CUDART_MISSING, handler = alloc::free_async, role = "stream-ordered free";
            Runtime fn cudaFreeAsync_ptsz(ptr: *mut c_void, stream: Stream) -> c_int,
                missing = CUDART_MISSING, handler = alloc::free_async, role = "stream-ordered free (per-thread default stream)";
            Runtime fn cudaMallocFromPoolAsync(p: *mut *mut c_void, size: usize, pool: *mut c_void, stream: Stream) -> c_int,
                missing = CUDART_MISSING, handler = alloc::malloc_from_pool, role = "device allocation from a memory pool";
            Runtime fn cudaMallocManaged(p: *mut *mut c_void, size: usize, flags: c_uint) -> c_int,
                missing = CUDART_MISSING, handler = alloc::malloc_flags::<MANAGED>, role = "managed (unified) allocation";
            Runtime fn cudaMallocPitch(p: *mut *mut c_void, pitch: *mut usize, width: usize, height: usize) -> c_int,
                missing = CUDART_MISSING, handler = alloc::malloc_pitch, role = "pitched 2D device allocation (pitch x height bytes)";
            Runtime fn cudaMalloc3D(pp: *mut CudaPitchedPtr, extent: CudaExtent) -> c_int,
                missing = CUDART_MISSING, handler = alloc::malloc_3d, role = "pitched 3D device allocation (pitch x height x depth bytes)";
            Runtime fn cudaMallocHost(p: *mut *mut c_void, size: usize) -> c_int,
                missing = CUDART_MISSING, handler = alloc::malloc::<PINNED_HOST>, role = "pinned host allocation";
            Runtime fn cudaHostAlloc(p: *mut *mut c_void, size: usize, flags: c_uint) -> c_int,
                missing = CUDART_MISSING, handler = alloc::malloc_flags::<PINNED_HOST>, role = "pinned host allocation";
            Runtime fn cudaFreeHost(ptr: *mut c_void) -> c_int,
                missing = CUDART_MISSING, handler = alloc::free, role = "free (pinned host)";

            Driver fn cuMemAlloc_v2(p: *mut *mut c_void, size: usize) -> c_int,
                missing = DRIVER_MISSING, handler = alloc::malloc::<DEVICE>, role = "device allocation";
            Driver fn cuMemAllocPitch_v2(p: *mut *mut c_void, pitch: *mut usize, width: usize, height: usize, elem: c_uint) -> c_int,
                missing = DRIVER_MISSING, handler = vmm::malloc_pitch_elem, role = "pitched 2D device allocation (pitch x height bytes)";
            Driver fn cuMemAllocManaged(p: *mut *mut c_void, size: usize, flags: c_uint) -> c_int,
                missing = DRIVER_MISSING, handler = alloc::malloc_flags::<MANAGED>, role = "managed (unified) allocation";
            Driver fn cuMemAllocAsync(p: *mut *mut c_void, size: usize, stream: Stream) -> c_int,
                missing = DRIVER_MISSING, handler = alloc::malloc_async, role = "stream-ordered device allocation";
            Driver fn cuMemAllocAsync_ptsz(p: *mut *mut c_void, size: usize, stream: Stream) -> c_int,
                missing = DRIVER_MISSING, handler = alloc::malloc_async, role = "stream-ordered device allocation (per-thread default stream)";
            Driver fn cuMemAllocFromPoolAsync(p: *mut *mut c_void, size: usize, pool: *mut c_void, stream: Stream) -> c_int,
                missing = DRIVER_MISSING, handler = alloc::malloc_from_pool, role = "device allocation from a memory pool";
            Driver fn cuMemAllocFromPoolAsync_ptsz(p: *mut *mut c_void, size: usize, pool: *mut c_void, stream: Stream) -> c_int,
                missing = DRIVER_MISSING, handler = alloc::malloc_from_pool, role = "device allocation from a memory pool (per-thread default stream)";
            Driver fn cuMemFree_v2(ptr: *mut c_void) -> c_int,
                missing = DRIVER_MISSING, handler = alloc::free, role = "free (device, managed)";
            Driver fn cuMemFreeAsync(ptr: *mut c_void, stream: Stream) -> c_int,
                missing = DRIVER_MISSING, handler = alloc::free_async, role = "stream-ordered free";
            Driver fn cuMemFreeAsync_ptsz(ptr: *mut c_void, stream: Stream) -> c_int,
                missing = DRIVER_MISSING, handler = alloc::free_async, role = "stream-ordered free (per-thread default stream)";
            Driver fn cuMemHostAlloc(p: *mut *mut c_void, size: usize, flags: c_uint) -> c_int,
                missing = DRIVER_MISSING, handler = alloc::malloc_flags::<PINNED_HOST>, role = "pinned host allocation";
            Driver fn cuMemAllocHost_v2(p: *mut *mut c_void, size: usize) -> c_int,
                missing = DRIVER_MISSING, handler = alloc::malloc::<PINNED_HOST>, role = "pinned host allocation";
            Driver fn cuMemFreeHost(ptr: *mut c_void) -> c_int,
                missing = DRIVER_MISSING, handler = alloc::free, role = "free (pinned host)";
            Driver fn cuMemHostRegister_v2(ptr: *mut c_void, size: usize, flags: c_uint) -> c_int,
                missing = DRIVER_MISSING, handler = vmm::host_register, role = "pinning of existing host memory (pinned host)";
            Driver fn cuMemHostUnregister(ptr: *mut c_void) -> c_int,
                missing = DRIVER_MISSING, handler = alloc::free, role = "unpinning (pinned host)";
            Driver fn cuMemCreate(handle: *mut U64, size: usize, prop: *const vmm::AllocationProp, flags: U64) -> c_int,
                missing = DRIVER_MISSING, handler = vmm::create, role = "physical memory handle (VMM; counted when mapped)";
            Driver fn cuMemRelease(handle: U64) -> c_int,
                missing = DRIVER_MISSING, handler = vmm::release, role = "release of a physical memory handle";
            Driver fn cuMemMap(ptr: U64, size: usize, offset: usize, handle: U64, flags: U64) -> c_int,
                missing = DRIVER_MISSING, handler = vmm::map, role = "mapping of a handle: device memory in use";
            Driver fn cuMemUnmap(ptr: U64, size: usize) -> c_int,
                missing = DRIVER_MISSING, handler = vmm::unmap, role = "unmapping: frees the mappings in the range";
            Driver fn cuMemAddressReserve(p: *mut U64, size: usize, align: usize, addr: U64, flags: U64) -> c_int,
                missing = DRIVER_MISSING, handler = vmm::reserve, role = "address-space reservation (never counted as memory)";
            Driver fn cuMemAddressFree(ptr: U64, size: usize) -> c_int,
                missing = DRIVER_MISSING, handler = vmm::address_free, role = "release of an address-space reservation";
            Driver fn cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: U64) -> c_int,
                missing = DRIVER_MISSING, handler = resolver::resolve_v1, role = "entry-point resolver: hands out the hooked functions";
            Driver fn cuGetProcAddress_v2(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: U64, status: *mut c_int) -> c_int,
                missing = DRIVER_MISSING, handler = resolver::resolve_v2, role = "entry-point resolver (behind `cudaGetDriverEntryPoint`): hands out the hooked functions";

            Hip fn hipMalloc(p: *mut *mut c_void, size: usize) -> c_int,
                missing = HIP_MISSING, handler = alloc::malloc::<DEVICE>, role = "device allocation";
            Hip fn hipFree(ptr: *mut c_void) -> c_int,
                missing = HIP_MISSING, handler = alloc::free, role = "free (device, managed)";
            Hip fn hipMallocAsync(p: *mut *mut c_void, size: usize, stream: Stream) -> c_int,
                missing = HIP_MISSING, handler = alloc::malloc_async, role = "stream-ordered device allocation";
            Hip fn hipFreeAsync(ptr: *mut c_void, stream: Stream) -> c_int,
                missing = HIP_MISSING, handler = alloc::free_async, role = "stream-ordered free";
            Hip fn hipMallocFromPoolAsync(p: *mut *mut c_void, size: usize, pool: *mut c_void, stream: Stream) -> c_int,
                missing = HIP_MISSING, handler = alloc::malloc_from_pool, role = "device allocation from a memory pool";
            Hip fn hipMallocManaged(p: *mut *mut c_void, size: usize, flags: c_uint) -> c_int,
                missing = HIP_MISSING, handler = alloc::malloc_flags::<MANAGED>, role = "managed (unified) allocation";
            Hip fn hipHostMalloc(p: *mut *mut c_void, size: usize, flags: c_uint) -> c_int,
                missing = HIP_MISSING, handler = alloc::malloc_flags::<PINNED_HOST>, role = "pinned host allocation";
            Hip fn hipHostFree(ptr: *mut c_void) -> c_int,
                missing = HIP_MISSING, handler = alloc::free, role = "free (pinned host)";
            Hip fn hipExtMallocWithFlags(p: *mut *mut c_void, size: usize, flags: c_uint) -> c_int,
                missing = HIP_MISSING, handler = alloc::malloc_flags::<DEVICE>, role = "device allocation with flags";
            Hip fn hipMemCreate(handle: *mut U64, size: usize, prop: *const vmm::AllocationProp, flags: U64) -> c_int,
                missing = HIP_MISSING, handler = vmm::create, role = "physical memory handle (VMM; counted when mapped)";
            Hip fn hipMemRelease(handle: U64) -> c_int,
                missing = HIP_MISSING, handler = vmm::release, role = "release of a physical memory handle";
            Hip fn hipMemMap(ptr: U64, size: usize, offset: usize, handle: U64, flags: U64) -> c_int,
                missing = HIP_MISSING, handler = vmm::map, role = "mapping of a handle: device memory in use";
            Hip fn hipMemUnmap(ptr: U64, size: usize) -> c_int,
                missing = HIP_MISSING, handler = vmm::unmap, role = "unmapping: frees the mappings in the range";
            Hip fn hipMemAddressReserve(p: *mut U64, size: usize, align: usize, addr: U64, flags: U64) -> c_int,
                missing = HIP_MISSING, handler = vmm::reserve, role = "address-space reservation (never counted as memory)";
            Hip fn hipMemAddressFree(ptr: U64, size: usize) -> c_int,
                missing = HIP_MISSING, handler = vmm::address_free, role = "release of an address-space reservation";
        }
    };
}
pub(crate) use hook_list;

/// Which library a hooked function belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Family {
    Runtime = 0,
    Driver = 1,
    Hip = 2,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Runtime => "runtime",
            Family::Driver => "driver",
            Family::Hip => "hip",
        }
    }
    pub fn library(self) -> &'static str {
        match self {
            Family::Runtime => "libcudart.so",
            Family::Driver => "libcuda.so.1",
            Family::Hip => "libamdhip64.so",
        }
    }
}

/// One hooked function, as the trace and the README name it.
pub struct ApiInfo {
    pub api: Api,
    pub name: &'static str,
    pub family: Family,
    /// What the function does, for the coverage table.
    pub role: &'static str,
}

macro_rules! api_table {
    ($(
        $family:ident fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) -> $ret:ty
            , missing = $missing:expr, handler = $handler:path, role = $role:literal;
    )*) => {
        /// A hooked function's id in the trace (the header's `apis` maps it to a name).
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(u16)]
        pub enum Api { _None = 0, $($name,)* }

        /// Every hooked function, in table order (`APIS[id - 1]`).
        pub static APIS: &[ApiInfo] = &[
            $(ApiInfo {
                api: Api::$name,
                name: stringify!($name),
                family: Family::$family,
                role: $role,
            },)*
        ];
    };
}

hook_list!(api_table);

impl Api {
    pub fn id(self) -> u16 {
        self as u16
    }

    /// The family of the function (runtime, driver, HIP).
    #[inline]
    pub fn family(self) -> Family {
        self.info().map_or(Family::Runtime, |h| h.family)
    }

    /// The function's name.
    pub fn name(self) -> &'static str {
        self.info().map_or("", |h| h.name)
    }

    fn info(self) -> Option<&'static ApiInfo> {
        APIS.get((self as usize).wrapping_sub(1))
    }
}

/// The header's `apis` table: id, name and family of every hooked function.
pub fn apis_json() -> serde_json::Value {
    serde_json::Value::Array(
        APIS.iter()
            .map(|h| {
                serde_json::json!({"id": h.api.id(), "name": h.name, "family": h.family.name()})
            })
            .collect(),
    )
}

/// The README's coverage table, generated from the hook list.
pub fn coverage_markdown() -> String {
    let mut s = String::from("| Function | Library | Recorded as |\n|---|---|---|\n");
    for h in APIS {
        s.push_str(&format!(
            "| `{}` | `{}` | {} |\n",
            h.name,
            h.family.library(),
            h.role
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_the_table_and_are_unique() {
        for (i, h) in APIS.iter().enumerate() {
            assert_eq!(h.api.id() as usize, i + 1, "{}", h.name);
        }
        let json = apis_json();
        assert_eq!(json[0]["name"], "cudaMalloc");
        assert_eq!(json[0]["id"], 1);
        assert_eq!(Api::cudaMalloc.family(), Family::Runtime);
        assert_eq!(Api::cuMemMap.family(), Family::Driver);
        assert_eq!(Api::hipMemMap.family(), Family::Hip);
    }

    #[test]
    fn readme_coverage_table_is_generated_from_the_hook_table() {
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
            .expect("README.md at the repository root");
        let table = coverage_markdown();
        assert!(
            readme.contains(&table),
            "README.md's coverage table is out of date; replace it with:\n{table}"
        );
    }
}
