#!/usr/bin/env python3
"""launch_tty.py: Ctrl-C typed at a terminal while `gpumemprof run` runs a program, stdlib only.

The real situation: a user starts `gpumemprof run -- python train.py` in a terminal and presses
Ctrl-C. The terminal sends SIGINT to its whole foreground process group, the launcher and the
program alike, so the launcher must not pass it on a second time (a program would take that as
a second Ctrl-C).

    launch_tty.py GPUMEMPROF LAUNCH_CHILD TRACE

runs "GPUMEMPROF run -o TRACE -- python3 LAUNCH_CHILD count" on a new pseudo-terminal (a session
of its own, the terminal its controlling terminal, the launcher's group in the foreground) and
waits for the program's "ready". Then, with no timing assumption:
  1. SIGSTOP to the launcher, and wait until it is stopped;
  2. type Ctrl-C: the program prints "SIGINT 1"; the launcher's SIGINT stays pending;
  3. SIGTERM to the launcher alone, then SIGCONT: the launcher takes its pending signals lowest
     number first, so a SIGINT copy (if it sent one) would reach the program before the SIGTERM,
     long after the program consumed the terminal's SIGINT (no merging of the two);
  4. the program prints "SIGTERM after N SIGINT" and exits 0: N is 1 exactly when the launcher
     did not pass the terminal's SIGINT on.

Prints the terminal's transcript (lines without carriage returns), then "launcher_status=S" (the
launcher's exit status, or -N for signal N). Every wait is bounded: an alarm after 60 s kills the
launcher and exits 3.
"""
import os
import pty
import signal
import sys
import termios


def main():
    gpumemprof, launch_child, trace = sys.argv[1:4]
    pid, master = pty.fork()
    if pid == 0:
        os.execv(gpumemprof, [gpumemprof, "run", "-o", trace, "--",
                              sys.executable, launch_child, "count"])

    def give_up(signum, frame):
        os.kill(pid, signal.SIGKILL)
        sys.stdout.write("launch_tty: timed out\n" + transcript.decode(errors="replace"))
        sys.exit(3)

    signal.signal(signal.SIGALRM, give_up)
    signal.alarm(60)
    transcript = b""
    # No echo: the transcript holds only what the processes wrote (Ctrl-C would show as ^C);
    # NOFLSH: Ctrl-C does not discard output the processes wrote and we have not read yet.
    attrs = termios.tcgetattr(master)
    attrs[3] = (attrs[3] & ~termios.ECHO) | termios.NOFLSH
    termios.tcsetattr(master, termios.TCSANOW, attrs)

    def read_until(text):
        nonlocal transcript
        while text.encode() not in transcript:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: every process holding the terminal is gone
                chunk = b""
            if not chunk:
                raise SystemExit(f"launch_tty: the terminal closed before {text!r}\n"
                                 + transcript.decode(errors="replace"))
            transcript += chunk

    read_until("ready\r\n")
    os.kill(pid, signal.SIGSTOP)
    _, status = os.waitpid(pid, os.WUNTRACED)
    if not os.WIFSTOPPED(status):
        raise SystemExit(f"launch_tty: the launcher ended early ({status})")
    os.write(master, b"\x03")  # Ctrl-C: the terminal signals its foreground process group
    read_until("SIGINT 1\r\n")
    os.kill(pid, signal.SIGTERM)  # to the launcher alone
    os.kill(pid, signal.SIGCONT)
    read_until("SIGTERM after")
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        transcript += chunk
    _, status = os.waitpid(pid, 0)
    signal.alarm(0)
    code = os.waitstatus_to_exitcode(status)
    sys.stdout.write(transcript.decode(errors="replace").replace("\r", ""))
    print(f"launcher_status={code}")


if __name__ == "__main__":
    main()
