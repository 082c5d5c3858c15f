//! The plan's JSON document (docs/plan.md "JSON"): what `--format json` prints and a plan file
//! holds. Items' targets name their site and profile; the resolved sites and profiles are
//! written once, under `resolved`, so a plan of 10,000 nodes over 5 sites carries 5 sites and 5
//! profiles, not 10,000 copies (reading one back compiles each profile's boot-disk pattern once).

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

use crate::model::{Node, NodeId, Profile, ProfileName, SecretRef, Site, SiteName};

use super::types::{Action, NodeTarget, Plan, PlanItem, SitePlan, Summary, UserDataChange};

#[derive(Serialize)]
struct DocumentRef<'a> {
    format: u32,
    id: &'a str,
    fleet_revision: &'a str,
    snapshot_fingerprint: &'a str,
    snapshot_parts: &'a BTreeMap<String, String>,
    store_serial: i64,
    parent: &'a Option<String>,
    sites: &'a [SitePlan],
    items: Vec<ItemRef<'a>>,
    summary: &'a Summary,
    resolved: ResolvedRef<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    signature: Option<&'a str>,
}

#[derive(Serialize)]
struct ResolvedRef<'a> {
    sites: BTreeMap<&'a SiteName, &'a Site>,
    profiles: BTreeMap<&'a ProfileName, &'a Profile>,
}

#[derive(Serialize)]
struct ItemRef<'a> {
    node: &'a NodeId,
    in_manifests: bool,
    action: &'a Action,
    reason: &'a str,
    destructive: bool,
    settled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    drift: &'a Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    window_ignored: &'a Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user_data: &'a Option<UserDataChange>,
    #[serde(skip_serializing_if = "Option::is_none")]
    target: Option<TargetRef<'a>>,
}

#[derive(Serialize)]
struct TargetRef<'a> {
    site: &'a SiteName,
    profile: &'a ProfileName,
    node: &'a Node,
    power_credentials: &'a SecretRef,
    system_id: &'a Option<String>,
    node_id: &'a Option<Uuid>,
    job_id: &'a Option<Uuid>,
}

impl Serialize for Plan {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        document(self, &self.id, self.signature.as_deref()).serialize(serializer)
    }
}

/// The plan's id: `sha256:` of its document with an empty `id` and no signature (no copy of
/// the plan is made).
pub fn content_id(plan: &Plan) -> String {
    crate::observe::hash_json(&document(plan, "", None))
}

/// The document of `plan`, with `id` as its id.
fn document<'a>(plan: &'a Plan, id: &'a str, signature: Option<&'a str>) -> DocumentRef<'a> {
    {
        let mut resolved = ResolvedRef {
            sites: BTreeMap::new(),
            profiles: BTreeMap::new(),
        };
        let items = plan
            .items
            .iter()
            .map(|item| ItemRef {
                node: &item.node,
                in_manifests: item.in_manifests,
                action: &item.action,
                reason: &item.reason,
                destructive: item.destructive,
                settled: item.settled,
                drift: &item.drift,
                window_ignored: &item.window_ignored,
                user_data: &item.user_data,
                target: item.target.as_ref().map(|t| {
                    resolved.sites.entry(&t.site.name).or_insert(&t.site);
                    resolved
                        .profiles
                        .entry(&t.profile.name)
                        .or_insert(&t.profile);
                    TargetRef {
                        site: &t.site.name,
                        profile: &t.profile.name,
                        node: &t.node,
                        power_credentials: &t.power_credentials,
                        system_id: &t.system_id,
                        node_id: &t.node_id,
                        job_id: &t.job_id,
                    }
                }),
            })
            .collect();
        DocumentRef {
            format: plan.format,
            id,
            fleet_revision: &plan.fleet_revision,
            snapshot_fingerprint: &plan.snapshot_fingerprint,
            snapshot_parts: &plan.snapshot_parts,
            store_serial: plan.store_serial,
            parent: &plan.parent,
            sites: &plan.sites,
            items,
            summary: &plan.summary,
            resolved,
            signature,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    format: u32,
    id: String,
    fleet_revision: String,
    snapshot_fingerprint: String,
    snapshot_parts: BTreeMap<String, String>,
    store_serial: i64,
    parent: Option<String>,
    sites: Vec<SitePlan>,
    items: Vec<ItemDocument>,
    summary: Summary,
    resolved: Resolved,
    #[serde(default)]
    signature: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Resolved {
    sites: BTreeMap<SiteName, Site>,
    profiles: BTreeMap<ProfileName, Profile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ItemDocument {
    node: NodeId,
    in_manifests: bool,
    action: Action,
    reason: String,
    destructive: bool,
    settled: bool,
    #[serde(default)]
    drift: Option<String>,
    #[serde(default)]
    window_ignored: Option<String>,
    #[serde(default)]
    user_data: Option<UserDataChange>,
    #[serde(default)]
    target: Option<TargetDocument>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetDocument {
    site: SiteName,
    profile: ProfileName,
    node: Node,
    power_credentials: SecretRef,
    system_id: Option<String>,
    node_id: Option<Uuid>,
    job_id: Option<Uuid>,
}

impl<'de> Deserialize<'de> for Plan {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let doc = Document::deserialize(deserializer)?;
        let resolved = doc.resolved;
        let items = doc
            .items
            .into_iter()
            .map(|item| {
                let target = item
                    .target
                    .map(|t| {
                        let missing = |what: &str, name: &str| {
                            serde::de::Error::custom(format!(
                                "the target of {} names {what} `{name}`, which `resolved` lacks",
                                item.node
                            ))
                        };
                        Ok::<_, D::Error>(NodeTarget {
                            site: resolved
                                .sites
                                .get(&t.site)
                                .ok_or_else(|| missing("site", t.site.as_str()))?
                                .clone(),
                            profile: resolved
                                .profiles
                                .get(&t.profile)
                                .ok_or_else(|| missing("profile", t.profile.as_str()))?
                                .clone(),
                            node: t.node,
                            power_credentials: t.power_credentials,
                            system_id: t.system_id,
                            node_id: t.node_id,
                            job_id: t.job_id,
                        })
                    })
                    .transpose()?;
                Ok(PlanItem {
                    node: item.node,
                    in_manifests: item.in_manifests,
                    action: item.action,
                    reason: item.reason,
                    destructive: item.destructive,
                    settled: item.settled,
                    drift: item.drift,
                    window_ignored: item.window_ignored,
                    user_data: item.user_data,
                    target: target.map(Box::new),
                })
            })
            .collect::<Result<Vec<_>, D::Error>>()?;
        Ok(Plan {
            format: doc.format,
            id: doc.id,
            fleet_revision: doc.fleet_revision,
            snapshot_fingerprint: doc.snapshot_fingerprint,
            snapshot_parts: doc.snapshot_parts,
            store_serial: doc.store_serial,
            parent: doc.parent,
            sites: doc.sites,
            items,
            summary: doc.summary,
            signature: doc.signature,
        })
    }
}
