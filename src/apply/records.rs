//! What applying a plan writes besides jobs (issue 18): the release policy of every node the
//! manifests have (pruning decommissions a removed node with the one recorded last), and the
//! audit of every maintenance window an operator overrode (`--ignore-windows`, or the API's
//! `ignore_windows`). `metalform apply` and the daemon call both before they run work.

use serde_json::json;

use crate::model::Fleet;
use crate::observe::InventoryNode;
use crate::plan::{Plan, policy_updates};
use crate::store::{Actor, AuditEntry, Store, StoreError};

/// Record, for every node of the inventory `inventory` that the manifests have, the release
/// policy they give it now (only where it changed; each write audited). Returns how many.
pub async fn sync_release_policies(
    store: &Store,
    fleet: &Fleet,
    inventory: &[InventoryNode],
    actor: &Actor,
) -> Result<usize, StoreError> {
    let updates = policy_updates(fleet, inventory);
    for update in &updates {
        store
            .record_release_policy(update.node_id, &update.policy, actor)
            .await?;
    }
    Ok(updates.len())
}

/// [`sync_release_policies`] for the live nodes of the store in `fleet`'s sites.
pub async fn sync_release_policies_now(
    store: &Store,
    fleet: &Fleet,
    actor: &Actor,
) -> Result<usize, StoreError> {
    let nodes = store
        .list_nodes(&crate::store::NodeFilter::default())
        .await?;
    let inventory: Vec<InventoryNode> = nodes
        .iter()
        .filter(|n| fleet.sites.keys().any(|s| s.as_str() == n.site))
        .map(InventoryNode::from)
        .collect();
    sync_release_policies(store, fleet, &inventory, actor).await
}

/// Audit each change item of `plan` that runs although its maintenance window is closed:
/// actor and role, the operator's reason, the node, the window and the action.
pub async fn audit_window_overrides(
    store: &Store,
    plan: &Plan,
    actor: &Actor,
    reason: Option<&str>,
) -> Result<usize, StoreError> {
    let mut audited = 0;
    for item in plan.changes() {
        let Some(window) = &item.window_ignored else {
            continue;
        };
        let node = item.target.as_ref().and_then(|t| t.node_id);
        store
            .audit(&AuditEntry {
                actor: actor.clone(),
                reason: reason.map(str::to_owned),
                action: "plan.maintenance_window_ignored".into(),
                subject_kind: "node".into(),
                subject_id: node.map_or_else(|| item.node.to_string(), |id| id.to_string()),
                prior_state: None,
                expected_target: Some(item.action.name().into()),
                correlation_ids: json!({"plan_id": plan.id, "node": item.node.to_string()}),
                details: json!({"window": window, "action": item.action.name(), "reason": item.reason}),
            })
            .await?;
        audited += 1;
    }
    Ok(audited)
}
