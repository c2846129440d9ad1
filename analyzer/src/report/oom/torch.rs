//! The `oom` report's `pytorch` object: an out-of-memory failure in PyTorch's terms, when
//! the trace has the caching allocator's tensors on the failing device. "Allocated" is
//! the tensors live then, "reserved" the device memory live then (the allocator's
//! segments, and any other allocation of the process on that device), and `message` the
//! sentence PyTorch's `OutOfMemoryError` carries, with the same numbers and the same
//! rounding (c10's `format_size`). For the tensor PyTorch's allocator refused (a failure of
//! kind `tensor`, from `c10::reportOutOfMemoryToProfiler`), allocated and reserved are the
//! allocator's own totals it reported with it.

use std::collections::HashMap;

use gpumemprof_format::{AllocFailed, MemKind};

use super::model::{TensorSite, TorchAtFailure};
use super::scan::Moment;
use crate::report::level::site;
use crate::symbolize::Symbolizer;

/// `None` unless tensors of that device were recorded before the failure.
pub fn at_failure(
    call: &AllocFailed,
    moment: &Moment,
    sym: &mut Symbolizer,
    top: usize,
    frames: usize,
) -> Option<TorchAtFailure> {
    let r = &moment.replayed;
    // A refused tensor is PyTorch's own report (with its own totals); a failed CUDA call
    // is PyTorch's when its tensors were seen on that device.
    let refused = call.kind == MemKind::Tensor;
    if !refused
        && !r.allocators.iter().any(|f| {
            f.device == call.device
                && f.allocations > 0
                && f.framework == gpumemprof_format::FRAMEWORK_PYTORCH
        })
    {
        return None;
    }
    let (mut allocated, mut tensors, mut reserved) = (0u64, 0u64, 0u64);
    let mut by_stack: HashMap<u64, (u64, u64)> = HashMap::new();
    for a in r.live.iter().filter(|a| a.device == call.device) {
        match a.kind {
            MemKind::Tensor => {
                allocated = allocated.saturating_add(a.size);
                tensors += 1;
                let s = by_stack.entry(a.stack).or_default();
                s.0 = s.0.saturating_add(a.size);
                s.1 += 1;
            }
            MemKind::Device => reserved = reserved.saturating_add(a.size),
            _ => {}
        }
    }
    if refused {
        // The allocator's figures as it raised the error: the very numbers of its message.
        (allocated, reserved) = (call.stream, call.pool);
    }
    let mut sites: Vec<(u64, (u64, u64))> = by_stack.into_iter().collect();
    sites.sort_by(|(sa, a), (sb, b)| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(sa.cmp(sb)));
    if top > 0 {
        sites.truncate(top);
    }
    let known = call.mem_total > 0;
    let cached = reserved.saturating_sub(allocated);
    let mut message = format!("Tried to allocate {}.", format_size(call.size));
    if known {
        message.push_str(&format!(
            " GPU {} has a total capacity of {} of which {} is free.",
            call.device,
            format_size(call.mem_total),
            format_size(call.mem_free)
        ));
    }
    message.push_str(&format!(
        " Of the allocated memory {} is allocated by PyTorch, and {} is reserved by PyTorch \
         but unallocated.",
        format_size(allocated),
        format_size(cached)
    ));
    Some(TorchAtFailure {
        device: call.device,
        tried_to_allocate_bytes: call.size,
        allocated_bytes: allocated,
        tensors,
        reserved_bytes: reserved,
        cached_bytes: cached,
        device_total_bytes: known.then_some(call.mem_total),
        device_free_bytes: known.then_some(call.mem_free),
        message,
        sites: sites
            .into_iter()
            .map(|(stack, (bytes, count))| TensorSite {
                stack_id: stack,
                bytes,
                count,
                site: site(&sym.stack(stack, 0)).cloned(),
                frames: sym.stack(stack, frames),
            })
            .collect(),
    })
}

/// c10's `format_size`: bytes up to 1024, then KiB, MiB up to 1 GiB inclusive, then GiB,
/// with two decimals.
pub fn format_size(size: u64) -> String {
    let s = size as f64;
    if size <= 1024 {
        format!("{size} bytes")
    } else if size <= 1 << 20 {
        format!("{:.2} KiB", s / 1024.0)
    } else if size <= 1 << 30 {
        format!("{:.2} MiB", s / 1048576.0)
    } else {
        format!("{:.2} GiB", s / 1073741824.0)
    }
}

#[cfg(test)]
mod tests {
    use super::format_size;

    /// As PyTorch words sizes in its out-of-memory message.
    #[test]
    fn sizes_as_c10_formats_them() {
        assert_eq!(format_size(512), "512 bytes");
        assert_eq!(format_size(1024), "1024 bytes");
        assert_eq!(format_size(1536), "1.50 KiB");
        assert_eq!(format_size(1 << 20), "1024.00 KiB");
        assert_eq!(format_size(8 << 20), "8.00 MiB");
        assert_eq!(format_size(1 << 30), "1024.00 MiB");
        assert_eq!(format_size(64 << 30), "64.00 GiB");
    }
}
