//! Device memory as NVML sees it, sampled from the writer thread.
//!
//! The hooks see allocations; they cannot see the CUDA context, library workspaces
//! (cuBLAS, cuDNN, NCCL) or memory allocated by paths the shim does not hook. NVML
//! reports what each process really uses on each device, so the writer thread asks it
//! every `GPUMEMPROF_NVML_MS` and records a `Sample` per device this process uses.
//!
//! NVML is loaded at run time (`dlopen("libnvidia-ml.so.1")`; the shim never links
//! it), only from the writer thread, and never calls CUDA, so it is safe off the
//! program's threads. No NVML (no driver, a CPU-only box): nothing is recorded, nothing
//! printed. A process in another PID namespace than the driver sees no entry for its
//! pid and records nothing (documented in the README's limits).

use crate::sys::clock;
use crate::sys::dl as dlsym;
use gpumemprof_format::Sample;
use std::ffi::{c_int, c_uint, c_void, CStr};

const NVML_SUCCESS: c_int = 0;
const NVML_ERROR_INSUFFICIENT_SIZE: c_int = 7;
/// More processes than this on one device: the sample of that device is skipped.
const MAX_PROCESSES: usize = 4096;

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ProcessInfo {
    pid: c_uint,
    used_gpu_memory: u64,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

#[repr(C)]
#[derive(Default)]
struct Memory {
    total: u64,
    free: u64,
    used: u64,
}

type Device = *mut c_void;

pub struct Nvml {
    get_processes: unsafe extern "C" fn(Device, *mut c_uint, *mut ProcessInfo) -> c_int,
    get_memory: unsafe extern "C" fn(Device, *mut Memory) -> c_int,
    devices: Vec<Device>,
    /// Whether the previous sample of each device listed this process.
    listed: Vec<bool>,
    buf: Vec<ProcessInfo>,
    pid: u32,
}

// SAFETY: NVML handles are plain pointers valid in any thread; the sampler lives on
// the writer thread only.
unsafe impl Send for Nvml {}

fn symbol<T>(lib: *mut c_void, name: &CStr) -> Option<T> {
    let p = dlsym::lookup(lib, name);
    if p.is_null() {
        return None;
    }
    // SAFETY: T is the function pointer type of that NVML symbol (checked by callers'
    // declarations); both are pointer-sized.
    Some(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
}

impl Nvml {
    /// Loads and initialises NVML; None (silently) if it is not there or fails.
    pub fn open() -> Option<Nvml> {
        // SAFETY: dlopen with a valid name; the handle is kept for the process's life.
        let lib = unsafe {
            libc::dlopen(
                c"libnvidia-ml.so.1".as_ptr(),
                libc::RTLD_NOW | libc::RTLD_LOCAL,
            )
        };
        if lib.is_null() {
            return None;
        }
        let init: unsafe extern "C" fn() -> c_int = symbol(lib, c"nvmlInit_v2")?;
        let count: unsafe extern "C" fn(*mut c_uint) -> c_int =
            symbol(lib, c"nvmlDeviceGetCount_v2")?;
        let by_index: unsafe extern "C" fn(c_uint, *mut Device) -> c_int =
            symbol(lib, c"nvmlDeviceGetHandleByIndex_v2")?;
        let get_processes = symbol(lib, c"nvmlDeviceGetComputeRunningProcesses_v3")?;
        let get_memory = symbol(lib, c"nvmlDeviceGetMemoryInfo")?;
        // SAFETY: NVML's documented calling sequence; out-pointers are valid.
        unsafe {
            if init() != NVML_SUCCESS {
                return None;
            }
            let mut n: c_uint = 0;
            if count(&mut n) != NVML_SUCCESS {
                return None;
            }
            let mut devices = Vec::with_capacity(n as usize);
            for i in 0..n.min(1024) {
                let mut d: Device = std::ptr::null_mut();
                if by_index(i, &mut d) != NVML_SUCCESS {
                    return None;
                }
                devices.push(d);
            }
            let listed = vec![false; devices.len()];
            Some(Nvml {
                get_processes,
                get_memory,
                devices,
                listed,
                buf: vec![ProcessInfo::default(); 64],
                pid: std::process::id(),
            })
        }
    }

    /// Appends a sample for every device this process uses now or used at the
    /// previous sample (so the drop to zero is seen).
    pub fn sample(&mut self, time_ns: u64, out: &mut Vec<Sample>) {
        let start = clock::now_ns();
        for i in 0..self.devices.len() {
            let used = self.process_used(i);
            // NVML's figure is of a moment between the stamp and now.
            let query_ns = clock::now_ns().saturating_sub(start);
            let listed = used.is_some();
            if listed || self.listed[i] {
                let mut m = Memory::default();
                // SAFETY: a device handle from NVML and a valid out-pointer.
                if unsafe { (self.get_memory)(self.devices[i], &mut m) } == NVML_SUCCESS {
                    out.push(Sample {
                        time_ns,
                        device: i as i32,
                        process_used: used.unwrap_or(0),
                        device_used: m.used,
                        device_total: m.total,
                        query_ns,
                    });
                }
            }
            self.listed[i] = listed;
        }
    }

    /// This process's bytes on device `i`, None if NVML does not list it there.
    fn process_used(&mut self, i: usize) -> Option<u64> {
        loop {
            let mut n = self.buf.len() as c_uint;
            // SAFETY: `buf` holds `n` entries; NVML writes at most `n` and sets `n`.
            let rc =
                unsafe { (self.get_processes)(self.devices[i], &mut n, self.buf.as_mut_ptr()) };
            if rc == NVML_ERROR_INSUFFICIENT_SIZE && (n as usize) > self.buf.len() {
                if n as usize > MAX_PROCESSES {
                    return None;
                }
                self.buf.resize(n as usize, ProcessInfo::default());
                continue;
            }
            if rc != NVML_SUCCESS {
                return None;
            }
            let n = (n as usize).min(self.buf.len());
            return self.buf[..n]
                .iter()
                .find(|p| p.pid == self.pid)
                .map(|p| p.used_gpu_memory);
        }
    }
}
