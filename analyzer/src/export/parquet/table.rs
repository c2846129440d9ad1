//! One Parquet file written a row group at a time: rows go into column buffers, and when
//! their estimated size reaches `row_group_bytes` the buffers become one row group (zstd
//! pages, dictionary-encoded strings), encoded and written by a thread of the table's own
//! (`encoder.rs`) while the next group's rows are made. Memory is the buffers of two row
//! groups at most, whatever the number of rows written.
//!
//! Columns are the leaves of a Parquet message type, filled in order by `Row`: a required
//! or optional scalar (INT32, INT64, BOOLEAN, BYTE_ARRAY) or a list of strings (the
//! three-level LIST of the Parquet spec).

use std::collections::HashSet;
use std::io::BufWriter;
use std::path::Path;
use std::sync::{Arc, Mutex};

use parquet::basic::{Compression, Type as Physical, ZstdLevel};
use parquet::data_type::ByteArray;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::SchemaDescriptor;

use super::columns::{Column, Values};
use super::encoder::{failed, Encoder};
use crate::error::Error;

/// Row group size engines read best (Spark's and DuckDB's default block, about 128 MiB),
/// as estimated uncompressed bytes of the buffered rows.
pub const ROW_GROUP_BYTES: usize = 128 << 20;

/// The zstd level of the pages: 3 is zstd's default, most of its ratio at a fraction of
/// the time of higher levels.
const ZSTD_LEVEL: i32 = 3;

/// A string for the columns, as a `ByteArray` with no reference count: copied once and
/// kept for the rest of the process. A row's clones of it, the writer's dictionary's and
/// their drops are then copies of a pointer; a counted one cost an atomic increment and
/// decrement per value, shared with the encoder's thread (15% of an export's time). For
/// the strings rows share (an API, a kind, a range's name, a host, a path): each distinct
/// one is kept once for all the traces of an export (the ranks of a job name the same
/// ranges), so what is kept is bounded by the distinct names, not by the traces.
pub fn kept(s: &str) -> ByteArray {
    static KEPT: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    let set = kept.get_or_insert_with(HashSet::new);
    let s: &'static str = match set.get(s) {
        Some(k) => k,
        None => {
            let k: &'static str = Box::leak(s.to_owned().into_boxed_str());
            set.insert(k);
            k
        }
    };
    ByteArray::from(bytes::Bytes::from_static(s.as_bytes()))
}

/// A Parquet file being written.
pub struct Table {
    encoder: Encoder,
    columns: Vec<Column>,
    buffered_rows: usize,
    buffered_bytes: usize,
    row_group_bytes: usize,
    rows: u64,
    row_groups: u64,
}

impl Table {
    /// Creates `path` (replacing it only with `force`) for rows of `message_type`;
    /// `schema_version` goes into the file's key-value metadata.
    pub fn create(
        path: &Path,
        message_type: &str,
        schema_version: u32,
        force: bool,
        row_group_bytes: usize,
    ) -> Result<Table, Error> {
        let schema = Arc::new(parse_message_type(message_type).expect("a valid message type"));
        let descr = SchemaDescriptor::new(schema.clone());
        let columns = descr
            .columns()
            .iter()
            .map(|c| Column {
                name: c.path().string(),
                values: match c.physical_type() {
                    Physical::INT32 => Values::I32(Vec::new()),
                    Physical::INT64 => Values::I64(Vec::new()),
                    Physical::BOOLEAN => Values::Bool(Vec::new()),
                    Physical::BYTE_ARRAY => Values::Bytes(Vec::new()),
                    other => unreachable!("no {other} column in gpumemprof's tables"),
                },
                defs: Vec::new(),
                reps: Vec::new(),
                max_def: c.max_def_level(),
                repeated: c.max_rep_level() > 0,
            })
            .collect();
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(
                ZstdLevel::try_new(ZSTD_LEVEL).expect("a valid zstd level"),
            ))
            .set_created_by(format!("gpumemprof {}", env!("CARGO_PKG_VERSION")))
            .set_key_value_metadata(Some(vec![KeyValue::new(
                "gpumemprof.schema_version".to_string(),
                schema_version.to_string(),
            )]))
            .build();
        let file = crate::term::create_output(path, force)?;
        let writer = SerializedFileWriter::new(BufWriter::new(file), schema, Arc::new(props))
            .map_err(|e| failed(path, e))?;
        Ok(Table {
            encoder: Encoder::start(path, writer),
            columns,
            buffered_rows: 0,
            buffered_bytes: 0,
            row_group_bytes,
            rows: 0,
            row_groups: 0,
        })
    }

    /// Starts a row: fill every column in order with the `Row`'s methods, then `end` it.
    pub fn row(&mut self) -> Row<'_> {
        Row {
            table: self,
            next: 0,
        }
    }

    /// Rows written so far (buffered ones included).
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Hands the buffered rows to the encoder as one row group, and fills emptied buffers
    /// from then on.
    fn flush(&mut self) -> Result<(), Error> {
        if self.buffered_rows == 0 {
            return Ok(());
        }
        let fresh = self.columns.iter().map(Column::empty_like).collect();
        let full = std::mem::replace(&mut self.columns, fresh);
        self.encoder.write(full)?;
        // The encoder took this group once it had written the one before, whose buffers
        // it gave back: those are filled next (so two groups' buffers exist at most).
        if let Some(emptied) = self.encoder.emptied() {
            self.columns = emptied;
        }
        self.row_groups += 1;
        self.buffered_rows = 0;
        self.buffered_bytes = 0;
        Ok(())
    }

    /// Writes what is buffered and the footer; returns (rows, row groups).
    pub fn close(mut self) -> Result<(u64, u64), Error> {
        self.flush()?;
        self.encoder.finish()?;
        Ok((self.rows, self.row_groups))
    }
}

/// One row being filled, column after column.
pub struct Row<'a> {
    table: &'a mut Table,
    next: usize,
}

impl Row<'_> {
    fn column(&mut self, bytes: usize) -> &mut Column {
        let c = &mut self.table.columns[self.next];
        self.next += 1;
        self.table.buffered_bytes += bytes + 2 * usize::from(c.max_def > 0);
        c
    }

    fn mismatch(c: &Column, what: &str) -> ! {
        panic!("column {} is not {what}", c.name)
    }

    pub fn i64(&mut self, v: Option<i64>) -> &mut Self {
        let c = self.column(8);
        let Values::I64(values) = &mut c.values else {
            Self::mismatch(c, "INT64")
        };
        push(values, &mut c.defs, c.max_def, v);
        self
    }

    pub fn i32(&mut self, v: Option<i32>) -> &mut Self {
        let c = self.column(4);
        let Values::I32(values) = &mut c.values else {
            Self::mismatch(c, "INT32")
        };
        push(values, &mut c.defs, c.max_def, v);
        self
    }

    pub fn bool(&mut self, v: bool) -> &mut Self {
        let c = self.column(1);
        let Values::Bool(values) = &mut c.values else {
            Self::mismatch(c, "BOOLEAN")
        };
        push(values, &mut c.defs, c.max_def, Some(v));
        self
    }

    /// A string (a clone of a `ByteArray` shares its bytes).
    pub fn bytes(&mut self, v: Option<&ByteArray>) -> &mut Self {
        let len = v.map_or(0, |b| b.len() + 4);
        let c = self.column(len);
        let Values::Bytes(values) = &mut c.values else {
            Self::mismatch(c, "BYTE_ARRAY")
        };
        push(values, &mut c.defs, c.max_def, v.cloned());
        self
    }

    pub fn str(&mut self, v: Option<&str>) -> &mut Self {
        self.bytes(v.map(ByteArray::from).as_ref())
    }

    /// A list of strings (required list, required elements: definition level 1 for an
    /// element, 0 for an empty list).
    pub fn str_list(&mut self, items: &[String]) -> &mut Self {
        let len: usize = items.iter().map(|s| s.len() + 8).sum();
        let c = self.column(len);
        let Values::Bytes(values) = &mut c.values else {
            Self::mismatch(c, "a list of BYTE_ARRAY")
        };
        if items.is_empty() {
            c.defs.push(0);
            c.reps.push(0);
        }
        for (i, s) in items.iter().enumerate() {
            values.push(ByteArray::from(s.as_str()));
            c.defs.push(c.max_def);
            c.reps.push(i16::from(i > 0));
        }
        self
    }

    /// Ends the row; writes a row group when the buffers reached their size.
    pub fn end(&mut self) -> Result<(), Error> {
        let t = &mut *self.table;
        assert_eq!(self.next, t.columns.len(), "a row fills every column");
        t.buffered_rows += 1;
        t.rows += 1;
        if t.buffered_bytes >= t.row_group_bytes {
            t.flush()?;
        }
        Ok(())
    }
}

fn push<T>(values: &mut Vec<T>, defs: &mut Vec<i16>, max_def: i16, v: Option<T>) {
    if max_def > 0 {
        defs.push(if v.is_some() { max_def } else { 0 });
    }
    match v {
        Some(v) => values.push(v),
        None => assert!(max_def > 0, "a required column got no value"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::{Field, Row as ReadRow};
    use std::fs::File;

    const SCHEMA: &str = "message t {
        required int64 n;
        optional binary name (STRING);
        optional int32 small;
        required boolean even;
        required group items (LIST) {
            repeated group list {
                required binary element (STRING);
            }
        }
    }";

    fn write(path: &Path, rows: i64, row_group_bytes: usize) -> (u64, u64) {
        let mut t = Table::create(path, SCHEMA, 7, false, row_group_bytes).unwrap();
        for n in 0..rows {
            let items: Vec<String> = (0..n % 3).map(|i| format!("{n}.{i}")).collect();
            t.row()
                .i64(Some(n))
                .str((n % 2 == 1).then_some("odd"))
                .i32((n % 4 == 0).then_some(n as i32))
                .bool(n % 2 == 0)
                .str_list(&items)
                .end()
                .unwrap();
        }
        t.close().unwrap()
    }

    fn read(path: &Path) -> (Vec<ReadRow>, usize, Option<String>) {
        let reader = SerializedFileReader::new(File::open(path).unwrap()).unwrap();
        let meta = reader.metadata();
        let groups = meta.num_row_groups();
        let version = meta
            .file_metadata()
            .key_value_metadata()
            .and_then(|kv| kv.iter().find(|k| k.key == "gpumemprof.schema_version"))
            .and_then(|k| k.value.clone());
        let rows = reader.into_iter().map(|r| r.unwrap()).collect();
        (rows, groups, version)
    }

    /// 1000 rows of about 36 estimated bytes each (`Row` counts values, lengths and
    /// levels), in row groups of 4 KiB: every value, null and list comes back in order,
    /// across 9 row groups.
    #[test]
    fn rows_come_back_across_row_groups_with_nulls_and_lists() {
        let dir = std::env::temp_dir().join(format!("gpumemprof-table-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.parquet");
        let _ = std::fs::remove_file(&path);
        let (rows, groups) = write(&path, 1000, 4096);
        assert_eq!(rows, 1000);
        let (read_rows, read_groups, version) = read(&path);
        assert_eq!(read_groups as u64, groups);
        assert_eq!(groups, 9, "row groups of 4 KiB");
        assert_eq!(version.as_deref(), Some("7"));
        assert_eq!(read_rows.len(), 1000);
        for (n, row) in read_rows.iter().enumerate() {
            let n = n as i64;
            let f: Vec<&Field> = row.get_column_iter().map(|(_, f)| f).collect();
            assert_eq!(f[0], &Field::Long(n));
            let name = if n % 2 == 1 {
                Field::Str("odd".into())
            } else {
                Field::Null
            };
            assert_eq!(f[1], &name);
            let small = if n % 4 == 0 {
                Field::Int(n as i32)
            } else {
                Field::Null
            };
            assert_eq!(f[2], &small);
            assert_eq!(f[3], &Field::Bool(n % 2 == 0));
            let Field::ListInternal(items) = f[4] else {
                panic!("items is a list: {:?}", f[4])
            };
            let want: Vec<Field> = (0..n % 3).map(|i| Field::Str(format!("{n}.{i}"))).collect();
            assert_eq!(items.elements(), &want[..]);
        }
        // An existing file is not replaced without `force`.
        assert!(Table::create(&path, SCHEMA, 7, false, 4096).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A disk that is full (`/dev/full`): the encoder's thread stops at its first write
    /// error, and that error comes back, naming the file, from the next hand-off or from
    /// `close`; nothing waits for ever.
    #[test]
    fn the_encoders_write_error_comes_back() {
        let path = Path::new("/dev/full");
        let mut t = Table::create(path, SCHEMA, 7, true, 4096).unwrap();
        let mut error = None;
        for n in 0..100_000 {
            let mut row = t.row();
            row.i64(Some(n))
                .str(None)
                .i32(None)
                .bool(true)
                .str_list(&[]);
            if let Err(e) = row.end() {
                error = Some(e);
                break;
            }
        }
        let Some(error) = error else {
            panic!("100,000 rows of 4 KiB groups written to /dev/full")
        };
        assert_eq!(
            error.to_string(),
            "writing /dev/full: No space left on device (os error 28)"
        );
        // Once returned, the error is not forgotten.
        assert_eq!(
            t.close().unwrap_err().to_string(),
            "/dev/full: not written: an earlier write failed"
        );
    }

    /// A string kept twice (the same range name in two ranks' traces) is one copy.
    #[test]
    fn a_kept_string_is_kept_once() {
        let (a, b) = (kept("aten::addmm"), kept(&String::from("aten::addmm")));
        assert_eq!(a.data(), b"aten::addmm");
        assert_eq!(a.data().as_ptr(), b.data().as_ptr());
        assert_ne!(kept("aten::mm").data().as_ptr(), a.data().as_ptr());
    }

    /// One row group for the default size: nothing is flushed before `close`.
    #[test]
    fn a_small_table_is_one_row_group() {
        let dir = std::env::temp_dir().join(format!("gpumemprof-table1-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.parquet");
        let _ = std::fs::remove_file(&path);
        assert_eq!(write(&path, 1000, ROW_GROUP_BYTES), (1000, 1));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
