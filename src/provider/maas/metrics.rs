//! MAAS requests counted by operation and status (issue 3; later: "MAAS requests per
//! reconcile" and the daemon's Prometheus metrics, DESIGN.md §6).
//!
//! Every HTTP attempt is one count, retries included: the figure is what MAAS had to serve.
//! The handle is cheap to clone and shared between clients (one per site, or one per process).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The outcome label of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RequestStatus {
    /// MAAS answered with this HTTP status.
    Http(u16),
    /// The connection could not be made.
    ConnectError,
    /// No complete answer in time.
    Timeout,
    /// The connection broke during the exchange.
    TransportError,
}

impl fmt::Display for RequestStatus {
    /// The Prometheus label value: `200`, `connect_error`, `timeout`, `transport_error`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestStatus::Http(code) => write!(f, "{code}"),
            RequestStatus::ConnectError => f.write_str("connect_error"),
            RequestStatus::Timeout => f.write_str("timeout"),
            RequestStatus::TransportError => f.write_str("transport_error"),
        }
    }
}

/// Shared request counters: `{("deploy", Http(200)): 3, ("list_machines", Http(503)): 1}`.
#[derive(Clone, Default)]
pub struct MaasMetrics {
    counts: Arc<Mutex<BTreeMap<(&'static str, RequestStatus), u64>>>,
}

impl MaasMetrics {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(&'static str, RequestStatus), u64>> {
        // Counters stay consistent even if a holder panicked: each update is one insert.
        self.counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn count(&self, operation: &'static str, status: RequestStatus) {
        *self.lock().entry((operation, status)).or_insert(0) += 1;
    }

    /// A copy of all counters, ordered by operation then status.
    pub fn snapshot(&self) -> BTreeMap<(&'static str, RequestStatus), u64> {
        self.lock().clone()
    }

    /// All requests made so far.
    pub fn total(&self) -> u64 {
        self.lock().values().sum()
    }

    /// Requests made for one operation, whatever their status.
    pub fn operation_total(&self, operation: &str) -> u64 {
        self.lock()
            .iter()
            .filter(|((op, _), _)| *op == operation)
            .map(|(_, n)| n)
            .sum()
    }

    /// One counter.
    pub fn get(&self, operation: &str, status: RequestStatus) -> u64 {
        self.lock()
            .iter()
            .find(|((op, st), _)| *op == operation && *st == status)
            .map_or(0, |(_, n)| *n)
    }
}

impl fmt::Debug for MaasMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(
                self.snapshot()
                    .into_iter()
                    .map(|((op, status), n)| (format!("{op} {status}"), n)),
            )
            .finish()
    }
}

/// One request's outcome: logged and counted in one place.
pub(crate) struct RequestEvent<'a> {
    pub operation: &'static str,
    pub method: &'a str,
    pub path: &'a str,
    pub status: RequestStatus,
    pub attempt: u32,
    pub elapsed: Duration,
}

impl RequestEvent<'_> {
    pub(crate) fn emit(self, metrics: &MaasMetrics) {
        metrics.count(self.operation, self.status);
        // Paths and statuses only: bodies may carry user_data, power passwords or tokens.
        tracing::debug!(
            target: "metalform::maas",
            operation = self.operation,
            method = self.method,
            path = self.path,
            status = %self.status,
            attempt = self.attempt,
            elapsed_ms = self.elapsed.as_millis() as u64,
            "MAAS request"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_operation_and_status_across_clones() {
        let metrics = MaasMetrics::new();
        let shared = metrics.clone();
        metrics.count("deploy", RequestStatus::Http(200));
        shared.count("deploy", RequestStatus::Http(200));
        shared.count("list_machines", RequestStatus::Http(503));
        shared.count("list_machines", RequestStatus::Timeout);
        assert_eq!(metrics.total(), 4);
        assert_eq!(metrics.get("deploy", RequestStatus::Http(200)), 2);
        assert_eq!(metrics.operation_total("list_machines"), 2);
        assert_eq!(
            metrics.snapshot().into_iter().collect::<Vec<_>>(),
            vec![
                (("deploy", RequestStatus::Http(200)), 2),
                (("list_machines", RequestStatus::Http(503)), 1),
                (("list_machines", RequestStatus::Timeout), 1),
            ]
        );
        assert_eq!(
            format!("{metrics:?}"),
            r#"{"deploy 200": 2, "list_machines 503": 1, "list_machines timeout": 1}"#
        );
    }
}
