//! The trace decoded on a second thread (`decoding.rs`) gives the replay exactly what one
//! thread reading it gives: the same records in the same order, a damaged block's marker
//! where it was, across many batches; a consumer that stops early stops the decoder.

use gpumemprof_analyzer::decoding::{each_batch_on, Flow, Item};
use gpumemprof_format::{Record, TraceReader, FORMAT_VERSION};
use serde_json::json;

#[path = "checks/synth.rs"]
mod synth;

/// 5 blocks of 4,000 allocations and frees (20,000 records, about five batches), with a
/// byte of the third block's payload flipped when `damage`.
fn trace(damage: bool) -> Vec<u8> {
    let header = json!({
        "format": "gpumemprof-trace", "format_version": FORMAT_VERSION, "pid": 7,
        "argv": ["t"], "start_monotonic_ns": 0,
        "apis": [{"id": 0, "name": "cudaMalloc"}, {"id": 1, "name": "cudaFree"}]
    });
    let blocks: Vec<Vec<Record>> = (0..5u64)
        .map(|b| {
            (0..2000u64)
                .flat_map(|i| {
                    let (t, address) = (b * 10_000 + i * 2, 0x1000 + b * 100_000 + i);
                    [
                        synth::alloc(t, address, 512 + i, 1),
                        synth::free(t + 1, address),
                    ]
                })
                .collect()
        })
        .collect();
    let (mut bytes, ends) = synth::trace_bytes(&header, &blocks);
    if damage {
        let at = (ends[1] + ends[2]) / 2;
        bytes[at] ^= 0x40;
    }
    bytes
}

/// What one thread reading it gives: `Some(record)`, `None` for a skipped block.
fn one_thread(bytes: &[u8]) -> Vec<Option<Record>> {
    let mut reader = TraceReader::open(bytes).expect("open");
    let mut out = Vec::new();
    loop {
        match reader.next_record() {
            Ok(Some(r)) => out.push(Some(r)),
            Ok(None) => return out,
            Err(gpumemprof_format::ReadError::Corrupt { .. }) => out.push(None),
            Err(e) => panic!("{e}"),
        }
    }
}

/// What `each_batch_on` gives, on a second thread or not.
fn batched(bytes: &[u8], threaded: bool) -> (Vec<Option<Record>>, usize) {
    let mut reader = TraceReader::open(bytes).expect("open");
    let (mut out, mut batches) = (Vec::new(), 0);
    each_batch_on(&mut reader, threaded, |batch| {
        batches += 1;
        for item in batch.iter_mut() {
            out.push(match item.take() {
                Item::Record(r) => Some(r),
                Item::Damaged => None,
                Item::Taken => panic!("a batch came with a record taken"),
            });
        }
        Flow::More
    })
    .expect("read");
    assert_eq!(
        reader.damage().blocks,
        one_thread(bytes).iter().filter(|r| r.is_none()).count() as u64
    );
    (out, batches)
}

#[test]
fn the_same_records_in_the_same_order_as_one_thread() {
    let bytes = trace(false);
    let want = one_thread(&bytes);
    assert_eq!(want.len(), 20_000);
    for threaded in [true, false] {
        let (got, batches) = batched(&bytes, threaded);
        assert_eq!(got, want);
        assert_eq!(batches, 5, "4 full batches and the rest");
    }
}

#[test]
fn a_damaged_block_is_marked_where_it_was() {
    let bytes = trace(true);
    let want = one_thread(&bytes);
    let marks: Vec<usize> = (want.iter().enumerate())
        .filter(|(_, r)| r.is_none())
        .map(|(i, _)| i)
        .collect();
    // The third block fails zstd's checksum: its 4,000 records are lost, the mark is
    // after the first two blocks' 8,000.
    assert_eq!(marks, vec![8000]);
    assert_eq!(want.len(), 16_001);
    for threaded in [true, false] {
        assert_eq!(batched(&bytes, threaded).0, want);
    }
}

#[test]
fn a_consumer_that_stops_stops_the_decoder() {
    let bytes = trace(false);
    for threaded in [true, false] {
        let mut reader = TraceReader::open(&bytes[..]).expect("open");
        let mut seen = 0;
        each_batch_on(&mut reader, threaded, |batch| {
            seen += batch.len();
            Flow::Stop
        })
        .expect("read");
        assert_eq!(seen, 4096);
    }
}
