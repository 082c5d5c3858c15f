//! How the agent acts on its host: every task type runs behind one interface
//! ([`TaskExecutor`]), and every change it makes is a command line run through one [`Runner`]
//! — so a dry run logs exactly what a real run would run, tests point the commands at
//! recording scripts, and the journal can tell which changes of a task already happened.
//!
//! A change is journaled when it succeeded: a task handed out again after the agent died (its
//! lease ran out) skips the changes it already made and runs the rest. Commands die with the
//! agent (`PR_SET_PDEATHSIG`), so a killed agent leaves no half-run command behind it.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::config::NodeConfig;
use super::probe::HostView;
use super::state::Journal;
use crate::agent::TaskType;

/// One command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cmd {
    pub program: String,
    pub args: Vec<String>,
    /// It changes the host (a dry run only logs it; the journal records it once done).
    pub changes: bool,
}

impl Cmd {
    /// A command that only reads.
    pub fn probe(program: &str, args: &[&str]) -> Cmd {
        Cmd {
            program: program.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            changes: false,
        }
    }

    /// A command that changes the host.
    pub fn change(program: &str, args: &[&str]) -> Cmd {
        Cmd {
            changes: true,
            ..Cmd::probe(program, args)
        }
    }

    /// The command line, quoted where needed: what logs, journals and results show.
    pub fn line(&self) -> String {
        std::iter::once(&self.program)
            .chain(&self.args)
            .map(|w| quote(w))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// What a command printed and how it ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CmdOutput {
    /// The exit status; `None` when a signal ended it.
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl CmdOutput {
    pub fn ok(&self) -> bool {
        self.status == Some(0)
    }

    /// The last lines of stderr (or stdout), for a message.
    pub fn tail(&self) -> String {
        let text = if self.stderr.trim().is_empty() {
            &self.stdout
        } else {
            &self.stderr
        };
        let lines: Vec<&str> = text.trim().lines().collect();
        let tail = lines[lines.len().saturating_sub(3)..].join(" | ");
        tail.chars().take(400).collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    #[error("`{program}` is not installed (or not on PATH)")]
    NotFound { program: String },
    #[error("`{line}` did not finish within {seconds} s; killed")]
    TimedOut { line: String, seconds: u64 },
    #[error("cannot run `{line}`: {message}")]
    Io { line: String, message: String },
}

/// Runs commands: the agent's only way to change its host.
pub trait Runner: Send + Sync {
    fn run(&self, cmd: &Cmd) -> Result<CmdOutput, RunError>;
}

/// Output kept per stream.
const MAX_OUTPUT: usize = 256 * 1024;

/// The real thing: a child process per command, killed when the agent dies or the timeout
/// passes.
#[derive(Debug, Clone)]
pub struct HostRunner {
    pub timeout: Duration,
}

impl Runner for HostRunner {
    fn run(&self, cmd: &Cmd) -> Result<CmdOutput, RunError> {
        let mut command = Command::new(&cmd.program);
        command
            .args(&cmd.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("LC_ALL", "C");
        // SAFETY: prctl is async-signal-safe; the closure touches nothing else.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => RunError::NotFound {
                program: cmd.program.clone(),
            },
            _ => RunError::Io {
                line: cmd.line(),
                message: e.to_string(),
            },
        })?;
        let pid = child.id() as libc::pid_t;
        let read = |pipe: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut out = Vec::new();
                if let Some(pipe) = pipe {
                    let _ = pipe.take(MAX_OUTPUT as u64).read_to_end(&mut out);
                }
                String::from_utf8_lossy(&out).into_owned()
            })
        };
        let stdout = read(
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let stderr = read(
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        let status = match rx.recv_timeout(self.timeout) {
            Ok(status) => status.map_err(|e| RunError::Io {
                line: cmd.line(),
                message: e.to_string(),
            })?,
            Err(_) => {
                // SAFETY: kill(2) on the child's pid, which is not reaped yet.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
                let _ = rx.recv();
                return Err(RunError::TimedOut {
                    line: cmd.line(),
                    seconds: self.timeout.as_secs(),
                });
            }
        };
        Ok(CmdOutput {
            status: status.code(),
            stdout: stdout.join().unwrap_or_default(),
            stderr: stderr.join().unwrap_or_default(),
        })
    }
}

/// `--dry-run`: commands that only read run; changes are logged and answered as done.
pub struct DryRun<R> {
    pub inner: R,
}

impl<R: Runner> Runner for DryRun<R> {
    fn run(&self, cmd: &Cmd) -> Result<CmdOutput, RunError> {
        if cmd.changes {
            tracing::info!(command = %cmd.line(), "dry run: would run");
            Ok(CmdOutput {
                status: Some(0),
                ..CmdOutput::default()
            })
        } else {
            self.inner.run(cmd)
        }
    }
}

/// A task that did not do what it was asked: a stable code, a sentence for people, details.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskFailure {
    pub code: &'static str,
    pub message: String,
    pub details: Value,
}

impl TaskFailure {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: json!({}),
        }
    }

    pub fn with(mut self, details: Value) -> Self {
        self.details = details;
        self
    }
}

impl From<RunError> for TaskFailure {
    fn from(err: RunError) -> Self {
        let code = match err {
            RunError::NotFound { .. } => "tool_missing",
            RunError::TimedOut { .. } => "command_timed_out",
            RunError::Io { .. } => "command_failed",
        };
        TaskFailure::new(code, err.to_string())
    }
}

/// A task done: a sentence for people and details for the control plane.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub message: String,
    pub details: Value,
    /// Changes to make once the result is stored (`node.uninstall` removes the agent itself,
    /// which it cannot do before it reported).
    pub then: Vec<Cmd>,
}

impl Report {
    pub fn new(message: impl Into<String>, details: Value) -> Self {
        Self {
            message: message.into(),
            details,
            then: Vec::new(),
        }
    }
}

/// Who the agent is, from its environment file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    pub hostname: String,
    pub system_id: String,
    /// The site's deploy user: never a tenant.
    pub deploy_user: Option<String>,
}

/// What one run of a task has to work with.
pub struct TaskContext<'a> {
    pub config: &'a NodeConfig,
    pub identity: &'a Identity,
    pub host: &'a HostView,
    /// The agent's state directory (`node.uninstall` removes it).
    pub state_dir: &'a std::path::Path,
    runner: &'a dyn Runner,
    journal: &'a mut Journal,
    save: &'a mut dyn FnMut(&Journal),
    /// Every command this run ran (or skipped as done), for the result's details.
    pub ran: Vec<String>,
}

impl<'a> TaskContext<'a> {
    pub fn new(
        config: &'a NodeConfig,
        identity: &'a Identity,
        host: &'a HostView,
        state_dir: &'a std::path::Path,
        runner: &'a dyn Runner,
        journal: &'a mut Journal,
        save: &'a mut dyn FnMut(&Journal),
    ) -> Self {
        Self {
            config,
            identity,
            host,
            state_dir,
            runner,
            journal,
            save,
            ran: Vec::new(),
        }
    }

    /// Run a command that only reads.
    pub fn probe(&mut self, cmd: Cmd) -> Result<CmdOutput, RunError> {
        debug_assert!(!cmd.changes);
        tracing::debug!(command = %cmd.line(), "probe");
        self.runner.run(&cmd)
    }

    /// Make a change once: skipped when this task's journal says it was made (a re-run after
    /// the agent died), journaled when it succeeded. A non-zero exit is a failure naming the
    /// command and what it printed.
    pub fn change(&mut self, cmd: Cmd) -> Result<CmdOutput, TaskFailure> {
        self.change_allowing(cmd, &[0])
    }

    /// [`TaskContext::change`] for a command whose other exit codes also mean done (`pkill`'s
    /// 1: nothing matched).
    pub fn change_allowing(&mut self, cmd: Cmd, ok: &[i32]) -> Result<CmdOutput, TaskFailure> {
        let line = cmd.line();
        if self.journal.steps_done.contains(&line) {
            tracing::info!(command = %line, "already done by an earlier run of this task; skipped");
            self.ran.push(format!("{line} (done earlier)"));
            return Ok(CmdOutput {
                status: Some(0),
                ..CmdOutput::default()
            });
        }
        tracing::info!(command = %line, "running");
        let output = self.runner.run(&cmd)?;
        self.ran.push(line.clone());
        if !output.status.is_some_and(|s| ok.contains(&s)) {
            return Err(TaskFailure::new(
                "command_failed",
                format!(
                    "`{line}` exited with {}: {}",
                    output
                        .status
                        .map_or("a signal".to_owned(), |s| s.to_string()),
                    output.tail()
                ),
            )
            .with(json!({"command": line, "status": output.status})));
        }
        self.journal.steps_done.push(line);
        (self.save)(self.journal);
        Ok(output)
    }

    /// The path of a tool as configured (`[commands]`).
    pub fn tool(&self, name: &str) -> String {
        self.config.commands.path_of(name)
    }
}

/// The one interface every task type runs through.
pub trait TaskExecutor: Send + Sync {
    fn task_type(&self) -> TaskType;
    fn run(&self, params: &Value, ctx: &mut TaskContext<'_>) -> Result<Report, TaskFailure>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_are_quoted_for_people_and_logs() {
        let cmd = Cmd::change(
            "sed",
            &["-i", "-E", "/^[^#]*[[:space:]]wekafs/d", "/etc/fstab"],
        );
        assert_eq!(
            cmd.line(),
            "sed -i -E '/^[^#]*[[:space:]]wekafs/d' /etc/fstab"
        );
        assert_eq!(Cmd::probe("echo", &["it's"]).line(), "echo 'it'\\''s'");
        assert_eq!(Cmd::probe("echo", &[""]).line(), "echo ''");
    }

    #[test]
    fn the_host_runner_reports_exit_status_output_missing_tools_and_timeouts() {
        let runner = HostRunner {
            timeout: Duration::from_secs(5),
        };
        let out = runner
            .run(&Cmd::probe("sh", &["-c", "echo out; echo err >&2; exit 3"]))
            .unwrap();
        assert_eq!(
            out,
            CmdOutput {
                status: Some(3),
                stdout: "out\n".into(),
                stderr: "err\n".into()
            }
        );
        assert_eq!(
            runner.run(&Cmd::probe("/nonexistent/tool", &[])),
            Err(RunError::NotFound {
                program: "/nonexistent/tool".into()
            })
        );
        let quick = HostRunner {
            timeout: Duration::from_millis(200),
        };
        let started = std::time::Instant::now();
        assert!(matches!(
            quick.run(&Cmd::probe("sleep", &["5"])),
            Err(RunError::TimedOut { .. })
        ));
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn a_dry_run_runs_probes_and_only_logs_changes() {
        let dry = DryRun {
            inner: HostRunner {
                timeout: Duration::from_secs(5),
            },
        };
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("touched");
        let marker_arg = marker.display().to_string();
        let out = dry.run(&Cmd::change("touch", &[&marker_arg])).unwrap();
        assert!(out.ok());
        assert!(!marker.exists(), "a dry run changes nothing");
        let out = dry.run(&Cmd::probe("echo", &["hello"])).unwrap();
        assert_eq!(out.stdout, "hello\n");
    }
}
