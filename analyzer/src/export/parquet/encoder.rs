//! The thread that compresses and writes a Parquet table's row groups (`table.rs` hands
//! them over), so that encoding one overlaps with making the next's rows (it was a third
//! of an export's time); and the file errors of the `parquet` crate as the CLI's.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

use parquet::data_type::{BoolType, ByteArrayType, Int32Type, Int64Type};
use parquet::errors::ParquetError;
use parquet::file::writer::SerializedFileWriter;

use super::columns::{Column, Values};
use crate::error::Error;

/// The thread that encodes and writes a table's row groups, in the order they are handed
/// to it, one at a time: a hand-off waits until it has written the previous one, so two
/// groups' buffers exist at most (the one it writes, the one being filled). It gives each
/// group's buffers back, emptied, for the one after next.
pub struct Encoder {
    path: PathBuf,
    groups: Option<SyncSender<Vec<Column>>>,
    emptied: Receiver<Vec<Column>>,
    thread: Option<JoinHandle<Result<(), Error>>>,
    /// The thread ended at an error, which was returned once.
    failed: bool,
}

impl Encoder {
    pub fn start(path: &Path, mut writer: SerializedFileWriter<BufWriter<File>>) -> Encoder {
        let (groups, incoming) = mpsc::sync_channel::<Vec<Column>>(0);
        let (give_back, emptied) = mpsc::channel();
        let file = path.to_owned();
        let thread = std::thread::Builder::new()
            .name("parquet-encoder".to_string())
            .spawn(move || {
                for mut columns in incoming {
                    write_group(&mut writer, &file, &mut columns)?;
                    let _ = give_back.send(columns);
                }
                writer.close().map_err(|e| failed(&file, e))?;
                Ok(())
            })
            .expect("a thread for the Parquet encoder");
        Encoder {
            path: path.to_owned(),
            groups: Some(groups),
            emptied,
            thread: Some(thread),
            failed: false,
        }
    }

    /// Hands a group over (waiting while the previous one is written); on the thread's
    /// error, that error.
    pub fn write(&mut self, columns: Vec<Column>) -> Result<(), Error> {
        let sent = self.groups.as_ref().map(|g| g.send(columns));
        match sent {
            Some(Ok(())) => Ok(()),
            // The thread stopped at an error: the error.
            _ => self.finish(),
        }
    }

    /// Buffers the thread emptied, if it gave some back.
    pub fn emptied(&self) -> Option<Vec<Column>> {
        self.emptied.try_recv().ok()
    }

    /// Waits for the thread to write what it was handed and the footer.
    pub fn finish(&mut self) -> Result<(), Error> {
        self.groups = None;
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(Err(e))) => {
                self.failed = true;
                Err(e)
            }
            Some(Ok(Ok(()))) => Ok(()),
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            None if self.failed => Err(Error::Failed(format!(
                "{}: not written: an earlier write failed",
                self.path.display()
            ))),
            None => Ok(()),
        }
    }
}

impl Drop for Encoder {
    /// A table dropped without `close` (an error elsewhere): the thread writes what it
    /// was handed and ends before the caller goes on (which removes a failed export's
    /// files).
    fn drop(&mut self) {
        self.groups = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Writes `columns` as one row group, and empties them.
fn write_group(
    writer: &mut SerializedFileWriter<BufWriter<File>>,
    path: &Path,
    columns: &mut [Column],
) -> Result<(), Error> {
    let mut group = writer.next_row_group().map_err(|e| failed(path, e))?;
    for c in columns {
        let mut col = group
            .next_column()
            .map_err(|e| failed(path, e))?
            .expect("one writer per leaf column");
        let defs = (c.max_def > 0).then_some(&c.defs[..]);
        let reps = c.repeated.then_some(&c.reps[..]);
        match &c.values {
            Values::I32(v) => col.typed::<Int32Type>().write_batch(v, defs, reps),
            Values::I64(v) => col.typed::<Int64Type>().write_batch(v, defs, reps),
            Values::Bool(v) => col.typed::<BoolType>().write_batch(v, defs, reps),
            Values::Bytes(v) => col.typed::<ByteArrayType>().write_batch(v, defs, reps),
        }
        .map_err(|e| failed(path, e))?;
        col.close().map_err(|e| failed(path, e))?;
        c.clear();
    }
    group.close().map_err(|e| failed(path, e))?;
    Ok(())
}

pub fn failed(path: &Path, e: ParquetError) -> Error {
    let source = match e {
        ParquetError::External(inner) => match inner.downcast::<std::io::Error>() {
            Ok(io) => *io,
            Err(other) => std::io::Error::other(other),
        },
        other => std::io::Error::other(other),
    };
    Error::File {
        what: format!("writing {}", path.display()),
        source,
    }
}
