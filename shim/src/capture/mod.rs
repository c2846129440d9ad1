//! What a hooked call captures on its own thread: the thread's state and re-entrancy
//! guard, its event ring, its native stack (the cached-CFI unwinder and libgcc's), its
//! Python frames, the interned stacks and NVTX names, and the module map that later
//! symbolizes them, and the memory figures the C API reads at once. Imports only `sys`.

pub(crate) mod figures;
mod frames_arena;
mod id_table;
pub(crate) mod intern;
pub mod modules;
pub(crate) mod nvtx_names;
pub mod python;
pub(crate) mod ring;
pub(crate) mod stack;
pub(crate) mod thread;
pub(crate) mod unwind;
pub(crate) mod words_hash;
