//! Cache-line prefetches: a hint that never faults, a no-op where the CPU has none.

/// Prefetches the cache line at `p` with intent to write (`prefetchw`); a no-op on CPUs
/// without it (it decodes as a NOP there) and on other architectures.
#[inline(always)]
pub fn for_write<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and changes no architectural state.
    unsafe {
        std::arch::asm!("prefetchw [{0}]", in(reg) p, options(nostack, preserves_flags, readonly));
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Prefetches the cache line at `p` for reading, into every level of the cache.
#[inline(always)]
pub fn for_read<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and changes no architectural state.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
