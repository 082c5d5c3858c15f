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
    }
}
