//! The table of keys and the shapes of `inputs.rs`, one by one.

use super::super::memo::offset;
use super::*;

/// A block with no table, whatever another test left in the pool.
fn empty() -> &'static mut Inputs {
    // SAFETY: a block of the calling test's own, from the pool.
    let i = unsafe { &mut *take() };
    i.release();
    (i.buckets, i.stored) = (0, 0);
    i
}

/// Notes `id` for key `k` as `note` does after a walk (`store` leaves it pending).
fn noted(i: &mut Inputs, k: u64, id: u32) {
    i.pending = k;
    i.note(id);
}

#[test]
fn every_key_noted_is_found_as_the_table_grows() {
    let i = empty();
    // 40,000 keys that share a first bucket by four at most while the table has room
    // for them (1, 2, 3, ...: the low bits pick it), the table growing from 1,024
    // buckets to 16,384 as it fills (at 3.5 keys a bucket): every key kept through each
    // growth.
    let key = |n: u64| n + 1;
    for n in 0..40_000u64 {
        assert_eq!(i.find(key(n)), None);
        noted(i, key(n), n as u32 + 1);
    }
    assert_eq!(i.buckets, 16_384);
    let found = (0..40_000u64)
        .filter(|&n| i.find(key(n)) == Some(n as u32 + 1))
        .count();
    assert_eq!(found, 40_000);
    // Nothing noted without a pending key, nor for id 0.
    i.note(9);
    noted(i, key(40_000), 0);
    assert_eq!(i.find(key(40_000)), None);
    give_back(i);
}

#[test]
fn a_bucket_keeps_its_five_most_recent_keys_in_one_cache_line() {
    let mut b = Bucket {
        keys: [0; WAYS_PER_BUCKET],
        ids: [0; WAYS_PER_BUCKET],
    };
    for k in 1..=6u64 {
        assert!(put(&mut b, k, 10 * k as u32));
    }
    assert_eq!((b.keys, b.ids), ([6, 5, 4, 3, 2], [60, 50, 40, 30, 20]));
    // One put again moves to the front, and is not counted as new.
    assert!(!put(&mut b, 3, 30));
    assert_eq!((b.keys, b.ids), ([3, 6, 5, 4, 2], [30, 60, 50, 40, 20]));
    assert_eq!(BUCKET_BYTES, 64);
}

#[test]
fn keys_that_share_a_first_bucket_spread_to_their_second() {
    let i = empty();
    // Seven keys below 2^32 whose low ten bits are 5 (first bucket 5 of 1,024) and whose
    // bits 11 on differ (second buckets 1 to 7): all seven are found, where one bucket
    // a key keeps five.
    let key = |j: u64| 5 + 2048 * (j + 1);
    for j in 0..7 {
        assert_eq!(buckets_of(key(j), 1024), (5, j as usize + 1));
        noted(i, key(j), j as u32 + 1);
    }
    assert_eq!(i.buckets, 1024);
    let found: Vec<_> = (0..7).map(|j| i.find(key(j))).collect();
    assert_eq!(found, (1..=7).map(Some).collect::<Vec<_>>());
    // Each went to the emptier of its two: the first key to bucket 5 (a tie), the next
    // three to their empty second buckets, the fifth (second bucket 5 too) to bucket 5,
    // the last two to their second buckets.
    // SAFETY: the table of 1,024 buckets noted into above.
    let held = |b: usize| unsafe { (*i.table.add(b)).held() };
    assert_eq!(
        (0..9).map(held).collect::<Vec<_>>(),
        [0, 0, 1, 1, 1, 2, 1, 1, 0]
    );
    give_back(i);
}

#[test]
fn a_shape_keeps_its_addresses_as_word_offsets_from_the_start() {
    // Offsets, not addresses: a set's eight shapes in 4.4 KiB, not 16.
    assert_eq!(std::mem::size_of::<Shape>(), 568);
    let sp = 0x7ffc_0000_1000u64;
    assert_eq!(offset(sp, sp), Some(0));
    assert_eq!(offset(sp, sp + 8 * 65_535), Some(65_535));
    // Below the start, between words, or past what a u16 holds: no shape is kept.
    assert_eq!(offset(sp, sp - 8), None);
    assert_eq!(offset(sp, sp + 12), None);
    assert_eq!(offset(sp, sp + 8 * 65_536), None);
}

/// A stack of 64 words to walk on, and the start of every walk below (at its first word).
struct Stack {
    words: Box<[u64; 64]>,
}

/// The start of every walk below, at stack pointer `sp`.
fn start_at(sp: u64) -> Start {
    Start {
        ip: 0x40_1000,
        sp,
        bp: 0,
        epoch: 1,
        skip: (0, 0),
    }
}

impl Stack {
    fn new() -> Stack {
        Stack {
            words: Box::new([0; 64]),
        }
    }

    fn start(&self) -> Start {
        start_at(self.words.as_ptr() as u64)
    }

    fn top(&self) -> u64 {
        self.start().sp + 8 * 64
    }

    /// `Inputs::lookup` of a walk from this stack's start (output room 64), `with` merged.
    fn lookup(&self, i: &mut Inputs, with: u64) -> Option<u32> {
        // SAFETY: the start's stack pointer is this stack's first word, its top its end.
        unsafe { i.lookup(self.start(), 64, self.top(), with) }
    }

    /// `Inputs::store` of walk `rec` from this stack's start (output room 64).
    fn store(&self, i: &mut Inputs, rec: &memo::Record, with: u64) -> bool {
        i.store(self.start(), rec, 64, self.top(), with)
    }

    /// A walk that read `read` (offset in words, value): the values written to the stack
    /// first, as the program left them.
    fn walk(&mut self, read: &[(usize, u64)]) -> memo::Record {
        let sp = self.start().sp;
        for &(o, v) in read {
            self.words[o] = v;
        }
        let words: Vec<(u64, u64)> = read.iter().map(|&(o, v)| (sp + 8 * o as u64, v)).collect();
        memo::Record::of_words(sp, &words)
    }
}

/// The shape of `stack`'s start whose first offsets are `offs`.
fn shape_at<'a>(i: &'a Inputs, stack: &Stack, offs: &[u16]) -> &'a Shape {
    let s = stack.start();
    i.shapes[set(s.ip, s.sp)]
        .iter()
        .find(|sh| sh.epoch != 0 && sh.offs[..sh.n_words as usize] == *offs)
        .expect("a shape with these offsets")
}

#[test]
fn the_shapes_of_one_start_are_told_apart_by_the_word_where_they_part() {
    let i = empty();
    let mut stack = Stack::new();
    let s = stack.start();
    // Two walks from one start that read the same first two words and part after the
    // second, a return address (0x5000 or 0x6000), as an allocation's and a free's walks
    // do in `varied_sites`.
    let a = [(0, 10), (1, 0x5000), (2, 20), (5, 30)];
    let b = [(0, 10), (1, 0x6000), (3, 40), (6, 50)];
    let rec = stack.walk(&a);
    assert!(stack.store(i, &rec, 0));
    i.note(1);
    assert_eq!(stack.lookup(i, 0), Some(1));
    let rec = stack.walk(&b);
    assert_eq!(stack.lookup(i, 0), None);
    assert!(stack.store(i, &rec, 0));
    i.note(2);
    assert_eq!(stack.lookup(i, 0), Some(2));
    // The new shape's fork is its second word (index 1, kept plus one), its value known;
    // the older one's is the same word, its value learnt from its next walk met.
    let (sa, sb) = (
        shape_at(i, &stack, &[0, 1, 2, 5]),
        shape_at(i, &stack, &[0, 1, 3, 6]),
    );
    assert_eq!((sb.fork, sb.fork_known, sb.fork_val), (2, true, 0x6000));
    assert_eq!((sa.fork, sa.fork_known), (2, false));
    stack.walk(&a);
    assert_eq!(stack.lookup(i, 0), Some(1));
    let (sa, sb) = (
        shape_at(i, &stack, &[0, 1, 2, 5]),
        shape_at(i, &stack, &[0, 1, 3, 6]),
    );
    assert_eq!((sa.fork, sa.fork_known, sa.fork_val), (2, true, 0x5000));
    // With a's words on the stack, b's shape is not asked, a's is.
    // SAFETY: the stack's words, the shapes' start.
    unsafe { assert_eq!((sa.forks_here(s.sp), sb.forks_here(s.sp)), (true, false)) };

    // A walk of a's shape that read another word there (another return address into the
    // same frame layout): neither shape is asked, so it is walked; its store takes a's
    // fork away for good, and from then on a's shape is asked whatever word is there.
    let a2 = [(0, 10), (1, 0x5008), (2, 20), (5, 30)];
    let rec = stack.walk(&a2);
    assert_eq!(stack.lookup(i, 0), None);
    assert!(stack.store(i, &rec, 0));
    i.note(3);
    assert_eq!(shape_at(i, &stack, &[0, 1, 2, 5]).fork, 0);
    assert_eq!(stack.lookup(i, 0), Some(3));
    stack.walk(&a);
    assert_eq!(stack.lookup(i, 0), Some(1));
    // A third shape parting after the second word too: its own fork there; a's shape,
    // which had one, gets none again, and b's keeps its own.
    let c = [(0, 10), (1, 0x7000), (4, 60)];
    let rec = stack.walk(&c);
    assert_eq!(stack.lookup(i, 0), None);
    assert!(stack.store(i, &rec, 0));
    i.note(4);
    assert_eq!(stack.lookup(i, 0), Some(4));
    let sc = shape_at(i, &stack, &[0, 1, 4]);
    assert_eq!((sc.fork, sc.fork_known, sc.fork_val), (2, true, 0x7000));
    assert_eq!(shape_at(i, &stack, &[0, 1, 2, 5]).fork, 0);
    let sb = shape_at(i, &stack, &[0, 1, 3, 6]);
    assert_eq!((sb.fork, sb.fork_val), (2, 0x6000));
    for (read, id) in [(&a[..], 1), (&b[..], 2), (&c[..], 4)] {
        stack.walk(read);
        assert_eq!(stack.lookup(i, 0), Some(id));
    }
    give_back(i);
}

#[test]
fn a_walk_stored_after_the_lookup_that_missed_it_keeps_the_key_that_lookup_made() {
    let i = empty();
    let mut stack = Stack::new();
    let s = stack.start();
    let rec = stack.walk(&[(0, 10), (1, 0x5000), (2, 20)]);
    // No lookup before it made a key: the first store hashes the words itself.
    assert!(stack.store(i, &rec, 7));
    let first = i.pending;
    i.note(1);
    assert_eq!(stack.lookup(i, 7), Some(1));
    // The same shape, another last word: the lookup hashes the shape's words, misses, and
    // keeps the key; the walk's store takes it (no second hash), the key of these words.
    let rec = stack.walk(&[(0, 10), (1, 0x5000), (2, 21)]);
    assert_eq!(stack.lookup(i, 7), None);
    let sh = shape_at(i, &stack, &[0, 1, 2]);
    // SAFETY: the stack's words, the shape's start.
    let made = unsafe { sh.key_now(s, 7) };
    assert_ne!(made, first);
    assert_eq!((i.missed.n, i.missed.keys[0]), (1, made));
    assert!(stack.store(i, &rec, 7));
    assert_eq!(i.pending, made);
    i.note(2);
    assert_eq!(stack.lookup(i, 7), Some(2));
    // A store with no lookup since the last one (the clock moved) makes its own key.
    let rec = stack.walk(&[(0, 10), (1, 0x5000), (2, 22)]);
    assert!(stack.store(i, &rec, 7));
    // SAFETY: as above.
    let own = unsafe { shape_at(i, &stack, &[0, 1, 2]).key_now(s, 7) };
    assert_eq!(i.pending, own);
    assert_ne!(own, made);
    give_back(i);
}

#[test]
fn a_walk_that_read_a_word_no_offset_holds_is_not_kept() {
    let i = empty();
    let sp = 0x7ffc_0000_1000u64;
    let start = start_at(sp);
    let store = |i: &mut Inputs, a: u64| {
        let rec = memo::Record::of_words(sp, &[(sp, 1), (a, 2), (sp + 16, 3)]);
        i.store(start, &rec, 64, sp + 8 * 70_000, 0)
    };
    // The farthest word a u16 offset holds is kept; one word past it, or an address
    // between words, is not (as `memo::offset` says for each).
    assert!(store(i, sp + 8 * 65_535));
    assert!(!store(i, sp + 8 * 65_536));
    assert!(!store(i, sp + 12));
    assert!(!store(i, sp + (1 << 40)));
    // A word read twice in a row (a forgotten rbp word) is one word of the shape.
    let rec = memo::Record::of_words(sp, &[(sp, 1), (sp + 8, 2), (sp + 8, 2), (sp + 24, 4)]);
    assert!(i.store(start, &rec, 64, sp + 8 * 70_000, 0));
    let sh = i.shapes[set(start.ip, sp)]
        .iter()
        .find(|sh| sh.epoch != 0 && sh.offs[1] == 1)
        .expect("the shape of the walk that read a word twice");
    assert_eq!(sh.offs[..sh.n_words as usize], [0, 1, 3]);
    give_back(i);
}

#[test]
fn a_new_shape_that_takes_the_way_of_a_shape_the_lookup_hashed_makes_its_own_key() {
    let i = empty();
    let mut stack = Stack::new();
    let s = stack.start();
    // Eight shapes of one start fill its set, the first one (a) the least recently used;
    // the seven after it part from it at their second word.
    let a = [(0, 10), (1, 0x5000), (2, 20)];
    let rec = stack.walk(&a);
    assert!(stack.store(i, &rec, 0));
    i.note(1);
    for j in 0..7u64 {
        let rec = stack.walk(&[(0, 10), (1, 0x6000 + 16 * j), (3 + j as usize, 30)]);
        assert!(stack.store(i, &rec, 0));
        i.note(2 + j as u32);
    }
    // a's words but another last one: only a's shape is asked (the others' forks say
    // no), and it misses.
    stack.walk(&[(0, 10), (1, 0x5000), (2, 21)]);
    assert_eq!(stack.lookup(i, 0), None);
    let ways = set(s.ip, s.sp);
    let a_way = ways
        .clone()
        .find(|&w| i.shapes[w].offs[..3] == [0, 1, 2])
        .unwrap();
    assert_eq!((i.missed.n, i.missed.ways[0]), (1, a_way));
    // The walk takes a ninth shape, which replaces a's (the least recently used): its key
    // is made with its own tag, not taken from the lookup's key for a's.
    let rec = stack.walk(&[(0, 10), (1, 0x5000), (12, 40)]);
    assert!(stack.store(i, &rec, 0));
    assert_eq!(i.shapes[a_way].offs[..3], [0, 1, 12]);
    // SAFETY: the stack's words, the new shape's start.
    let own = unsafe { i.shapes[a_way].key_now(s, 0) };
    assert_eq!(i.pending, own);
    assert_ne!(own, i.missed.keys[0]);
    i.note(9);
    assert_eq!(stack.lookup(i, 0), Some(9));
    give_back(i);
}
