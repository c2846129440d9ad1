//! What a capture found, packed into one word so that it comes back in registers: its
//! frames, the memo slot or first-state entry it met, the stack id noted for them, and
//! whether its walk waits for an id (`capture_noted`'s result).

/// What `capture_noted` found, in one word, so that it comes back in registers: a larger
/// struct came back through memory, written a field at a time and read back in wider
/// loads, each of which stalled on the narrower stores under it (BENCHMARKS.md, tenth).
/// Bits 0-14: frames; 15: the walk waits for its id (`waits_for_id`); 16-31: the memo slot
/// met (`0xFFFF`: none); 32-63: the noted id (0: none; a noted id is never 0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Captured(u64);

const NO_HIT: u64 = 0xFFFF;
/// Frames in a `Captured` (bit 15: the walk waits for its id).
const N_MASK: u64 = 0x7FFF;

impl Captured {
    /// `n` is at most the capture buffer's length (within 15 bits), `hit` below
    /// `memo::SLOTS` + the first-state cache's entries (within 16).
    #[inline(always)]
    pub fn new(n: usize, hit: Option<usize>, noted: Option<u32>) -> Captured {
        let n = (n as u64).min(N_MASK);
        let hit = hit.map_or(NO_HIT, |h| (h as u64).min(NO_HIT));
        Captured(n | hit << 16 | u64::from(noted.unwrap_or(0)) << 32)
    }

    /// Frames (in `out[..n]`, unless `noted`).
    #[inline(always)]
    pub fn n(self) -> usize {
        (self.0 & N_MASK) as usize
    }

    /// The same, told that the walk was kept by its inputs and waits for its stack id
    /// (`note_walked_id`).
    #[inline(always)]
    pub fn pending(self, pending: bool) -> Captured {
        Captured(self.0 | u64::from(pending) << 15)
    }

    /// Whether the walk waits for its stack id (`note_walked_id`).
    #[inline(always)]
    pub fn waits_for_id(self) -> bool {
        self.0 & 1 << 15 != 0
    }

    /// The memo slot met at the walk's first state (`capture_memo`'s).
    #[inline(always)]
    pub fn hit(self) -> Option<usize> {
        let h = self.0 >> 16 & 0xFFFF;
        (h != NO_HIT).then_some(h as usize)
    }

    /// The stack id noted for these frames with what was asked for merged in
    /// (`set_memo_stack_id(hit, n, id, with)` before), if there is one: then the frames
    /// were not copied to `out`.
    #[inline(always)]
    pub fn noted(self) -> Option<u32> {
        let id = (self.0 >> 32) as u32;
        (id != 0).then_some(id)
    }
}
