//! The decoders' tests: the fast paths agree with the careful ones; damage is named.
use super::*;
use crate::varint::put_u64;

/// Whatever the payload, the fast paths give what the careful decoder gives, or
/// decline (`None`) and leave the block's time alone.
#[test]
fn fast_paths_agree_with_the_careful_decoder() {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let (mut fast, mut declined) = (0, 0);
    for round in 0..50_000 {
        let mut data = Vec::new();
        let fields = 7 + next() % 6; // too few, exactly ten, or more
        for _ in 0..fields {
            let r = next();
            // Mostly small values (of every field's range), some of any size.
            let v = if r % 4 == 0 { r >> (r % 64) } else { r % 300 };
            put_u64(&mut data, v);
        }
        if next() % 8 == 0 {
            let at = (next() as usize) % data.len();
            data[at] ^= 1 << (next() % 8); // a damaged byte
        }
        let len = data.len() - (next() % 3 == 0) as usize; // sometimes cut short
        data.extend_from_slice(&[0xff; 16]); // what follows in the block
        for k in [
            kind::ALLOC,
            kind::FREE,
            kind::PACKED_ALLOC,
            kind::PACKED_FREE,
        ] {
            let (mut t_fast, mut t_careful) = (round, round);
            let before = Running {
                tid: 3,
                alloc_api: 4,
                free_api: 5,
                kind: 1,
                device: -1,
                stream: 6,
                pool: 7,
                address: 0x7f00_0000_1000,
            };
            let (mut run_fast, mut run_careful) = (before, before);
            let got = match k {
                kind::ALLOC => alloc(&data, len, &mut t_fast).map(Record::Alloc),
                kind::FREE => free(&data, len, &mut t_fast).map(Record::Free),
                kind::PACKED_ALLOC => {
                    packed_alloc_fast(&data, len, &mut t_fast, &mut run_fast).map(Record::Alloc)
                }
                _ => packed_free_fast(&data, len, &mut t_fast, &mut run_fast).map(Record::Free),
            };
            let want = decode(k, &data, len, &mut t_careful, &mut run_careful);
            match got {
                Some(r) => {
                    fast += 1;
                    assert_eq!(Ok(r), want, "round {round}, kind {k}");
                    assert_eq!(t_fast, t_careful);
                    assert_eq!(run_fast, run_careful);
                }
                None => {
                    declined += 1;
                    assert_eq!(t_fast, round, "a declined record moved the time");
                    assert_eq!(run_fast, before, "a declined record moved the values");
                }
            }
        }
    }
    assert!(
        fast > 20_000 && declined > 20_000,
        "{fast} fast, {declined} declined"
    );
}
