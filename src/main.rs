//! metalform binary: parse the command line, run, map the error class to an exit code (DESIGN.md §3).
fn main() -> std::process::ExitCode {
    metalform::cli::main()
}
