//! Round trips of every record kind through the writer and reader, plus the reader's
//! behaviour on cut, damaged, foreign and random input (never a panic, never a record
//! from an incomplete block).

use std::io::Cursor;

use gpumemprof_format::*;
use serde_json::json;

// ---------- helpers ----------

/// Small deterministic PRNG (xorshift64*), so failures reproduce.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn preamble(header: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    write_preamble(&mut v, header).unwrap();
    v
}

fn block(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    compress_block(raw, 3, &mut out).unwrap();
    out
}

fn raw_of(records: &[Record]) -> Vec<u8> {
    let mut e = BlockEncoder::new();
    for r in records {
        e.record(r);
    }
    e.raw().to_vec()
}

/// A file with the given raw blocks after a `{}` header.
fn file_of_raw(blocks: &[Vec<u8>]) -> Vec<u8> {
    let mut f = preamble(b"{}");
    for b in blocks {
        f.extend_from_slice(&block(b));
    }
    f
}

type Reader<'a> = TraceReader<Cursor<&'a [u8]>>;

/// Reads every record until `Ok(None)` or the first error.
fn read_all(bytes: &[u8]) -> Result<(Vec<Record>, Reader<'_>), ReadError> {
    let mut r = TraceReader::open(Cursor::new(bytes))?;
    let mut out = Vec::new();
    while let Some(rec) = r.next_record()? {
        out.push(rec);
    }
    Ok((out, r))
}

/// Reads to the end, going on after errors; returns records and errors. Panics if the
/// reader does not terminate.
fn read_through(bytes: &[u8]) -> Result<(Vec<Record>, Vec<ReadError>), ReadError> {
    let mut r = TraceReader::open(Cursor::new(bytes))?;
    let (mut recs, mut errs) = (Vec::new(), Vec::new());
    for _ in 0..10_000_000 {
        match r.next_record() {
            Ok(Some(rec)) => recs.push(rec),
            Ok(None) => return Ok((recs, errs)),
            Err(e) => {
                assert!(!e.to_string().is_empty());
                errs.push(e)
            }
        }
    }
    panic!("reader did not terminate");
}

fn alloc(time_ns: u64, address: u64) -> Alloc {
    Alloc {
        time_ns,
        tid: 4242,
        api: 1,
        kind: MemKind::Device,
        device: 0,
        address,
        size: 1 << 20,
        stream: 0,
        pool: 0,
        stack: 1,
    }
}

/// One of each kind, with extreme values and times going backwards and wrapping.
fn every_kind() -> Vec<Record> {
    let mut x = Rng(7);
    let big_stack: Vec<u64> = (0..1024).map(|_| x.next()).collect();
    vec![
        Record::Stack {
            id: 1,
            frames: vec![0x5555_0000_1234, 0x5555_0000_1000, 0x7fff_ffff_0000],
        },
        Record::Stack {
            id: 0,
            frames: vec![],
        },
        Record::Stack {
            id: u64::MAX,
            frames: big_stack,
        },
        Record::Stack {
            id: 3,
            frames: vec![u64::MAX, 0, u64::MAX, 1],
        },
        Record::Alloc(Alloc {
            time_ns: 1_000_000,
            tid: u32::MAX,
            api: u16::MAX,
            kind: MemKind::Other(200),
            device: -1,
            address: u64::MAX,
            size: u64::MAX,
            stream: u64::MAX,
            pool: u64::MAX,
            stack: u64::MAX,
        }),
        Record::Free(Free {
            time_ns: 5, // backwards
            tid: 0,
            api: 0,
            address: u64::MAX,
            stream: 0,
            stack: 0,
            result: u32::MAX,
            flags: u8::MAX,
            kind: MemKind::Device,
            size: 0,
        }),
        Record::AllocFailed(AllocFailed {
            time_ns: u64::MAX,
            tid: 1,
            api: 2,
            kind: MemKind::PinnedHost,
            device: i32::MIN,
            size: 0,
            stream: 9,
            pool: 10,
            stack: 3,
            result: 2,
            mem_free: 0,
            mem_total: 0,
        }),
        Record::Alloc(Alloc {
            device: i32::MAX,
            kind: MemKind::Managed,
            ..alloc(0, 0)
        }), // wraps
        Record::Free(Free {
            time_ns: 0,
            tid: 7,
            api: 3,
            address: 0,
            stream: 1,
            stack: 0,
            result: 0,
            flags: FREE_STREAM_ORDERED,
            kind: MemKind::Device,
            size: 0,
        }),
        Record::Module(Module {
            time_ns: 17,
            bias: 0x7f00_0000_0000,
            start: 0x7f00_0000_1000,
            end: u64::MAX,
            path: "/usr/lib/libcuda.so.1 — ünïcode".into(),
            build_id: vec![0xde, 0xad, 0xbe, 0xef, 0, 255],
        }),
        Record::Module(Module {
            time_ns: 0,
            bias: 0,
            start: 0,
            end: 0,
            path: String::new(),
            build_id: vec![],
        }),
        Record::Free(Free {
            time_ns: 9,
            tid: 7,
            api: 30,
            address: 0x7000_0000_0000,
            stream: 0,
            stack: 1,
            result: 0,
            flags: FREE_RANGE,
            kind: MemKind::Device,
            size: 4 << 20,
        }),
        Record::Free(Free {
            kind: MemKind::VmmHandle,
            ..free_at(10, 0x4a00_0010)
        }),
        Record::Sample(Sample {
            time_ns: 11,
            device: 3,
            process_used: 1 << 40,
            device_used: u64::MAX,
            device_total: 80 << 30,
            query_ns: 1_250_000,
        }),
        Record::Sample(Sample::default()),
        Record::PyCode(PyCode {
            id: 1,
            first_line: 12,
            filename: "/srv/train/ünïcode_model.py".into(),
            name: "Trainer.step".into(),
        }),
        Record::PyCode(PyCode {
            id: PY_MAX_CODE_ID,
            first_line: u32::MAX,
            filename: String::new(),
            name: "<module>".into(),
        }),
        Record::Stack {
            id: 9,
            frames: vec![
                0x7f00_0000_1000,
                python_frame(1, 40),
                python_frame(PY_MAX_CODE_ID, 1),
            ],
        },
        Record::NvtxString {
            id: 1,
            text: "optimizer_step ünïcode".into(),
        },
        Record::NvtxString {
            id: u64::MAX,
            text: String::new(),
        },
        Record::Nvtx(Nvtx {
            time_ns: 3, // behind the running event time: a negative delta
            tid: u32::MAX,
            op: NvtxOp::Push,
            domain: 0,
            name: 1,
            range: 0,
        }),
        Record::Nvtx(Nvtx {
            time_ns: u64::MAX,
            tid: 0,
            op: NvtxOp::Other(255),
            domain: u64::MAX,
            name: u64::MAX,
            range: u64::MAX,
        }),
        Record::Stats(Stats {
            time_ns: u64::MAX,
            events: u64::MAX,
            queue_waits: 0,
            dropped: 1,
        }),
        Record::Ending(EndingRecord {
            time_ns: 7,
            ending: Ending::Signal(11),
        }),
        Record::Ending(EndingRecord {
            time_ns: u64::MAX,
            ending: Ending::Exit(-1),
        }),
        Record::Ending(EndingRecord {
            time_ns: 0,
            ending: Ending::Exit(i32::MAX),
        }),
        Record::Stopped(StoppedRecord {
            time_ns: 9,
            reason: StopReason::FileSizeLimit,
            errno: 27,
        }),
        Record::Stopped(StoppedRecord {
            time_ns: u64::MAX,
            reason: StopReason::NoSpace,
            errno: 28,
        }),
        Record::Stopped(StoppedRecord {
            time_ns: 0,
            reason: StopReason::WriteError,
            errno: u32::MAX,
        }),
        Record::Stopped(StoppedRecord {
            time_ns: 5,
            reason: StopReason::InternalError,
            errno: 0,
        }),
        Record::Tensor(Tensor {
            time_ns: 2, // behind the running event time: a negative delta
            tid: 9,
            framework: FRAMEWORK_PYTORCH,
            device: 0,
            address: 0x7f00_0000_0000,
            delta: 3 << 20,
            allocated: 12 << 20,
            reserved: 22 << 20,
            stack: 4,
        }),
        Record::Tensor(Tensor {
            time_ns: u64::MAX,
            tid: u32::MAX,
            framework: u8::MAX,
            device: -1,
            address: u64::MAX,
            delta: i64::MIN,
            allocated: u64::MAX,
            reserved: 0,
            stack: u64::MAX,
        }),
        Record::End(Stats::default()),
    ]
}

fn free_at(time_ns: u64, address: u64) -> Free {
    Free {
        time_ns,
        tid: 1,
        api: 2,
        address,
        stream: 0,
        stack: 0,
        result: 0,
        flags: 0,
        kind: MemKind::Device,
        size: 0,
    }
}

/// A free written before `kind` and `size` were appended (format version 1 as first
/// released) reads as a plain free of memory.
/// A crash recorded by the shim: SIGSEGV is kind 14, time, how 2, signal 11.
#[test]
fn an_ending_by_signal_is_its_time_how_and_number() {
    let r = Record::Ending(EndingRecord {
        time_ns: 5,
        ending: Ending::Signal(11),
    });
    assert_eq!(raw_of(std::slice::from_ref(&r)), vec![14, 3, 5, 2, 11]);
    let r = Record::Ending(EndingRecord {
        time_ns: 5,
        ending: Ending::Exit(3),
    });
    assert_eq!(raw_of(std::slice::from_ref(&r)), vec![14, 3, 5, 1, 6]);
}

/// Recording stopped by a bug of the shim: kind 16, time, reason 4, errno 0; each reason
/// reads back as itself, with its JSON name.
#[test]
fn a_stop_for_an_internal_error_is_its_time_reason_and_errno() {
    let r = Record::Stopped(StoppedRecord {
        time_ns: 5,
        reason: StopReason::InternalError,
        errno: 0,
    });
    assert_eq!(raw_of(std::slice::from_ref(&r)), vec![16, 3, 5, 4, 0]);
    let names: Vec<(u8, &str)> = (0..=5)
        .filter_map(|v| StopReason::from_u8(v).map(|r| (r.to_u8(), r.name())))
        .collect();
    assert_eq!(
        names,
        [
            (1, "file_size_limit"),
            (2, "no_space"),
            (3, "write_error"),
            (4, "internal_error")
        ]
    );
}

/// A tensor freed by PyTorch's allocator: kind 15, then the time delta (not advancing the
/// running time), tid, framework, device, address, delta (negative), allocated, reserved,
/// stack, each a varint (zigzag for the signed ones).
#[test]
fn a_tensor_free_is_its_fields_in_order() {
    let r = Record::Tensor(Tensor {
        time_ns: 5,
        tid: 7,
        framework: FRAMEWORK_PYTORCH,
        device: 1,
        address: 64,
        delta: -2,
        allocated: 3,
        reserved: 4,
        stack: 5,
    });
    assert_eq!(
        raw_of(std::slice::from_ref(&r)),
        vec![15, 9, 10, 7, 1, 2, 64, 3, 3, 4, 5]
    );
}

#[test]
fn a_free_without_the_appended_fields_reads_as_memory() {
    let raw = rec(kind::FREE, &[20, 1, 2, 3, 4, 5, 6, 1]);
    let (recs, _) = read_all(&file_of_raw(&[raw])).expect("readable");
    assert_eq!(
        recs,
        vec![Record::Free(Free {
            time_ns: 10,
            tid: 1,
            api: 2,
            address: 3,
            stream: 4,
            stack: 5,
            result: 6,
            flags: 1,
            kind: MemKind::Device,
            size: 0,
        })]
    );
}

fn write_trace(blocks: &[Vec<Record>]) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), &json!({"pid": 1, "argv": ["x"]}), 3).unwrap();
    for b in blocks {
        for r in b {
            w.encoder().record(r);
        }
        w.flush_block().unwrap();
    }
    w.into_inner()
}

// ---------- round trips ----------

#[test]
fn every_kind_round_trips_across_blocks() {
    let blocks = vec![
        every_kind(),
        every_kind().into_iter().rev().collect(),
        vec![Record::End(Stats::default())],
    ];
    let bytes = write_trace(&blocks);
    let (recs, r) = read_all(&bytes).unwrap();
    assert_eq!(recs, blocks.concat());
    assert_eq!(r.header(), &json!({"pid": 1, "argv": ["x"]}));
    assert_eq!(r.version(), FORMAT_VERSION);
    assert_eq!(r.blocks_read(), 3);
    assert_eq!(r.bytes_read(), bytes.len() as u64);
    assert!(!r.truncated());
}

#[test]
fn many_random_events_round_trip() {
    let mut x = Rng(99);
    let mut blocks = Vec::new();
    for _ in 0..5 {
        let mut b = Vec::new();
        for _ in 0..2000 {
            let t = x.next() >> x.below(64);
            b.push(match x.below(3) {
                0 => Record::Alloc(alloc(t, x.next())),
                1 => Record::Free(Free {
                    time_ns: t,
                    tid: x.next() as u32,
                    api: x.next() as u16,
                    address: x.next(),
                    stream: x.next(),
                    stack: x.below(100),
                    result: x.next() as u32,
                    flags: x.next() as u8,
                    kind: MemKind::Device,
                    size: 0,
                }),
                _ => Record::Stack {
                    id: x.next(),
                    frames: (0..x.below(40)).map(|_| x.next()).collect(),
                },
            });
        }
        blocks.push(b);
    }
    let bytes = write_trace(&blocks);
    let (recs, r) = read_all(&bytes).unwrap();
    assert_eq!(recs, blocks.concat());
    assert_eq!(r.blocks_read(), 5);
}

#[test]
fn exact_encoding() {
    let mut e = BlockEncoder::new();
    e.stats(&Stats {
        time_ns: 1,
        events: 2,
        queue_waits: 3,
        dropped: 300,
    });
    assert_eq!(e.raw(), &[kind::STATS, 5, 1, 2, 3, 0xac, 0x02]);
    e.clear();
    e.free(&Free {
        time_ns: 10,
        tid: 1,
        api: 2,
        address: 3,
        stream: 4,
        stack: 5,
        result: 6,
        flags: 1,
        kind: MemKind::Device,
        size: 0,
    });
    e.free(&Free {
        time_ns: 7,
        tid: 1,
        api: 2,
        address: 3,
        stream: 4,
        stack: 5,
        result: 6,
        flags: 1,
        kind: MemKind::Device,
        size: 0,
    });
    // Packed frees (kind 13). The first: dt = zigzag(10) = 20, and every field that
    // differs from the block's zeroed running values: mask tid|api|stream|result|flags,
    // then tid, api, stream, address delta zigzag(3) = 6, stack, result, flags.
    let one = [kind::PACKED_FREE, 9, 0b1_1111, 20, 1, 2, 4, 6, 5, 6, 1];
    // The second repeats tid, api, stream and address: dt = zigzag(-3) = 5, address
    // delta 0; result and flags are not running values, so they are written again.
    let two = [kind::PACKED_FREE, 6, 0b1_1000, 5, 0, 5, 6, 1];
    assert_eq!(e.raw(), [&one[..], &two[..]].concat());
    e.clear();
    e.stack(9, &[100, 90, 110]);
    assert_eq!(e.raw(), &[kind::STACK, 5, 9, 3, 100, 19, 40]);
}

/// Packed allocs write only what changed since the block's previous event; the address
/// is a delta from the previous event's (alloc or free) and the running values start
/// again at zero in every block, so each block reads on its own.
#[test]
fn packed_allocs_write_what_changed_and_restart_each_block() {
    let a = |time_ns, tid, device, address, stream| Alloc {
        time_ns,
        tid,
        api: 1,
        kind: MemKind::Managed,
        device,
        address,
        size: 300,
        stream,
        pool: 0,
        stack: 7,
    };
    let mut e = BlockEncoder::new();
    e.alloc(&a(5, 9, -1, 0x1000, 0));
    // tid|api|kind|device: tid 9, api 1, kind 1 (managed), device zigzag(-1) = 1;
    // address zigzag(0x1000) = 0x2000 = [0x80, 0x40]; size 300 = [0xac, 0x02]; stack 7.
    let first = [
        kind::PACKED_ALLOC,
        11,
        0b1111,
        10,
        9,
        1,
        1,
        1,
        0x80,
        0x40,
        0xac,
        0x02,
        7,
    ];
    assert_eq!(e.raw(), first);
    let start = e.len();
    // Same thread, device and kind; a new stream; the address 16 bytes lower.
    e.alloc(&a(6, 9, -1, 0x1000 - 16, 3));
    let second = [kind::PACKED_ALLOC, 7, 0b1_0000, 2, 3, 31, 0xac, 0x02, 7];
    assert_eq!(&e.raw()[start..], second);
    // A free of it: the same stream and address.
    let start = e.len();
    e.free(&Free {
        time_ns: 6,
        tid: 9,
        api: 2,
        address: 0x1000 - 16,
        stream: 3,
        stack: 7,
        result: 0,
        flags: 0,
        kind: MemKind::Device,
        size: 0,
    });
    assert_eq!(&e.raw()[start..], [kind::PACKED_FREE, 5, 0b10, 0, 2, 0, 7]);
    // A new block: the first record spells everything out again.
    e.clear();
    e.alloc(&a(5, 9, -1, 0x1000, 0));
    assert_eq!(e.raw(), first);
    let blocks = vec![
        vec![
            Record::Alloc(a(5, 9, -1, 0x1000, 0)),
            Record::Alloc(a(6, 9, -1, 0x0ff0, 3)),
        ],
        vec![
            Record::Alloc(a(7, 9, -1, 0x0ff0, 3)),
            Record::Alloc(a(8, 4, 2, 0x0fe0, 3)),
        ],
    ];
    let bytes = write_trace(&blocks);
    let (recs, r) = read_all(&bytes).unwrap();
    assert_eq!(recs, blocks.concat());
    assert_eq!(r.blocks_read(), 2);
}

/// Version-1 traces (every field of every alloc and free, kinds 1 and 2) still read.
#[test]
fn version_one_events_still_read() {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&MAGIC);
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.extend_from_slice(&2u32.to_le_bytes());
    bytes.extend_from_slice(b"{}");
    let raw = [
        rec(kind::ALLOC, &[20, 1, 2, 0, 0, 0x1000, 64, 0, 0, 3]),
        rec(kind::FREE, &[2, 1, 3, 0x1000, 0, 3, 0, 0, 0, 0]),
    ]
    .concat();
    bytes.extend_from_slice(&block(&raw));
    let (recs, r) = read_all(&bytes).unwrap();
    assert_eq!(r.version(), 1);
    assert_eq!(
        recs,
        vec![
            Record::Alloc(Alloc {
                time_ns: 10,
                tid: 1,
                api: 2,
                kind: MemKind::Device,
                device: 0,
                address: 0x1000,
                size: 64,
                stream: 0,
                pool: 0,
                stack: 3,
            }),
            Record::Free(Free {
                time_ns: 11,
                tid: 1,
                api: 3,
                address: 0x1000,
                stream: 0,
                stack: 3,
                result: 0,
                flags: 0,
                kind: MemKind::Device,
                size: 0,
            }),
        ]
    );
}

#[test]
fn encoder_bookkeeping() {
    let mut e = BlockEncoder::new();
    assert!(e.is_empty());
    assert_eq!((e.len(), e.records()), (0, 0));
    e.alloc(&alloc(1000, 1));
    let first = e.raw().to_vec();
    e.record(&Record::Unknown { kind: 99, len: 3 }); // ignored
    assert_eq!((e.len(), e.records()), (first.len(), 1));
    e.clear();
    assert!(e.is_empty());
    assert_eq!(e.records(), 0);
    e.alloc(&alloc(1000, 1));
    assert_eq!(e.raw(), &first[..], "clear() resets the delta-time base");
}

#[test]
fn overlong_stack_is_cut_to_the_limit() {
    let frames: Vec<u64> = (0..2000).collect();
    let raw = raw_of(&[Record::Stack {
        id: 1,
        frames: frames.clone(),
    }]);
    let (recs, _) = read_all(&file_of_raw(&[raw])).unwrap();
    assert_eq!(
        recs,
        vec![Record::Stack {
            id: 1,
            frames: frames[..MAX_STACK_FRAMES].to_vec()
        }]
    );
}

#[test]
fn compress_block_layout() {
    let raw = raw_of(&every_kind());
    let out = block(&raw);
    let n = u32::from_le_bytes(out[..4].try_into().unwrap()) as usize;
    assert_eq!(n, out.len() - 4);
    let frame = &out[4..];
    assert_eq!(
        zstd::zstd_safe::get_frame_content_size(frame).ok(),
        Some(Some(raw.len() as u64))
    );
    assert_ne!(frame[4] & 0x04, 0, "content checksum flag");
    assert_eq!(zstd::bulk::decompress(frame, raw.len()).unwrap(), raw);
    let mut big = Vec::new();
    assert!(compress_block(&vec![0; MAX_BLOCK_RAW + 1], 1, &mut big).is_err());
}

#[test]
fn writer_flush_and_preamble() {
    let mut w = TraceWriter::new(Vec::new(), &json!({}), 1).unwrap();
    let pre = w.get_ref().len();
    assert_eq!(pre, 16 + 2);
    assert_eq!(w.flush_block().unwrap(), 0);
    w.encoder().end(&Stats::default());
    let n = w.flush_block().unwrap();
    assert_eq!(w.get_ref().len(), pre + n);
    assert!(w.encoder().is_empty());
    assert!(write_preamble(&mut Vec::new(), &vec![b' '; MAX_HEADER_LEN + 1]).is_err());
    let bytes = w.into_inner();
    assert_eq!(&bytes[..8], &MAGIC);
    assert_eq!(&bytes[8..12], &FORMAT_VERSION.to_le_bytes());
    assert_eq!(&bytes[12..16], &2u32.to_le_bytes());
}

/// A budget of the preamble and one block: the next block is refused whole with `EFBIG`
/// (27) and nothing of it reaches the file; with the budget lifted, the last block is
/// written, and the file reads to its end.
#[test]
fn a_block_past_the_budget_is_refused_whole() {
    let mut w = TraceWriter::new(Vec::new(), &json!({}), 1).unwrap();
    w.encoder().alloc(&alloc(1, 0x1000));
    let first = w.flush_block().unwrap();
    w.set_budget(Some(18 + first as u64));
    w.encoder().alloc(&alloc(2, 0x2000));
    let err = w.flush_block().unwrap_err();
    assert_eq!(err.raw_os_error(), Some(27));
    assert_eq!(w.written(), 18 + first as u64);
    assert_eq!(w.get_ref().len(), 18 + first);
    assert!(w.encoder().is_empty());
    w.set_budget(None);
    w.encoder().end(&Stats::default());
    let last = w.flush_block().unwrap();
    assert_eq!(w.written(), (18 + first + last) as u64);
    let bytes = w.into_inner();
    let (recs, r) = read_all(&bytes).unwrap();
    assert_eq!(
        recs,
        [
            Record::Alloc(alloc(1, 0x1000)),
            Record::End(Stats::default())
        ]
    );
    assert!(!r.truncated());
}

#[test]
fn open_path_reads_a_file() {
    let path = std::env::temp_dir().join(format!(
        "gpumemprof-format-test-{}.trace",
        std::process::id()
    ));
    let bytes = write_trace(&[every_kind()]);
    std::fs::write(&path, &bytes).unwrap();
    let mut r = open_path(&path).unwrap();
    let mut n = 0;
    while r.next_record().unwrap().is_some() {
        n += 1;
    }
    std::fs::remove_file(&path).unwrap();
    assert_eq!(n, every_kind().len());
    assert!(matches!(open_path(&path), Err(ReadError::Io(_))));
}

// ---------- forward compatibility ----------

/// Re-frames the single record in `raw` with `extra` appended to its payload.
fn with_trailing(raw: &[u8], extra: &[u8]) -> Vec<u8> {
    assert!(
        raw[1] < 0x80 && raw.len() == 2 + raw[1] as usize,
        "one short record"
    );
    let mut v = vec![raw[0], raw[1] + extra.len() as u8];
    v.extend_from_slice(&raw[2..]);
    v.extend_from_slice(extra);
    v
}

#[test]
fn unknown_kinds_are_skipped() {
    let a = Record::Alloc(alloc(10, 1));
    let b = Record::Alloc(alloc(20, 2));
    let mut raw = raw_of(std::slice::from_ref(&a));
    raw.extend_from_slice(&[200, 3, 0xff, 0xff, 0xff]); // unknown kind, payload not even a valid varint
    raw.extend_from_slice(&[0, 0]); // kind 0, empty payload
                                    // b's bytes as encoded after a (delta +10): unknown records do not move the time base.
    raw.extend_from_slice(&{
        let mut e2 = BlockEncoder::new();
        e2.alloc(&alloc(10, 1));
        let skip = e2.len();
        e2.alloc(&alloc(20, 2));
        e2.raw()[skip..].to_vec()
    });
    let (recs, _) = read_all(&file_of_raw(&[raw])).unwrap();
    assert_eq!(
        recs,
        vec![
            a,
            Record::Unknown { kind: 200, len: 3 },
            Record::Unknown { kind: 0, len: 0 },
            b
        ]
    );
}

#[test]
fn trailing_payload_bytes_are_ignored() {
    let recs = [
        Record::Alloc(alloc(5, 6)),
        Record::Free(Free {
            time_ns: 1,
            tid: 2,
            api: 3,
            address: 4,
            stream: 5,
            stack: 6,
            result: 7,
            flags: 0,
            kind: MemKind::Device,
            size: 0,
        }),
        Record::AllocFailed(AllocFailed {
            time_ns: 1,
            tid: 2,
            api: 3,
            kind: MemKind::Device,
            device: 0,
            size: 9,
            stream: 0,
            pool: 0,
            stack: 0,
            result: 2,
            mem_free: 0,
            mem_total: 0,
        }),
        Record::Stack {
            id: 1,
            frames: vec![1, 2],
        },
        Record::Module(Module {
            time_ns: 1,
            bias: 2,
            start: 3,
            end: 4,
            path: "/a".into(),
            build_id: vec![1],
        }),
        Record::Stats(Stats {
            time_ns: 1,
            events: 2,
            queue_waits: 3,
            dropped: 4,
        }),
        Record::End(Stats {
            time_ns: 1,
            events: 2,
            queue_waits: 3,
            dropped: 4,
        }),
    ];
    for rec in recs {
        let raw = with_trailing(
            &raw_of(std::slice::from_ref(&rec)),
            &[0x80, 0x80, 0x80, 7, 1, 2],
        );
        let (got, _) = read_all(&file_of_raw(&[raw])).unwrap();
        assert_eq!(got, vec![rec]);
    }
}

// ---------- corrupt records ----------

/// The reader's result for one block holding `raw`, after `good` valid records.
fn corrupt_case(raw: &[u8]) -> ReadError {
    let good = raw_of(&[Record::End(Stats::default())]);
    let bytes = file_of_raw(&[[&good[..], raw].concat(), good.clone()]);
    let mut r = TraceReader::open(Cursor::new(&bytes[..])).unwrap();
    assert_eq!(
        r.next_record().unwrap(),
        Some(Record::End(Stats::default()))
    );
    let err = r.next_record().unwrap_err();
    assert!(
        matches!(err, ReadError::Corrupt { offset, .. } if offset == 18),
        "{err}"
    );
    // The rest of the block is dropped, the next block is read.
    assert_eq!(
        r.next_record().unwrap(),
        Some(Record::End(Stats::default()))
    );
    assert_eq!(r.next_record().unwrap(), None);
    err
}

fn rec(kind: u8, fields: &[u64]) -> Vec<u8> {
    let mut p = Vec::new();
    for &f in fields {
        let mut v = f;
        while v >= 0x80 {
            p.push(v as u8 | 0x80);
            v >>= 7;
        }
        p.push(v as u8);
    }
    let mut r = vec![kind, p.len() as u8];
    r.extend(p);
    r
}

#[test]
fn corrupt_records_are_reported() {
    let alloc_fields = [0u64, 1, 2, 0, 0, 3, 4, 5, 6, 7];
    // Too short.
    let e = corrupt_case(&rec(kind::ALLOC, &alloc_fields[..9]));
    assert!(e.to_string().contains("alloc record"), "{e}");
    corrupt_case(&rec(kind::STATS, &[1, 2, 3]));
    corrupt_case(&rec(kind::FREE, &[]));
    // Out of range fields.
    for (i, v) in [(1, 1u64 << 32), (2, 1 << 16), (3, 256), (4, 1 << 32)] {
        let mut f = alloc_fields;
        f[i] = v;
        let e = corrupt_case(&rec(kind::ALLOC, &f));
        assert!(e.to_string().contains("out of range"), "{e}");
    }
    corrupt_case(&rec(kind::FREE, &[0, 1, 2, 3, 4, 5, 1 << 32, 0]));
    corrupt_case(&rec(kind::FREE, &[0, 1, 2, 3, 4, 5, 0, 256]));
    // Packed records: cut short, and fields out of range (mask tid, tid 2^32; mask
    // api, api 2^16; mask kind, kind 256; mask flags, flags 256).
    let e = corrupt_case(&rec(kind::PACKED_ALLOC, &[0, 2, 6, 300]));
    assert!(
        e.to_string().contains("packed alloc record, field stack"),
        "{e}"
    );
    let e = corrupt_case(&rec(kind::PACKED_FREE, &[]));
    assert!(
        e.to_string().contains("packed free record, field mask"),
        "{e}"
    );
    for (kind, fields) in [
        (kind::PACKED_ALLOC, [1, 0, 1 << 32, 0, 0, 0]),
        (kind::PACKED_ALLOC, [2, 0, 1 << 16, 0, 0, 0]),
        (kind::PACKED_ALLOC, [4, 0, 256, 0, 0, 0]),
        (kind::PACKED_FREE, [16, 0, 0, 0, 256, 0]),
    ] {
        let e = corrupt_case(&rec(kind, &fields));
        assert!(e.to_string().contains("out of range"), "{e}");
    }
    // Stack too deep, and frame count larger than the payload.
    let deep: Vec<u64> = [1, 1025]
        .into_iter()
        .chain(std::iter::repeat_n(1, 10))
        .collect();
    let e = corrupt_case(&rec(kind::STACK, &deep));
    assert!(e.to_string().contains("1025"), "{e}");
    corrupt_case(&rec(kind::STACK, &[1, 1000, 1, 1]));
    corrupt_case(&rec(kind::STACK, &[1, u64::MAX]));
    // Module path / build-id longer than the payload.
    corrupt_case(&rec(kind::MODULE, &[0, 0, 0, 0, 50, 1, 2]));
    corrupt_case(&rec(kind::MODULE, &[0, 0, 0, 0, u64::MAX]));
    corrupt_case(&rec(kind::MODULE, &[0, 0, 0, 0, 1, b'a' as u64, 3, 1]));
    // Malformed varint (11 bytes).
    let mut bad = vec![kind::STATS, 14];
    bad.extend([0x80; 10]);
    bad.extend([0, 1, 2, 3]);
    corrupt_case(&bad);
    // Payload running past the block; record length itself malformed.
    corrupt_case(&[kind::ALLOC, 100, 1, 2]);
    corrupt_case(&[kind::ALLOC, 0xff]);
    corrupt_case(&[
        0xee, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
    ]);
}

// ---------- preamble errors ----------

fn open_err(bytes: &[u8]) -> ReadError {
    match TraceReader::open(Cursor::new(bytes)) {
        Ok(_) => panic!("opened"),
        Err(e) => e,
    }
}

#[test]
fn preamble_errors() {
    for bad in [
        &b""[..],
        b"G",
        b"GPUMEM",
        &MAGIC,
        &preamble(b"{}")[..12],
        &preamble(b"{}")[..17],
    ] {
        assert!(
            matches!(open_err(bad), ReadError::HeaderTruncated),
            "{bad:?}"
        );
    }
    for bad in [
        &b"X"[..],
        b"GPUX",
        b"hello, world! this is text",
        b"\x28\xb5\x2f\xfd\0\0\0\0\0\0\0\0\0\0\0\0",
    ] {
        assert!(matches!(open_err(bad), ReadError::NotATrace));
    }
    let mut newer = preamble(b"{}");
    newer[8..12].copy_from_slice(&7u32.to_le_bytes());
    let e = open_err(&newer);
    assert!(matches!(
        e,
        ReadError::UnsupportedVersion {
            found: 7,
            supported: FORMAT_VERSION
        }
    ));
    assert_eq!(
        e.to_string(),
        "trace format version 7 is newer than this analyzer supports (2): upgrade gpumemprof"
    );
    newer[8..12].copy_from_slice(&0u32.to_le_bytes());
    assert!(matches!(
        open_err(&newer),
        ReadError::UnsupportedVersion { found: 0, .. }
    ));
    let mut huge = preamble(b"{}");
    huge[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(open_err(&huge), ReadError::BadHeader(_)));
    for hdr in [&b"[1,2]"[..], b"nope", b"{\"a\":", b"", b"\xff\xfe"] {
        assert!(
            matches!(open_err(&preamble(hdr)), ReadError::BadHeader(_)),
            "{hdr:?}"
        );
    }
    assert!(matches!(
        open_err(&preamble(b"{\"a\": 1} x")),
        ReadError::BadHeader(_)
    ));
}

#[test]
fn error_messages() {
    assert_eq!(
        ReadError::NotATrace.to_string(),
        "not a gpumemprof trace (bad magic bytes)"
    );
    let c = ReadError::Corrupt {
        offset: 1234,
        what: "x".into(),
    };
    assert_eq!(c.to_string(), "corrupt trace at byte 1234: x");
    assert!(ReadError::HeaderTruncated
        .to_string()
        .starts_with("trace header is cut short"));
    let io = ReadError::Io(std::io::Error::other("boom"));
    assert!(std::error::Error::source(&io).is_some());
}

#[test]
fn oversized_block_length_is_rejected() {
    let mut bytes = preamble(b"{}");
    bytes.extend_from_slice(&u32::MAX.to_le_bytes());
    bytes.extend_from_slice(&[0; 64]);
    let mut r = TraceReader::open(Cursor::new(&bytes[..])).unwrap();
    let e = r.next_record().unwrap_err();
    assert!(matches!(e, ReadError::Corrupt { offset: 18, .. }), "{e}");
    assert_eq!(r.next_record().unwrap(), None);
    assert!(!r.truncated());
}

#[test]
fn corrupt_blocks_are_reported_and_skipped() {
    let good = block(&raw_of(&[Record::End(Stats::default())]));
    let mut flipped = good.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1; // checksum mismatch
    let not_zstd = [&4u32.to_le_bytes()[..], b"abcd"].concat();
    let mut two_frames = good.clone();
    two_frames.extend_from_slice(&good[4..]);
    let n = (two_frames.len() - 4) as u32;
    two_frames[..4].copy_from_slice(&n.to_le_bytes());
    let no_size = {
        let frame = zstd::stream::encode_all(&b"\x07\x00"[..], 1).unwrap(); // streaming: no content size
        [&(frame.len() as u32).to_le_bytes()[..], &frame].concat()
    };
    let cases = [
        (flipped, "does not decompress"),
        (not_zstd, "not a zstd frame"),
        (two_frames, "stray bytes"),
        (no_size, "does not record its decompressed size"),
        (0u32.to_le_bytes().to_vec(), "not a zstd frame"),
    ];
    for (bad, why) in cases {
        let bytes = [&preamble(b"{}")[..], &good, &bad, &good].concat();
        let (recs, errs) = read_through(&bytes).unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(errs.len(), 1);
        assert!(
            matches!(errs[0], ReadError::Corrupt { offset, .. } if offset == 18 + good.len() as u64)
        );
        assert!(errs[0].to_string().contains(why), "{}", errs[0]);
    }
}

/// Three blocks: 2 events then counters (2), 3 events (damaged in the test), 1 event then
/// counters (6). Returns the file and the three blocks' offsets.
fn three_blocks() -> (Vec<u8>, [usize; 3]) {
    let stats = |events| {
        Record::Stats(Stats {
            time_ns: 0,
            events,
            queue_waits: 0,
            dropped: 0,
        })
    };
    let first = block(&raw_of(&[
        Record::Alloc(alloc(1, 0x1000)),
        Record::Free(free_at(2, 0x1000)),
        stats(2),
    ]));
    let second = block(&raw_of(&[
        Record::Alloc(alloc(3, 0x2000)),
        Record::Alloc(alloc(4, 0x3000)),
        Record::Free(free_at(5, 0x2000)),
    ]));
    let third = block(&raw_of(&[Record::Free(free_at(6, 0x3000)), stats(6)]));
    let pre = preamble(b"{}");
    let at = [
        pre.len(),
        pre.len() + first.len(),
        pre.len() + first.len() + second.len(),
    ];
    ([&pre[..], &first[..], &second[..], &third[..]].concat(), at)
}

/// Every record `next_salvaged` gives, and the damage counted.
fn salvaged(bytes: &[u8]) -> (Vec<Record>, Damage, u64) {
    let mut r = TraceReader::open(Cursor::new(bytes)).unwrap();
    let mut recs = Vec::new();
    while let Some(rec) = r.next_salvaged().unwrap() {
        recs.push(rec);
    }
    (recs, r.damage().clone(), r.blocks_read())
}

#[test]
fn a_damaged_block_is_skipped_and_its_bytes_and_events_are_counted() {
    let (good, at) = three_blocks();
    let (recs, damage, blocks) = salvaged(&good);
    assert_eq!((recs.len(), blocks), (8, 3));
    assert_eq!(damage, Damage::default());

    // Three bytes flipped inside the second block's compressed data: its length is intact.
    let mut flipped = good.clone();
    for b in &mut flipped[at[1] + 12..at[1] + 15] {
        *b ^= 0x5a;
    }
    let (recs, damage, blocks) = salvaged(&flipped);
    assert_eq!((recs.len(), blocks), (5, 2), "{recs:?}");
    assert_eq!(damage.blocks, 1);
    assert_eq!(damage.bytes, (at[2] - at[1]) as u64);
    assert_eq!((damage.events, damage.events_known), (3, true));
    assert_eq!(damage.first.as_ref().map(|f| f.0), Some(at[1] as u64));

    // Its length field damaged (over the limit): the third block is found by its header.
    let mut bad_len = good.clone();
    bad_len[at[1] + 3] = 0xff;
    let (recs, damage, _) = salvaged(&bad_len);
    assert_eq!(recs.len(), 5, "{recs:?}");
    assert_eq!((damage.blocks, damage.bytes), (1, (at[2] - at[1]) as u64));
    assert_eq!((damage.events, damage.events_known), (3, true));
    let why = &damage.first.as_ref().unwrap().1;
    assert!(why.contains("exceeds"), "{why}");

    // Its length field damaged to a smaller plausible value: the same.
    let mut short_len = good.clone();
    short_len[at[1]] = short_len[at[1]].wrapping_sub(7);
    let (recs, damage, _) = salvaged(&short_len);
    assert_eq!(recs.len(), 5, "{recs:?}");
    assert_eq!((damage.blocks, damage.bytes), (1, (at[2] - at[1]) as u64));

    // Its length field damaged to a larger value within the limit, running past the end of
    // the file: not a cut file (another block starts inside it), so the same again.
    let mut long_len = good.clone();
    long_len[at[1] + 2] = 0x7f;
    let (recs, damage, _) = salvaged(&long_len);
    assert_eq!(recs.len(), 5, "{recs:?}");
    assert_eq!((damage.blocks, damage.bytes), (1, (at[2] - at[1]) as u64));
    let why = &damage.first.as_ref().unwrap().1;
    assert!(why.contains("runs past the end of the file"), "{why}");
    let mut r = TraceReader::open(Cursor::new(&long_len[..])).unwrap();
    while r.next_salvaged().unwrap().is_some() {}
    assert!(!r.truncated());

    // The last block damaged: no counters after it, so its events are not known.
    let mut last = good.clone();
    let end = last.len();
    last[end - 6] ^= 0xff;
    let (recs, damage, _) = salvaged(&last);
    assert_eq!(recs.len(), 6, "{recs:?}");
    assert_eq!(damage.blocks, 1);
    assert!(!damage.events_known);
}

/// Two traces in one file (`cat a.trace b.trace`): the first is read, and where the second
/// starts is said; its events are never read as the first process's, also when the first
/// ends with a damaged block.
#[test]
fn a_second_trace_after_the_first_is_not_read_as_the_same_process() {
    let (one, at) = three_blocks();
    let both = [&one[..], &one[..]].concat();
    let mut r = TraceReader::open(Cursor::new(&both[..])).unwrap();
    let mut n = 0;
    while r.next_salvaged().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, 8);
    assert_eq!(r.second_trace_at(), Some(one.len() as u64));
    assert!(!r.truncated());
    // The first one's last block damaged (its length too large): the search for the next
    // block stops at the second trace's magic.
    let mut damaged = one.clone();
    damaged[at[2] + 3] = 0x7f;
    let both = [&damaged[..], &one[..]].concat();
    let mut r = TraceReader::open(Cursor::new(&both[..])).unwrap();
    let mut n = 0;
    while r.next_salvaged().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, 6);
    assert_eq!(r.second_trace_at(), Some(one.len() as u64));
}

// ---------- truncation ----------

#[test]
fn cut_at_every_offset() {
    let blocks: Vec<Vec<Record>> = vec![
        vec![
            Record::Stack {
                id: 1,
                frames: vec![1, 2, 3],
            },
            Record::Alloc(alloc(10, 0x1000)),
        ],
        vec![Record::Free(Free {
            time_ns: 20,
            tid: 1,
            api: 1,
            address: 0x1000,
            stream: 0,
            stack: 1,
            result: 0,
            flags: 0,
            kind: MemKind::Device,
            size: 0,
        })],
        every_kind(),
        vec![Record::End(Stats {
            time_ns: 30,
            events: 2,
            queue_waits: 0,
            dropped: 0,
        })],
    ];
    let mut w = TraceWriter::new(Vec::new(), &json!({"argv": ["a", "b"]}), 3).unwrap();
    let preamble_end = w.get_ref().len();
    let mut ends = vec![preamble_end];
    for b in &blocks {
        for r in b {
            w.encoder().record(r);
        }
        w.flush_block().unwrap();
        ends.push(w.get_ref().len());
    }
    let bytes = w.into_inner();
    for cut in 0..=bytes.len() {
        let part = &bytes[..cut];
        if cut < preamble_end {
            assert!(
                matches!(open_err(part), ReadError::HeaderTruncated),
                "cut {cut}"
            );
            continue;
        }
        let (recs, r) = read_all(part).unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        let complete = ends.iter().filter(|&&e| e <= cut).count() - 1;
        assert_eq!(recs, blocks[..complete].concat(), "cut {cut}");
        assert_eq!(r.truncated(), !ends.contains(&cut), "cut {cut}");
        assert_eq!(r.blocks_read(), complete as u64);
        assert_eq!(r.bytes_read(), ends[complete] as u64);
    }
}

// ---------- hostile input ----------

#[test]
fn random_bytes_never_panic() {
    let mut x = Rng(0x1234_5678);
    let valid = preamble(b"{}");
    for case in 0..6000 {
        let len = x.below(300) as usize;
        let mut bytes: Vec<u8> = (0..len).map(|_| x.next() as u8).collect();
        if case % 3 == 1 {
            bytes = [&MAGIC[..], &bytes].concat(); // past the magic check
        } else if case % 3 == 2 {
            // Valid preamble, then a plausible block length over random bytes.
            let n = x.below(len as u64 + 8) as u32;
            bytes = [&valid[..], &n.to_le_bytes(), &bytes].concat();
        }
        let _ = read_through(&bytes);
    }
}

#[test]
fn random_records_in_valid_blocks_never_panic() {
    let mut x = Rng(42);
    for _ in 0..3000 {
        let mut raw = Vec::new();
        for _ in 0..x.below(6) {
            raw.push(1 + x.below(8) as u8);
            let len = x.below(40) as u8;
            raw.push(if x.below(10) == 0 { len | 0x80 } else { len });
            raw.extend((0..len).map(|_| x.next() as u8));
        }
        let _ = read_through(&file_of_raw(&[raw.clone(), raw]));
    }
}

#[test]
fn random_corruptions_of_a_valid_file_never_panic() {
    let blocks = vec![every_kind(), every_kind(), vec![Record::Alloc(alloc(1, 2))]];
    let bytes = write_trace(&blocks);
    let mut x = Rng(2024);
    for _ in 0..3000 {
        let mut b = bytes.clone();
        for _ in 0..1 + x.below(4) {
            let i = x.below(b.len() as u64) as usize;
            b[i] = if x.below(2) == 0 {
                b[i] ^ (1 << x.below(8))
            } else {
                x.next() as u8
            };
        }
        if x.below(4) == 0 {
            b.truncate(x.below(b.len() as u64) as usize);
        }
        if let Ok((recs, _)) = read_through(&b) {
            assert!(recs.len() <= blocks.concat().len() + 64);
        }
    }
}

/// A Python frame word keeps its code id and line, and never looks like an address; a line
/// past 24 bits is clamped, not wrapped into the code id.
#[test]
fn python_frame_words() {
    let w = python_frame(77, 1234);
    assert_eq!(as_python_frame(w), Some((77, 1234)));
    assert_eq!(as_python_frame(0x7fff_ffff_f000), None);
    assert_eq!(
        as_python_frame(python_frame(5, u32::MAX)),
        Some((5, (1 << 24) - 1))
    );
    assert_eq!(
        as_python_frame(python_frame(PY_MAX_CODE_ID, 0)),
        Some((PY_MAX_CODE_ID, 0))
    );
}

/// A Python code record whose strings run past `MAX_PY_STRING` is cut on write, at a
/// character boundary.
#[test]
fn python_code_strings_are_cut_at_a_char_boundary() {
    let mut enc = BlockEncoder::new();
    let long = "é".repeat(MAX_PY_STRING); // 2 bytes each
    enc.py_code(&PyCode {
        id: 3,
        first_line: 1,
        filename: long,
        name: "f".into(),
    });
    let file = file_of_raw(&[enc.raw().to_vec()]);
    let (records, _) = read_all(&file).unwrap();
    match &records[..] {
        [Record::PyCode(c)] => {
            assert_eq!(c.filename.len(), MAX_PY_STRING);
            assert_eq!(c.name, "f");
        }
        other => panic!("{other:?}"),
    }
}
