//! The moments `browse` shows: a time bucket (where its tensors, else its memory, were
//! highest), an out-of-memory error or the end; what was live then, when it was and what
//! it is called; and, with two traces, the second's moment and how it follows the first's.

use super::story::Story;

/// The moment shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    /// Where this bucket's tensors (or memory) were highest.
    Bucket(usize),
    /// Out-of-memory error N (0-based), when it was returned.
    Oom(usize),
    /// The end of the trace.
    End,
}

/// How the second trace's moment follows the first's (`browse A B`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// The same time since each trace started.
    Time,
    /// The same number of allocations made live and released before it.
    Events,
    /// The same point of the same training step (`steps`), by time where the second trace
    /// has not that step.
    Steps,
}

/// The second trace of `browse A B`: its story, its name and the moment shown.
pub struct Other {
    pub story: Story,
    pub program: String,
    pub moment: Moment,
}

impl Moment {
    /// What was live on `story` then.
    pub fn sites(self, story: &Story) -> Vec<crate::snapshot::StackBytes> {
        match self {
            Moment::Bucket(b) => story.at_bucket(b),
            Moment::Oom(n) => story.at_oom(n),
            Moment::End => story.at_end(),
        }
    }

    /// Its time on `story`.
    pub fn time(self, story: &Story) -> u64 {
        match self {
            Moment::Bucket(b) => story.buckets.get(b).map_or(0, |b| b.max_ns),
            Moment::Oom(n) => story.ooms.get(n).map_or(0, |o| o.time_ns),
            Moment::End => story.end_ns,
        }
    }

    /// Its bucket on `story`.
    pub fn bucket(self, story: &Story) -> usize {
        match self {
            Moment::Bucket(b) => b,
            Moment::Oom(n) => (story.ooms.get(n)).map_or(0, |o| story.bucket_of(o.time_ns)),
            Moment::End => story.buckets.len().saturating_sub(1),
        }
    }

    /// ` (step 3/10)` where the trace marks steps, else nothing.
    pub fn step_words(self, story: &Story) -> String {
        match super::steps::words(&story.steps, self.time(story)) {
            w if w.is_empty() => w,
            w => format!(" ({w})"),
        }
    }

    /// "at the peak", "at OOM 1 of 2", "at the end", "at" (a moment of no name).
    pub fn words(self, story: &Story) -> String {
        match self {
            Moment::Bucket(b) if b == story.peak_bucket() => "at the peak".to_string(),
            Moment::Bucket(_) => "at".to_string(),
            Moment::Oom(n) => format!("at OOM {} of {}", n + 1, story.oom_count),
            Moment::End => "at the end".to_string(),
        }
    }
}
