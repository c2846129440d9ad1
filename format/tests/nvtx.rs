//! The NVTX record kinds (10: an NVTX event, 11: an interned NVTX string): their exact
//! bytes, their round trip in time order with allocations, and the promise that lets them
//! into version-1 traces: a reader that does not know them skips them and still decodes
//! every allocation's time exactly.

use std::io::Cursor;

use gpumemprof_format::*;

fn alloc(time_ns: u64, address: u64) -> Alloc {
    Alloc {
        time_ns,
        tid: 7,
        api: 1,
        kind: MemKind::Device,
        device: 0,
        address,
        size: 4096,
        stream: 0,
        pool: 0,
        stack: 0,
    }
}

fn nvtx(time_ns: u64, op: NvtxOp, name: u64, range: u64) -> Nvtx {
    Nvtx {
        time_ns,
        tid: 7,
        op,
        domain: 0,
        name,
        range,
    }
}

/// A one-block trace of `raw` records.
fn file_of(raw: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    write_preamble(&mut f, b"{}").unwrap();
    let mut block = Vec::new();
    compress_block(raw, 3, &mut block).unwrap();
    f.extend_from_slice(&block);
    f
}

fn read(bytes: &[u8]) -> Result<Vec<Record>, ReadError> {
    let mut r = TraceReader::open(Cursor::new(bytes))?;
    let mut out = Vec::new();
    while let Some(rec) = r.next_record()? {
        out.push(rec);
    }
    Ok(out)
}

#[test]
fn exact_encoding() {
    let mut e = BlockEncoder::new();
    e.alloc(&alloc(100, 1));
    let start = e.len();
    // 90 is 10 before the running time 100: zigzag(-10) = 19.
    e.nvtx(&Nvtx {
        time_ns: 90,
        tid: 7,
        op: NvtxOp::Start,
        domain: 2,
        name: 3,
        range: 4,
    });
    assert_eq!(&e.raw()[start..], &[kind::NVTX, 6, 19, 7, 2, 2, 3, 4]);
    let start = e.len();
    e.nvtx_string(3, "fwd");
    assert_eq!(
        &e.raw()[start..],
        &[kind::NVTX_STRING, 5, 3, 3, b'f', b'w', b'd']
    );
    // The NVTX event did not move the time base: the next alloc's delta is from 100.
    let start = e.len();
    e.alloc(&alloc(105, 2));
    // kind, length, mask, then the time delta.
    assert_eq!(e.raw()[start + 3], 10, "zigzag(+5) from the alloc at 100");
}

/// Ranges, marks and strings interleaved with allocations come back as written, in order,
/// with every time exact.
#[test]
fn events_round_trip_in_order_with_allocations() {
    let records = vec![
        Record::NvtxString {
            id: 1,
            text: "forward".into(),
        },
        Record::Nvtx(nvtx(1_000, NvtxOp::Push, 1, 0)),
        Record::Alloc(alloc(1_500, 0x10)),
        Record::NvtxString {
            id: 2,
            text: "optimizer_step".into(),
        },
        Record::Nvtx(nvtx(2_000, NvtxOp::Start, 2, 1)),
        Record::Alloc(alloc(2_500, 0x20)),
        Record::Nvtx(nvtx(3_000, NvtxOp::End, 0, 1)),
        Record::Nvtx(nvtx(3_100, NvtxOp::Mark, 2, 0)),
        Record::Nvtx(nvtx(3_200, NvtxOp::Pop, 0, 0)),
        Record::Alloc(alloc(4_000, 0x30)),
    ];
    let mut e = BlockEncoder::new();
    for r in &records {
        e.record(r);
    }
    assert_eq!(read(&file_of(e.raw())).unwrap(), records);
}

/// What a reader without kinds 10 and 11 sees (simulated by renaming them to a kind no
/// reader knows): the allocations, with the times the writer gave them.
#[test]
fn a_reader_that_skips_nvtx_records_keeps_every_allocation_time() {
    let mut e = BlockEncoder::new();
    let mut nvtx_at = Vec::new();
    for i in 0..50u64 {
        nvtx_at.push(e.len());
        e.nvtx_string(i + 1, "step");
        nvtx_at.push(e.len());
        // Stamped between allocations, sometimes before the previous one (reordering).
        e.nvtx(&nvtx(
            i * 1_000 + 999 - (i % 3) * 700,
            NvtxOp::Push,
            i + 1,
            0,
        ));
        e.alloc(&alloc(i * 1_000 + 500, i));
    }
    let mut raw = e.raw().to_vec();
    for at in nvtx_at {
        raw[at] = 200;
    }
    let allocs: Vec<Alloc> = read(&file_of(&raw))
        .unwrap()
        .into_iter()
        .filter_map(|r| match r {
            Record::Alloc(a) => Some(a),
            Record::Unknown { kind: 200, .. } => None,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    let want: Vec<Alloc> = (0..50).map(|i| alloc(i * 1_000 + 500, i)).collect();
    assert_eq!(allocs, want);
}

#[test]
fn strings_are_cut_at_a_char_boundary_and_longer_ones_rejected() {
    let mut e = BlockEncoder::new();
    e.nvtx_string(1, &"é".repeat(MAX_NVTX_STRING)); // 2 bytes each
    match &read(&file_of(e.raw())).unwrap()[..] {
        [Record::NvtxString { id: 1, text }] => {
            assert_eq!(text.len(), MAX_NVTX_STRING);
            assert!(text.chars().all(|c| c == 'é'));
        }
        other => panic!("{other:?}"),
    }
    // A hand-made record one byte over the limit is corrupt, not allocated for.
    let mut payload = vec![1u8];
    let n = MAX_NVTX_STRING + 1;
    payload.extend_from_slice(&[(n & 0x7f) as u8 | 0x80, (n >> 7) as u8]);
    payload.extend(std::iter::repeat_n(b'x', n));
    let mut raw = vec![kind::NVTX_STRING];
    let len = payload.len();
    raw.extend_from_slice(&[(len & 0x7f) as u8 | 0x80, (len >> 7) as u8]);
    raw.extend_from_slice(&payload);
    let err = read(&file_of(&raw)).unwrap_err().to_string();
    assert!(err.contains("nvtx string record: 4097 bytes"), "{err}");
}

/// Names that are not UTF-8 (an ASCII message is any bytes) read back lossily, never fail.
#[test]
fn invalid_utf8_reads_lossily() {
    let raw = vec![kind::NVTX_STRING, 4, 9, 2, 0xff, b'a'];
    assert_eq!(
        read(&file_of(&raw)).unwrap(),
        vec![Record::NvtxString {
            id: 9,
            text: "\u{fffd}a".into()
        }]
    );
}

#[test]
fn op_codes_are_stable() {
    for (op, code, name) in [
        (NvtxOp::Push, 0, "push"),
        (NvtxOp::Pop, 1, "pop"),
        (NvtxOp::Start, 2, "start"),
        (NvtxOp::End, 3, "end"),
        (NvtxOp::Mark, 4, "mark"),
        (NvtxOp::Other(9), 9, "other"),
    ] {
        assert_eq!(op.to_u8(), code);
        assert_eq!(NvtxOp::from_u8(code), op);
        assert_eq!(op.name(), name);
    }
}
