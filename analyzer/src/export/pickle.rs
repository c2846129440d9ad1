//! A small streaming pickle writer (protocol 4 opcodes), for the PyTorch memory snapshot
//! export (`torch_snapshot/`). It writes opcodes straight to an `io::Write` as the caller
//! builds the object, so nothing is held in memory but the memo's keys.
//!
//! ```text
//!  PROTO 4 | EMPTY_DICT MARK key value key value ... SETITEMS | ... | STOP
//!  a list: EMPTY_LIST [BINPUT n] MARK item x1000 APPENDS MARK item ... APPENDS
//!  a repeat: BINGET n (the same object again: a stack's frame list, a key string)
//! ```
//!
//! Only opcodes that both readers of snapshots understand are written: CPython's `pickle`
//! (ptmem, `torch.cuda._memory_viz`) and the hand-written unpickler in PyTorch's
//! MemoryViz.js (pytorch.org/memory_viz), which knows a fixed subset (not POP, BINUNICODE8
//! or SHORT_BINBYTES; FRAME, optional in protocol 4, is not written). Lists are appended
//! in batches of 1000, as CPython's pickler does: MemoryViz.js spreads one batch into a
//! call's arguments, and a huge spread overflows a browser's stack.
//!
//! We write this rather than use `serde-pickle`: its serializer never emits a memo
//! reference (a shared frame list would be written again for every entry), and it writes
//! every `u64` from 2^31 up as a 9-byte LONG1, which MemoryViz.js reads as a BigInt that
//! its arithmetic cannot mix with numbers.

use std::collections::HashMap;
use std::io::{self, Write};

const PROTO: u8 = 0x80;
const STOP: u8 = b'.';
const MARK: u8 = b'(';
const EMPTY_DICT: u8 = b'}';
const EMPTY_LIST: u8 = b']';
const SETITEM: u8 = b's';
const SETITEMS: u8 = b'u';
const APPEND: u8 = b'a';
const APPENDS: u8 = b'e';
const NONE: u8 = b'N';
const NEWTRUE: u8 = 0x88;
const NEWFALSE: u8 = 0x89;
const BININT: u8 = b'J';
const BININT1: u8 = b'K';
const BININT2: u8 = b'M';
const LONG1: u8 = 0x8a;
const SHORT_BINUNICODE: u8 = 0x8c;
const BINUNICODE: u8 = b'X';
const BINPUT: u8 = b'q';
const LONG_BINPUT: u8 = b'r';
const BINGET: u8 = b'h';
const LONG_BINGET: u8 = b'j';

/// Items per MARK ... APPENDS batch (CPython's own batch size).
pub const BATCH: usize = 1000;

/// A memo slot: a written object that `Pickler::get` can push again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memo(u32);

/// Writes one pickle. Every method writes its opcodes at once; the caller keeps the
/// pickle stack balanced (a key and a value before `setitem`, a `mark` before `setitems`).
pub struct Pickler<W: Write> {
    out: W,
    next_memo: u32,
    /// Strings written with `str_memo`, by value.
    strings: HashMap<String, Memo>,
}

impl<W: Write> Pickler<W> {
    /// Starts a pickle on `out` (the protocol header).
    pub fn new(mut out: W) -> io::Result<Pickler<W>> {
        out.write_all(&[PROTO, 4])?;
        Ok(Pickler {
            out,
            next_memo: 0,
            strings: HashMap::new(),
        })
    }

    /// Ends the pickle (the object on the stack is the result) and flushes.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.write_all(&[STOP])?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn op(&mut self, op: u8) -> io::Result<()> {
        self.out.write_all(&[op])
    }

    pub fn mark(&mut self) -> io::Result<()> {
        self.op(MARK)
    }
    pub fn empty_dict(&mut self) -> io::Result<()> {
        self.op(EMPTY_DICT)
    }
    pub fn empty_list(&mut self) -> io::Result<()> {
        self.op(EMPTY_LIST)
    }
    /// `dict[key] = value` for the top three items: dict, key, value.
    pub fn setitem(&mut self) -> io::Result<()> {
        self.op(SETITEM)
    }
    /// Every key, value pair since the last `mark` into the dict below the mark.
    pub fn setitems(&mut self) -> io::Result<()> {
        self.op(SETITEMS)
    }
    /// The top item onto the list below it.
    pub fn append(&mut self) -> io::Result<()> {
        self.op(APPEND)
    }
    /// Every item since the last `mark` onto the list below the mark.
    pub fn appends(&mut self) -> io::Result<()> {
        self.op(APPENDS)
    }
    pub fn none(&mut self) -> io::Result<()> {
        self.op(NONE)
    }
    pub fn bool(&mut self, v: bool) -> io::Result<()> {
        self.op(if v { NEWTRUE } else { NEWFALSE })
    }

    /// An integer in the shortest form: BININT1/BININT2 (unsigned), BININT (signed 32-bit),
    /// else LONG1 with the fewest little-endian two's-complement bytes. MemoryViz.js reads
    /// a LONG1 of up to 8 bytes as a JavaScript number (exact below 2^53), longer as BigInt.
    pub fn int(&mut self, v: i128) -> io::Result<()> {
        if (0..=0xff).contains(&v) {
            return self.out.write_all(&[BININT1, v as u8]);
        }
        if (0..=0xffff).contains(&v) {
            let b = (v as u16).to_le_bytes();
            return self.out.write_all(&[BININT2, b[0], b[1]]);
        }
        if let Ok(v) = i32::try_from(v) {
            self.op(BININT)?;
            return self.out.write_all(&v.to_le_bytes());
        }
        let bytes = v.to_le_bytes();
        // Drop high bytes that only repeat the sign, keeping the sign bit of the last.
        let mut n = bytes.len();
        while n > 1 {
            let (top, next) = (bytes[n - 1], bytes[n - 2]);
            let redundant = (top == 0 && next < 0x80) || (top == 0xff && next >= 0x80);
            if !redundant {
                break;
            }
            n -= 1;
        }
        self.out.write_all(&[LONG1, n as u8])?;
        self.out.write_all(&bytes[..n])
    }

    /// A `u64` (sizes, addresses, times).
    pub fn uint(&mut self, v: u64) -> io::Result<()> {
        self.int(i128::from(v))
    }

    /// A string (UTF-8).
    pub fn str(&mut self, s: &str) -> io::Result<()> {
        let len = s.len();
        if len < 256 {
            self.out.write_all(&[SHORT_BINUNICODE, len as u8])?;
        } else {
            let len = u32::try_from(len)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a string over 4 GiB"))?;
            self.op(BINUNICODE)?;
            self.out.write_all(&len.to_le_bytes())?;
        }
        self.out.write_all(s.as_bytes())
    }

    /// A string, written once and referenced from the memo after that (dict keys, actions,
    /// file and function names repeat in every entry).
    pub fn str_memo(&mut self, s: &str) -> io::Result<()> {
        if let Some(&m) = self.strings.get(s) {
            return self.get(m);
        }
        self.str(s)?;
        if let Some(m) = self.memoize()? {
            self.strings.insert(s.to_owned(), m);
        }
        Ok(())
    }

    /// Stores the top item in the next memo slot, to push again with `get`; `None` once
    /// 2^32 - 1 slots are used (the item is then simply not shared).
    pub fn memoize(&mut self) -> io::Result<Option<Memo>> {
        let id = self.next_memo;
        if id == u32::MAX {
            return Ok(None);
        }
        self.next_memo += 1;
        if id < 256 {
            self.out.write_all(&[BINPUT, id as u8])?;
        } else {
            self.op(LONG_BINPUT)?;
            self.out.write_all(&id.to_le_bytes())?;
        }
        Ok(Some(Memo(id)))
    }

    /// Pushes the memoized object again (the same object, not a copy).
    pub fn get(&mut self, m: Memo) -> io::Result<()> {
        if m.0 < 256 {
            self.out.write_all(&[BINGET, m.0 as u8])
        } else {
            self.op(LONG_BINGET)?;
            self.out.write_all(&m.0.to_le_bytes())
        }
    }

    /// Call before each item of a list that is on top of the stack; `batch` counts the
    /// items of the current batch (start it at 0, one per list).
    pub fn begin_item(&mut self, batch: &mut usize) -> io::Result<()> {
        if *batch == 0 {
            self.mark()?;
        }
        Ok(())
    }

    /// Call after each item: closes the batch at `BATCH` items.
    pub fn end_item(&mut self, batch: &mut usize) -> io::Result<()> {
        *batch += 1;
        if *batch == BATCH {
            *batch = 0;
            self.appends()?;
        }
        Ok(())
    }

    /// Call after the list's last item: appends the open batch, if any.
    pub fn end_items(&mut self, batch: &mut usize) -> io::Result<()> {
        if *batch > 0 {
            *batch = 0;
            self.appends()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Loads `bytes` with CPython's `pickle` and runs `check` (Python statements over the
    /// loaded object `v` and the file's bytes `data`, printing something); returns what it
    /// printed.
    fn python(bytes: &[u8], check: &str) -> String {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!("gpumemprof-pickle-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join(format!("{}.pickle", N.fetch_add(1, Ordering::Relaxed)));
        std::fs::write(&path, bytes).expect("write the pickle");
        let script = format!(
            "import pickle, pickletools, sys\ndata = open(sys.argv[1], 'rb').read()\nv = pickle.loads(data)\n{check}\n"
        );
        let out = Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(&path)
            .output()
            .expect("these tests need python3 on PATH (CPython's pickle is the reference)");
        let _ = std::fs::remove_file(&path);
        assert!(
            out.status.success(),
            "python3 could not load the pickle: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .expect("utf-8")
            .trim()
            .to_owned()
    }

    fn pickle(build: impl FnOnce(&mut Pickler<Vec<u8>>) -> io::Result<()>) -> Vec<u8> {
        let mut p = Pickler::new(Vec::new()).expect("header");
        build(&mut p).expect("write");
        p.finish().expect("finish")
    }

    /// Integers at every encoding's edges come back exactly, and strings of each length
    /// class (short, long, non-ASCII).
    #[test]
    fn integers_and_strings_round_trip_through_cpython() {
        let ints: Vec<i128> = vec![
            0,
            1,
            255,
            256,
            65535,
            65536,
            i32::MAX.into(),
            i128::from(i32::MAX) + 1,
            -1,
            -128,
            -129,
            i32::MIN.into(),
            i128::from(i32::MIN) - 1,
            1 << 53,
            0x7fff_1234_5678_9abc,
            u64::MAX.into(),
            i64::MIN.into(),
        ];
        let strings = [
            "",
            "alloc",
            "µs ✓",
            &"x".repeat(255),
            &"y".repeat(256),
            &"z".repeat(70000),
        ];
        let bytes = pickle(|p| {
            p.empty_list()?;
            let mut batch = 0;
            for &i in &ints {
                p.begin_item(&mut batch)?;
                p.int(i)?;
                p.end_item(&mut batch)?;
            }
            for s in strings {
                p.begin_item(&mut batch)?;
                p.str(s)?;
                p.end_item(&mut batch)?;
            }
            for b in [true, false] {
                p.begin_item(&mut batch)?;
                p.bool(b)?;
                p.end_item(&mut batch)?;
            }
            p.begin_item(&mut batch)?;
            p.none()?;
            p.end_item(&mut batch)?;
            p.end_items(&mut batch)
        });
        let mut expected: Vec<String> = ints.iter().map(|i| i.to_string()).collect();
        expected.extend(strings.iter().map(|s| format!("{:?}", s.chars().count())));
        expected.extend(["True", "False", "None"].map(String::from));
        let printed = python(
            &bytes,
            "print(' '.join(str(len(x)) if isinstance(x, str) else str(x) for x in v))",
        );
        assert_eq!(printed, expected.join(" "));
        let printed = python(&bytes, "print(v[-7] == 'µs ✓', v[-4][0], v[-4][-1])");
        assert_eq!(printed, "True z z");
    }

    /// A memoized list is one object wherever it is referenced (also past 256 memo
    /// slots, where the long opcodes take over); memoized strings are written once; a
    /// list of 2500 items is appended in three batches.
    #[test]
    fn memo_references_share_one_object_and_batches_append_everything() {
        let bytes = pickle(|p| {
            p.empty_dict()?;
            p.mark()?;
            p.str_memo("small")?;
            p.empty_list()?;
            let small = p.memoize()?.expect("a slot");
            p.mark()?;
            p.int(7)?;
            p.appends()?;
            // 300 memoized strings push the next slots past 255.
            p.str_memo("strings")?;
            p.empty_list()?;
            let mut batch = 0;
            for i in 0..300 {
                p.begin_item(&mut batch)?;
                p.str_memo(&format!("s{i}"))?;
                p.end_item(&mut batch)?;
            }
            p.end_items(&mut batch)?;
            p.str_memo("big")?;
            p.empty_list()?;
            let big = p.memoize()?.expect("a slot");
            for i in 0..2500 {
                p.begin_item(&mut batch)?;
                p.uint(i)?;
                p.end_item(&mut batch)?;
            }
            p.end_items(&mut batch)?;
            p.str_memo("again")?;
            p.empty_list()?;
            p.mark()?;
            for _ in 0..3 {
                p.get(small)?;
                p.get(big)?;
                p.str_memo("s299")?;
            }
            p.appends()?;
            p.setitems()
        });
        let printed = python(
            &bytes,
            "a = v['again']\n\
             print(a[0] is v['small'], a[1] is v['big'], a[3] is v['small'], a[4] is v['big'],\n\
                   v['small'], len(v['big']), v['big'][-1], sum(v['big']), a[2], len(v['strings']))",
        );
        assert_eq!(
            printed,
            format!(
                "True True True True [7] 2500 2499 {} s299 300",
                (0..2500u64).sum::<u64>()
            )
        );
        // "s299" is in the file once: the later uses are memo references.
        let needle = b"s299";
        let count = bytes.windows(needle.len()).filter(|w| w == needle).count();
        assert_eq!(count, 1);
        // One APPENDS per list, three for the 2500 items (batches of 1000).
        let printed = python(
            &bytes,
            "print(sum(op.name == 'APPENDS' for op, _, _ in pickletools.genops(data)))",
        );
        assert_eq!(printed, "6");
    }
}
