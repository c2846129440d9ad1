//! The terminal `browse` draws on, a frame at a time: each frame reaches it in one write,
//! bracketed as a synchronized update (DEC mode 2026; terminals that lack it ignore it), so
//! that no terminal, and no SSH link, shows half a screen. Drawn straight to stdout, a
//! frame of several KiB went out in 1 KiB pieces (stdout's line buffer), and a test in
//! tmux caught a screen half drawn.

use std::cell::RefCell;
use std::io::{self, Stdout, Write};
use std::rc::Rc;

use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::queue;
use ratatui::crossterm::terminal::{BeginSynchronizedUpdate, EndSynchronizedUpdate};
use ratatui::{Terminal, TerminalOptions};

use super::app::App;

/// The frame being written, and where it goes.
struct Pending<W: Write> {
    frame: Vec<u8>,
    out: W,
}

/// The writer under ratatui's backend: it keeps what is written (ratatui flushes at the
/// end of each draw, before the update's end is queued) until the screen sends it.
/// Whatever is left when it is dropped (the cursor shown again) goes out then.
struct Frames<W: Write>(Rc<RefCell<Pending<W>>>);

impl<W: Write> Write for Frames<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.borrow_mut().frame.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    /// Nothing: the frame goes out whole, when the screen sends it.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<W: Write> Drop for Frames<W> {
    fn drop(&mut self) {
        let _ = send(&self.0);
    }
}

/// Writes the frame kept so far in one write.
fn send<W: Write>(pending: &RefCell<Pending<W>>) -> io::Result<()> {
    let mut p = pending.borrow_mut();
    let Pending { frame, out } = &mut *p;
    if frame.is_empty() {
        return Ok(());
    }
    out.write_all(frame)?;
    frame.clear();
    out.flush()
}

/// A terminal whose frames go out whole.
pub struct Screen<W: Write> {
    terminal: Terminal<CrosstermBackend<Frames<W>>>,
    pending: Rc<RefCell<Pending<W>>>,
}

impl<W: Write> Screen<W> {
    /// A screen writing to `out`, of the terminal's size (`options`' viewport).
    pub fn new(out: W, options: TerminalOptions) -> io::Result<Screen<W>> {
        let pending = Rc::new(RefCell::new(Pending {
            frame: Vec::with_capacity(64 << 10),
            out,
        }));
        let backend = CrosstermBackend::new(Frames(pending.clone()));
        Ok(Screen {
            terminal: Terminal::with_options(backend, options)?,
            pending,
        })
    }

    /// Draws the app as one synchronized update, in one write.
    pub fn draw(&mut self, app: &mut App) -> io::Result<()> {
        queue!(self.terminal.backend_mut(), BeginSynchronizedUpdate)?;
        self.terminal.draw(|f| super::draw::draw(f, app))?;
        queue!(self.terminal.backend_mut(), EndSynchronizedUpdate)?;
        send(&self.pending)
    }
}

/// Raw mode, the alternate screen and the terminal given back on a panic (ratatui's
/// `try_init`), drawing on stdout a frame at a time.
pub fn open() -> io::Result<Screen<Stdout>> {
    drop(ratatui::try_init()?);
    Screen::new(io::stdout(), TerminalOptions::default())
}
