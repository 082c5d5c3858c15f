//! The daemon's Prometheus metrics (DESIGN.md §6; docs/daemon.md "Metrics"): one registry, owned
//! here. Other parts report counts through their return values (plans, apply reports, drift
//! reports); the daemon records them.
//!
//! | metric | labels |
//! |---|---|
//! | `metalform_reconcile_duration_seconds` (histogram) | site |
//! | `metalform_reconciles_total` | site, outcome |
//! | `metalform_plan_items` (gauge, last plan) | site, kind |
//! | `metalform_stage_outcomes_total` | stage, status |
//! | `metalform_node_outcomes_total` | outcome, failure_class |
//! | `metalform_maas_requests_total` | operation, status |
//! | `metalform_drift_findings` (gauge, last pass) | site, rule |
//! | `metalform_drift_actions_total` | site, action, result |
//! | `metalform_jobs` (gauge) | kind, site, state |
//! | `metalform_source_reads_total` | outcome |
//! | `metalform_events_delivered_total`, `metalform_event_delivery_failures_total` | — |

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::apply::{ApplyReport, NodeOutcome, ProgressEvent, ProgressStatus};
use crate::drift::{DriftReport, Rule};
use crate::plan::Plan;
use crate::provider::maas::MaasMetrics;

type Labels = Vec<(&'static str, String)>;

/// Every metric the daemon serves on `/metrics`.
pub struct Metrics {
    registry: Registry,
    reconcile_duration: Family<Labels, Histogram>,
    reconciles: Family<Labels, Counter>,
    plan_items: Family<Labels, Gauge>,
    stage_outcomes: Family<Labels, Counter>,
    node_outcomes: Family<Labels, Counter>,
    drift_findings: Family<Labels, Gauge>,
    drift_actions: Family<Labels, Counter>,
    jobs: Family<Labels, Gauge>,
    source_reads: Family<Labels, Counter>,
    events_delivered: Counter,
    event_failures: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

/// MAAS request counters, read from the clients' shared counter on each scrape.
#[derive(Debug)]
struct MaasRequests(MaasMetrics);

impl Collector for MaasRequests {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snapshot = self.0.snapshot();
        let counter = ConstCounter::new(0u64);
        let mut family = encoder.encode_descriptor(
            "metalform_maas_requests",
            "MAAS API requests by operation and outcome (every attempt, retries included)",
            None,
            counter.metric_type(),
        )?;
        for ((operation, status), count) in snapshot {
            let labels: Labels = vec![
                ("operation", operation.to_owned()),
                ("status", status.to_string()),
            ];
            let metric = family.encode_family(&labels)?;
            ConstCounter::new(count).encode(metric)?;
        }
        Ok(())
    }
}

impl Metrics {
    pub fn new(maas: MaasMetrics) -> Arc<Metrics> {
        let mut registry = Registry::default();
        let reconcile_duration = Family::<Labels, Histogram>::new_with_constructor(|| {
            Histogram::new([0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 180.0])
        });
        let reconciles = Family::<Labels, Counter>::default();
        let plan_items = Family::<Labels, Gauge>::default();
        let stage_outcomes = Family::<Labels, Counter>::default();
        let node_outcomes = Family::<Labels, Counter>::default();
        let drift_findings = Family::<Labels, Gauge>::default();
        let drift_actions = Family::<Labels, Counter>::default();
        let jobs = Family::<Labels, Gauge>::default();
        let source_reads = Family::<Labels, Counter>::default();
        let events_delivered = Counter::default();
        let event_failures = Counter::default();
        registry.register(
            "metalform_reconcile_duration_seconds",
            "Time to observe, plan, dispatch and run the drift pass of one site's reconcile",
            reconcile_duration.clone(),
        );
        registry.register(
            "metalform_reconciles",
            "Site reconciles by outcome (ok, unreadable, error)",
            reconciles.clone(),
        );
        registry.register(
            "metalform_plan_items",
            "Items of the site's last plan by kind",
            plan_items.clone(),
        );
        registry.register(
            "metalform_stage_outcomes",
            "Stage transitions by stage and status (ok, skip, retry, FAILED, ...)",
            stage_outcomes.clone(),
        );
        registry.register(
            "metalform_node_outcomes",
            "Nodes run by the executor by outcome and failure class",
            node_outcomes.clone(),
        );
        registry.register(
            "metalform_drift_findings",
            "Drift findings of the site's last drift pass by rule",
            drift_findings.clone(),
        );
        registry.register(
            "metalform_drift_actions",
            "Drift auto-actions by kind and result (taken, held, skipped, failed)",
            drift_actions.clone(),
        );
        registry.register(
            "metalform_jobs",
            "Jobs by kind, site and job state",
            jobs.clone(),
        );
        registry.register(
            "metalform_source_reads",
            "Reads of the fleet source by outcome (accepted, unchanged, rejected, failed)",
            source_reads.clone(),
        );
        registry.register(
            "metalform_events_delivered",
            "Domain events delivered to the events sink",
            events_delivered.clone(),
        );
        registry.register(
            "metalform_event_delivery_failures",
            "Failed delivery attempts of domain events (each is retried)",
            event_failures.clone(),
        );
        registry.register_collector(Box::new(MaasRequests(maas)));
        Arc::new(Metrics {
            registry,
            reconcile_duration,
            reconciles,
            plan_items,
            stage_outcomes,
            node_outcomes,
            drift_findings,
            drift_actions,
            jobs,
            source_reads,
            events_delivered,
            event_failures,
        })
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }

    pub fn reconciled(&self, site: &str, outcome: &str, seconds: f64) {
        self.reconcile_duration
            .get_or_create(&vec![("site", site.to_owned())])
            .observe(seconds);
        self.reconciles
            .get_or_create(&vec![
                ("site", site.to_owned()),
                ("outcome", outcome.to_owned()),
            ])
            .inc();
    }

    /// The counts of a site's last plan, by action kind.
    pub fn planned(&self, site: &str, plan: &Plan) {
        let summary = plan
            .sites
            .iter()
            .find(|s| s.site.as_str() == site)
            .map(|s| s.summary)
            .unwrap_or_default();
        for (kind, n) in [
            ("onboard", summary.onboard),
            ("resume", summary.resume),
            ("rerun", summary.rerun),
            ("adopt", summary.adopt),
            ("noop", summary.noop),
            ("blocked", summary.blocked),
        ] {
            self.plan_items
                .get_or_create(&vec![("site", site.to_owned()), ("kind", kind.to_owned())])
                .set(n as i64);
        }
    }

    pub fn stage_event(&self, event: &ProgressEvent) {
        if matches!(
            event.status,
            ProgressStatus::Waiting | ProgressStatus::Begin
        ) {
            return;
        }
        self.stage_outcomes
            .get_or_create(&vec![
                ("stage", event.stage.clone()),
                ("status", event.status.label().trim().to_owned()),
            ])
            .inc();
    }

    pub fn applied(&self, report: &ApplyReport) {
        for result in &report.results {
            let (outcome, class) = match &result.outcome {
                NodeOutcome::Converged { .. } => ("converged", String::new()),
                NodeOutcome::Failed { class, .. } => ("failed", class.to_string()),
                NodeOutcome::Left { .. } => ("left", String::new()),
                NodeOutcome::Aborted { .. } => ("aborted", String::new()),
            };
            self.node_outcomes
                .get_or_create(&vec![
                    ("outcome", outcome.to_owned()),
                    ("failure_class", class),
                ])
                .inc();
        }
    }

    /// A site's drift pass: its findings by rule (every rule, 0 when none: the gauge shows
    /// the last pass) and its actions by result.
    pub fn drift(&self, report: &DriftReport) {
        for rule in Rule::ALL {
            let count = report.by_rule.get(rule.as_str()).copied().unwrap_or(0);
            self.drift_findings
                .get_or_create(&vec![
                    ("site", report.site.clone()),
                    ("rule", rule.as_str().to_owned()),
                ])
                .set(count as i64);
        }
        for outcome in &report.actions {
            self.drift_actions
                .get_or_create(&vec![
                    ("site", report.site.clone()),
                    ("action", outcome.action.as_str().to_owned()),
                    ("result", outcome.result.label().to_owned()),
                ])
                .inc();
        }
    }

    pub fn jobs(&self, kind: &str, site: &str, state: &str, count: usize) {
        self.jobs
            .get_or_create(&vec![
                ("kind", kind.to_owned()),
                ("site", site.to_owned()),
                ("state", state.to_owned()),
            ])
            .set(count as i64);
    }

    pub fn source_read(&self, outcome: &str) {
        self.source_reads
            .get_or_create(&vec![("outcome", outcome.to_owned())])
            .inc();
    }

    pub fn event_delivered(&self) {
        self.events_delivered.inc();
    }

    pub fn event_failed(&self) {
        self.event_failures.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::maas::RequestStatus;

    #[test]
    fn maas_requests_and_families_are_encoded() {
        let maas = MaasMetrics::new();
        let metrics = Metrics::new(maas.clone());
        maas.count("deploy", RequestStatus::Http(200));
        maas.count("deploy", RequestStatus::Http(200));
        maas.count("list_machines", RequestStatus::Timeout);
        metrics.reconciled("dc1", "ok", 0.3);
        metrics.jobs("onboarding", "dc1", "running", 2);
        metrics.drift(&drift_report());
        let text = metrics.encode();
        assert!(
            text.contains("metalform_maas_requests_total{operation=\"deploy\",status=\"200\"} 2"),
            "{text}"
        );
        assert!(
            text.contains(
                "metalform_maas_requests_total{operation=\"list_machines\",status=\"timeout\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("metalform_reconcile_duration_seconds_count{site=\"dc1\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("metalform_jobs{kind=\"onboarding\",site=\"dc1\",state=\"running\"} 2"),
            "{text}"
        );
        for needle in [
            "metalform_drift_findings{site=\"dc1\",rule=\"released_outside_workflow\"} 1",
            "metalform_drift_findings{site=\"dc1\",rule=\"deployed_active\"} 3",
            "metalform_drift_findings{site=\"dc1\",rule=\"machine_deleted\"} 0",
            "metalform_drift_actions_total{site=\"dc1\",action=\"quarantine\",result=\"taken\"} 1",
            "metalform_drift_actions_total{site=\"dc1\",action=\"update_host\",result=\"held\"} 1",
        ] {
            assert!(text.contains(needle), "no `{needle}` in\n{text}");
        }
    }

    fn drift_report() -> DriftReport {
        use crate::drift::{ActionOutcome, ActionResult, DriftAction};
        let outcome = |action, result| ActionOutcome {
            node_id: uuid::Uuid::nil(),
            hostname: "gpu01".into(),
            action,
            result,
        };
        DriftReport {
            site: "dc1".into(),
            reconciled_at: chrono::DateTime::UNIX_EPOCH,
            unreadable: None,
            findings: Vec::new(),
            by_rule: [
                ("deployed_active".to_owned(), 3),
                ("released_outside_workflow".to_owned(), 1),
            ]
            .into(),
            unmanaged: Vec::new(),
            guard: None,
            actions: vec![
                outcome(DriftAction::Quarantine, ActionResult::Taken),
                outcome(
                    DriftAction::UpdateHost {
                        from: None,
                        to: "10.0.0.2".into(),
                    },
                    ActionResult::Held("update_host is off".into()),
                ),
            ],
            errors: Vec::new(),
        }
    }
}
