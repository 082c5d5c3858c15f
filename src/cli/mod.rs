//! Command-line surface (DESIGN.md §3): clap definitions and dispatch.
//!
//! Each subcommand lives in its own file with an `Args` struct and a `run` function returning
//! `Result<Exit, CliError>`; this file only wires them together and maps the outcome to the
//! process exit code.

pub mod error;
pub mod output;

pub mod agent;
mod apply;
mod completions;
mod daemon;
mod decommissions;
mod demo;
mod demo_redfish;
mod diff;
mod drift;
mod fleet_dir;
mod import_csv;
mod import_maas;
mod jobs;
mod man;
mod observe;
mod onboardings;
mod plan;
mod provision;
mod render;
mod show;
pub mod sim;
mod state;
pub mod status;
mod validate;
mod world;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use error::{CliError, ErrorClass, Exit};

/// Declarative reconciler for bare-metal GPU fleets.
#[derive(Debug, Parser)]
#[command(name = "metalform", version, about, max_term_width = 100)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every command accepts.
#[derive(Debug, Clone, clap::Args)]
pub struct GlobalArgs {
    /// State store: sqlite://PATH or postgres://… [default: a SQLite file per fleet under
    /// $XDG_STATE_HOME/metalform (~/.local/state/metalform)]. The daemon reads its store from
    /// its configuration file and ignores METALFORM_STATE.
    #[arg(long, global = true, env = "METALFORM_STATE", value_name = "URL")]
    pub state: Option<String>,
    /// `state` came from METALFORM_STATE, not from `--state`.
    #[arg(skip)]
    pub state_from_env: bool,
    /// Log filter for stderr (e.g. `info`, `metalform=debug`).
    #[arg(
        long,
        global = true,
        env = "METALFORM_LOG",
        value_name = "FILTER",
        default_value = "warn"
    )]
    pub log: String,
}

/// The arguments of a command made of subcommands (`jobs`, `drift`, …).
#[derive(Debug, clap::Args)]
pub struct Subcommands<C: Subcommand> {
    #[command(subcommand)]
    pub command: C,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print a shell completion script (e.g. `metalform completions bash >
    /// ~/.local/share/bash-completion/completions/metalform`).
    Completions(completions::Args),
    /// Write the man pages of every command into a directory.
    Man(man::Args),
    /// Show the node inventory, or one node's lifecycle detail.
    Status(status::Args),
    /// Run the embedded MAAS API 2.0 simulator (docs/simulator.md).
    Sim(sim::Args),
    /// Check a fleet's manifests and report every problem at FILE:LINE:COL.
    Validate(validate::Args),
    /// Show the desired-state change between two revisions of a fleet (for PR review).
    Diff(diff::Args),
    /// Convert a header-driven CSV of nodes into a NodeGroup manifest on stdout.
    ImportCsv(import_csv::Args),
    /// Read a site's MAAS and write a NodeGroup manifest of its machines (Deployed ones are
    /// then adopted, not redeployed).
    ImportMaas(import_maas::Args),
    /// Apply the fleet's plan: onboard nodes as durable, resumable stage journals.
    Apply(apply::Args),
    /// Jobs of every kind (onboarding, decommission): list, show, and the operator recovery
    /// actions (docs/architecture.md).
    Jobs(jobs::Args),
    /// Onboarding jobs: list, show, and the operator recovery actions (`jobs --kind onboarding`).
    Onboardings(onboardings::Args),
    /// Decommission jobs (soft reset, reimage, full, storage cleanup, retire): list, show,
    /// retry, cancel (docs/decommission.md).
    Decommissions(decommissions::Args),
    /// The whole slice on embedded defaults: simulated MAAS, validate, plan, apply, status.
    Demo(demo::Args),
    /// Print what metalform would send: `render cloud-init NODE` (docs/cloud-init.md).
    Render(render::Args),
    /// Observe the sites' MAAS, the inventory and the jobs; print the snapshot as JSON.
    Observe(observe::Args),
    /// Plan what apply would do, and why (docs/plan.md).
    Plan(plan::Args),
    /// Print a plan file written by `plan --out`, as `plan` printed it.
    Show(show::Args),
    /// MAAS drift: list, status, resolve, run a pass now (docs/drift.md).
    Drift(drift::Args),
    /// Keep the fleet converged from git; serve the admin and agent API (docs/daemon.md).
    Daemon(daemon::Args),
    /// The node agent that runs on deployed hosts (docs/agent.md).
    Agent(agent::Args),
    /// A provisioning verb on one node (inspect, clean, provide, rescue, unrescue, abort),
    /// carried out on MAAS and audited (docs/recovery.md).
    Provision(provision::Args),
}

/// Parse, run, and turn the outcome into an exit code. Errors go to stderr as
/// `error: …` followed by `hint: …` lines.
pub fn main() -> ExitCode {
    // `plan --detailed-exitcode` keeps 2 for "changes": a usage error exits 1 there.
    let detailed = std::env::args_os().any(|a| a == "--detailed-exitcode");
    let usage_code = |class: ErrorClass| match class {
        ErrorClass::Argument if detailed => 1,
        class => class.exit_code(),
    };
    let cli = match parse() {
        Ok(cli) => cli,
        Err(err) => {
            let code = match err.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => 0,
                _ => usage_code(ErrorClass::Argument),
            };
            let _ = err.print();
            return ExitCode::from(code);
        }
    };
    // The node agent has its own runtime (one thread) and logging.
    let cli = match cli.command {
        Command::Agent(args) => return agent::main(args, &cli.global.log),
        command => Cli {
            global: cli.global,
            command,
        },
    };
    match cli.command {
        Command::Plan(_) => {
            crate::memory::return_freed_memory_after(std::time::Duration::ZERO);
            crate::memory::keep_freed_pages_in_the_first_arena(std::time::Duration::from_millis(
                300,
            ));
            crate::memory::every_thread_allocates_from_the_first_arena();
        }
        Command::Daemon(_) => {
            crate::memory::return_freed_memory_after(std::time::Duration::from_secs(1));
            crate::memory::purge_in_the_background();
        }
        _ => {}
    }
    // The daemon logs JSON lines, at info unless --log/METALFORM_LOG asks otherwise.
    let daemon = matches!(cli.command, Command::Daemon(_));
    init_logging(&cli.global.log, daemon);
    // One TLS provider for every HTTPS client in the process (reqwest, vaultrs).
    let _ = rustls::crypto::ring::default_provider().install_default();
    if let Err(err) = check_worker_threads() {
        eprintln!("{err}");
        return ExitCode::from(usage_code(err.class));
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    // Each runtime thread allocates as the command chose above.
    builder.on_thread_start(crate::memory::thread_started);
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(ErrorClass::Unexpected.exit_code());
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(exit) => exit.into(),
        Err(err) => {
            eprintln!("{err}");
            ExitCode::from(usage_code(err.class))
        }
    }
}

/// `TOKIO_WORKER_THREADS` sets how many worker threads the async runtime runs (by default
/// one per core the process may use; docs/ha.md: replicas sharing a host). The runtime would
/// panic on a value that is not a positive number: refuse it with what to do instead.
fn check_worker_threads() -> Result<(), CliError> {
    const VAR: &str = "TOKIO_WORKER_THREADS";
    let Some(value) = std::env::var_os(VAR) else {
        return Ok(());
    };
    match value.to_str().map(|v| v.parse::<usize>()) {
        Some(Ok(threads)) if threads > 0 => Ok(()),
        _ => Err(CliError::argument(format!(
            "{VAR} is `{}`: it must be a whole number of at least 1 (the worker threads of \
             metalform's async runtime)",
            value.to_string_lossy()
        ))
        .hint(format!("unset {VAR} to run one worker thread per core"))),
    }
}

/// Parse the command line, noting whether `--state` came from `METALFORM_STATE`.
fn parse() -> Result<Cli, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command().try_get_matches()?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    cli.global.state_from_env =
        state_source(&matches) == Some(clap::parser::ValueSource::EnvVariable);
    Ok(cli)
}

/// Where `--state` came from (it is global: the subcommand's matches hold it too).
fn state_source(matches: &clap::ArgMatches) -> Option<clap::parser::ValueSource> {
    matches
        .value_source("state")
        .or_else(|| matches.subcommand().and_then(|(_, sub)| state_source(sub)))
}

async fn run(cli: Cli) -> Result<Exit, CliError> {
    let Cli { global, command } = cli;
    let _ = &global;
    match command {
        Command::Completions(args) => completions::run(args),
        Command::Man(args) => man::run(args),
        Command::Show(args) => show::run(args),
        Command::Status(args) => status::run(&global, args).await,
        Command::Sim(args) => sim::run(args).await,
        Command::Validate(args) => validate::run(args),
        Command::Diff(args) => diff::run(args),
        Command::ImportCsv(args) => import_csv::run(args),
        Command::ImportMaas(args) => import_maas::run(args).await,
        Command::Apply(args) => apply::run(&global, args).await,
        Command::Jobs(args) => jobs::run(&global, args).await,
        Command::Onboardings(args) => onboardings::run(&global, args).await,
        Command::Decommissions(args) => decommissions::run(&global, args).await,
        Command::Demo(args) => demo::run(&global, args).await,
        Command::Render(args) => render::run(&global, args).await,
        Command::Observe(args) => observe::run(&global, args).await,
        Command::Plan(args) => plan::run(&global, args).await,
        Command::Drift(args) => drift::run(&global, args).await,
        Command::Daemon(args) => daemon::run(&global, args).await,
        Command::Agent(_) => unreachable!("the agent runs on its own runtime (main)"),
        Command::Provision(args) => provision::run(&global, args).await,
    }
}

fn init_logging(filter: &str, json: bool) {
    let filter = match (json, filter) {
        (true, "warn") => "info",
        (_, filter) => filter,
    };
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // Every log line passes the redaction path (docs/security.md "What is redacted where").
    let writer = || crate::sanitize::redact::RedactingWriter(std::io::stderr());
    if json {
        let _ = tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .with_writer(writer)
            .try_init();
        return;
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(output::use_color(std::io::IsTerminal::is_terminal(
            &std::io::stderr(),
        )))
        .try_init();
}
