//! Per-thread event rings: each recording thread writes its events into its own
//! single-producer ring; the writer thread drains every ring in batches.
//!
//! ```text
//!  thread A: stamp ─► slot[head] = event; head += 1 (one release store, no RMW)
//!  thread B: ...                 ring B
//!  writer (holding the writer lock): for each ring: read head (acquire), copy
//!          slots tail..head out, tail = head (release)
//! ```
//!
//! Why not one shared queue: with a multi-producer queue every push is an atomic
//! read-modify-write on a shared index plus a store into a slot line the consumer owns
//! (a cross-core cache transfer per event), and 8 threads contend on the index. Here a
//! push touches only lines its thread wrote last (the producer line and its slots),
//! except the consumer's `tail`, read when the ring looks full.
//!
//! The consumer is whoever holds the writer lock (`Pipeline::core`): the writer thread,
//! or a thread writing late events after shutdown. A thread that exits marks its ring
//! retired (a `pthread_key` destructor, in `thread.rs`); once drained, the ring is free and
//! the next new thread reuses it. A new thread that finds no free ring takes a retired one
//! still holding events: under the registry's lock, which the consumer holds too while it
//! drains, it moves those events to the registry's spill list (drained first next time)
//! and reuses the ring. So however fast short-lived threads come and go, the rings are
//! bounded by the threads alive at once, not by how many ended since the last drain.

use crate::sys::event::Event;
use crate::sys::prefetch::{for_read as prefetch_for_read, for_write as prefetch_for_write};
use std::cell::{Cell, UnsafeCell};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

/// How many slots ahead of the one written a push prefetches (see `push`). At 0 (the slot
/// just written, until 2026-11-26) the loop ran at twice its cost in some runs, in
/// phases of several runs in a row: each push's store waited for the writer's core to
/// give up the slot's line, and the program's next locked instruction (a mutex in the
/// CUDA library) waited for that store. At 8 and 32 no run did, in the same rounds; 8
/// was the fastest otherwise (BENCHMARKS.md, tenth).
const PREFETCH_AHEAD: u64 = 8;

/// A drain hands the slots it has copied out back to the producer every this many events,
/// not only at its end: a thread waiting on a full ring goes on once this many are free,
/// instead of after the whole ring (16,384 events by default). On
/// the allocation loop, which waits 4 to 22 times a million pairs, the waits' count and
/// the loop's time did not move beyond the noise (BENCHMARKS.md, tenth); a wait is shorter.
const RELEASE_EVERY: u64 = 1024;

const OWNED: u8 = 0;
const RETIRED: u8 = 1;
const FREE: u8 = 2;

/// What the producer writes on every push (and reads: its stale copy of `tail`).
#[repr(C, align(64))]
struct ProducerLine {
    head: AtomicU64,
    /// The consumer's `tail` as last read; only the owner thread touches it.
    tail_seen: Cell<u64>,
}

/// What the consumer writes once per drain.
#[repr(C, align(64))]
struct ConsumerLine {
    tail: AtomicU64,
    /// The highest stamp drained so far (see `drain`); only the consumer touches it.
    last: AtomicU64,
}

/// A ring's slot: one event in a cache line of its own (an `Event` itself is aligned to 8
/// only, see `sys/event.rs`).
#[repr(C, align(64))]
struct Slot(UnsafeCell<MaybeUninit<Event>>);

impl Slot {
    #[inline(always)]
    fn get(&self) -> *mut MaybeUninit<Event> {
        self.0.get()
    }
}

pub struct Ring {
    producer: ProducerLine,
    consumer: ConsumerLine,
    tid: AtomicU32,
    state: AtomicU8,
    mask: u64,
    slots: Box<[Slot]>,
}

// SAFETY: `tail_seen` and the slots between tail and head are touched only by the owner
// thread (the producer); slots between tail and head are read only by the consumer, after
// an acquire load of head; the release store of tail hands them back.
unsafe impl Sync for Ring {}

/// Stores `ev` into `slot` a field at a time. The hook builds the event a field at a time
/// (on its stack, where the compiler keeps it), and a whole-slot copy read it back in
/// 16-byte loads, each of which waited for the narrower stores under it to retire instead
/// of taking their values (store forwarding serves a load from one store of its width).
///
/// # Safety
/// `slot` is valid for writes of an `Event`.
#[inline(always)]
unsafe fn write_fields(slot: *mut Event, ev: &Event) {
    use std::ptr::addr_of_mut;
    addr_of_mut!((*slot).time_ns).write(ev.time_ns);
    addr_of_mut!((*slot).address).write(ev.address);
    addr_of_mut!((*slot).size).write(ev.size);
    addr_of_mut!((*slot).stream).write(ev.stream);
    addr_of_mut!((*slot).pool).write(ev.pool);
    addr_of_mut!((*slot).aux).write(ev.aux);
    addr_of_mut!((*slot).stack).write(ev.stack);
    addr_of_mut!((*slot).device).write(ev.device);
    addr_of_mut!((*slot).result).write(ev.result);
    addr_of_mut!((*slot).api).write(ev.api);
    addr_of_mut!((*slot).kind).write(ev.kind);
    addr_of_mut!((*slot).mem).write(ev.mem);
}

impl Ring {
    /// A ring of `capacity` events (rounded up to a power of two), owned by `tid`;
    /// None if the memory cannot be had.
    pub fn new(capacity: usize, tid: u32) -> Option<Ring> {
        let cap = capacity.max(2).next_power_of_two();
        let mut v: Vec<Slot> = Vec::new();
        v.try_reserve_exact(cap).ok()?;
        v.resize_with(cap, || Slot(UnsafeCell::new(MaybeUninit::uninit())));
        Some(Ring {
            producer: ProducerLine {
                head: AtomicU64::new(0),
                tail_seen: Cell::new(0),
            },
            consumer: ConsumerLine {
                tail: AtomicU64::new(0),
                last: AtomicU64::new(0),
            },
            tid: AtomicU32::new(tid),
            state: AtomicU8::new(OWNED),
            mask: cap as u64 - 1,
            slots: v.into_boxed_slice(),
        })
    }

    pub fn capacity(&self) -> u64 {
        self.mask + 1
    }

    pub fn tid(&self) -> u32 {
        self.tid.load(Ordering::Relaxed)
    }

    /// Appends `ev`; returns the events in the ring as far as this thread knows (an
    /// upper bound), or Err if the ring is full.
    ///
    /// # Safety
    /// Only the owner thread may call it, never re-entrantly.
    #[inline(always)]
    pub unsafe fn push(&self, ev: &Event) -> Result<u64, ()> {
        let head = self.producer.head.load(Ordering::Relaxed);
        let mut tail = self.producer.tail_seen.get();
        if head.wrapping_sub(tail) > self.mask {
            tail = self.consumer.tail.load(Ordering::Acquire);
            self.producer.tail_seen.set(tail);
            if head.wrapping_sub(tail) > self.mask {
                return Err(());
            }
        }
        write_fields(
            (*self.slots[(head & self.mask) as usize].get()).as_mut_ptr(),
            ev,
        );
        self.producer.head.store(head + 1, Ordering::Release);
        // The slot `PREFETCH_AHEAD` pushes ahead was last read by the writer on another
        // core: ask for it in exclusive state now, so the store then does not wait for it
        // (that wait would stall the program's next locked instruction).
        prefetch_for_write(self.slots[((head + PREFETCH_AHEAD) & self.mask) as usize].get());
        Ok(head + 1 - tail)
    }

    /// The events in the ring now (reads the consumer's tail).
    ///
    /// # Safety
    /// Only the owner thread may call it.
    #[inline]
    pub unsafe fn refresh_used(&self) -> u64 {
        let tail = self.consumer.tail.load(Ordering::Acquire);
        self.producer.tail_seen.set(tail);
        self.producer
            .head
            .load(Ordering::Relaxed)
            .wrapping_sub(tail)
    }

    /// Hands every event pushed so far to `f`, oldest first; returns how many. A ring
    /// whose thread exited becomes free once drained.
    ///
    /// # Safety
    /// Only one consumer at a time (the holder of the writer lock).
    pub unsafe fn drain(&self, mut f: impl FnMut(&Event)) -> usize {
        // Before head: every event the thread pushed before it retired is then seen.
        let retired = self.state.load(Ordering::Acquire) == RETIRED;
        let tail = self.consumer.tail.load(Ordering::Relaxed);
        let head = self.producer.head.load(Ordering::Acquire);
        let mut at = tail;
        let mut last = self.consumer.last.load(Ordering::Relaxed);
        while at != head {
            // The producer wrote these lines on another core: start the next transfers
            // while this event is handled.
            prefetch_for_read(self.slots[((at + PREFETCH_AHEAD) & self.mask) as usize].get());
            let e = (*self.slots[(at & self.mask) as usize].get()).assume_init_ref();
            // A thread's stamps in its program order: a free's unfenced stamp that read
            // the counter before the fenced stamp of the allocation before it (never seen,
            // but not ruled out by the architecture: `clock::rdtsc_before`) gets that
            // stamp, so the writer's stable sort keeps the two in order.
            if e.time_ns < last {
                f(&Event {
                    time_ns: last,
                    ..*e
                });
            } else {
                last = e.time_ns;
                f(e);
            }
            at += 1;
            if at.is_multiple_of(RELEASE_EVERY) {
                // `f` copied every event before `at` out of its slot.
                self.consumer.tail.store(at, Ordering::Release);
            }
        }
        self.consumer.tail.store(head, Ordering::Release);
        if retired {
            // The next thread to take the ring starts its own order.
            self.consumer.last.store(0, Ordering::Relaxed);
            self.state.store(FREE, Ordering::Release);
        } else {
            self.consumer.last.store(last, Ordering::Relaxed);
        }
        (head - tail) as usize
    }

    /// Its thread exited: no more pushes; the consumer frees it after the last drain.
    pub fn retire(&self) {
        self.state.store(RETIRED, Ordering::Release);
    }

    /// Takes a free ring for thread `tid` (the caller holds the registry lock).
    fn claim_if_free(&self, tid: u32) -> bool {
        if self.state.load(Ordering::Acquire) != FREE {
            return false;
        }
        self.tid.store(tid, Ordering::Relaxed);
        self.state.store(OWNED, Ordering::Release);
        true
    }
}

/// Every ring of one pipeline; rings are never freed (a free one is reused).
pub struct Registry {
    rings: parking_lot::Mutex<Rings>,
    capacity: usize,
}

struct Rings {
    all: Vec<&'static Ring>,
    /// Events of retired rings taken for a new thread before the consumer drained them.
    spilled: Vec<(u32, Event)>,
}

impl Registry {
    pub fn new(capacity: usize) -> Registry {
        Registry {
            rings: parking_lot::Mutex::new(Rings {
                all: Vec::new(),
                spilled: Vec::new(),
            }),
            capacity,
        }
    }

    /// A ring for thread `tid`: a free one, else a retired one whose events are spilled
    /// (see the module comment), else a new one; None if none can be had.
    pub fn claim(&self, tid: u32) -> Option<&'static Ring> {
        let mut rings = self.rings.lock();
        if let Some(r) = rings.all.iter().find(|r| r.claim_if_free(tid)) {
            return Some(r);
        }
        let Rings { all, spilled } = &mut *rings;
        if let Some(r) = all
            .iter()
            .find(|r| r.state.load(Ordering::Acquire) == RETIRED)
        {
            let owner = r.tid();
            spilled.try_reserve(r.capacity() as usize).ok()?;
            // SAFETY: the registry's lock is held, and the consumer drains only under it.
            unsafe { r.drain(|e| spilled.push((owner, *e))) };
            if r.claim_if_free(tid) {
                return Some(r);
            }
        }
        all.try_reserve(1).ok()?;
        let ring: &'static Ring = Box::leak(Box::new(Ring::new(self.capacity, tid)?));
        all.push(ring);
        Some(ring)
    }

    /// Drains the spilled events, then every ring, into `f(tid, event)`; returns the
    /// number of events.
    ///
    /// # Safety
    /// The caller holds the writer lock (one consumer at a time).
    pub unsafe fn drain_all(&self, mut f: impl FnMut(u32, &Event)) -> usize {
        let mut rings = self.rings.lock();
        let mut n = rings.spilled.len();
        for (tid, e) in rings.spilled.drain(..) {
            f(tid, &e);
        }
        for r in rings.all.iter() {
            let tid = r.tid();
            n += r.drain(|e| f(tid, e));
        }
        n
    }

    /// Rings allocated so far (for tests).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.rings.lock().all.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::event::EventKind;

    #[test]
    fn each_slot_is_a_cache_line_of_its_own() {
        assert_eq!(std::mem::size_of::<Slot>(), 64);
        assert_eq!(std::mem::align_of::<Slot>(), 64);
        let r = Ring::new(4, 1).unwrap();
        assert_eq!(r.slots.as_ptr() as usize % 64, 0);
    }

    #[test]
    fn a_threads_stamps_come_out_in_its_program_order() {
        let r = Ring::new(8, 7).unwrap();
        let mut got = Vec::new();
        // SAFETY: this thread is the only producer and the only consumer.
        unsafe {
            // 20 then 15: the second read the counter early; it is raised to 20, also
            // across drains, and later stamps pass unchanged.
            for t in [10, 20, 15] {
                r.push(&ev(t)).unwrap();
            }
            assert_eq!(r.drain(|e| got.push(e.time_ns)), 3);
            for t in [18, 30] {
                r.push(&ev(t)).unwrap();
            }
            assert_eq!(r.drain(|e| got.push(e.time_ns)), 2);
        }
        assert_eq!(got, [10, 20, 20, 20, 30]);
        // Its thread exits; the next thread to take the ring starts its own order.
        r.retire();
        // SAFETY: as above.
        unsafe { r.drain(|_| {}) };
        assert!(r.claim_if_free(8));
        got.clear();
        // SAFETY: as above.
        unsafe {
            r.push(&ev(5)).unwrap();
            r.drain(|e| got.push(e.time_ns));
        }
        assert_eq!(got, [5]);
    }

    #[test]
    fn a_drain_frees_slots_as_it_goes_so_a_full_ring_takes_pushes_before_it_ends() {
        let r = Ring::new(4096, 7).unwrap();
        let mut got = Vec::new();
        let mut pushed_during = Vec::new();
        // SAFETY: this thread is the only producer and the only consumer (the drain's
        // closure pushes as the thread would while the writer drains on another core).
        unsafe {
            for t in 0..4096 {
                r.push(&ev(t)).unwrap();
            }
            assert_eq!(r.push(&ev(99_999)), Err(()));
            let drained = r.drain(|e| {
                got.push(e.time_ns);
                // Full until the first 1,024 are handed back; then one free slot for
                // each event handled since, up to the next 1,024.
                let t = 10_000 + e.time_ns;
                pushed_during.push(r.push(&ev(t)).is_ok());
            });
            assert_eq!(drained, 4096);
            // The events pushed during the drain come out in the next one, in order.
            let mut next = Vec::new();
            assert_eq!(r.drain(|e| next.push(e.time_ns)), 3072);
            assert_eq!(next, (11_024..14_096).collect::<Vec<_>>());
        }
        assert_eq!(got, (0..4096).collect::<Vec<_>>());
        // The pushes made while handling events 0 to 1,023 found the ring full; from the
        // 1,025th on (the first 1,024 handed back), each found room.
        assert!(pushed_during[..1024].iter().all(|ok| !ok));
        assert!(pushed_during[1024..].iter().all(|&ok| ok));
    }

    fn ev(t: u64) -> Event {
        Event {
            time_ns: t,
            ..Event::new(EventKind::Alloc)
        }
    }

    #[test]
    fn a_ring_keeps_order_refuses_when_full_and_wraps() {
        let r = Ring::new(5, 7).unwrap();
        assert_eq!(r.capacity(), 8);
        let mut got = Vec::new();
        // SAFETY: this thread is the only producer and the only consumer.
        unsafe {
            for t in 0..8 {
                assert_eq!(r.push(&ev(t)), Ok(t + 1));
            }
            assert_eq!(r.push(&ev(99)), Err(()));
            assert_eq!(r.drain(|e| got.push(e.time_ns)), 8);
            for t in 8..13 {
                r.push(&ev(t)).unwrap();
            }
            assert_eq!(r.refresh_used(), 5);
            assert_eq!(r.drain(|e| got.push(e.time_ns)), 5);
        }
        assert_eq!(got, (0..13).collect::<Vec<_>>());
    }

    #[test]
    fn a_retired_ring_is_reused_at_once_its_events_spilled_for_the_consumer() {
        let reg = Registry::new(64);
        let a = reg.claim(1).unwrap();
        // SAFETY: this thread acts as both owner and consumer.
        unsafe {
            a.push(&ev(1)).unwrap();
            a.push(&ev(2)).unwrap();
            a.retire();
            // Thread 1 exited before a drain: thread 2 gets its ring, and its events wait
            // in the spill list under thread 1's id.
            let b = reg.claim(2).unwrap();
            assert!(std::ptr::eq(a, b));
            assert_eq!(b.tid(), 2);
            b.push(&ev(3)).unwrap();
            let mut seen = Vec::new();
            assert_eq!(reg.drain_all(|tid, e| seen.push((tid, e.time_ns))), 3);
            assert_eq!(seen, vec![(1, 1), (1, 2), (2, 3)]);
            // An owned ring is never taken.
            let c = reg.claim(3).unwrap();
            assert!(!std::ptr::eq(a, c));
        }
        assert_eq!(reg.len(), 2);
    }

    #[test]
    fn a_producer_and_the_consumer_on_two_threads_lose_nothing() {
        let reg: &'static Registry = Box::leak(Box::new(Registry::new(64)));
        let n = 200_000u64;
        let producer = std::thread::spawn(move || {
            let r = reg.claim(42).unwrap();
            for t in 0..n {
                // SAFETY: this thread owns `r`.
                while unsafe { r.push(&ev(t)) }.is_err() {
                    std::thread::yield_now();
                }
            }
        });
        let mut next = 0u64;
        while next < n {
            // SAFETY: this is the only consumer.
            unsafe {
                reg.drain_all(|tid, e| {
                    assert_eq!((tid, e.time_ns), (42, next));
                    next += 1;
                });
            }
        }
        producer.join().unwrap();
        assert_eq!(next, n);
    }
}
