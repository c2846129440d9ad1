//! `summary`'s device memory at its peak by the library that asked for it (`owner`):
//! PyTorch's caching allocator (`libc10_cuda.so`: its reserved), a library's own (CUDA 13's
//! cuBLAS workspace, NCCL's buffers), the program's. This is the hooked part of the
//! device's ledger: NVML's figure less these is the CUDA context and what no hook saw.

use std::collections::HashMap;

use gpumemprof_format::MemKind;
use serde::Serialize;

use crate::replay::Replayed;
use crate::symbolize::Symbolizer;
use crate::units;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LibraryBytes {
    pub device: i32,
    /// The file name of the library that asked (`libc10_cuda.so`, `libcublas.so.13`, the
    /// program's own executable); null when the stack does not say (none captured).
    pub library: Option<String>,
    /// Device memory it held at the device's peak, in so many allocations.
    pub bytes: u64,
    pub count: u64,
}

/// Each device's device memory at its peak, by the library that asked; per device the
/// largest first (ties by name).
pub fn at_peaks(r: &Replayed) -> Vec<LibraryBytes> {
    let sym = Symbolizer::new(&r.modules, &r.stacks, &r.python);
    let mut out = Vec::new();
    for row in r.rows.iter().filter(|row| row.kind == MemKind::Device) {
        let mut by: HashMap<Option<&str>, (u64, u64)> = HashMap::new();
        for site in &row.peak_sites {
            let library = crate::owner::asking_library(sym.native_modules(site.stack));
            let e = by.entry(library).or_default();
            e.0 = e.0.saturating_add(site.bytes);
            e.1 += site.count;
        }
        let mut libraries: Vec<_> = by.into_iter().collect();
        libraries.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(&b.0)));
        out.extend(
            libraries
                .into_iter()
                .map(|(library, (bytes, count))| LibraryBytes {
                    device: row.device,
                    library: library.map(str::to_owned),
                    bytes,
                    count,
                }),
        );
    }
    out
}

/// `  device 0 at its peak, by the library that asked: libc10_cuda.so (PyTorch's allocator)
/// 86.0 MiB, libcublas.so.13 32.0 MiB`, for each device where more than one library asked.
pub fn write_text(libraries: &[LibraryBytes], out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let mut devices: Vec<i32> = libraries.iter().map(|l| l.device).collect();
    devices.dedup();
    for device in devices {
        let of: Vec<&LibraryBytes> = libraries.iter().filter(|l| l.device == device).collect();
        if of.len() < 2 {
            continue;
        }
        let words: Vec<String> = (of.iter())
            .map(|l| format!("{} {}", name(l.library.as_deref()), units::bytes(l.bytes)))
            .collect();
        writeln!(
            out,
            "  device {} at its peak, by the library that asked: {}",
            units::device(device),
            words.join(", ")
        )?;
    }
    Ok(())
}

/// A library as the reports name it: its file name, PyTorch's said as such; `no stack`
/// when the stack does not say.
pub fn name(library: Option<&str>) -> String {
    match library {
        Some(n) if crate::torch_frames::is_torch_library(n) => {
            format!("{n} (PyTorch's allocator)")
        }
        Some(n) => n.to_owned(),
        None => "no stack".to_owned(),
    }
}
