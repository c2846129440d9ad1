//! Where CPython keeps what a stack walk reads, per minor version (x86_64 and aarch64:
//! LP64, the default build with the GIL).
//!
//! The numbers are `offsetof` values from each version's own headers, printed by
//! `tests/python/py_offsets.c`; `tests/e2e_python.rs` compiles that program against every
//! `python3.X` the machine has and compares its output with `table_text()`, so a number
//! here can never silently disagree with the headers of a version we test.
//!
//! What the walk reads, by version:
//! - 3.9, 3.10: `PyThreadState.frame` -> `PyFrameObject` chain (`f_back`); one Python
//!   frame per `_PyEval_EvalFrameDefault` call; the line from `PyFrame_GetLineNumber`.
//! - 3.11, 3.12: `PyThreadState.cframe->current_frame` -> `_PyInterpreterFrame` chain
//!   (`previous`); one evaluator call runs several frames: in 3.11 its outermost one has
//!   `is_entry`, in 3.12 a frame owned by the C stack (`owner == 3`) sits below them.
//! - 3.13: `PyThreadState.current_frame`, frames as in 3.12 but `f_executable` (a code
//!   object or None) and `instr_ptr`.
//!   The line comes from `PyCode_Addr2Line(code, byte offset of the instruction)`.

/// `-1`: the field does not exist in that version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// `major * 100 + minor`.
    pub version: u32,
    pub ob_type: isize,
    /// The frame pointer (3.9/3.10, 3.13) or the `_PyCFrame` pointer (3.11/3.12).
    pub tstate_frame: isize,
    /// `_PyCFrame.current_frame` (3.11/3.12).
    pub cframe_current: isize,
    pub frame_code: isize,
    pub frame_previous: isize,
    /// `f_lasti` (3.9/3.10, an int) or `prev_instr`/`instr_ptr` (a pointer).
    pub frame_instr: isize,
    /// `owner` (a char, 3.11+).
    pub frame_owner: isize,
    /// `is_entry` (a bool, 3.11 only).
    pub frame_is_entry: isize,
    pub code_filename: isize,
    /// `co_qualname` (3.11+) or `co_name`.
    pub code_name: isize,
    /// `co_code_adaptive`: the first code unit (3.11+).
    pub code_adaptive: isize,
    /// `_co_firsttraceable`, an int (3.11+).
    pub code_firsttraceable: isize,
    /// `co_firstlineno`, an int.
    pub code_firstlineno: isize,
    pub unicode_length: isize,
    /// The `state` bit field: kind in bits 2..5, compact bit 5, ascii bit 6 (3.9 to 3.13).
    pub unicode_state: isize,
    /// `sizeof(PyASCIIObject)`: where a compact ASCII string's bytes start.
    pub unicode_ascii_data: isize,
    /// `sizeof(PyCompactUnicodeObject)`: where other compact strings' code points start.
    pub unicode_compact_data: isize,
}

impl Layout {
    /// 3.11 and later: interpreter frames, several per evaluator call.
    pub fn interpreter_frames(&self) -> bool {
        self.version >= 311
    }
}

/// `_PyInterpreterFrame.owner` values (pycore_frame.h, 3.11+).
pub const OWNED_BY_GENERATOR: u8 = 1;
pub const OWNED_BY_CSTACK: u8 = 3;

macro_rules! layouts {
    ($($v:literal: [$($n:literal),* $(,)?]),* $(,)?) => {
        /// Field order as in `Layout` (and as `py_offsets.c` prints them).
        pub const LAYOUTS: &[Layout] = &[$(layouts!(@one $v, [$($n),*])),*];
    };
    (@one $v:literal, [$ob:literal, $tf:literal, $cc:literal, $fc:literal, $fp:literal,
      $fi:literal, $fo:literal, $fe:literal, $cf:literal, $cn:literal, $ca:literal,
      $ct:literal, $cl:literal, $ul:literal, $us:literal, $ua:literal, $uc:literal]) => {
        Layout {
            version: $v,
            ob_type: $ob,
            tstate_frame: $tf,
            cframe_current: $cc,
            frame_code: $fc,
            frame_previous: $fp,
            frame_instr: $fi,
            frame_owner: $fo,
            frame_is_entry: $fe,
            code_filename: $cf,
            code_name: $cn,
            code_adaptive: $ca,
            code_firsttraceable: $ct,
            code_firstlineno: $cl,
            unicode_length: $ul,
            unicode_state: $us,
            unicode_ascii_data: $ua,
            unicode_compact_data: $uc,
        }
    };
}

// From tests/python/py_offsets.c, run against CPython 3.9.18, 3.10.13, 3.11.7, 3.12.1 and
// 3.13.0 (the struct layouts do not change within a minor version).
layouts! {
    309: [8, 24, -1, 32, 24, 104, -1, -1, 104, 112, -1, -1, 40, 16, 32, 48, 72],
    310: [8, 24, -1, 32, 24, 96, -1, -1, 104, 112, -1, -1, 40, 16, 32, 48, 72],
    311: [8, 56, 8, 32, 48, 56, 69, 68, 112, 128, 184, 168, 72, 16, 32, 48, 72],
    312: [8, 56, 0, 0, 8, 56, 70, -1, 112, 128, 192, 176, 68, 16, 32, 40, 56],
    313: [8, 72, -1, 0, 8, 56, 70, -1, 112, 128, 200, 184, 68, 16, 32, 40, 56],
}

/// The layout of CPython `major.minor`, if this shim knows it.
pub fn for_version(version: u32) -> Option<&'static Layout> {
    LAYOUTS.iter().find(|l| l.version == version)
}

/// The layout of a version this shim knows, at compile time (the stack walk is compiled
/// once per version, its offsets constants: `walker`). A version not in the table does
/// not compile.
pub const fn layout_of(version: u32) -> Layout {
    let mut i = 0;
    while i < LAYOUTS.len() {
        if LAYOUTS[i].version == version {
            return LAYOUTS[i];
        }
        i += 1;
    }
    panic!("no layout for this Python version")
}

/// The table as `py_offsets.c` prints it for `version` (`name value` lines), for the
/// test that compares it with the headers.
pub fn table_text(version: u32) -> Option<String> {
    let l = for_version(version)?;
    let rows: [(&str, isize); 18] = [
        ("version", l.version as isize),
        ("ob_type", l.ob_type),
        ("tstate_frame", l.tstate_frame),
        ("cframe_current", l.cframe_current),
        ("frame_code", l.frame_code),
        ("frame_previous", l.frame_previous),
        ("frame_instr", l.frame_instr),
        ("frame_owner", l.frame_owner),
        ("frame_is_entry", l.frame_is_entry),
        ("code_filename", l.code_filename),
        ("code_name", l.code_name),
        ("code_adaptive", l.code_adaptive),
        ("code_firsttraceable", l.code_firsttraceable),
        ("code_firstlineno", l.code_firstlineno),
        ("unicode_length", l.unicode_length),
        ("unicode_state", l.unicode_state),
        ("unicode_ascii_data", l.unicode_ascii_data),
        ("unicode_compact_data", l.unicode_compact_data),
    ];
    Some(rows.iter().map(|(n, v)| format!("{n} {v}\n")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_layout_prints_all_fields_in_order() {
        let t = table_text(311).unwrap();
        assert!(t.starts_with("version 311\nob_type 8\ntstate_frame 56\ncframe_current 8\n"));
        assert!(t.ends_with("unicode_ascii_data 48\nunicode_compact_data 72\n"));
        assert_eq!(t.lines().count(), 18);
        assert!(for_version(308).is_none());
        assert!(for_version(314).is_none());
    }
}
