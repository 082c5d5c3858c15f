//! Each node's first-boot user-data in a plan (seed 000 §9; issue 12 "Install path"): the
//! payload a deploy would render now — the manifests, and the agent install of
//! [`PlanOptions::payload`] or else the one last used — against the payload last rendered for
//! the node (the record its journal keeps), as a diff of the redacted documents. Both sides are
//! rendered redacted: no enrollment token or password hash can appear.
//!
//! A node whose inputs are those of its record shows nothing, so a converged fleet renders
//! nothing here; a new onboarding shows its layers only when the plan knows the agent install.

use std::collections::HashMap;

use crate::cloudinit::{self, CloudInitInput, LayerSummary, NodeRuntime, PayloadRecord};
use crate::model::{Fleet, Lifecycle, Node, Profile, Site};
use crate::observe::Snapshot;

use super::types::{
    Action, PayloadSettings, PlanItem, PlanOptions, UserDataApplies, UserDataChange,
};

/// What stands for a value a review cannot know (the matched machine, the enrollment URL).
const SYSTEM_ID_PLACEHOLDER: &str = "<system-id>";
const ENROLL_URL_PLACEHOLDER: &str = "<enroll-url>";

/// Set `user_data` on the items whose node's payload would change.
pub(super) fn attach(
    fleet: &Fleet,
    snapshot: &Snapshot,
    options: &PlanOptions,
    items: &mut [PlanItem],
) {
    let records = latest_records(snapshot);
    for item in items.iter_mut() {
        let Some(node) = fleet.nodes.get(&item.node) else {
            continue;
        };
        if node.lifecycle != Lifecycle::Active {
            continue;
        }
        let applies = match item.action {
            Action::Onboard
            | Action::Rerun { .. }
            | Action::Reimage { .. }
            | Action::Reactivate => UserDataApplies::ThisDeploy,
            Action::Noop
            | Action::Adopt { .. }
            | Action::Resume { .. }
            | Action::Blocked { .. } => UserDataApplies::NextDeploy,
            // Nothing of cloud-init: the node leaves, or Redfish installs it.
            Action::Decommission
            | Action::Retire
            | Action::Prune
            | Action::Provision { .. }
            | Action::ResumeDecommission { .. } => continue,
        };
        let (Some(site), Some(profile)) = (fleet.site_of(node), fleet.profile_of(node)) else {
            continue;
        };
        let system_id = item.target.as_ref().and_then(|t| t.system_id.clone());
        let key = (node.id.site.as_str(), node.id.hostname.as_str());
        item.user_data = match records.get(&key) {
            Some(record) => changed(site, profile, node, record, system_id, options, applies),
            None if item.action == Action::Onboard => options
                .payload
                .as_ref()
                .and_then(|settings| new_payload(site, profile, node, system_id, settings)),
            None => None,
        };
    }
}

/// Per (site, hostname): the payload record of the node's most recently requested job that
/// rendered one (an onboarding, or a reimage's redeploy).
fn latest_records(snapshot: &Snapshot) -> HashMap<(&str, &str), &PayloadRecord> {
    let mut latest: HashMap<(&str, &str), (&crate::observe::ObservedJob, &PayloadRecord)> =
        HashMap::new();
    for job in &snapshot.jobs {
        let Some(record) = &job.payload else {
            continue;
        };
        let key = (job.site.as_str(), job.hostname.as_str());
        let newer = latest
            .get(&key)
            .is_none_or(|(seen, _)| (job.requested_at, job.id) > (seen.requested_at, seen.id));
        if newer {
            latest.insert(key, (job, record));
        }
    }
    latest.into_iter().map(|(k, (_, r))| (k, r)).collect()
}

/// The node's payload now against its record; `None` when the inputs are the record's.
fn changed(
    site: &Site,
    profile: &Profile,
    node: &Node,
    record: &PayloadRecord,
    system_id: Option<String>,
    options: &PlanOptions,
    applies: UserDataApplies,
) -> Option<UserDataChange> {
    let settings = options.payload.as_ref();
    let runtime = NodeRuntime::for_review(
        profile,
        system_id.unwrap_or_else(|| record.system_id.clone()),
        settings
            .and_then(|s| s.enroll_url.clone())
            .unwrap_or_else(|| record.enroll_url.clone()),
        record.boot_disk_hint.clone(),
        settings.map_or_else(|| record.agent_install(), |s| s.agent.clone()),
    );
    let now = CloudInitInput::for_node(site, profile, node, runtime);
    if now.record(&record.digest) == *record {
        return None;
    }
    let after = cloudinit::render_review(&now).ok()?;
    if after.digest == record.digest {
        return None;
    }
    // The record's inputs rendered by this metalform: a payload it rendered with other
    // layer scripts still diffs by what the inputs changed.
    let before = cloudinit::render_review(&record.input()).ok()?;
    Some(UserDataChange {
        before: Some(record.digest.clone()),
        after: after.digest,
        applies,
        layers: changed_layers(&before.layers, &after.layers),
        diff: cloudinit::review_diff(&before.document, &after.document),
    })
}

/// A new onboarding's payload: its layers (the document is the one `render cloud-init` prints).
fn new_payload(
    site: &Site,
    profile: &Profile,
    node: &Node,
    system_id: Option<String>,
    settings: &PayloadSettings,
) -> Option<UserDataChange> {
    let runtime = NodeRuntime::for_review(
        profile,
        system_id.unwrap_or_else(|| SYSTEM_ID_PLACEHOLDER.to_string()),
        settings
            .enroll_url
            .clone()
            .unwrap_or_else(|| ENROLL_URL_PLACEHOLDER.to_string()),
        None,
        settings.agent.clone(),
    );
    let review =
        cloudinit::render_review(&CloudInitInput::for_node(site, profile, node, runtime)).ok()?;
    Some(UserDataChange {
        before: None,
        after: review.digest,
        applies: UserDataApplies::ThisDeploy,
        layers: review
            .layers
            .iter()
            .filter(|l| l.included)
            .map(layer_line)
            .collect(),
        diff: Vec::new(),
    })
}

/// The layers of `after` that differ from `before` (version, inclusion or what they do).
fn changed_layers(before: &[LayerSummary], after: &[LayerSummary]) -> Vec<String> {
    after
        .iter()
        .filter(|layer| !before.iter().any(|b| b == *layer))
        .map(layer_line)
        .collect()
}

fn layer_line(layer: &LayerSummary) -> String {
    if layer.included {
        format!(
            "{} {} v{}: {}",
            layer.order, layer.name, layer.version, layer.detail
        )
    } else {
        format!("{} {}: skipped: {}", layer.order, layer.name, layer.detail)
    }
}
