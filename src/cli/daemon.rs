//! `metalform daemon --config FILE [--watch]` (DESIGN.md §3, §6; docs/daemon.md): run the
//! reconciler until SIGTERM or SIGINT, then stop gracefully (running stages reach their next
//! checkpoint) and exit 0. Logs are JSON lines on stderr.

use std::path::PathBuf;

use super::{CliError, Exit, GlobalArgs};
use crate::daemon::{self, DaemonConfig, DaemonOptions};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The daemon's configuration (TOML; see examples/daemon.toml).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Also follow a local repository with filesystem notifications (a commit is picked up at
    /// once instead of at the next poll).
    #[arg(long)]
    pub watch: bool,
    /// Check the configuration and exit.
    #[arg(long)]
    pub check: bool,
}

pub async fn run(global: &GlobalArgs, args: Args) -> Result<Exit, CliError> {
    let mut config = DaemonConfig::load(&args.config).map_err(|e| {
        let hint = e.hint.clone();
        let err = CliError::user(e.to_string());
        match hint {
            Some(hint) => err.hint(hint),
            None => err,
        }
    })?;
    // The configuration file says where the daemon's store is; an explicit --state overrides
    // it (and says so), METALFORM_STATE from the environment does not.
    match &global.state {
        Some(state) if global.state_from_env => {
            let differs = *state != config.state_url;
            if differs {
                eprintln!(
                    "warning: METALFORM_STATE is ignored: the daemon uses [state] url of {} ({})",
                    args.config.display(),
                    crate::store::redact_url(&config.state_url)
                );
            }
        }
        Some(state) => {
            eprintln!(
                "note: --state {} overrides [state] url of {}",
                crate::store::redact_url(state),
                args.config.display()
            );
            config.state_url = state.clone();
        }
        None => {}
    }
    if args.check {
        println!("{}: valid", args.config.display());
        return Ok(Exit::Success);
    }
    let running = daemon::start(config, DaemonOptions { watch: args.watch })
        .await
        .map_err(|e| {
            let hint = e.hint();
            let err = CliError::user(e.to_string());
            match hint {
                Some(hint) => err.hint(hint),
                None => err,
            }
        })?;
    let credentials = running.credentials();
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangup = signal(SignalKind::hangup()).expect("a SIGHUP handler");
        while hangup.recv().await.is_some() {
            // A failed reload keeps the tokens in force: a typo must not lock everyone out.
            if let Err(err) = credentials.reload().await {
                tracing::error!(error = %err, hint = err.hint().unwrap_or_default(), "SIGHUP: credentials not reloaded; the previous ones stay in force");
            }
        }
    });
    let trigger = running.shutdown_trigger();
    tokio::spawn(async move {
        let signal = wait_for_signal().await;
        tracing::info!(signal, "signal received: stopping gracefully");
        let _ = trigger.send(true);
    });
    running.wait().await;
    Ok(Exit::Success)
}

async fn wait_for_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("a SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("a SIGINT handler");
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}
