//! A row group's columns as the table buffers them: each leaf column's values and its
//! definition and repetition levels, until the encoder writes them (`encoder.rs`).

use parquet::data_type::ByteArray;

/// A leaf column's values, by physical type.
pub enum Values {
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
    Bytes(Vec<ByteArray>),
}

/// One leaf column's buffered values and levels.
pub struct Column {
    pub name: String,
    pub values: Values,
    /// Definition levels (optional columns and lists).
    pub defs: Vec<i16>,
    /// Repetition levels (lists).
    pub reps: Vec<i16>,
    pub max_def: i16,
    pub repeated: bool,
}

impl Column {
    /// An empty column of the same type and levels.
    pub fn empty_like(&self) -> Column {
        Column {
            name: self.name.clone(),
            values: match self.values {
                Values::I32(_) => Values::I32(Vec::new()),
                Values::I64(_) => Values::I64(Vec::new()),
                Values::Bool(_) => Values::Bool(Vec::new()),
                Values::Bytes(_) => Values::Bytes(Vec::new()),
            },
            defs: Vec::new(),
            reps: Vec::new(),
            max_def: self.max_def,
            repeated: self.repeated,
        }
    }

    pub fn clear(&mut self) {
        match &mut self.values {
            Values::I32(v) => v.clear(),
            Values::I64(v) => v.clear(),
            Values::Bool(v) => v.clear(),
            Values::Bytes(v) => v.clear(),
        }
        self.defs.clear();
        self.reps.clear();
    }
}
