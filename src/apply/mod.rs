//! Executor (DESIGN.md §4, seed 000 §4.3–§4.13, §5): runs plan items and operator recoveries as
//! durable per-node stage journals with retries, failure classes, compensation, leases and
//! per-site concurrency — one engine for every kind of job.
//!
//! | file | what |
//! |---|---|
//! | `engine` | the one executor loop ([`Engine`]) and the [`Kind`] trait a job kind implements |
//! | `onboarding` | the onboarding kind (16 stages of `crate::stages::onboard`) and its work items |
//! | `decommission` | the decommission kind (`crate::stages::decommission`, one stage list per mode) |
//! | `provisioning` | the Redfish provisioning kind (seed 003, `crate::stages::provision`), its workers and request service |
//! | `jobs` | list, show and cancel over every kind; what a kind offers ([`jobs::KindInfo`]) |
//! | `recovery` | operator recovery actions, recorded and audited |
//! | `kinds` | the registry of kinds: each kind's description, and a recovery carried out by its kind's engine |
//! | `from_plan` | a plan's change items as work items of both kinds ([`work_items`]) |
//! | `provision` | the provisioning verbs of seed 002 carried out on MAAS, under the node lease |
//! | `records` | what applying writes besides jobs: release policies, maintenance-window overrides |
//! | `lease`, `backoff`, `progress`, `outcome`, `maas` | the node lease and its heartbeat, retry delays, progress lines, results, per-site MAAS access |
//!
//! [`Executor`] is the engine of the onboarding kind; [`decommission::DecommissionExecutor`]
//! that of the decommission kind.

mod backoff;
pub mod decommission;
mod engine;
mod from_plan;
pub mod jobs;
pub mod kinds;
mod lease;
mod maas;
pub mod onboarding;
mod outcome;
pub mod progress;
pub mod provision;
pub mod provisioning;
pub mod records;
pub mod recovery;

use std::sync::Arc;
use std::time::Duration;

pub use engine::{
    Compensation, Continuing, Engine, HeldSlot, Kind, Pass, Run, SharedSlotSource, SharedSlots,
    Stop,
};
pub use from_plan::{
    FreshnessError, PlanRefused, PlanWork, destroys, plan_now, verify_plan_file, work_items,
};
pub use lease::{LeaseKeeper, NodeLease, onboarding_lease_name};
pub use maas::SiteMaas;
pub use progress::{
    JsonProgress, MemoryProgress, NoProgress, Progress, ProgressEvent, ProgressStatus,
    StderrProgress,
};

pub use crate::stages::StageEnv;
pub use onboarding::{FromPlan, Onboarding, Work, WorkItem};
pub use outcome::{ApplyReport, NodeOutcome, NodeResult};

/// Runs onboarding work items; cheap to clone.
pub type Executor = Engine<Onboarding>;

/// How the executor paces itself.
#[derive(Debug, Clone)]
pub struct ExecutorOptions {
    /// Between polls of a waiting stage (MAAS status, hardware sync, enrollment).
    pub poll_interval: Duration,
    /// First automatic retry delay; doubles per retry up to `retry_cap` (with jitter).
    pub retry_base: Duration,
    pub retry_cap: Duration,
    /// The wait before the reconciler tries a job that ended `failed_retryable` again: from
    /// its base after the first failure, doubling per failure in a row up to its cap, with
    /// jitter (the next try is recorded with the failure).
    pub failed_retry: crate::backoff::Backoff,
    /// Node lease lifetime; renewed every third of it. A killed executor's nodes are taken
    /// over this long after it died.
    pub lease_ttl: Duration,
    /// This executor's name in leases (unique per process).
    pub holder: String,
    /// Seed of the retry jitter.
    pub seed: u64,
    /// Recorded on new jobs.
    pub batch_id: Option<String>,
    /// The audit reason of recovery actions the executor takes for work that does not come
    /// from a plan (a plan's items give their own).
    pub reason: Option<String>,
    /// Raised by a shutting-down daemon: nodes stop at the next stage boundary (the journal
    /// holds where they are) and items not started yet are not taken up.
    pub stop: StopSignal,
    /// CD1 of the Redfish provisionings a plan queues, for nodes whose manifest names none
    /// (`MAINTENANCE_ISO_URL`).
    pub maintenance_iso_url: Option<String>,
    /// `maxParallel` slots shared with other processes (the daemon's replicas), taken after
    /// the executor's own.
    pub shared_slots: SharedSlotSource,
}

impl Default for ExecutorOptions {
    fn default() -> Self {
        Self {
            poll_interval: Duration::from_secs(10),
            retry_base: Duration::from_secs(2),
            retry_cap: Duration::from_secs(60),
            failed_retry: DEFAULT_FAILED_RETRY,
            lease_ttl: Duration::from_secs(60),
            holder: default_holder(),
            seed: rand::random(),
            batch_id: None,
            reason: None,
            stop: StopSignal::default(),
            maintenance_iso_url: None,
            shared_slots: SharedSlotSource::default(),
        }
    }
}

impl ExecutorOptions {
    /// How long the job of `node` (`site/hostname`) waits after its `failures`th failure in a
    /// row before the reconciler tries it again: `failed_retry`'s backoff with jitter drawn
    /// from (`seed`, node, count) — the same wait whichever run computes it.
    pub fn failed_retry_wait(&self, node: &str, failures: u32) -> Duration {
        let unit = backoff::failure_unit(self.seed, node, failures);
        self.failed_retry.jittered(failures, unit)
    }
}

/// A failed job's first next try is 30 s to a minute away; after six failures in a row it waits
/// 30 to 60 minutes, and never longer.
pub const DEFAULT_FAILED_RETRY: crate::backoff::Backoff =
    crate::backoff::Backoff::new(Duration::from_secs(60), Duration::from_secs(3600));

/// A one-way "stop taking work" flag shared by an executor's node tasks (SIGTERM in the
/// daemon). Stopping between stages loses nothing: every stage boundary is journaled, and a
/// restarted executor continues from there.
#[derive(Debug, Clone)]
pub struct StopSignal {
    flag: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Default for StopSignal {
    fn default() -> Self {
        Self {
            flag: Arc::new(tokio::sync::watch::Sender::new(false)),
        }
    }
}

impl StopSignal {
    /// Ask every holder to stop at its next checkpoint.
    pub fn stop(&self) {
        self.flag.send_replace(true);
    }

    pub fn is_stopped(&self) -> bool {
        *self.flag.borrow()
    }

    /// Resolves once [`StopSignal::stop`] was called.
    pub async fn stopped(&self) {
        let mut rx = self.flag.subscribe();
        let _ = rx.wait_for(|stopped| *stopped).await;
    }

    /// Sleep for `duration`, or less when stopped meanwhile.
    pub async fn sleep(&self, duration: Duration) {
        tokio::select! {
            _ = tokio::time::sleep(duration) => {}
            _ = self.stopped() => {}
        }
    }
}

/// `apply@HOST:PID:RANDOM`: unique per process, readable in `leases`.
pub fn default_holder() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into());
    format!(
        "apply@{host}:{}:{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}
