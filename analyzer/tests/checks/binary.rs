//! Running the analyzer's own binary, shared by its integration tests (included with
//! `#[path = "checks/binary.rs"] mod binary;`).

// Each test file uses the part it needs.
#![allow(dead_code)]

use std::process::{Command, Output};

/// `gpumemprof ARGS`, with no colour setting inherited from the caller's shell.
pub fn gpumemprof(args: &[&str]) -> Output {
    gpumemprof_env(args, &[])
}

/// `gpumemprof ARGS` with `env` added to an environment that has no colour setting of the
/// caller's shell.
pub fn gpumemprof_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpumemprof"));
    cmd.args(args);
    for var in ["NO_COLOR", "CLICOLOR_FORCE", "CLICOLOR"] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run gpumemprof")
}

/// The lines the command wrote to stderr.
pub fn stderr_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(str::to_owned)
        .collect()
}
