//! The trace's JSON header, read: the preamble before the first block (magic, version,
//! header length, header JSON), and typed views of the header fields more than one
//! reader needs (`apis`, the table of hooked functions). The header stays a JSON object:
//! fields are only ever added, and a reader keeps what it does not know.

use std::collections::HashMap;
use std::io::Read;

use crate::error::ReadError;
use crate::{FORMAT_VERSION, MAGIC, MAX_HEADER_LEN};

/// Preamble bytes before the header JSON: magic, version, header length.
pub const PREAMBLE_LEN: usize = 16;

/// A trace's preamble, validated: what `TraceReader::open` reads before the blocks.
#[derive(Debug, Clone)]
pub struct Preamble {
    pub version: u32,
    /// The header JSON (always an object).
    pub header: serde_json::Value,
    /// The preamble's bytes as they are in the file, header JSON included (a follower of
    /// a growing trace puts them in front of each continued read).
    pub bytes: Vec<u8>,
}

/// Reads and validates the preamble and header JSON from the start of a trace.
pub fn read_preamble(r: &mut impl Read) -> Result<Preamble, ReadError> {
    let mut pre = [0u8; PREAMBLE_LEN];
    let n = read_full(r, &mut pre)?;
    let m = n.min(MAGIC.len());
    if pre[..m] != MAGIC[..m] {
        return Err(ReadError::NotATrace);
    }
    if n < PREAMBLE_LEN {
        return Err(ReadError::HeaderTruncated);
    }
    let version = u32::from_le_bytes([pre[8], pre[9], pre[10], pre[11]]);
    if version == 0 || version > FORMAT_VERSION {
        return Err(ReadError::UnsupportedVersion {
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let hlen = u32::from_le_bytes([pre[12], pre[13], pre[14], pre[15]]) as usize;
    if hlen > MAX_HEADER_LEN {
        return Err(ReadError::BadHeader(format!(
            "header length {hlen} exceeds the {MAX_HEADER_LEN}-byte limit"
        )));
    }
    let mut bytes = pre.to_vec(); // grows with what is actually there, not with hlen
    r.take(hlen as u64).read_to_end(&mut bytes)?;
    if bytes.len() < PREAMBLE_LEN + hlen {
        return Err(ReadError::HeaderTruncated);
    }
    let header: serde_json::Value = serde_json::from_slice(&bytes[PREAMBLE_LEN..])
        .map_err(|e| ReadError::BadHeader(format!("not valid JSON: {e}")))?;
    if !header.is_object() {
        return Err(ReadError::BadHeader("not a JSON object".into()));
    }
    Ok(Preamble {
        version,
        header,
        bytes,
    })
}

/// Fills `buf` as far as the input goes; returns the bytes read.
pub(crate) fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The header's string field `key`, if present.
pub fn str_field<'a>(header: &'a serde_json::Value, key: &str) -> Option<&'a str> {
    header.get(key).and_then(|v| v.as_str())
}

/// One hooked function of the header's `apis` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiEntry {
    /// The id events carry.
    pub id: u16,
    pub name: String,
    /// `runtime`, `driver` or `hip` (absent in hand-made headers).
    pub family: Option<String>,
}

/// The header's `apis` table; entries without an id or a name are left out, and a header
/// without the table gives none.
pub fn apis(header: &serde_json::Value) -> Vec<ApiEntry> {
    let Some(list) = header.get("apis").and_then(|a| a.as_array()) else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|a| {
            Some(ApiEntry {
                id: u16::try_from(a.get("id")?.as_u64()?).ok()?,
                name: a.get("name")?.as_str()?.to_string(),
                family: a.get("family").and_then(|f| f.as_str()).map(str::to_owned),
            })
        })
        .collect()
}

/// API id -> name, from the header's `apis` table.
pub fn api_names(header: &serde_json::Value) -> HashMap<u16, String> {
    apis(header).into_iter().map(|a| (a.id, a.name)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_apis_table_reads_ids_names_and_families_and_skips_broken_entries() {
        let h = serde_json::json!({"apis": [
            {"id": 1, "name": "cudaMalloc", "family": "runtime"},
            {"id": 70000, "name": "too big"},
            {"name": "no id"},
            {"id": 2, "name": "cuMemFree_v2"},
        ]});
        assert_eq!(
            apis(&h),
            vec![
                ApiEntry {
                    id: 1,
                    name: "cudaMalloc".into(),
                    family: Some("runtime".into())
                },
                ApiEntry {
                    id: 2,
                    name: "cuMemFree_v2".into(),
                    family: None
                },
            ]
        );
        assert_eq!(
            api_names(&h).get(&2).map(String::as_str),
            Some("cuMemFree_v2")
        );
        assert!(apis(&serde_json::json!({})).is_empty());
    }

    #[test]
    fn the_preamble_keeps_its_bytes_and_refuses_a_cut_header() {
        let mut file = Vec::new();
        crate::write_preamble(&mut file, br#"{"pid": 7}"#).unwrap();
        let whole = file.len();
        file.extend_from_slice(b"block bytes");
        let p = read_preamble(&mut file.as_slice()).unwrap();
        assert_eq!(p.bytes, file[..whole]);
        assert_eq!(p.header["pid"], 7);
        assert_eq!(p.version, FORMAT_VERSION);
        assert!(matches!(
            read_preamble(&mut &file[..whole - 1]),
            Err(ReadError::HeaderTruncated)
        ));
    }
}
