//! NVML, read for `info` and `diagnose`: the driver's version, the devices and their
//! memory. `libnvidia-ml.so.1` is opened with `dlopen` when asked, never linked, so the
//! analyzer runs on machines without a driver; there NVML is simply "not available".
//! CUDA itself is never called (that would create a context and take device memory).

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

use serde::Serialize;

/// The soname the driver installs; found through the usual library search path
/// (`LD_LIBRARY_PATH`, the ld.so cache).
pub const LIBRARY: &str = "libnvidia-ml.so.1";

/// What NVML says about this machine.
#[derive(Debug, Clone, Serialize)]
pub struct NvmlInfo {
    /// NVML was loaded and initialised.
    pub available: bool,
    pub library: &'static str,
    /// Why NVML is not available, or what failed part way; null when all went well.
    pub message: Option<String>,
    /// The NVIDIA driver's version (`nvmlSystemGetDriverVersion`), e.g. "550.54.15".
    pub driver_version: Option<String>,
    pub nvml_version: Option<String>,
    /// The newest CUDA version the driver supports, "12.4"
    /// (`nvmlSystemGetCudaDriverVersion`).
    pub cuda_driver_version: Option<String>,
    pub devices: Vec<NvmlDeviceInfo>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NvmlDeviceInfo {
    /// NVML index (the CUDA ordinal unless `CUDA_VISIBLE_DEVICES` or `CUDA_DEVICE_ORDER`
    /// reorder devices).
    pub index: u32,
    pub name: Option<String>,
    pub uuid: Option<String>,
    pub memory_total_bytes: Option<u64>,
    pub memory_used_bytes: Option<u64>,
    pub memory_free_bytes: Option<u64>,
    /// What failed for this device, if anything.
    pub error: Option<String>,
}

/// `nvmlMemory_t`.
#[repr(C)]
#[derive(Default)]
struct Memory {
    total: u64,
    free: u64,
    used: u64,
}

type Device = *mut c_void;
type Ret = c_int;
const SUCCESS: Ret = 0;

/// The loaded library.
struct Lib(*mut c_void);

impl Lib {
    /// The first of `names` the library exports, as a function pointer of type `F`.
    fn func<F: Copy>(&self, names: &[&CStr]) -> Option<F> {
        assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
        names.iter().find_map(|name| {
            // SAFETY: a valid handle and a NUL-terminated name.
            let p = unsafe { libc::dlsym(self.0, name.as_ptr()) };
            // SAFETY: F is a function pointer type of the symbol's C signature (the
            // callers spell out NVML's documented prototypes), of pointer size.
            (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
        })
    }

    fn error(&self, ret: Ret) -> String {
        type ErrorString = unsafe extern "C" fn(Ret) -> *const c_char;
        let text = self
            .func::<ErrorString>(&[c"nvmlErrorString"])
            .and_then(|f| {
                // SAFETY: NVML returns a static string (or null).
                let p = unsafe { f(ret) };
                // SAFETY: non-null: a NUL-terminated static string.
                (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
            });
        match text {
            Some(t) => format!("{t} (NVML error {ret})"),
            None => format!("NVML error {ret}"),
        }
    }

    /// A string out-parameter function: `f(buffer, length)`.
    fn string(&self, names: &[&CStr]) -> Option<String> {
        type GetString = unsafe extern "C" fn(*mut c_char, c_uint) -> Ret;
        let f = self.func::<GetString>(names)?;
        let mut buf = [0 as c_char; 96];
        // SAFETY: the buffer and its length match.
        (unsafe { f(buf.as_mut_ptr(), buf.len() as c_uint) } == SUCCESS).then(|| c_string(&buf))
    }
}

fn c_string(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn unavailable(message: String) -> NvmlInfo {
    NvmlInfo {
        available: false,
        library: LIBRARY,
        message: Some(message),
        driver_version: None,
        nvml_version: None,
        cuda_driver_version: None,
        devices: Vec::new(),
    }
}

/// Loads NVML and asks it about the driver and every device.
pub fn query() -> NvmlInfo {
    let name = std::ffi::CString::new(LIBRARY).expect("no NUL in the soname");
    // SAFETY: a valid C string; RTLD_LOCAL keeps NVML's symbols out of the global scope.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns the last error as a C string, or null.
        let why = unsafe { libc::dlerror() };
        let why = if why.is_null() {
            "not found".to_string()
        } else {
            // SAFETY: non-null: a NUL-terminated string owned by libdl.
            unsafe { CStr::from_ptr(why) }
                .to_string_lossy()
                .into_owned()
        };
        return unavailable(format!(
            "NVML is not available ({why}): no NVIDIA driver is installed here, or \
             {LIBRARY} is not on the library path (set LD_LIBRARY_PATH to its folder)"
        ));
    }
    let lib = Lib(handle);
    type Init = unsafe extern "C" fn() -> Ret;
    let Some(init) = lib.func::<Init>(&[c"nvmlInit_v2", c"nvmlInit"]) else {
        return unavailable(format!("{LIBRARY} has no nvmlInit: not an NVML library"));
    };
    // SAFETY: no arguments; NVML allows repeated init/shutdown pairs.
    let ret = unsafe { init() };
    if ret != SUCCESS {
        return unavailable(format!(
            "NVML did not initialise: {} (is the NVIDIA driver loaded? try nvidia-smi)",
            lib.error(ret)
        ));
    }
    let mut info = NvmlInfo {
        available: true,
        library: LIBRARY,
        message: None,
        driver_version: lib.string(&[c"nvmlSystemGetDriverVersion"]),
        nvml_version: lib.string(&[c"nvmlSystemGetNVMLVersion"]),
        cuda_driver_version: None,
        devices: Vec::new(),
    };
    type GetInt = unsafe extern "C" fn(*mut c_int) -> Ret;
    if let Some(f) = lib.func::<GetInt>(&[
        c"nvmlSystemGetCudaDriverVersion_v2",
        c"nvmlSystemGetCudaDriverVersion",
    ]) {
        let mut v: c_int = 0;
        // SAFETY: a valid out-pointer.
        if unsafe { f(&mut v) } == SUCCESS {
            info.cuda_driver_version = Some(format!("{}.{}", v / 1000, (v % 1000) / 10));
        }
    }
    type GetCount = unsafe extern "C" fn(*mut c_uint) -> Ret;
    type GetHandle = unsafe extern "C" fn(c_uint, *mut Device) -> Ret;
    type DeviceString = unsafe extern "C" fn(Device, *mut c_char, c_uint) -> Ret;
    type GetMemory = unsafe extern "C" fn(Device, *mut Memory) -> Ret;
    let count = lib
        .func::<GetCount>(&[c"nvmlDeviceGetCount_v2", c"nvmlDeviceGetCount"])
        .map(|f| {
            let mut n: c_uint = 0;
            // SAFETY: a valid out-pointer.
            let ret = unsafe { f(&mut n) };
            (ret, n)
        });
    match count {
        None => info.message = Some(format!("{LIBRARY} has no nvmlDeviceGetCount")),
        Some((ret, _)) if ret != SUCCESS => {
            info.message = Some(format!("counting devices failed: {}", lib.error(ret)))
        }
        Some((_, n)) => {
            let handle_of = lib.func::<GetHandle>(&[
                c"nvmlDeviceGetHandleByIndex_v2",
                c"nvmlDeviceGetHandleByIndex",
            ]);
            let name_of = lib.func::<DeviceString>(&[c"nvmlDeviceGetName"]);
            let uuid_of = lib.func::<DeviceString>(&[c"nvmlDeviceGetUUID"]);
            let memory_of = lib.func::<GetMemory>(&[c"nvmlDeviceGetMemoryInfo"]);
            let text = |f: Option<DeviceString>, dev: Device| {
                let f = f?;
                let mut buf = [0 as c_char; 96];
                // SAFETY: a device handle from NVML, a buffer with its length.
                (unsafe { f(dev, buf.as_mut_ptr(), buf.len() as c_uint) } == SUCCESS)
                    .then(|| c_string(&buf))
            };
            for index in 0..n {
                let mut d = NvmlDeviceInfo {
                    index,
                    name: None,
                    uuid: None,
                    memory_total_bytes: None,
                    memory_used_bytes: None,
                    memory_free_bytes: None,
                    error: None,
                };
                let mut dev: Device = std::ptr::null_mut();
                // SAFETY: a valid out-pointer.
                let ret = handle_of.map(|f| unsafe { f(index, &mut dev) });
                if ret != Some(SUCCESS) {
                    d.error = Some(match ret {
                        Some(r) => format!("no handle: {}", lib.error(r)),
                        None => format!("{LIBRARY} has no nvmlDeviceGetHandleByIndex"),
                    });
                    info.devices.push(d);
                    continue;
                }
                d.name = text(name_of, dev);
                d.uuid = text(uuid_of, dev);
                let mut mem = Memory::default();
                // SAFETY: a device handle and a valid out-pointer to nvmlMemory_t.
                match memory_of.map(|f| unsafe { f(dev, &mut mem) }) {
                    Some(SUCCESS) => {
                        d.memory_total_bytes = Some(mem.total);
                        d.memory_used_bytes = Some(mem.used);
                        d.memory_free_bytes = Some(mem.free);
                    }
                    Some(r) => d.error = Some(format!("memory: {}", lib.error(r))),
                    None => d.error = Some(format!("{LIBRARY} has no nvmlDeviceGetMemoryInfo")),
                }
                info.devices.push(d);
            }
        }
    }
    type Shutdown = unsafe extern "C" fn() -> Ret;
    if let Some(f) = lib.func::<Shutdown>(&[c"nvmlShutdown"]) {
        // SAFETY: paired with the successful init above.
        unsafe { f() };
    }
    info
}
