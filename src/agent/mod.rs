//! Node-agent protocol, server side (seed 000 §4.3 WaitForAgentEnrollment, §4.6, §5.6; seed 001
//! §3.3, §8; docs/contracts.md §5): the enrollment endpoint deployed hosts call with the
//! single-use token their cloud-init payload carries.
//!
//! [`router`] is the HTTP surface (`POST /agent/v1/enroll`), mounted by `apply` through
//! [`EnrollmentServer`] while it runs and by the daemon (issue 6) next to its other routes.
//! The store does the work in one transaction (`Store::enroll_agent`); this module checks the
//! request's shape and size and answers with the typed JSON errors of the contract. Enrollment
//! is recorded, never turned into `active` here: the onboarding stage does that after its
//! health checks. The task API (`tasks`) hands enrolled agents their typed tasks under
//! dispatch leases (000 §5.6, 001 §8); each call is a heartbeat. docs/agent-protocol.md is the
//! protocol reference.

mod enroll;
mod server;
pub mod tasks;

use url::Url;

pub use enroll::{EnrollRequestBody, EnrollResponse, ErrorBody, MAX_BODY_BYTES};
pub use server::{AgentError, EnrollmentServer};
pub use tasks::{TaskTiming, TaskType};

use crate::store::Store;

/// The enrollment path below the public base URL.
pub const ENROLL_PATH: &str = "agent/v1/enroll";
/// The task API of one node below the public base URL: `agent/v1/nodes/{node_id}/tasks`
/// (poll `…/wait`, report `…/{task_id}/result`).
pub fn tasks_path(node: uuid::Uuid) -> String {
    format!("agent/v1/nodes/{node}/tasks")
}
/// How often an enrolled agent is told to poll (each poll is a heartbeat).
pub const HEARTBEAT_INTERVAL_SECONDS: u64 = 30;

/// What the endpoint needs: the store and the base URL agents reach metalform at.
#[derive(Debug, Clone)]
pub struct AgentState {
    store: Store,
    base: Url,
    tasks: TaskTiming,
    /// Set when the server stops: waiting polls answer 204 at once, so shutdown is not held up
    /// by long-polls.
    closing: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
}

impl AgentState {
    /// `public_base` is the URL deployed hosts use to reach this server (e.g.
    /// `http://10.176.46.5:8740/`); enrollment and task URLs are made from it.
    pub fn new(store: Store, public_base: Url) -> Self {
        Self {
            store,
            base: with_trailing_slash(public_base),
            tasks: TaskTiming::default(),
            closing: std::sync::Arc::new(tokio::sync::watch::channel(false).0),
        }
    }

    /// End every waiting task poll (204) and answer new ones at once: call before a graceful
    /// shutdown.
    pub fn close_polls(&self) {
        self.closing.send_replace(true);
    }

    /// Task lease and long-poll step (tests shorten them).
    pub fn with_task_timing(mut self, timing: TaskTiming) -> Self {
        self.tasks = timing;
        self
    }

    pub fn enroll_url(&self) -> String {
        join(&self.base, ENROLL_PATH)
    }

    /// Where the agent of `node` polls for tasks (`<tasks_url>/wait`) and reports results.
    pub fn tasks_url(&self, node: uuid::Uuid) -> String {
        join(&self.base, &tasks_path(node))
    }
}

/// The enrollment URL for a public base URL (what cloud-init carries).
pub fn enroll_url(public_base: &Url) -> String {
    join(&with_trailing_slash(public_base.clone()), ENROLL_PATH)
}

/// The routes of the agent API: enrollment and the task long-poll.
pub fn router(state: AgentState) -> axum::Router {
    enroll::routes().merge(tasks::routes()).with_state(state)
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
