//! The provisioning verbs of seed 002 on a MAAS-driven node (issue 18): what the admin API's
//! `PUT /api/v1/admin/nodes/{node_id}/states/provision` and `metalform provision` call.
//!
//! A verb is checked against seed 002's transitions in the node's provider-neutral view (and
//! seed 004's retired and protected flags) first: an illegal one is a conflict naming the
//! current state. Then it is carried out where MAAS has an equivalent — inspect = commission,
//! clean = release with erase (a Ready machine is allocated first), provide = mark_fixed of a
//! Broken machine, rescue/unrescue = rescue mode, abort = abort an erase or test — under the
//! node's lease (no executor works on it meanwhile), audited before the MAAS call. Deploy,
//! rebuild and delete are the manifests' (`lifecycle`, `reimage.generation`); manage has no
//! MAAS equivalent. While a job of metalform's works on the node, no verb runs: the job owns it.

use std::time::Duration;

use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use super::lease::{LeaseRefusal, NodeLease};
use crate::lifecycle::{
    JobKind, JobState, MaasOperation, ProvisionView, Verb, VerbRefusal, plan_verb,
};
use crate::model::{EraseMode, Fleet};
use crate::provider::maas::{EraseMode as MaasErase, MaasClient, MaasError, ReleaseParams};
use crate::store::{Actor, AuditEntry, MaasStateUpdate, Store, StoreError};

/// Why a verb was not carried out. Nothing was changed when this is returned, except for
/// [`VerbError::Maas`] after the audit row of the attempt.
#[derive(Debug, thiserror::Error)]
pub enum VerbError {
    #[error("node `{0}` not found")]
    NotFound(String),
    /// Seed 002/004 refuse it in the node's state (409, with the current state).
    #[error(transparent)]
    Refused(VerbRefusal),
    /// A job of metalform's owns the node.
    #[error(
        "{kind} {job} is {state} on this node: it owns the node until it ends (cancel it to stop it)"
    )]
    JobOpen {
        kind: JobKind,
        job: Uuid,
        state: JobState,
    },
    /// No view can be made: the node's machine was never observed.
    #[error(
        "the provision state of node {0} is not known yet (its machine was never observed in MAAS); run a reconcile first"
    )]
    Unknown(Uuid),
    /// The node's site is not in the fleet the caller holds, or its machine is not bound.
    #[error("{0}")]
    Unavailable(String),
    #[error("another executor holds the node: {0}")]
    Busy(String),
    #[error("MAAS refused `{op}`: {source}")]
    Maas { op: &'static str, source: MaasError },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A verb carried out.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerbDone {
    pub node_id: Uuid,
    pub verb: Verb,
    /// The MAAS operation(s) sent.
    pub operation: MaasOperation,
    pub system_id: String,
    /// The view before the verb.
    pub before: ProvisionView,
    /// The view after MAAS took it (its answer's status).
    pub after: Option<ProvisionView>,
    /// MAAS's status of the machine in its answer.
    pub maas_status: String,
}

/// What an operator asks.
#[derive(Debug, Clone)]
pub struct VerbRequest {
    pub node_id: Uuid,
    pub verb: Verb,
    pub actor: Actor,
    /// Why (audited).
    pub reason: String,
    /// The lease lifetime; the node's lease is taken without waiting (a live executor wins).
    pub lease_ttl: Duration,
}

/// Carry out a verb on a node of `fleet` (see the module doc).
pub async fn carry_out_verb(
    store: &Store,
    maas: &dyn crate::stages::onboard::MaasAccess,
    fleet: &Fleet,
    request: &VerbRequest,
) -> Result<VerbDone, VerbError> {
    let VerbRequest {
        node_id,
        verb,
        ref actor,
        ref reason,
        lease_ttl,
    } = *request;
    let found = store.node_view(node_id).await.map_err(|e| match e {
        StoreError::NotFound { .. } => VerbError::NotFound(node_id.to_string()),
        other => VerbError::Store(other),
    })?;
    if let Some(job) = found.job.as_ref().filter(|j| j.state.is_open()) {
        return Err(VerbError::JobOpen {
            kind: job.kind,
            job: job.id,
            state: job.state,
        });
    }
    let view = found.view.clone().ok_or(VerbError::Unknown(node_id))?;
    let observed = view.node.state;
    let status = found
        .maas
        .as_ref()
        .and_then(|m| m.last_maas_status.as_deref())
        .and_then(crate::lifecycle::MaasStatus::from_name);
    let operation = plan_verb(&view, verb, status).map_err(VerbError::Refused)?;
    let node = &found.node;
    let site = fleet
        .sites
        .values()
        .find(|s| s.name.as_str() == node.site)
        .ok_or_else(|| {
            VerbError::Unavailable(format!(
                "site `{}` of node {} is not in the fleet: its MAAS is unknown",
                node.site, node.id
            ))
        })?;
    let system_id = found
        .maas
        .as_ref()
        .map(|m| m.maas_system_id.clone())
        .or_else(|| found.job.as_ref().and_then(|j| j.maas_system_id.clone()))
        .ok_or_else(|| {
            VerbError::Unavailable(format!("node {} has no MAAS machine on record", node.id))
        })?;
    let holder = format!("provision:{}", super::default_holder());
    let lease = NodeLease::acquire(
        store,
        &crate::store::LeaseTarget::Named(super::onboarding_lease_name(&node.site, &node.hostname)),
        &holder,
        lease_ttl,
        Duration::ZERO,
    )
    .await
    .map_err(|refusal| match refusal {
        LeaseRefusal::Busy { .. } => VerbError::Busy(refusal.reason()),
        LeaseRefusal::Store(err) => VerbError::Store(err),
    })?;
    let result = async {
        // Audited before MAAS is asked: an operation that reached MAAS is never unrecorded.
        store
            .audit(&AuditEntry {
                actor: actor.clone(),
                reason: Some(reason.to_owned()),
                action: format!("node.provision.{verb}"),
                subject_kind: "node".into(),
                subject_id: node.id.to_string(),
                prior_state: Some(observed.to_string()),
                expected_target: view
                    .node
                    .apply(&crate::lifecycle::IronicEvent::Verb(verb))
                    .ok()
                    .map(|n| n.state.to_string()),
                correlation_ids: json!({"node_id": node.id, "system_id": system_id}),
                details: json!({"verb": verb, "maas": operation.op()}),
            })
            .await?;
        let client = maas
            .client(site)
            .await
            .map_err(|failure| VerbError::Unavailable(failure.message))?;
        let erase = node
            .release_policy
            .as_ref()
            .map(|p| p.erase)
            .unwrap_or(EraseMode::Quick);
        let machine = send(&client, &system_id, operation, erase, verb, reason)
            .await
            .map_err(|(op, source)| VerbError::Maas { op, source })?;
        let maas_status = machine.status_label();
        store
            .upsert_maas_state(&MaasStateUpdate {
                node_id: node.id,
                site: node.site.clone(),
                maas_system_id: system_id.clone(),
                status: Some(maas_status.clone()),
                power_state: Some(machine.power_state.as_str().to_owned()),
                ips: machine.ip_addresses.clone(),
                drift: None,
            })
            .await?;
        let after = store.node_view(node.id).await?.view;
        Ok(VerbDone {
            node_id: node.id,
            verb,
            operation,
            system_id: system_id.clone(),
            before: view.clone(),
            after,
            maas_status,
        })
    }
    .await;
    lease.release().await;
    result
}

async fn send(
    client: &MaasClient,
    system_id: &str,
    operation: MaasOperation,
    erase: EraseMode,
    verb: Verb,
    reason: &str,
) -> Result<crate::provider::maas::Machine, (&'static str, MaasError)> {
    let comment = format!("metalform {verb}: {reason}");
    match operation {
        MaasOperation::Commission => client
            .commission(system_id, &Default::default())
            .await
            .map_err(|e| ("commission", e)),
        MaasOperation::Erase { allocate_first } => {
            if allocate_first {
                client
                    .allocate(system_id)
                    .await
                    .map_err(|e| ("allocate", e))?;
            }
            let mut params = ReleaseParams::erasing(match erase {
                EraseMode::None => MaasErase::None,
                EraseMode::Quick => MaasErase::Quick,
                EraseMode::Secure => MaasErase::Secure,
            });
            params.comment = Some(comment);
            client
                .release(system_id, &params)
                .await
                .map_err(|e| ("release", e))
        }
        MaasOperation::MarkFixed => client
            .mark_fixed(system_id, Some(&comment))
            .await
            .map_err(|e| ("mark_fixed", e)),
        MaasOperation::Abort => client
            .abort(system_id, Some(&comment))
            .await
            .map_err(|e| ("abort", e)),
        MaasOperation::Rescue => client
            .rescue_mode(system_id)
            .await
            .map_err(|e| ("rescue_mode", e)),
        MaasOperation::ExitRescue => client
            .exit_rescue_mode(system_id)
            .await
            .map_err(|e| ("exit_rescue_mode", e)),
    }
}
