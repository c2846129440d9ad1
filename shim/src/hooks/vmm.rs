//! Virtual memory management (`cuMemCreate`/`cuMemMap`, PyTorch's expandable segments,
//! and HIP's twins), host-memory registration and the driver's pitched allocation.
//!
//! What is recorded (docs/REPORTS.md states it for users):
//! * `cuMemCreate`: a `VmmHandle` allocation at the handle's value (physical memory
//!   that counts only once mapped); its failure is a failed `Device` allocation, the
//!   out-of-memory of expandable segments. `cuMemRelease`: the handle's free.
//! * `cuMemMap`: a `Device` allocation of the mapped range on the handle's device:
//!   device memory in use. `cuMemUnmap`: a range free (`FREE_RANGE`) releasing every
//!   mapping inside the range.
//! * `cuMemAddressReserve`: an `AddressReservation` (address space, never memory);
//!   `cuMemAddressFree` its free.
//! * `cuMemHostRegister_v2`: `PinnedHost` memory at the registered pointer;
//!   `cuMemHostUnregister` its free.
//!
//! Safety, for every handler: as in `alloc.rs` (the generated wrapper passes the real
//! function and the program's own arguments; out-parameters are read only after
//! success and only if non-NULL).
#![allow(clippy::missing_safety_doc)]

use super::alloc::{on_alloc, on_failure, Placed};
use super::device;
pub use super::device::AllocationProp;
use super::record::{hooked, hooked_free, record, Rec};
use super::Api;
use crate::capture::thread::ThreadState;
use crate::sys::event::EventKind;
use gpumemprof_format::{MemKind, FREE_RANGE};
use std::ffi::{c_int, c_uint, c_void};

type PitchFn = unsafe extern "C" fn(*mut *mut c_void, *mut usize, usize, usize, c_uint) -> c_int;
type RegisterFn = unsafe extern "C" fn(*mut c_void, usize, c_uint) -> c_int;
type CreateFn = unsafe extern "C" fn(*mut u64, usize, *const AllocationProp, u64) -> c_int;
type ReleaseFn = unsafe extern "C" fn(u64) -> c_int;
type MapFn = unsafe extern "C" fn(u64, usize, usize, u64, u64) -> c_int;
type RangeFn = unsafe extern "C" fn(u64, usize) -> c_int;
type ReserveFn = unsafe extern "C" fn(*mut u64, usize, usize, u64, u64) -> c_int;

unsafe fn out_u64(p: *mut u64) -> u64 {
    if p.is_null() {
        0
    } else {
        *p
    }
}

/// `cuMemAllocPitch_v2(dptr*, pitch*, width, height, element size)`: pitch x height.
pub unsafe fn malloc_pitch_elem(
    api: Api,
    real: PitchFn,
    p: *mut *mut c_void,
    pitch: *mut usize,
    width: usize,
    height: usize,
    elem: c_uint,
) -> c_int {
    hooked(
        || real(p, pitch, width, height, elem),
        |rc, me| {
            let size = if rc == 0 && !pitch.is_null() {
                (*pitch as u64).saturating_mul(height as u64)
            } else {
                (width as u64).saturating_mul(height as u64)
            };
            let addr = if rc == 0 && !p.is_null() {
                *p as u64
            } else {
                0
            };
            on_alloc(me, api, MemKind::Device, rc, Placed::plain(addr, size))
        },
    )
}

pub unsafe fn host_register(
    api: Api,
    real: RegisterFn,
    ptr: *mut c_void,
    size: usize,
    flags: c_uint,
) -> c_int {
    hooked(
        || real(ptr, size, flags),
        |rc, me| {
            let addr = if rc == 0 { ptr as u64 } else { 0 };
            on_alloc(
                me,
                api,
                MemKind::PinnedHost,
                rc,
                Placed::plain(addr, size as u64),
            )
        },
    )
}

pub unsafe fn create(
    api: Api,
    real: CreateFn,
    handle: *mut u64,
    size: usize,
    prop: *const AllocationProp,
    flags: u64,
) -> c_int {
    hooked(
        || real(handle, size, prop, flags),
        |rc, me| {
            let t = crate::sys::clock::now();
            let dev = if prop.is_null() {
                device::current(api.family())
            } else {
                device::of_prop(&*prop)
            };
            if rc == 0 {
                let h = out_u64(handle);
                if h == 0 {
                    return;
                }
                let mut r = Rec::new(EventKind::Alloc, api, t);
                r.mem = MemKind::VmmHandle;
                r.device = dev;
                r.address = h;
                r.size = size as u64;
                record(me, r);
            } else {
                // The physical memory could not be had: a device out-of-memory.
                on_failure(me, api, MemKind::Device, rc, t, size as u64, 0, 0, dev);
            }
        },
    )
}

pub unsafe fn release(api: Api, real: ReleaseFn, handle: u64) -> c_int {
    hooked_free(
        || real(handle),
        |rc, t0, me| free_of(me, api, rc, t0, handle, MemKind::VmmHandle, 0, 0),
    )
}

pub unsafe fn map(
    api: Api,
    real: MapFn,
    ptr: u64,
    size: usize,
    offset: usize,
    handle: u64,
    flags: u64,
) -> c_int {
    hooked(
        || real(ptr, size, offset, handle, flags),
        |rc, me| {
            let t = crate::sys::clock::now();
            let dev = device::of_handle(api.family(), handle);
            if rc == 0 {
                if ptr == 0 {
                    return;
                }
                let mut r = Rec::new(EventKind::Alloc, api, t);
                r.mem = MemKind::Device;
                r.device = dev;
                r.address = ptr;
                r.size = size as u64;
                // The backing handle, for reports that show segments.
                r.pool = handle;
                record(me, r);
            } else {
                on_failure(me, api, MemKind::Device, rc, t, size as u64, 0, handle, dev);
            }
        },
    )
}

pub unsafe fn unmap(api: Api, real: RangeFn, ptr: u64, size: usize) -> c_int {
    hooked_free(
        || real(ptr, size),
        |rc, t0, me| {
            free_of(
                me,
                api,
                rc,
                t0,
                ptr,
                MemKind::Device,
                FREE_RANGE,
                size as u64,
            )
        },
    )
}

pub unsafe fn reserve(
    api: Api,
    real: ReserveFn,
    p: *mut u64,
    size: usize,
    align: usize,
    addr: u64,
    flags: u64,
) -> c_int {
    hooked(
        || real(p, size, align, addr, flags),
        |rc, me| {
            let t = crate::sys::clock::now();
            if rc == 0 {
                let a = out_u64(p);
                if a == 0 {
                    return;
                }
                let mut r = Rec::new(EventKind::Alloc, api, t);
                r.mem = MemKind::AddressReservation;
                r.address = a;
                r.size = size as u64;
                record(me, r);
            } else {
                on_failure(
                    me,
                    api,
                    MemKind::AddressReservation,
                    rc,
                    t,
                    size as u64,
                    0,
                    0,
                    -1,
                );
            }
        },
    )
}

pub unsafe fn address_free(api: Api, real: RangeFn, ptr: u64, size: usize) -> c_int {
    hooked_free(
        || real(ptr, size),
        |rc, t0, me| {
            free_of(
                me,
                api,
                rc,
                t0,
                ptr,
                MemKind::AddressReservation,
                0,
                size as u64,
            )
        },
    )
}

#[allow(clippy::too_many_arguments)]
fn free_of(
    me: &ThreadState,
    api: Api,
    rc: c_int,
    t0: u64,
    addr: u64,
    space: MemKind,
    flags: u8,
    size: u64,
) {
    if addr == 0 {
        return;
    }
    let mut r = Rec::new(EventKind::Free, api, t0);
    r.mem = space;
    r.address = addr;
    r.result = rc as u32;
    r.flags = flags;
    r.size = if flags & FREE_RANGE != 0 { size } else { 0 };
    record(me, r);
}
