//! The desired-state change between two fleets (DESIGN.md §3 `metalform diff`), for PR review:
//! per site, profile and node — added, removed or changed, with field-level before → after —
//! and the changes that will be destructive once applied, flagged with the reason.
//!
//! Pure: two models in, a `FleetDiff` out. NodeGroup members are nodes in the model, so they
//! are diffed one by one, never as a list. Rendering lives in `crate::cli::diff`.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Value, json};

use super::DataDisks;
use super::{Fleet, Lifecycle, Node, Profile, Revision, SecretRef, Site, duration};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum EntityKind {
    Site,
    Profile,
    Node,
}

impl EntityKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EntityKind::Site => "site",
            EntityKind::Profile => "profile",
            EntityKind::Node => "node",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ChangeKind {
    Added,
    Removed,
    Changed,
}

/// One field that differs. `before` is absent for a field that was not set (or an added
/// entity); `after` is absent for a field that was unset (or a removed entity).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FieldChange {
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EntityChange {
    pub kind: EntityKind,
    /// Site and profile name, or `site/hostname` for a node.
    pub id: String,
    pub change: ChangeKind,
    pub fields: Vec<FieldChange>,
    /// Why applying this change destroys something (data, an installed OS, a machine's place
    /// in the fleet). Empty when it does not.
    pub destructive: Vec<String>,
    /// Context a reviewer needs (e.g. a removal that will not be acted on).
    pub notes: Vec<String>,
}

impl EntityChange {
    pub fn is_destructive(&self) -> bool {
        !self.destructive.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetDiff {
    pub base: Revision,
    pub head: Revision,
    /// Sites, then profiles, then nodes; each ordered by id.
    pub changes: Vec<EntityChange>,
}

/// Counts per kind, for summary lines and tables.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct KindSummary {
    pub added: usize,
    pub removed: usize,
    pub changed: usize,
    pub destructive: usize,
}

impl FleetDiff {
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    pub fn summary(&self) -> BTreeMap<EntityKind, KindSummary> {
        let mut summary: BTreeMap<EntityKind, KindSummary> = [
            (EntityKind::Site, KindSummary::default()),
            (EntityKind::Profile, KindSummary::default()),
            (EntityKind::Node, KindSummary::default()),
        ]
        .into();
        for change in &self.changes {
            let counts = summary.entry(change.kind).or_default();
            match change.change {
                ChangeKind::Added => counts.added += 1,
                ChangeKind::Removed => counts.removed += 1,
                ChangeKind::Changed => counts.changed += 1,
            }
            if change.is_destructive() {
                counts.destructive += 1;
            }
        }
        summary
    }

    pub fn destructive_count(&self) -> usize {
        self.changes.iter().filter(|c| c.is_destructive()).count()
    }
}

/// Compare two fleets: `base` (before) and `head` (after).
pub fn diff(base: &Fleet, head: &Fleet) -> FleetDiff {
    let mut changes = Vec::new();
    compare_maps(
        EntityKind::Site,
        &base.sites,
        &head.sites,
        site_fields,
        site_rules,
        &mut changes,
    );
    compare_maps(
        EntityKind::Profile,
        &base.profiles,
        &head.profiles,
        profile_fields,
        |change, before, after| profile_rules(change, before, after, head),
        &mut changes,
    );
    compare_maps(
        EntityKind::Node,
        &base.nodes,
        &head.nodes,
        node_fields,
        |change, before, after| node_rules(change, before, after, base, head),
        &mut changes,
    );
    FleetDiff {
        base: base.revision.clone(),
        head: head.revision.clone(),
        changes,
    }
}

type Fields = Vec<(String, Value)>;

fn compare_maps<K: Ord + std::fmt::Display, T>(
    kind: EntityKind,
    base: &BTreeMap<K, T>,
    head: &BTreeMap<K, T>,
    fields_of: fn(&T) -> Fields,
    rules: impl Fn(&mut EntityChange, Option<&T>, Option<&T>),
    out: &mut Vec<EntityChange>,
) {
    let mut ids: Vec<&K> = base.keys().chain(head.keys()).collect();
    ids.sort();
    ids.dedup();
    for id in ids {
        let before = base.get(id);
        let after = head.get(id);
        let (change_kind, fields) = match (before, after) {
            (None, Some(after)) => (ChangeKind::Added, field_changes(&[], &fields_of(after))),
            (Some(before), None) => (ChangeKind::Removed, field_changes(&fields_of(before), &[])),
            (Some(before), Some(after)) => {
                let fields = field_changes(&fields_of(before), &fields_of(after));
                if fields.is_empty() {
                    continue;
                }
                (ChangeKind::Changed, fields)
            }
            (None, None) => continue,
        };
        let mut change = EntityChange {
            kind,
            id: id.to_string(),
            change: change_kind,
            fields,
            destructive: Vec::new(),
            notes: Vec::new(),
        };
        rules(&mut change, before, after);
        out.push(change);
    }
}

/// Field-level differences in the order fields are declared (after's order, then removed ones).
fn field_changes(before: &[(String, Value)], after: &[(String, Value)]) -> Vec<FieldChange> {
    let before_map: BTreeMap<&str, &Value> = before.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let after_map: BTreeMap<&str, &Value> = after.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut changes = Vec::new();
    for (path, value) in after {
        match before_map.get(path.as_str()) {
            Some(old) if *old == value => {}
            old => changes.push(FieldChange {
                path: path.clone(),
                before: old.map(|v| (*v).clone()),
                after: Some(value.clone()),
            }),
        }
    }
    for (path, value) in before {
        if !after_map.contains_key(path.as_str()) {
            changes.push(FieldChange {
                path: path.clone(),
                before: Some(value.clone()),
                after: None,
            });
        }
    }
    changes
}

/// Collects an entity's fields as (manifest path, value); optional fields appear only when set.
#[derive(Default)]
struct FieldList(Fields);

impl FieldList {
    fn put(&mut self, path: impl Into<String>, value: impl Into<Value>) -> &mut Self {
        self.0.push((path.into(), value.into()));
        self
    }

    fn text(&mut self, path: impl Into<String>, value: impl ToString) -> &mut Self {
        self.put(path, value.to_string())
    }

    /// A duration as manifests write it (`15m`).
    fn duration(&mut self, path: impl Into<String>, value: std::time::Duration) -> &mut Self {
        self.text(path, duration::format(value))
    }

    fn secret(&mut self, path: impl Into<String>, value: &SecretRef) -> &mut Self {
        // References appear as their paths only; they never hold values in the first place.
        self.text(path, value)
    }

    fn optional(&mut self, path: &str, value: Option<impl ToString>) -> &mut Self {
        if let Some(value) = value {
            self.text(path, value);
        }
        self
    }
}

fn site_fields(site: &Site) -> Fields {
    let mut f = FieldList::default();
    f.text("region", &site.region)
        .text("status", site.status)
        .text(
            "maas.url",
            crate::sanitize::redact::url(site.maas.url.as_str()),
        )
        .secret("maas.apiKey", &site.maas.api_key)
        .text("power.type", site.power.kind)
        .secret("power.defaultCredentials", &site.power.default_credentials);
    for o in &site.power.overrides {
        let path = format!(
            "power.overrides[{}={}]",
            o.selector.key(),
            o.selector.value()
        );
        f.secret(path, &o.credentials);
    }
    f.text("network.pxeIface", &site.network.pxe_iface)
        .put("network.pxeVlanVid", site.network.pxe_vlan_vid)
        .text("network.nodePxeIface", &site.network.node_pxe_iface)
        .put(
            "network.upstreamDns",
            json!(
                site.network
                    .upstream_dns
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
            ),
        )
        .text("deploy.user", &site.deploy.user)
        .optional("deploy.password", site.deploy.password.as_ref())
        .optional("deploy.nodePasswords", site.deploy.node_passwords.as_ref())
        .text("deploy.sshIface", &site.deploy.ssh_iface)
        .optional(
            "deploy.sshKeys",
            (!site.deploy.ssh_keys.is_empty()).then(|| site.deploy.ssh_keys.join(", ")),
        )
        .optional("defaultProfile", site.default_profile.as_ref())
        .put("reconcile.prune", site.reconcile.prune);
    f.0
}

fn profile_fields(p: &Profile) -> Fields {
    let mut f = FieldList::default();
    f.text("site", &p.site)
        .text("image.distroSeries", &p.image.distro_series)
        .text("image.architecture", &p.image.architecture)
        .text("storage.bootDisk.match", p.storage.boot_disk.pattern())
        .text("storage.layout", p.storage.layout)
        .text("storage.dataDisks", p.storage.data_disks)
        .put("roce.enabled", p.roce.enabled)
        .put("hardwareSync.required", p.hardware_sync.required)
        .duration("hardwareSync.interval", p.hardware_sync.interval)
        .put(
            "discovery.autoClaimSingleNewMachine",
            p.discovery.auto_claim_single_new_machine,
        )
        .put(
            "deploy.retryOnDatasourceFailure",
            p.deploy.retry_on_datasource_failure,
        )
        .put("deploy.maxRetryAttempts", p.deploy.max_retry_attempts)
        .optional(
            "deployUser",
            (!p.deploy_user.is_default()).then(|| {
                format!(
                    "sudo {}, password {}, sshPasswordLogin {}",
                    p.deploy_user.sudo, p.deploy_user.password, p.deploy_user.ssh_password_login
                )
            }),
        )
        .text("release.erase", p.release.erase)
        .put("release.fallbackNoErase", p.release.fallback_no_erase)
        .put("preflight.strictPxe", p.preflight.strict_pxe)
        .put("concurrency.maxParallel", p.concurrency.max_parallel)
        .duration("enrollment.tokenTtl", p.enrollment.token_ttl);
    let t = &p.timeouts;
    for (name, value) in [
        ("discovery", t.discovery),
        ("commission", t.commission),
        ("deploy", t.deploy),
        ("hwSyncSeed", t.hw_sync_seed),
        ("hwSyncHealth", t.hw_sync_health),
        ("enrollment", t.enrollment),
        ("agentTask", t.agent_task),
        ("release", t.release),
        ("powerOff", t.power_off),
    ] {
        f.duration(format!("timeouts.{name}"), value);
    }
    if let Some(bundle) = &p.cloud_init.site_bundle {
        f.text("cloudInit.siteBundle.ref", &bundle.reference)
            .text("cloudInit.siteBundle.version", &bundle.version);
    }
    let o = &p.network_overrides;
    f.optional("network.pxeIface", o.pxe_iface.as_ref())
        .optional("network.nodePxeIface", o.node_pxe_iface.as_ref())
        .optional("network.pxeVlanVid", o.pxe_vlan_vid);
    f.0
}

fn node_fields(n: &Node) -> Fields {
    let mut f = FieldList::default();
    f.text("profile", &n.profile)
        .text("sku", &n.sku)
        .put("gpus", n.gpus)
        .text("bmc.ipmiIp", n.bmc.ipmi_ip)
        .optional("pxeMac", n.pxe_mac);
    for assignment in &n.roce {
        f.text(
            format!("roce[{}]", assignment.interface),
            assignment.address,
        );
    }
    f.text("lifecycle", n.lifecycle)
        .optional("retiredReason", n.retired_reason.as_ref())
        .put("reimage.generation", n.reimage.generation)
        .optional("decommission.erase", n.decommission.erase_override)
        .put(
            "decommission.removeFromMaas",
            n.decommission.remove_from_maas,
        )
        .put("protected", n.protected)
        .put("paused", n.paused)
        .optional("group", n.group.as_ref());
    f.0
}

fn site_rules(change: &mut EntityChange, before: Option<&Site>, after: Option<&Site>) {
    if let (Some(before), Some(after)) = (before, after)
        && !before.reconcile.prune
        && after.reconcile.prune
    {
        // Pruning is declared but not carried out yet (docs/plan.md): say so instead of
        // promising a decommission the planner never plans.
        change.notes.push(
            "pruning turned on: not carried out yet, nodes that leave the manifests are still left alone"
                .into(),
        );
    }
}

fn profile_rules(
    change: &mut EntityChange,
    before: Option<&Profile>,
    after: Option<&Profile>,
    head: &Fleet,
) {
    let (Some(before), Some(after)) = (before, after) else {
        return;
    };
    let users = head
        .nodes
        .values()
        .filter(|n| n.profile == after.name)
        .count();
    if before.release.erase != after.release.erase {
        change.destructive.push(format!(
            "erase mode changed {} → {}: applies to every release of the {users} node(s) using this profile",
            before.release.erase, after.release.erase
        ));
    }
    if before.storage.data_disks == DataDisks::Skip
        && after.storage.data_disks == DataDisks::Initialize
    {
        change.destructive.push(format!(
            "dataDisks → initialize: the first boot of every deploy of its {users} node(s) formats all non-root disks as /shareN"
        ));
    }
}

fn node_rules(
    change: &mut EntityChange,
    before: Option<&Node>,
    after: Option<&Node>,
    base: &Fleet,
    head: &Fleet,
) {
    match (before, after) {
        (Some(before), None) => {
            if before.lifecycle == Lifecycle::Decommissioned {
                change.notes.push(
                    "already decommissioned: removing it from the manifests changes nothing".into(),
                );
                return;
            }
            let site = head
                .sites
                .get(&before.id.site)
                .or_else(|| base.sites.get(&before.id.site));
            if site.is_some_and(|s| s.reconcile.prune) {
                change.notes.push(format!(
                    "site {} prunes, but pruning is not carried out yet: the machine is left as it is and no longer managed; to decommission it (erase {}), set `lifecycle: decommissioned` and remove it once that finished",
                    before.id.site, before.decommission.erase
                ));
            } else {
                change.notes.push(format!(
                    "site {} does not prune (reconcile.prune: false): the machine is left as it is and no longer managed",
                    before.id.site
                ));
            }
        }
        (Some(before), Some(after)) => {
            if before.lifecycle != after.lifecycle {
                match after.lifecycle {
                    Lifecycle::Decommissioned => change.destructive.push(format!(
                        "lifecycle {} → decommissioned: released with erase {}, powered off and removed from the inventory",
                        before.lifecycle, after.decommission.erase
                    )),
                    Lifecycle::Retired => change.destructive.push(format!(
                        "lifecycle {} → retired: released (erase {}) and powered off, never handed out again",
                        before.lifecycle, after.decommission.erase
                    )),
                    Lifecycle::Active => {}
                }
            }
            if after.reimage.generation > before.reimage.generation {
                change.destructive.push(format!(
                    "reimage requested (generation {} → {}): the OS is reinstalled, erase {}",
                    before.reimage.generation, after.reimage.generation, after.decommission.erase
                ));
            } else if after.reimage.generation < before.reimage.generation {
                change.notes.push(format!(
                    "reimage generation went down ({} → {}): generations only count up; this requests nothing",
                    before.reimage.generation, after.reimage.generation
                ));
            }
            if before.decommission.erase != after.decommission.erase
                && before.decommission.erase_override != after.decommission.erase_override
            {
                change.destructive.push(format!(
                    "erase mode changed {} → {}",
                    before.decommission.erase, after.decommission.erase
                ));
            }
            if before.protected && !after.protected {
                change.destructive.push(
                    "protection turned off: reimage, decommission and release are no longer blocked"
                        .into(),
                );
            }
            if after.protected && change.is_destructive() {
                change.notes.push(
                    "protected: the destructive action stays blocked until protected is false"
                        .into(),
                );
            }
            if after.paused && change.is_destructive() {
                change
                    .notes
                    .push("paused: nothing happens to this node until paused is false".into());
            }
        }
        _ => {}
    }
}
