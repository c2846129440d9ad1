//! A program in a real terminal: tmux runs it in a detached session of a given size, keys
//! go in with `send-keys` and the screen comes out with `capture-pane`, as a user at a
//! terminal would see it (`browse`'s end-to-end tests). Each session has its own socket, so
//! tests in parallel never meet.

use std::cell::RefCell;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// How long a screen may take to show what a test waits for (a debug build reading a real
/// torch trace): generous, never a timing under test.
const PATIENCE: Duration = Duration::from_secs(60);

pub struct Tmux {
    socket: String,
    /// The screen before the last keys (or resize) that no `wait_for` has seen change yet.
    before: RefCell<Option<String>>,
}

fn tmux(socket: &str, args: &[&str]) -> Output {
    Command::new("tmux")
        .args(["-L", socket])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run tmux (install it: apt-get install tmux): {e}"))
}

impl Tmux {
    /// Runs `command` (a shell line) in `dir` in a `width`x`height` terminal; when it ends,
    /// the pane shows `EXIT=<status>` and stays.
    pub fn start(name: &str, dir: &Path, command: &str, width: u16, height: u16) -> Tmux {
        let socket = format!("gpumemprof-{name}-{}", std::process::id());
        let t = Tmux {
            socket,
            before: RefCell::new(None),
        };
        let line = format!("{command}; echo EXIT=$?; sleep 600");
        let out = tmux(
            &t.socket,
            &[
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-x",
                &width.to_string(),
                "-y",
                &height.to_string(),
                "-c",
                &dir.display().to_string(),
                "-e",
                "TERM=xterm-256color",
                &line,
            ],
        );
        assert!(
            out.status.success(),
            "tmux new-session: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        t
    }

    /// The screen now, each line's trailing blanks cut.
    pub fn screen(&self) -> String {
        let out = tmux(&self.socket, &["capture-pane", "-p"]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::trim_end)
            .collect::<Vec<_>>()
            .join("\n")
            .trim_end()
            .to_string()
    }

    /// Waits until the screen shows `text`, differs from the screen before the last keys
    /// (a program slow to read them still shows the old screen, which may hold `text` too)
    /// and has stopped changing (the same in two looks 100 ms apart: a frame may reach the
    /// terminal in more than one read), and returns it; panics with the screen after
    /// `PATIENCE`.
    pub fn wait_for(&self, text: &str) -> String {
        let start = Instant::now();
        let mut last = String::new();
        loop {
            let s = self.screen();
            let changed = self.before.borrow().as_ref() != Some(&s);
            if s.contains(text) && s == last && changed {
                self.before.replace(None);
                return s;
            }
            if start.elapsed() > PATIENCE {
                panic!("the terminal never showed {text:?} for long; it shows:\n{s}");
            }
            last = s;
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends tmux key names (`Tab`, `Enter`, `q`, `Escape`), one at a time; the next
    /// `wait_for` waits for a screen that differs from the one before them.
    pub fn keys(&self, keys: &[&str]) {
        self.expect_change();
        self.send(keys);
    }

    /// The next `wait_for` waits for a screen other than this one.
    fn expect_change(&self) {
        self.before.replace(Some(self.screen()));
    }

    /// `keys` that may leave the screen as it was (`r`: read the trace again, to the
    /// same state): the next `wait_for` does not wait for a change.
    pub fn keys_keeping_screen(&self, keys: &[&str]) {
        self.before.replace(None);
        self.send(keys);
    }

    fn send(&self, keys: &[&str]) {
        for k in keys {
            let out = tmux(&self.socket, &["send-keys", k]);
            assert!(out.status.success(), "send-keys {k}");
            // The next key after the program read this one: an Escape followed at once by
            // a key reads as Alt+key.
            std::thread::sleep(Duration::from_millis(150));
        }
    }

    /// Presses `q` and waits for the program to exit 0 (the shell prints `EXIT=<code>`).
    pub fn quit(&self) {
        self.keys(&["q"]);
        self.wait_for("EXIT=0");
    }

    /// Resizes the terminal; the next `wait_for` waits for a screen that differs from the
    /// one before.
    pub fn resize(&self, width: u16, height: u16) {
        self.expect_change();
        let out = tmux(
            &self.socket,
            &[
                "resize-window",
                "-x",
                &width.to_string(),
                "-y",
                &height.to_string(),
            ],
        );
        assert!(
            out.status.success(),
            "resize-window: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = tmux(&self.socket, &["kill-server"]);
    }
}
