//! The node-agent protocol (seed 000 §4.3 WaitForAgentEnrollment, §4.6, §5.6, §6.3; seed 001
//! §3.3, §8; docs/agent-protocol.md): the server side — enrollment, the task long-poll with
//! dispatch leases, results, lease renewal — and, in [`node`], the agent that runs on a
//! deployed host (`metalform agent`).
//!
//! [`AgentChannel`] is the server's state and routes; [`AgentServer`] serves it on its own
//! hardened listener (crate::listener), separate from the admin API. `apply` and the daemon
//! both start an [`AgentServer`]: one implementation.
//!
//! Heartbeats cost the store nothing per call ([`dispatch`], [`contacts`]): a checked agent token
//! is remembered until the store serial moves (a revocation or an enrollment moves it; the
//! serial is read once per poll step), which nodes have a task to claim is read once per poll
//! step for all nodes together (through the tasks' status index: the cost follows the open
//! tasks, not the agents), and every authenticated call's contact is noted in memory and written
//! in batches, one transaction per flush. The same read wakes the waiting long-polls.
//! The store does the leasing (`Store::claim_task`, `Store::renew_task`,
//! `Store::complete_task`).

mod contacts;
mod dispatch;
mod enroll;
pub mod node;
mod server;
mod signals;
pub mod tasks;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use url::Url;

pub use enroll::{EnrollRequestBody, EnrollResponse, MAX_BODY_BYTES};
pub use server::{AgentError, AgentServer, AgentServerConfig, server_certificate_names};
pub use signals::{AgentSignals, AgentWatch};
pub use tasks::{TaskTiming, TaskType};

/// Every error answer of the agent channel: a stable code and a sentence for people.
pub use crate::listener::ErrorBody;

use crate::store::{Store, StoreError};

/// The enrollment path below the public base URL.
pub const ENROLL_PATH: &str = "agent/v1/enroll";
/// The task API of one node below the public base URL: `agent/v1/nodes/{node_id}/tasks`
/// (poll `…/wait`, report `…/{task_id}/result`, renew `…/{task_id}/lease`).
pub fn tasks_path(node: uuid::Uuid) -> String {
    format!("agent/v1/nodes/{node}/tasks")
}
/// How often an enrolled agent is told to poll (each poll is a heartbeat).
pub const HEARTBEAT_INTERVAL_SECONDS: u64 = 30;

/// How the channel paces itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelOptions {
    pub timing: TaskTiming,
    /// How often noted agent contacts are written to the store (one transaction each time).
    /// Keep it well below the drift pass's heartbeat threshold.
    pub contact_flush: Duration,
}

impl Default for ChannelOptions {
    fn default() -> Self {
        Self {
            timing: TaskTiming::default(),
            contact_flush: Duration::from_secs(5),
        }
    }
}

/// The server side of the agent protocol: its routes and what they share.
#[derive(Clone)]
pub struct AgentChannel {
    inner: Arc<Channel>,
}

struct Channel {
    store: Store,
    base: Url,
    options: ChannelOptions,
    /// Set when the server stops: waiting polls answer 204 at once, so shutdown is not held up
    /// by long-polls.
    closing: tokio::sync::watch::Sender<bool>,
    waiters: dispatch::Waiters,
    /// Agent tokens checked and in use (by hash), valid while the serial is `known.serial`.
    known: dispatch::Known,
    contacts: contacts::ContactBook,
    /// Stages of this process waiting on an agent, woken when it enrolls.
    signals: AgentSignals,
    background: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for AgentChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentChannel")
            .field("base", &self.inner.base.as_str())
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl AgentChannel {
    /// `public_base` is the URL deployed hosts use to reach this server (e.g.
    /// `https://10.176.46.5:8741/`); enrollment and task URLs are made from it. Starts the
    /// channel's background work (the poll dispatcher and the contact flusher), so it must be
    /// called inside a tokio runtime; [`AgentChannel::close`] ends it.
    pub fn new(store: Store, public_base: Url, options: ChannelOptions) -> AgentChannel {
        let inner = Arc::new(Channel {
            store,
            base: with_trailing_slash(public_base),
            options,
            closing: tokio::sync::watch::channel(false).0,
            waiters: dispatch::Waiters::default(),
            known: dispatch::Known::default(),
            contacts: contacts::ContactBook::default(),
            signals: AgentSignals::default(),
            background: Mutex::new(Vec::new()),
        });
        let weak = Arc::downgrade(&inner);
        let tasks = vec![
            tokio::spawn(dispatch::run(weak.clone(), options.timing.poll_step)),
            tokio::spawn(contacts::run(weak, options.contact_flush)),
        ];
        *inner.background.lock().expect("background lock") = tasks;
        AgentChannel { inner }
    }

    /// The routes: enrollment, the task long-poll, results and lease renewal.
    pub fn router(&self) -> axum::Router {
        enroll::routes()
            .merge(tasks::routes())
            .fallback(not_found)
            .with_state(self.clone())
            // A malformed query string is a typed JSON error like every other answer.
            .layer(axum::middleware::from_fn(crate::api::typed_rejections))
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    pub fn enroll_url(&self) -> String {
        join(&self.inner.base, ENROLL_PATH)
    }

    /// Where the agent of `node` polls for tasks (`<tasks_url>/wait`) and reports results.
    pub fn tasks_url(&self, node: uuid::Uuid) -> String {
        join(&self.inner.base, &tasks_path(node))
    }

    /// What wakes this process's stages waiting on an agent (an enrollment recorded here).
    pub fn signals(&self) -> &AgentSignals {
        &self.inner.signals
    }

    /// How many task polls are waiting now.
    pub fn waiting_polls(&self) -> usize {
        self.inner.waiters.count()
    }

    /// End every waiting task poll (204) and answer new ones at once: the first step of a
    /// graceful shutdown.
    pub fn close_polls(&self) {
        self.inner.closing.send_replace(true);
    }

    /// Write the agent contacts noted since the last flush (one transaction); how many.
    pub async fn flush_contacts(&self) -> Result<usize, StoreError> {
        contacts::flush(&self.inner).await
    }

    /// Stop: waiting polls answer 204, the background work ends, and the noted contacts are
    /// written (so a restart does not lose them).
    pub async fn close(&self) {
        self.close_polls();
        let tasks = std::mem::take(&mut *self.inner.background.lock().expect("background lock"));
        for task in tasks {
            task.abort();
        }
        if let Err(err) = self.flush_contacts().await {
            tracing::error!(error = %err, "agent contacts not written at shutdown");
        }
    }
}

async fn not_found() -> axum::response::Response {
    crate::listener::error_response(
        axum::http::StatusCode::NOT_FOUND,
        "not_found",
        "no such agent route (docs/agent-protocol.md)",
    )
}

/// The enrollment URL for a public base URL (what cloud-init carries).
pub fn enroll_url(public_base: &Url) -> String {
    join(&with_trailing_slash(public_base.clone()), ENROLL_PATH)
}

/// A base whose path ends in `/`, so joining keeps any prefix (`http://h/metalform/`).
fn with_trailing_slash(mut url: Url) -> Url {
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    url.set_query(None);
    url.set_fragment(None);
    url
}

fn join(base: &Url, path: &str) -> String {
    base.join(path)
        .map(String::from)
        .unwrap_or_else(|_| format!("{base}{path}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_the_base_path() {
        let url = |s: &str| enroll_url(&Url::parse(s).unwrap());
        assert_eq!(
            url("http://10.0.0.5:8740"),
            "http://10.0.0.5:8740/agent/v1/enroll"
        );
        assert_eq!(
            url("http://10.0.0.5:8740/"),
            "http://10.0.0.5:8740/agent/v1/enroll"
        );
        assert_eq!(
            url("https://ctl.example/metalform?x=1"),
            "https://ctl.example/metalform/agent/v1/enroll"
        );
    }
}
