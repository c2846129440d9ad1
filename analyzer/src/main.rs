//! The `gpumemprof` command: everything lives in the library's `cli` module.

fn main() -> std::process::ExitCode {
    gpumemprof_analyzer::cli::run()
}
