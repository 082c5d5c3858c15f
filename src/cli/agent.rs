//! `metalform agent [run|enroll|status|unit]` (docs/agent.md): the node agent that runs on every
//! deployed host (crate::agent::node). The same code is the `metalform-agent` binary that
//! cloud-init installs on hosts (src/bin/metalform-agent.rs): one small executable, because the
//! linker keeps only what the agent reaches — none of the store, planner, MAAS client or
//! simulator.
//!
//! The agent runs on a single-threaded runtime with its own logging (JSON lines on stderr by
//! default: journald keeps them structured).

use std::path::PathBuf;
use std::process::ExitCode;

use crate::agent::node::{self, AgentStop, EXIT_NEEDS_OPERATOR, Options, Stopped};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<AgentCommand>,
    #[command(flatten)]
    pub paths: PathArgs,
}

/// Where the agent's files are.
#[derive(Debug, Clone, clap::Args)]
pub struct PathArgs {
    /// What the tasks may touch (optional; docs/agent.md "Configuration").
    #[arg(
        long,
        global = true,
        default_value = "/etc/metalform/agent.toml",
        value_name = "FILE"
    )]
    pub config: PathBuf,
    /// Where to enroll and who this host is (cloud-init writes it).
    #[arg(
        long,
        global = true,
        default_value = "/etc/metalform/agent.env",
        value_name = "FILE"
    )]
    pub env_file: PathBuf,
    /// The agent's credentials and task journals (0700).
    #[arg(
        long,
        global = true,
        default_value = "/var/lib/metalform-agent",
        value_name = "DIR"
    )]
    pub state_dir: PathBuf,
    /// The CA bundle to pin (default: /etc/metalform/ca.pem when it exists, else the system
    /// roots).
    #[arg(long, global = true, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Log lines as `json` (default) or `text`.
    #[arg(long, global = true, default_value = "json", value_parser = ["json", "text"])]
    pub log_format: String,
}

#[derive(Debug, clap::Subcommand)]
pub enum AgentCommand {
    /// Enroll if needed, then take and run tasks until stopped (what the systemd unit runs).
    Run(RunArgs),
    /// Enroll again with a new single-use token: the operator's step after the control plane
    /// revoked this agent's token (the agent never re-enrolls on its own).
    Enroll(EnrollArgs),
    /// Show the enrollment and any result not yet delivered (never the token).
    Status,
    /// Print the systemd unit cloud-init installs.
    Unit,
}

#[derive(Debug, Default, clap::Args)]
pub struct RunArgs {
    /// Log each command a task would run instead of running it (reads still happen).
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, clap::Args)]
pub struct EnrollArgs {
    /// The single-use enrollment token (from a fresh cloud-init payload).
    #[arg(
        long,
        env = "METALFORM_ENROLL_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: String,
    /// The enrollment URL (default: agent.env's METALFORM_ENROLL_URL).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Forget the credentials the agent has.
    #[arg(long)]
    pub force: bool,
}

/// `metalform-agent`: the agent alone.
#[derive(Debug, clap::Parser)]
#[command(
    name = "metalform-agent",
    version,
    about = "metalform node agent (docs/agent.md)"
)]
struct Standalone {
    #[command(flatten)]
    args: Args,
    /// Log filter (e.g. `info`, `metalform=debug`).
    #[arg(long, global = true, env = "METALFORM_LOG", default_value = "info")]
    log: String,
}

/// The `metalform-agent` binary's main.
pub fn standalone_main() -> ExitCode {
    let cli = match <Standalone as clap::Parser>::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let code = match err.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => 0,
                _ => super::ErrorClass::Argument.exit_code(),
            };
            let _ = err.print();
            return ExitCode::from(code);
        }
    };
    main(cli.args, &cli.log)
}

/// Run an agent command; `log` is the log filter.
pub fn main(args: Args, log: &str) -> ExitCode {
    // `warn` is the other commands' default; the agent's log is its record.
    let filter = if log == "warn" { "info" } else { log };
    init_logging(filter, &args.paths.log_format);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(1);
        }
    };
    let paths = args.paths;
    let options = |dry_run: bool| Options {
        config: paths.config.clone(),
        env_file: paths.env_file.clone(),
        state_dir: paths.state_dir.clone(),
        ca_file: paths.ca_file.clone(),
        dry_run,
    };
    let outcome = match args
        .command
        .unwrap_or(AgentCommand::Run(RunArgs::default()))
    {
        AgentCommand::Run(run) => {
            runtime
                .block_on(node::run(options(run.dry_run)))
                .map(|stopped| match stopped {
                    Stopped::Signalled => tracing::info!("metalform agent stopped"),
                    Stopped::Uninstalled => tracing::info!("metalform agent uninstalled itself"),
                })
        }
        AgentCommand::Enroll(enroll) => runtime.block_on(async {
            let options = options(false);
            if !enroll.force
                && let Ok(status) = node::status(&options)
                && status["enrolled"] == true
            {
                return Err(AgentStop::NeedsOperator {
                    message: format!(
                        "already enrolled as node {}",
                        status["node_id"].as_str().unwrap_or("?")
                    ),
                    hint: "--force forgets those credentials and enrolls with the new token".into(),
                });
            }
            node::reenroll(options, enroll.url, enroll.token)
                .await
                .map(|credentials| println!("enrolled as node {}", credentials.node_id))
        }),
        AgentCommand::Status => node::status(&options(false)).map(|status| {
            println!(
                "{}",
                serde_json::to_string_pretty(&status).unwrap_or_default()
            )
        }),
        AgentCommand::Unit => {
            print!("{}", crate::cloudinit::AGENT_UNIT);
            Ok(())
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(AgentStop::NeedsOperator { message, hint }) => {
            tracing::error!(hint = %hint, "{message}");
            eprintln!("error: {message}\nhint: {hint}");
            ExitCode::from(EXIT_NEEDS_OPERATOR)
        }
        Err(AgentStop::Failed(message)) => {
            tracing::error!("{message}");
            eprintln!("error: {message}");
            ExitCode::from(1)
        }
    }
}

fn init_logging(filter: &str, format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if format == "text" {
        builder.with_ansi(false).try_init()
    } else {
        builder.json().try_init()
    };
}
