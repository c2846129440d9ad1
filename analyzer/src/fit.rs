//! Text that fits the terminal: when a report is written to a terminal, a line wider than
//! the terminal wraps at a space, its continuation indented under it, rather than running
//! off the edge (a name that has no space in it is cut where the line ends and goes on
//! below). Numbers are never cut: tables that would not fit lay themselves out narrower
//! (`width` tells them). Files and pipes get the lines as they are.

use std::io::{self, IsTerminal, Write};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The terminal's width while a report is written to one; 0 otherwise.
static WIDTH: AtomicUsize = AtomicUsize::new(0);

/// Narrower than this, wrapping would make things worse: lines are left as they are.
const MIN_WIDTH: usize = 40;

/// The terminal's width in columns when the report goes to a terminal (`None`: a file or
/// a pipe, or a width unknown).
pub fn width() -> Option<usize> {
    match WIDTH.load(Ordering::Relaxed) {
        0 => None,
        w => Some(w),
    }
}

/// The width of the terminal stdout is, if it is one: `COLUMNS` when set, else the
/// terminal's own.
pub fn terminal_width() -> Option<usize> {
    if !io::stdout().is_terminal() {
        return None;
    }
    if let Some(w) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse().ok())
    {
        return (w >= MIN_WIDTH).then_some(w);
    }
    // SAFETY: TIOCGWINSZ fills a winsize; the fd is stdout's.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    let w = usize::from(size.ws_col);
    (ok && w >= MIN_WIDTH).then_some(w)
}

/// Writes through to `inner`, each line wrapped to `width` columns.
pub struct Fit<W: Write> {
    inner: W,
    width: usize,
    line: Vec<u8>,
}

impl<W: Write> Fit<W> {
    /// Wraps at `width` (and tells the reports the width, `width()`), until dropped.
    pub fn new(inner: W, width: usize) -> Fit<W> {
        WIDTH.store(width, Ordering::Relaxed);
        Fit {
            inner,
            width,
            line: Vec::new(),
        }
    }

    /// Writes the line gathered so far, wrapped; `newline`: end it with one.
    fn write_line(&mut self, newline: bool) -> io::Result<()> {
        let text = String::from_utf8_lossy(&self.line).into_owned();
        self.line.clear();
        let pieces = wrap(&text, self.width);
        let last = pieces.len().saturating_sub(1);
        for (i, piece) in pieces.iter().enumerate() {
            self.inner.write_all(piece.as_bytes())?;
            if newline || i < last {
                self.inner.write_all(b"\n")?;
            }
        }
        Ok(())
    }
}

impl<W: Write> Drop for Fit<W> {
    fn drop(&mut self) {
        WIDTH.store(0, Ordering::Relaxed);
    }
}

impl<W: Write> Write for Fit<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        for &b in buf {
            if b == b'\n' {
                self.write_line(true)?;
            } else {
                self.line.push(b);
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.line.is_empty() {
            self.write_line(false)?;
        }
        self.inner.flush()
    }
}

/// Columns `s` takes on a terminal: its characters, less terminal escape sequences.
fn columns(s: &str) -> usize {
    let mut n = 0;
    let mut escape = false;
    for c in s.chars() {
        match (escape, c) {
            (false, '\x1b') => escape = true,
            (true, c) if c.is_ascii_alphabetic() => escape = false,
            (true, _) => {}
            (false, _) => n += 1,
        }
    }
    n
}

/// `line` in pieces of at most `width` columns: broken at the last space that fits, the
/// continuations indented 4 more than the line (at most half the width).
pub fn wrap(line: &str, width: usize) -> Vec<String> {
    if columns(line) <= width {
        return vec![line.to_string()];
    }
    let indent = line.len() - line.trim_start_matches(' ').len();
    let hang = " ".repeat((indent + 4).min(width / 2));
    let mut pieces = Vec::new();
    let mut rest = line.to_string();
    let mut first = true;
    loop {
        let prefix = if first { "" } else { hang.as_str() };
        let room = width - columns(prefix);
        if columns(&rest) <= room {
            pieces.push(format!("{prefix}{rest}"));
            break;
        }
        // The byte where `room` columns end, and the last space before it.
        let mut cols = 0;
        let mut cut = rest.len();
        let mut escape = false;
        for (i, c) in rest.char_indices() {
            match (escape, c) {
                (false, '\x1b') => escape = true,
                (true, c) if c.is_ascii_alphabetic() => escape = false,
                (true, _) => {}
                (false, _) => {
                    if cols == room {
                        cut = i;
                        break;
                    }
                    cols += 1;
                }
            }
        }
        let start = if first { indent } else { 0 };
        let at = match rest[..cut].rfind(' ') {
            Some(space) if space > start => space,
            _ => cut,
        };
        pieces.push(format!("{prefix}{}", rest[..at].trim_end()));
        rest = rest[at..].trim_start().to_string();
        first = false;
        if rest.is_empty() {
            break;
        }
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_line_wraps_at_spaces_under_its_indent() {
        let line =
            "  #1 20.0 MiB (20971520 B) in 20 allocations from keep_for_logging at train.c:77";
        assert_eq!(
            wrap(line, 40),
            [
                "  #1 20.0 MiB (20971520 B) in 20",
                "      allocations from keep_for_logging",
                "      at train.c:77"
            ]
        );
        assert_eq!(wrap("short", 40), ["short"]);
    }

    #[test]
    fn a_word_longer_than_the_line_is_cut_and_goes_on_below() {
        let pieces = wrap(&format!("x {}", "a".repeat(50)), 40);
        let a = |n| "a".repeat(n);
        assert_eq!(
            pieces,
            [
                "x".to_string(),
                format!("    {}", a(36)),
                format!("    {}", a(14))
            ]
        );
    }

    #[test]
    fn escape_sequences_take_no_columns() {
        let red = "\x1b[31mWARNING\x1b[0m";
        assert_eq!(columns(red), 7);
        assert_eq!(wrap(red, 40), [red]);
    }
}
