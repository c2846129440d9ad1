//! Running a program with a time limit: started in a process group of its own, its stdout read
//! line by line as it comes (so a test can wait for a line such as "ready" before it signals),
//! its stderr collected in the background. A hang is killed with its whole process group and
//! fails the test; dropping a [`Running`] that was not waited for kills the group too, so a
//! failing test leaves nothing running.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A started program; see the module comment.
pub struct Running {
    child: Child,
    /// Open until [`Running::finish`] when started with [`Running::start_holding_stdin`].
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    stdout: String,
    stderr: Option<JoinHandle<Vec<u8>>>,
    reaped: bool,
}

/// How a program ended and all it printed.
pub struct Ended {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Ended {
    /// The exit code; `None` when a signal ended the program.
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
}

impl Running {
    /// Starts `cmd` with stdin from `/dev/null`.
    pub fn start(cmd: Command) -> Running {
        Running::spawn(cmd, Stdio::null())
    }

    /// Starts `cmd` with stdin a pipe that stays open, with nothing written to it, until
    /// [`Running::finish`] closes it: a program blocked reading stdin waits for a signal.
    pub fn start_holding_stdin(cmd: Command) -> Running {
        Running::spawn(cmd, Stdio::piped())
    }

    fn spawn(mut cmd: Command, stdin: Stdio) -> Running {
        cmd.process_group(0)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("start {cmd:?}: {e}"));
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().expect("piped stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut err = child.stderr.take().expect("piped stderr");
        let stderr = Some(std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = err.read_to_end(&mut bytes);
            bytes
        }));
        Running {
            stdin: child.stdin.take(),
            child,
            lines,
            stdout: String::new(),
            stderr,
            reaped: false,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Reads stdout until a line equal to `want`; panics if the program ends or `limit` passes
    /// first.
    pub fn wait_for_line(&mut self, want: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.stdout.push_str(&line);
                    self.stdout.push('\n');
                    if line == want {
                        return;
                    }
                }
                Err(e) => panic!(
                    "waiting for the line {want:?} ({e:?}); stdout so far:\n{}",
                    self.stdout
                ),
            }
        }
    }

    /// SIGKILL to the program itself (not its group).
    pub fn kill(&mut self) {
        self.child.kill().expect("SIGKILL the program");
    }

    /// Closes stdin, waits for the end (killing the group and panicking after `limit`: a
    /// hang), then collects all of stdout and stderr.
    pub fn finish(&mut self, limit: Duration) -> Ended {
        drop(self.stdin.take());
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait for the program") {
                break status;
            }
            if Instant::now() > deadline {
                kill_group(self.pid());
                let _ = self.child.wait();
                self.reaped = true;
                panic!(
                    "still running after {limit:?} (a hang): killed; stdout so far:\n{}",
                    self.stdout
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        self.reaped = true;
        // The pipes close when the program and every child that inherited them are gone.
        while let Ok(line) = self.lines.recv_timeout(limit) {
            self.stdout.push_str(&line);
            self.stdout.push('\n');
        }
        let stderr = self
            .stderr
            .take()
            .map(|h| h.join().expect("stderr reader"))
            .unwrap_or_default();
        Ended {
            status,
            stdout: std::mem::take(&mut self.stdout),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.reaped {
            kill_group(self.pid());
            let _ = self.child.wait();
        }
    }
}

/// Runs `cmd` (stdin from `/dev/null`) to its end within `limit`.
pub fn run_within(cmd: Command, limit: Duration) -> Ended {
    Running::start(cmd).finish(limit)
}

/// SIGKILL to every process of the group `pgid` (a program started by [`Running::start`] and
/// all it forked).
pub fn kill_group(pgid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stderr(Stdio::null())
        .status();
}

/// `kill -<name> <pid>`, as a scheduler or a user at a terminal sends it.
pub fn send_signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} {pid} failed");
}
