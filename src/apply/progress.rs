//! Progress of an apply on stderr (DESIGN.md §3: data on stdout, progress on stderr; issue 5:
//! "a line per stage transition; bars on a TTY").
//!
//! Every stage transition is one line: `elapsed  site/host  stage  status  message`. On a
//! terminal an overall bar (nodes finished / total) stays below the lines. Each event is one
//! value ([`ProgressEvent`]) so tests and other front ends can collect them.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

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

/// How often the display ticks while stages wait.
const TICK: Duration = Duration::from_millis(500);
/// Without a terminal (CI logs), how often a "still waiting" line is written while any stage
/// waits: often enough to show the run is alive, rare enough for a log.
const HEARTBEAT: Duration = Duration::from_secs(30);

/// Lines on stderr, with a bar when stderr is a terminal. While a stage waits (on MAAS, on an
/// agent) the display keeps ticking: on a terminal the bar's clock and the longest wait move
/// every half second; in a log a "still waiting" line is written every 30 seconds.
pub struct StderrProgress {
    inner: Arc<Display>,
}

/// The display the ticker and the reporting threads share.
struct Display {
    started: Instant,
    bar: Option<ProgressBar>,
    state: Mutex<Ticking>,
    out: Mutex<Box<dyn Write + Send>>,
}

/// The stages waiting now, and when the last heartbeat line was written.
#[derive(Debug, Default)]
struct Ticking {
    /// node → (stage, reason, elapsed when the wait began)
    waits: BTreeMap<String, (String, String, Duration)>,
    last_heartbeat: Option<Duration>,
}

impl Ticking {
    fn observe(&mut self, elapsed: Duration, event: &ProgressEvent) {
        if event.status == ProgressStatus::Waiting {
            if self.waits.is_empty() {
                self.last_heartbeat = Some(elapsed);
            }
            self.waits.insert(
                event.node.clone(),
                (event.stage.clone(), event.message.clone(), elapsed),
            );
        } else {
            self.waits.remove(&event.node);
        }
    }

    /// The longest wait: node, stage, reason, for how long.
    fn longest(&self, elapsed: Duration) -> Option<(&str, &str, &str, Duration)> {
        self.waits
            .iter()
            .min_by_key(|(_, (_, _, since))| *since)
            .map(|(node, (stage, reason, since))| {
                (
                    node.as_str(),
                    stage.as_str(),
                    reason.as_str(),
                    elapsed.saturating_sub(*since),
                )
            })
    }

    /// The bar's message at `elapsed`: the longest wait and its clock.
    fn status(&self, elapsed: Duration) -> String {
        match self.longest(elapsed) {
            None => String::new(),
            Some((node, stage, _, waited)) => {
                let more = match self.waits.len() {
                    1 => String::new(),
                    n => format!(" (+{} more waiting)", n - 1),
                };
                format!(
                    "{node}: {stage} waiting {}{more}",
                    clock(waited).trim_start()
                )
            }
        }
    }

    /// The heartbeat line due at `elapsed` (once per `every` while anything waits).
    fn heartbeat(&mut self, elapsed: Duration, every: Duration) -> Option<String> {
        let last = self.last_heartbeat?;
        if elapsed.saturating_sub(last) < every {
            return None;
        }
        let (node, stage, reason, waited) = self.longest(elapsed)?;
        let line = format!(
            "{}  {node:<20} {stage:<32} {:<6} still waiting after {}: {reason}{}",
            clock(elapsed),
            ProgressStatus::Waiting.label(),
            clock(waited).trim_start(),
            match self.waits.len() {
                1 => String::new(),
                n => format!(" ({} nodes waiting)", n),
            }
        );
        self.last_heartbeat = Some(elapsed);
        Some(line)
    }
}

/// `m:ss`, minutes right-aligned in two columns.
fn clock(elapsed: Duration) -> String {
    let secs = elapsed.as_secs();
    format!("{:>2}:{:02}", secs / 60, secs % 60)
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
        let progress = Self::with_output(bar, Box::new(std::io::stderr()));
        // The clock keeps moving while a stage waits on MAAS (a deploy takes many minutes
        // without a transition); the thread ends with the display.
        let display = Arc::downgrade(&progress.inner);
        let started = progress.inner.started;
        std::thread::spawn(move || {
            tick_until_dropped(&display, || {
                std::thread::sleep(TICK);
                started.elapsed()
            })
        });
        progress
    }

    /// A display writing its lines to `out` (with `bar` on a terminal) that ticks only when
    /// [`StderrProgress::tick`] is called.
    fn with_output(bar: Option<ProgressBar>, out: Box<dyn Write + Send>) -> Self {
        Self {
            inner: Arc::new(Display {
                started: Instant::now(),
                bar,
                state: Mutex::new(Ticking::default()),
                out: Mutex::new(out),
            }),
        }
    }

    /// One line as printed.
    pub fn line(elapsed: Duration, event: &ProgressEvent) -> String {
        format!(
            "{}  {:<20} {:<32} {:<6} {}",
            clock(elapsed),
            event.node,
            event.stage,
            event.status.label(),
            event.message
        )
    }
}

/// Tick `display` at each elapsed time `next` waits for, until the display is dropped.
fn tick_until_dropped(display: &Weak<Display>, mut next: impl FnMut() -> Duration) {
    loop {
        let elapsed = next();
        let Some(display) = display.upgrade() else {
            return;
        };
        display.tick(elapsed);
    }
}

impl Display {
    /// One tick of the display at `elapsed`: the bar redrawn with the longest wait's clock,
    /// or, without a terminal, a heartbeat line when one is due.
    fn tick(&self, elapsed: Duration) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match &self.bar {
            Some(bar) => {
                bar.set_message(state.status(elapsed));
                bar.tick();
            }
            None => {
                if let Some(line) = state.heartbeat(elapsed, HEARTBEAT) {
                    self.write_line(&line);
                }
            }
        }
    }

    fn report(&self, elapsed: Duration, event: ProgressEvent) {
        let line = StderrProgress::line(elapsed, &event);
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.observe(elapsed, &event);
        match &self.bar {
            Some(bar) => {
                bar.println(line);
                if event.status.ends_node() {
                    bar.inc(1);
                }
                bar.set_message(state.status(elapsed));
            }
            None => self.write_line(&line),
        }
    }

    fn write_line(&self, line: &str) {
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

impl Default for StderrProgress {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress for StderrProgress {
    fn report(&self, event: ProgressEvent) {
        self.inner.report(self.inner.started.elapsed(), event);
    }

    fn total(&self, nodes: usize) {
        if let Some(bar) = &self.inner.bar {
            bar.set_length(nodes as u64);
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.inner.bar {
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
    pub fn line(elapsed: Duration, event: &ProgressEvent) -> String {
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

    /// What a display wrote, shared with the test.
    #[derive(Clone, Default)]
    struct Written(Arc<Mutex<Vec<u8>>>);

    impl Write for Written {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Written {
        fn lines(&self) -> Vec<String> {
            String::from_utf8(self.0.lock().unwrap().clone())
                .unwrap()
                .lines()
                .map(str::to_owned)
                .collect()
        }
    }

    fn event(node: &str, stage: &str, status: ProgressStatus, message: &str) -> ProgressEvent {
        ProgressEvent {
            node: node.into(),
            stage: stage.into(),
            status,
            message: message.into(),
        }
    }

    const NODE: &str = "dc1/gpu00001";
    const STAGE: &str = "wait_for_deployed";

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// Without a terminal: while one deploy waits on MAAS, the ticks write a "still waiting"
    /// line every 30 seconds, each with a later clock and a longer wait; none once it moved on.
    #[test]
    fn a_wait_on_maas_keeps_ticking_in_a_log_until_the_stage_moves_on() {
        let written = Written::default();
        let progress = StderrProgress::with_output(None, Box::new(written.clone()));
        let display = progress.inner.clone();
        display.report(
            secs(5),
            event(NODE, STAGE, ProgressStatus::Waiting, "MAAS says Deploying"),
        );
        // The ticker thread's loop, fed elapsed times instead of sleeping; the display is
        // dropped when the schedule runs out, which ends the loop.
        let weak = Arc::downgrade(&display);
        drop(display);
        let mut schedule = [10, 20, 35, 50, 65, 96, 100].into_iter();
        let mut kept = Some(progress);
        tick_until_dropped(&weak, || match schedule.next() {
            Some(t) => secs(t),
            None => {
                let progress = kept.take().expect("the loop ends when the display is gone");
                progress.inner.report(
                    secs(101),
                    event(NODE, STAGE, ProgressStatus::Succeeded, "Deployed"),
                );
                for t in [140, 200] {
                    progress.inner.tick(secs(t));
                }
                secs(0)
            }
        });
        assert_eq!(
            written.lines(),
            [
                " 0:05  dc1/gpu00001         wait_for_deployed                wait   MAAS says Deploying",
                " 0:35  dc1/gpu00001         wait_for_deployed                wait   still waiting after 0:30: MAAS says Deploying",
                " 1:05  dc1/gpu00001         wait_for_deployed                wait   still waiting after 1:00: MAAS says Deploying",
                " 1:36  dc1/gpu00001         wait_for_deployed                wait   still waiting after 1:31: MAAS says Deploying",
                " 1:41  dc1/gpu00001         wait_for_deployed                ok     Deployed",
            ]
        );
    }

    /// On a terminal: every tick redraws the bar with the longest wait's clock.
    #[test]
    fn a_wait_on_maas_keeps_the_bar_ticking() {
        let bar = ProgressBar::with_draw_target(Some(2), indicatif::ProgressDrawTarget::hidden());
        let written = Written::default();
        let progress = StderrProgress::with_output(Some(bar.clone()), Box::new(written.clone()));
        let display = &progress.inner;
        display.report(
            secs(5),
            event(NODE, STAGE, ProgressStatus::Waiting, "MAAS says Deploying"),
        );
        // (a transition reported first, if any; the tick's elapsed seconds)
        const OTHER: &str = "dc1/gpu00002";
        let steps = [
            (None, 6),
            (None, 7),
            (None, 65),
            (None, 125),
            (Some((130, OTHER, ProgressStatus::Waiting)), 131),
            (Some((140, NODE, ProgressStatus::Converged)), 150),
            (Some((151, OTHER, ProgressStatus::Failed)), 152),
        ];
        let mut shown = Vec::new();
        for (transition, tick) in steps {
            if let Some((at, node, status)) = transition {
                display.report(secs(at), event(node, STAGE, status, "MAAS says so"));
            }
            display.tick(secs(tick));
            shown.push(bar.message());
        }
        assert_eq!(
            shown,
            [
                "dc1/gpu00001: wait_for_deployed waiting 0:01",
                "dc1/gpu00001: wait_for_deployed waiting 0:02",
                "dc1/gpu00001: wait_for_deployed waiting 1:00",
                "dc1/gpu00001: wait_for_deployed waiting 2:00",
                "dc1/gpu00001: wait_for_deployed waiting 2:06 (+1 more waiting)",
                "dc1/gpu00002: wait_for_deployed waiting 0:20",
                "",
            ]
        );
        assert_eq!(bar.position(), 2);
        assert!(written.lines().is_empty(), "lines go above the bar");
    }

    #[test]
    fn one_line_per_transition() {
        let event = ProgressEvent {
            node: "dc1/c07u43".into(),
            stage: "deploy_via_maas".into(),
            status: ProgressStatus::Succeeded,
            message: "deploy issued".into(),
        };
        assert_eq!(
            StderrProgress::line(Duration::from_secs(75), &event),
            " 1:15  dc1/c07u43           deploy_via_maas                  ok     deploy issued"
        );
        assert_eq!(
            JsonProgress::line(Duration::from_millis(75_250), &event),
            r#"{"event":"stage","elapsed_ms":75250,"node":"dc1/c07u43","stage":"deploy_via_maas","status":"succeeded","message":"deploy issued"}"#
        );
    }
}
