//! The changes `browse`'s story keeps per bucket: a key's bytes and allocations, signed,
//! as sorted lists (`Delta`), added together as buckets merge; and the open bucket's sums
//! while it fills, dense by key index so that a change costs no hashing.

/// A change of one key: bytes and allocations, signed (16 bytes). Sorted by key in a
/// bucket.
pub type Delta = (u32, i64, i32);

/// The open bucket's changes by key: dense by key index (no hashing per change), with
/// the keys touched in order of first touch.
#[derive(Debug, Default)]
pub struct Sums {
    by_key: Vec<(i64, i64)>,
    listed: Vec<bool>,
    touched: Vec<u32>,
}

impl Sums {
    pub fn add(&mut self, k: u32, bytes: i64, count: i64) {
        let i = k as usize;
        if self.by_key.len() <= i {
            self.by_key.resize(i + 1, (0, 0));
            self.listed.resize(i + 1, false);
        }
        if !self.listed[i] {
            self.listed[i] = true;
            self.touched.push(k);
        }
        let e = &mut self.by_key[i];
        e.0 += bytes;
        e.1 += count;
    }

    /// Every key's sum, emptied.
    pub fn drain(&mut self) -> Vec<(u32, i64, i64)> {
        let mut out = Vec::with_capacity(self.touched.len());
        for k in self.touched.drain(..) {
            let i = k as usize;
            self.listed[i] = false;
            let (b, c) = std::mem::take(&mut self.by_key[i]);
            out.push((k, b, c));
        }
        out
    }

    /// Adds every sum of `other` into this one, emptying it.
    pub fn absorb(&mut self, other: &mut Sums) {
        for (k, b, c) in other.drain() {
            self.add(k, b, c);
        }
    }
}

/// `sums` added to the sorted `old`, sorted by key, zeros dropped.
pub fn sorted(sums: Vec<(u32, i64, i64)>, old: Vec<Delta>) -> Vec<Delta> {
    let mut v: Vec<Delta> = sums.into_iter().map(|(k, b, c)| (k, b, c as i32)).collect();
    v.sort_unstable_by_key(|d| d.0);
    add(&old, &v)
}

/// Two sorted delta lists added, sorted, zeros dropped.
pub fn add(a: &[Delta], b: &[Delta]) -> Vec<Delta> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let d = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x.0 == y.0 => {
                i += 1;
                j += 1;
                (x.0, x.1 + y.1, x.2 + y.2)
            }
            (Some(x), Some(y)) if x.0 < y.0 => {
                i += 1;
                *x
            }
            (Some(x), None) => {
                i += 1;
                *x
            }
            (_, Some(y)) => {
                j += 1;
                *y
            }
            (None, None) => unreachable!(),
        };
        if d.1 != 0 || d.2 != 0 {
            out.push(d);
        }
    }
    out
}
