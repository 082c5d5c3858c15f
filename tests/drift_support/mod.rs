//! Drift test bed: nodes onboarded to active against the simulator (tests/onboard_support),
//! then changed out of band through the simulator's control API and reconciled by a drift pass.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use metalform::drift::{DriftEnv, DriftPolicy, DriftReport};
use metalform::lifecycle::{DecommissionMode, JobKind, JobState, NodeState, Owner};
use metalform::model::SiteName;
use metalform::observe::MaasClients;
use metalform::provider::maas::{MaasClientOptions, RetryPolicy};
use metalform::sim::Counters;
use metalform::store::{
    Actor, AuditRecord, JobUpdate, NewDecommission, Node, NodeTransition, Store,
};
use uuid::Uuid;

use crate::onboard_support::{Bed, Setup, SiteSetup};

/// A site of `declared` active nodes plus `extra` machines MAAS has that no manifest declares.
/// Commissioning takes simulated days here, so a recommissioned machine stays Commissioning.
pub async fn active_site(declared: usize, extra: usize) -> Bed {
    let mut site = SiteSetup::generated("dc1", 11, declared + extra, 0);
    site.config.timings.commissioning_secs = 30.0 * 86_400.0;
    site.config.timings.node_timeout_secs = 60.0 * 86_400.0;
    site.declared = Some((0..declared).collect());
    let bed = Bed::start(Setup::one_site(site)).await;
    let report = bed.executor().run(bed.onboard_all()).await;
    assert!(report.all_converged(), "{report:#?}");
    bed
}

/// The active node of a hostname and its machine's system id.
pub async fn node_of(bed: &Bed, hostname: &str) -> (Node, String) {
    let node = bed.store.find_node("dc1", hostname).await.unwrap().unwrap();
    let state = bed.store.maas_state(node.id).await.unwrap().unwrap();
    (node, state.maas_system_id)
}

/// The site's live nodes with their machines, ordered by hostname.
pub async fn nodes(bed: &Bed) -> Vec<(Node, String)> {
    let mut out = Vec::new();
    for node in bed
        .store
        .list_nodes(&metalform::store::NodeFilter::default())
        .await
        .unwrap()
    {
        let state = bed.store.maas_state(node.id).await.unwrap().unwrap();
        out.push((node, state.maas_system_id));
    }
    out
}

/// An out-of-band operator change through `POST /sim/v1/machines/{id}/oob`.
pub async fn out_of_band(bed: &Bed, system_id: &str, action: &str) -> serde_json::Value {
    let url = format!(
        "{}/sim/v1/machines/{system_id}/oob",
        bed.sim("dc1").base_url().trim_end_matches('/')
    );
    let response = reqwest::Client::new()
        .post(url)
        .json(&serde_json::json!({"action": action}))
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body: serde_json::Value = response.json().await.unwrap();
    assert!(
        status.is_success(),
        "oob {action} on {system_id}: {status} {body}"
    );
    body
}

/// One machine's request counters (requests that took effect).
pub fn counters(bed: &Bed, system_id: &str) -> Counters {
    bed.sim("dc1")
        .counters()
        .get(system_id)
        .cloned()
        .unwrap_or_default()
}

/// The MAAS status the simulator shows now.
pub fn sim_status(bed: &Bed, system_id: &str) -> Option<String> {
    bed.sim("dc1")
        .with_world(|w| w.machine(system_id).map(|m| m.status.name().to_owned()))
}

/// A drift environment on `store` (the bed's, or one with another clock on the same file).
pub fn drift_env(bed: &Bed, store: Store, policy: DriftPolicy) -> DriftEnv {
    let options = MaasClientOptions {
        metrics: bed.metrics.clone(),
        retry: RetryPolicy {
            base_delay: Duration::from_millis(50),
            max_delay: Duration::from_millis(500),
            ..RetryPolicy::default()
        },
        ..MaasClientOptions::default()
    };
    DriftEnv::new(
        store,
        bed.secrets.clone(),
        MaasClients::new(options),
        policy,
    )
}

/// One drift pass of site dc1.
pub async fn pass(env: &DriftEnv, bed: &Bed) -> DriftReport {
    let site = &bed.fleet.sites[&SiteName::new("dc1")];
    metalform::drift::reconcile_site(env, site, None)
        .await
        .expect("drift pass")
}

/// Retire a node in the inventory without telling MAAS (000 §6.2 "GPUasService retires node,
/// MAAS not told"): a full decommission drains and retires it, then is cancelled before it
/// reaches MAAS.
pub async fn retire_without_maas(store: &Store, node: Uuid) {
    let actor = Actor::system("test-decommission");
    let job = store
        .create_decommission(&NewDecommission {
            node_id: node,
            mode: DecommissionMode::FullDecommission,
            erase: None,
            storage_cleanup: None,
            reason: Some("hardware returned".into()),
            requested_by: None,
            plan_id: None,
        })
        .await
        .unwrap();
    for to in [NodeState::Draining, NodeState::Retired] {
        let mut update = JobUpdate::new(JobState::Running);
        update.node_transition = Some(NodeTransition::new(
            to,
            Owner::DecommissionWorkflow,
            actor.clone(),
        ));
        store
            .advance_job(JobKind::Decommission, job.id, &update)
            .await
            .unwrap();
    }
    for state in [JobState::Compensating, JobState::Cancelled] {
        store
            .advance_job(JobKind::Decommission, job.id, &JobUpdate::new(state))
            .await
            .unwrap();
    }
    assert_eq!(store.node(node).await.unwrap().status, NodeState::Retired);
}

/// The node's audit rows with this action.
pub async fn audits(store: &Store, node: Uuid, action: &str) -> Vec<AuditRecord> {
    store
        .audit_log("node", &node.to_string())
        .await
        .unwrap()
        .into_iter()
        .filter(|a| a.action == action)
        .collect()
}

/// Make the node's agent silent since `ago`: its agent process stops (out of band), its last
/// long-poll (2 s) ends, then its last contact is written by a store whose clock is `ago` back,
/// on the same database.
pub async fn silence_agent(bed: &Bed, node: Uuid, system_id: &str, ago: chrono::Duration) {
    out_of_band(bed, system_id, "stop_agent").await;
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let past = metalform::clock::ManualClock::new(chrono::Utc::now() - ago);
    let store = Store::open(&bed.state_url, Arc::new(past)).await.unwrap();
    store.touch_agent_contact(node).await.unwrap();
    store.close().await;
}
