//! Progress of an apply on stderr (DESIGN.md §3: data on stdout, progress on stderr; issue 5:
//! "a line per stage transition; bars on a TTY").
//!
//! Every stage transition is one line: `elapsed  site/host  stage  status  message`. On a
//! terminal an overall bar (nodes finished / total) stays below the lines. Each event is one
//! value ([`ProgressEvent`]) so tests and other front ends can collect them.

use std::io::Write;
use std::sync::Mutex;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

/// What happened to one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgressEvent {
    /// `site/hostname`.
    pub node: String,
    /// The stage, or `-` for whole-node events.
    pub stage: String,
    pub status: ProgressStatus,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressStatus {
    /// A node's job was taken up (created, resumed, adopted).
    Begin,
    Started,
    Waiting,
    Succeeded,
    Skipped,
    /// Failed, retried after a backoff.
    Retrying,
    Failed,
    /// The node reached its goal (job completed or reconciled).
    Converged,
    /// Nothing was done to the node (lease held elsewhere, a failed job awaiting an operator).
    Left,
}

impl ProgressStatus {
    pub fn label(self) -> &'static str {
        match self {
            ProgressStatus::Begin => "begin",
            ProgressStatus::Started => "start",
            ProgressStatus::Waiting => "wait",
            ProgressStatus::Succeeded => "ok",
            ProgressStatus::Skipped => "skip",
            ProgressStatus::Retrying => "retry",
            ProgressStatus::Failed => "FAILED",
            ProgressStatus::Converged => "DONE",
            ProgressStatus::Left => "left",
        }
    }

    /// The name in `apply --json` events (docs/apply.md).
    pub fn name(self) -> &'static str {
        match self {
            ProgressStatus::Begin => "begin",
            ProgressStatus::Started => "started",
            ProgressStatus::Waiting => "waiting",
            ProgressStatus::Succeeded => "succeeded",
            ProgressStatus::Skipped => "skipped",
            ProgressStatus::Retrying => "retrying",
            ProgressStatus::Failed => "failed",
            ProgressStatus::Converged => "converged",
            ProgressStatus::Left => "left",
        }
    }

    fn ends_node(self) -> bool {
        matches!(
            self,
            ProgressStatus::Failed | ProgressStatus::Converged | ProgressStatus::Left
        )
    }
}

/// Where progress goes.
pub trait Progress: Send + Sync {
    fn report(&self, event: ProgressEvent);
    /// How many nodes the run works on (for bars).
    fn total(&self, _nodes: usize) {}
    fn finish(&self) {}
}

/// Report one node's stage transition (`stage` is `-` for whole-node events).
pub(super) fn report(
    progress: &dyn Progress,
    node: &str,
    stage: &str,
    status: ProgressStatus,
    message: &str,
) {
    progress.report(ProgressEvent {
        node: node.to_owned(),
        stage: stage.to_owned(),
        status,
        message: message.to_owned(),
    });
}

/// Lines on stderr, with a bar when stderr is a terminal.
pub struct StderrProgress {
    started: Instant,
    bar: Option<ProgressBar>,
    lock: Mutex<()>,
}

impl StderrProgress {
    pub fn new() -> Self {
        let bar = std::io::IsTerminal::is_terminal(&std::io::stderr()).then(|| {
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:40}] {pos}/{len} nodes {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            // The clock keeps moving while a stage waits on MAAS (a deploy takes many minutes
            // without a transition).
            bar.enable_steady_tick(std::time::Duration::from_millis(500));
            bar
        });
        Self {
            started: Instant::now(),
            bar,
            lock: Mutex::new(()),
        }
    }

    /// One line as printed.
    pub fn line(elapsed: std::time::Duration, event: &ProgressEvent) -> String {
        let secs = elapsed.as_secs();
        format!(
            "{:>2}:{:02}  {:<20} {:<32} {:<6} {}",
            secs / 60,
            secs % 60,
            event.node,
            event.stage,
            event.status.label(),
            event.message
        )
    }
}

impl Default for StderrProgress {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress for StderrProgress {
    fn report(&self, event: ProgressEvent) {
        let line = Self::line(self.started.elapsed(), &event);
        let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        match &self.bar {
            Some(bar) => {
                bar.println(line);
                if event.status.ends_node() {
                    bar.inc(1);
                }
                // What the run waits on now, next to the ticking clock.
                if event.status == ProgressStatus::Waiting {
                    bar.set_message(format!("{}: {}", event.node, event.stage));
                } else if event.status.ends_node() {
                    bar.set_message("");
                }
            }
            None => {
                let _ = writeln!(std::io::stderr(), "{line}");
            }
        }
    }

    fn total(&self, nodes: usize) {
        if let Some(bar) = &self.bar {
            bar.set_length(nodes as u64);
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// `apply --json`: one JSON object per line on stdout for each transition,
/// `{"event": "stage", "elapsed_ms", "node", "stage", "status", "message"}` (docs/apply.md).
pub struct JsonProgress {
    started: Instant,
    lock: Mutex<()>,
}

impl JsonProgress {
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            lock: Mutex::new(()),
        }
    }

    /// One event as written (without the newline).
    pub fn line(elapsed: std::time::Duration, event: &ProgressEvent) -> String {
        serde_json::json!({
            "event": "stage",
            "elapsed_ms": elapsed.as_millis() as u64,
            "node": event.node,
            "stage": event.stage,
            "status": event.status.name(),
            "message": event.message,
        })
        .to_string()
    }
}

impl Default for JsonProgress {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress for JsonProgress {
    fn report(&self, event: ProgressEvent) {
        let line = Self::line(self.started.elapsed(), &event);
        let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

/// Keeps every event (tests, the demo's summary).
#[derive(Default)]
pub struct MemoryProgress {
    pub events: Mutex<Vec<ProgressEvent>>,
}

impl Progress for MemoryProgress {
    fn report(&self, event: ProgressEvent) {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(event);
    }
}

/// Prints nothing.
pub struct NoProgress;

impl Progress for NoProgress {
    fn report(&self, _event: ProgressEvent) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_transition() {
        let event = ProgressEvent {
            node: "dc1/c07u43".into(),
            stage: "deploy_via_maas".into(),
            status: ProgressStatus::Succeeded,
            message: "deploy issued".into(),
        };
        assert_eq!(
            StderrProgress::line(std::time::Duration::from_secs(75), &event),
            " 1:15  dc1/c07u43           deploy_via_maas                  ok     deploy issued"
        );
        assert_eq!(
            JsonProgress::line(std::time::Duration::from_millis(75_250), &event),
            r#"{"event":"stage","elapsed_ms":75250,"node":"dc1/c07u43","stage":"deploy_via_maas","status":"succeeded","message":"deploy issued"}"#
        );
    }
}
