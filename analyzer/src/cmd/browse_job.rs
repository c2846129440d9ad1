//! Which traces `browse` shows: the files named, or, for a job folder of several ranks
//! (`browse DIR`), its first rank beside the rank that peaked highest of the others (or the
//! one `--rank` names), each read once.

use std::path::{Path, PathBuf};

use super::ranks::{self, Entry};
use crate::browse::story::StoryBuilder;
use crate::error::Error;
use crate::replay::Loaded;

/// A trace read for `browse`: its path, its replay, its story, and how the title names it
/// beside its program (`rank 3`), if it does.
pub type Read = (PathBuf, Loaded, StoryBuilder, Option<String>);

/// What `browse` opens.
pub struct Opened {
    pub read: Vec<Read>,
    /// Which rank B is and why, for the footer (a job folder).
    pub note: Option<String>,
}

pub fn read_one(path: &Path, label: Option<String>) -> Result<Read, Error> {
    let mut builder = StoryBuilder::new();
    let loaded = crate::input::load_keeping_exit(path, &mut [&mut builder])?;
    Ok((path.to_path_buf(), loaded, builder, label))
}

/// The traces named (`rank` is only for a folder); a single folder is a job's.
pub fn open(inputs: &[PathBuf], rank: Option<u64>) -> Result<Opened, Error> {
    match inputs {
        [dir] if dir.is_dir() => job(dir, rank),
        _ if rank.is_some() => Err(Error::Failed(
            "--rank picks the second trace among a job folder's: give the folder \
             (`gpumemprof browse DIR --rank N`)"
                .to_string(),
        )),
        _ => Ok(Opened {
            read: (inputs.iter())
                .map(|p| read_one(p, None))
                .collect::<Result<_, _>>()?,
            note: None,
        }),
    }
}

fn name(e: &Entry) -> String {
    e.rank.map_or_else(
        || {
            let file = e.path.file_name().unwrap_or_default();
            file.to_string_lossy().into_owned()
        },
        |r| format!("rank {r}"),
    )
}

/// A job folder: its traces sorted by rank (`ranks::entries`); A is the first, B the one of
/// rank `rank`, else the one whose tensors (else memory) peaked highest, the first of equals.
/// Only A and the best B so far are kept while the others are read.
fn job(dir: &Path, rank: Option<u64>) -> Result<Opened, Error> {
    let entries = ranks::entries(&[dir.to_path_buf()])?;
    let (first, others) = entries.split_first().expect("entries are never empty");
    let a = read_one(&first.path, Some(name(first)))?;
    let (b, note) = match (others, rank) {
        ([], None) => (None, None),
        (_, Some(r)) => {
            let e = (others.iter()).find(|e| e.rank == Some(r)).ok_or_else(|| {
                let ranks: Vec<String> = others.iter().map(name).collect();
                Error::Failed(format!(
                    "{}: no trace of rank {r} beside {} (A); the others are: {}",
                    dir.display(),
                    name(first),
                    if ranks.is_empty() {
                        "none".to_string()
                    } else {
                        ranks.join(", ")
                    }
                ))
            })?;
            (Some(read_one(&e.path, Some(name(e)))?), None)
        }
        (_, None) => {
            let mut best: Option<(Read, u64)> = None;
            for e in others {
                let read = read_one(&e.path, Some(name(e)))?;
                let peak = read.2.peak();
                if best.as_ref().is_none_or(|(_, p)| peak > *p) {
                    best = Some((read, peak));
                }
            }
            let (read, _) = best.expect("others is not empty");
            let note = (others.len() > 1).then(|| {
                format!(
                    "B: {}, the highest peak of the {} other traces (--rank N picks another)",
                    read.3.as_deref().unwrap_or_default(),
                    others.len(),
                )
            });
            (Some(read), note)
        }
    };
    Ok(Opened {
        read: std::iter::once(a).chain(b).collect(),
        note,
    })
}
