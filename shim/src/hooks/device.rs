//! Which device an allocation is on, and how much memory the device has left: small
//! questions asked of the same library as the hooked call, on the calling thread.
//!
//! The helpers are looked up in the library the hooked function came from (remembered
//! by `note_library` when a real function is first found), because a library opened
//! with `RTLD_LOCAL` (TensorFlow's `dlopen` of libcuda, `ctypes.CDLL`) is invisible to
//! `dlsym(RTLD_NEXT, ...)`. They run inside the hook's guard, so nothing they do is
//! recorded, and only on the thread that made the call (never from the writer: CUDA
//! calls from a background thread can create contexts or break stream capture).

use super::Family;
use crate::sys::diag;
use crate::sys::dl::{self, ABSENT};
use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, Ordering};

/// Per family: a handle of the library its hooked functions came from (NULL until one
/// was seen).
static LIBRARIES: [AtomicPtr<c_void>; 3] = [
    AtomicPtr::new(std::ptr::null_mut()),
    AtomicPtr::new(std::ptr::null_mut()),
    AtomicPtr::new(std::ptr::null_mut()),
];

/// Remembers the library that contains `real` (once per family).
pub fn note_library(family: Family, real: *mut c_void) {
    let slot = &LIBRARIES[family as usize];
    if !slot.load(Ordering::Acquire).is_null() {
        return;
    }
    let handle = library_of(real);
    if !handle.is_null() {
        let _ = slot.compare_exchange(
            std::ptr::null_mut(),
            handle,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }
}

/// A handle of the loaded object containing `addr` (a reference taken without
/// loading anything: `RTLD_NOLOAD`). `addr` is only compared against the loader's
/// tables, never dereferenced.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn library_of(addr: *mut c_void) -> *mut c_void {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables; info is a valid out-pointer.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: dli_fname is the loader's NUL-terminated path of a loaded object.
    unsafe { libc::dlopen(info.dli_fname, libc::RTLD_NOW | libc::RTLD_NOLOAD) }
}

/// A helper function of a family's library, found on first use.
struct Helper {
    family: Family,
    name: &'static CStr,
    ptr: AtomicPtr<c_void>,
}

impl Helper {
    const fn new(family: Family, name: &'static CStr) -> Helper {
        Helper {
            family,
            name,
            ptr: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The helper, or `None` when the library lacks it. A miss in the family's own
    /// library is remembered (`ABSENT`): a runtime without `cudaGetDevice` would
    /// otherwise cost a symbol-table search on every event. A miss before that library
    /// is known (an `RTLD_NEXT` guess) is asked again next time.
    fn get(&self) -> Option<*mut c_void> {
        self.find(false)
    }

    /// `get`, remembering a miss even when it was only an `RTLD_NEXT` guess: for a
    /// helper of another family, asked on every event of a library that lacks its own.
    fn get_once(&self) -> Option<*mut c_void> {
        self.find(true)
    }

    fn find(&self, remember_any_miss: bool) -> Option<*mut c_void> {
        let p = self.ptr.load(Ordering::Acquire);
        if p == ABSENT {
            return None;
        }
        if !p.is_null() {
            return Some(p);
        }
        let lib = LIBRARIES[self.family as usize].load(Ordering::Acquire);
        let handle = if lib.is_null() { libc::RTLD_NEXT } else { lib };
        let p = dl::lookup(handle, self.name);
        if p.is_null() {
            if !lib.is_null() || remember_any_miss {
                self.ptr.store(ABSENT, Ordering::Release);
            }
            return None;
        }
        self.ptr.store(p, Ordering::Release);
        Some(p)
    }
}

static CUDA_GET_DEVICE: Helper = Helper::new(Family::Runtime, c"cudaGetDevice");
static CUDA_POINTER_ATTRS: Helper = Helper::new(Family::Runtime, c"cudaPointerGetAttributes");
static CUDA_MEM_GET_INFO: Helper = Helper::new(Family::Runtime, c"cudaMemGetInfo");
static CU_CTX_GET_DEVICE: Helper = Helper::new(Family::Driver, c"cuCtxGetDevice");
static CU_POINTER_ATTR: Helper = Helper::new(Family::Driver, c"cuPointerGetAttribute");
static CU_MEM_GET_INFO: Helper = Helper::new(Family::Driver, c"cuMemGetInfo_v2");
static CU_PROPS_FROM_HANDLE: Helper =
    Helper::new(Family::Driver, c"cuMemGetAllocationPropertiesFromHandle");
static CUDA_DEVICE_COUNT: Helper = Helper::new(Family::Runtime, c"cudaGetDeviceCount");
/// `cuCtxGetDevice` as a runtime's fallback: its own slot, so that a miss remembered here
/// (no driver loaded yet) never hides the driver's own helper once it is loaded.
static CU_CTX_GET_DEVICE_FOR_RUNTIME: Helper = Helper::new(Family::Driver, c"cuCtxGetDevice");
static CU_DEVICE_COUNT: Helper = Helper::new(Family::Driver, c"cuDeviceGetCount");
static HIP_GET_DEVICE: Helper = Helper::new(Family::Hip, c"hipGetDevice");
static HIP_DEVICE_COUNT: Helper = Helper::new(Family::Hip, c"hipGetDeviceCount");
static HIP_MEM_GET_INFO: Helper = Helper::new(Family::Hip, c"hipMemGetInfo");
static HIP_PROPS_FROM_HANDLE: Helper =
    Helper::new(Family::Hip, c"hipMemGetAllocationPropertiesFromHandle");

/// The calling thread's current device; when the library has no way to say (a runtime
/// without `cudaGetDevice`), the current context's device, else the only device, with
/// one warning (see `fallback`); -1 if none of these can be known.
pub fn current(family: Family) -> i32 {
    let helper = match family {
        Family::Runtime => &CUDA_GET_DEVICE,
        Family::Driver => &CU_CTX_GET_DEVICE,
        Family::Hip => &HIP_GET_DEVICE,
    };
    match helper.get() {
        Some(f) => asked(f),
        None => fallback(family, helper.name),
    }
}

/// The device of an allocation that succeeded on the current device: `current`, without
/// asking the library when it counts exactly one device (a process sees its devices
/// numbered from 0, and their number never changes while it runs: the only one is 0).
/// A successful allocation had a device; a failed one may have had none (`current`).
#[inline]
pub fn of_allocation(family: Family) -> i32 {
    match only_device(family) {
        0 => 0,
        _ => current(family),
    }
}

/// The device (or count) a get-device helper `f` reports (-1 when it fails).
fn asked(f: *mut c_void) -> i32 {
    // SAFETY: cudaGetDevice(int*), cuCtxGetDevice(CUdevice*), hipGetDevice(int*) and
    // the three device counts (int*) share this signature.
    let f: unsafe extern "C" fn(*mut c_int) -> c_int = unsafe { std::mem::transmute(f) };
    let mut d: c_int = -1;
    // SAFETY: valid out-pointer.
    if unsafe { f(&mut d) } == 0 {
        d
    } else {
        -1
    }
}

/// Per family: the only device's ordinal (0) when the library counts exactly one, -1
/// when it counts another number or cannot count, `UNCOUNTED` before it was asked.
static ONLY_DEVICE: [AtomicI32; 3] = [
    AtomicI32::new(UNCOUNTED),
    AtomicI32::new(UNCOUNTED),
    AtomicI32::new(UNCOUNTED),
];
const UNCOUNTED: i32 = -2;
static FALLBACK_SAID: AtomicBool = AtomicBool::new(false);

/// The device of a family whose library lacks its get-device helper (`missing`): a
/// runtime's through the driver's current context, else the only device when there is
/// exactly one. Said once on stderr, so that device numbers in the reports are known to
/// be inferred.
fn fallback(family: Family, missing: &CStr) -> i32 {
    let (context, how) = match family {
        Family::Runtime => (
            CU_CTX_GET_DEVICE_FOR_RUNTIME.get_once().map_or(-1, asked),
            "the current context's device",
        ),
        _ => (-1, ""),
    };
    let (device, how) = if context >= 0 {
        (context, how)
    } else {
        (only_device(family), "the only device")
    };
    if device >= 0 && !FALLBACK_SAID.swap(true, Ordering::Relaxed) {
        let library = match family {
            Family::Runtime => "the CUDA runtime",
            Family::Driver => "the CUDA driver",
            Family::Hip => "the HIP runtime",
        };
        diag::warn(&format!(
            "{library} has no {}; its allocations are put on {how}, device {device}",
            missing.to_string_lossy()
        ));
    }
    device
}

#[inline]
fn only_device(family: Family) -> i32 {
    match ONLY_DEVICE[family as usize].load(Ordering::Acquire) {
        UNCOUNTED => count_devices(family),
        known => known,
    }
}

#[cold]
fn count_devices(family: Family) -> i32 {
    let slot = &ONLY_DEVICE[family as usize];
    let helper = match family {
        Family::Runtime => &CUDA_DEVICE_COUNT,
        Family::Driver => &CU_DEVICE_COUNT,
        Family::Hip => &HIP_DEVICE_COUNT,
    };
    // cudaGetDeviceCount, cuDeviceGetCount and hipGetDeviceCount count the same way. A
    // library without the helper never counts: remembered as not one device.
    let Some(f) = helper.get_once() else {
        slot.store(-1, Ordering::Release);
        return -1;
    };
    let count = asked(f);
    let device = if count == 1 { 0 } else { -1 };
    // Only an answer is remembered: a failed count (before the driver is initialised)
    // is asked again.
    if count >= 0 {
        slot.store(device, Ordering::Release);
    }
    device
}

/// The device an allocation lives on, asked of the library by pointer (a pool belongs
/// to its own device, not necessarily the current one); the current device when the
/// library cannot say.
pub fn of_pointer(family: Family, ptr: u64) -> i32 {
    let found = match family {
        Family::Runtime => runtime_pointer_device(ptr),
        Family::Driver => driver_pointer_device(ptr),
        Family::Hip => None,
    };
    found.unwrap_or_else(|| current(family))
}

fn runtime_pointer_device(ptr: u64) -> Option<i32> {
    #[repr(C)]
    struct PointerAttributes {
        ty: c_int,
        device: c_int,
        device_pointer: *mut c_void,
        host_pointer: *mut c_void,
    }
    let f = CUDA_POINTER_ATTRS.get()?;
    // SAFETY: cudaPointerGetAttributes(cudaPointerAttributes*, const void*).
    let f: unsafe extern "C" fn(*mut PointerAttributes, *const c_void) -> c_int =
        unsafe { std::mem::transmute(f) };
    let mut a = PointerAttributes {
        ty: 0,
        device: -1,
        device_pointer: std::ptr::null_mut(),
        host_pointer: std::ptr::null_mut(),
    };
    // SAFETY: valid out-pointer; the pointer is only looked up, never dereferenced.
    (unsafe { f(&mut a, ptr as *const c_void) } == 0 && a.device >= 0).then_some(a.device)
}

fn driver_pointer_device(ptr: u64) -> Option<i32> {
    const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_int = 9;
    let f = CU_POINTER_ATTR.get()?;
    // SAFETY: cuPointerGetAttribute(void *data, CUpointer_attribute, CUdeviceptr).
    let f: unsafe extern "C" fn(*mut c_void, c_int, u64) -> c_int =
        unsafe { std::mem::transmute(f) };
    let mut d: c_int = -1;
    // SAFETY: the ordinal attribute writes one int.
    let rc = unsafe {
        f(
            &mut d as *mut c_int as *mut c_void,
            CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            ptr,
        )
    };
    (rc == 0 && d >= 0).then_some(d)
}

/// `CUmemAllocationProp` / `hipMemAllocationProp` (identical layouts).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct AllocationProp {
    pub ty: c_int,
    pub requested_handle_types: c_int,
    pub location_type: c_int,
    pub location_id: c_int,
    pub win32_metadata: *mut c_void,
    pub alloc_flags: [u8; 8],
}

/// `CU_MEM_LOCATION_TYPE_DEVICE` / `hipMemLocationTypeDevice`.
pub const LOCATION_DEVICE: c_int = 1;

/// The device of an allocation property (-1 if it is not a device location).
pub fn of_prop(prop: &AllocationProp) -> i32 {
    if prop.location_type == LOCATION_DEVICE {
        prop.location_id
    } else {
        -1
    }
}

/// The device a VMM handle's memory is on.
pub fn of_handle(family: Family, handle: u64) -> i32 {
    let helper = match family {
        Family::Hip => &HIP_PROPS_FROM_HANDLE,
        _ => &CU_PROPS_FROM_HANDLE,
    };
    let Some(f) = helper.get() else {
        return current(family);
    };
    // SAFETY: cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp*, handle).
    let f: unsafe extern "C" fn(*mut AllocationProp, u64) -> c_int =
        unsafe { std::mem::transmute(f) };
    // SAFETY: an all-zero property is a valid value of this plain C struct.
    let mut prop: AllocationProp = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    if unsafe { f(&mut prop, handle) } == 0 {
        of_prop(&prop)
    } else {
        current(family)
    }
}

/// The current device's free and total bytes, if the library can say.
pub fn mem_info(family: Family) -> Option<(u64, u64)> {
    let helper = match family {
        Family::Runtime => &CUDA_MEM_GET_INFO,
        Family::Driver => &CU_MEM_GET_INFO,
        Family::Hip => &HIP_MEM_GET_INFO,
    };
    let f = helper.get()?;
    // SAFETY: cudaMemGetInfo, cuMemGetInfo_v2 and hipMemGetInfo: (size_t*, size_t*).
    let f: unsafe extern "C" fn(*mut usize, *mut usize) -> c_int =
        unsafe { std::mem::transmute(f) };
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: valid out-pointers.
    (unsafe { f(&mut free, &mut total) } == 0 && total > 0).then_some((free as u64, total as u64))
}
