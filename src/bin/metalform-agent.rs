//! `metalform-agent`: the node agent alone (docs/agent.md), the executable cloud-init installs
//! on deployed hosts. `metalform agent` runs the same code.
fn main() -> std::process::ExitCode {
    metalform::cli::agent::standalone_main()
}
