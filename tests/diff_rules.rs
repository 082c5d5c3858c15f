//! The destructive-change rules of `metalform diff` (model::diff), one by one, on fleets built
//! in memory: what is flagged, what is only noted, and what is not a change at all.

use metalform::manifest;
use metalform::model::diff::{ChangeKind, EntityChange, FleetDiff, diff};
use metalform::model::{Fleet, Revision};
use metalform::source::{Snapshot, SourceFile};

const SITE: &str = "apiVersion: metalform/v1\nkind: Site\nmetadata: {name: dc1}\nspec: {region: r1, maas: {url: \"https://10.0.0.1:5443/MAAS\", apiKey: {vault: kv/maas/dc1, key: token}}, power: {defaultCredentials: {vault: kv/power/dc1}}, network: {pxeIface: ens19, pxeVlanVid: 46, nodePxeIface: eno8303}, deploy: {password: {vault: kv/deploy/dc1, key: password}}, defaultProfile: gpu, reconcile: {prune: PRUNE}}\n";
const PROFILE: &str = "apiVersion: metalform/v1\nkind: Profile\nmetadata: {name: gpu, site: dc1}\nspec: {storage: {dataDisks: DISKS}, release: {erase: ERASE}}\n";

fn fleet(prune: bool, disks: &str, erase: &str, nodes: &str) -> Fleet {
    let text = format!(
        "{}---\n{}---\napiVersion: metalform/v1\nkind: NodeGroup\nmetadata: {{name: rack}}\nspec:\n  site: dc1\n  sku: s1\n  gpus: 8\n  nodes:\n{nodes}",
        SITE.replace("PRUNE", &prune.to_string()),
        PROFILE.replace("DISKS", disks).replace("ERASE", erase)
    );
    let snapshot = Snapshot {
        revision: Revision::WorkingTree {
            content_hash: format!("sha256:{}", text.len()),
        },
        display_root: ".".into(),
        files: vec![SourceFile {
            path: "fleet.yaml".into(),
            bytes: text.into_bytes(),
        }],
    };
    let validation = manifest::load(&snapshot);
    validation
        .fleet
        .unwrap_or_else(|| panic!("{:?}", validation.errors))
}

const A: &str = "    - {hostname: a, bmc: {ipmiIp: 10.1.0.1}}\n";
const B: &str = "    - {hostname: b, bmc: {ipmiIp: 10.1.0.2}}\n";

fn only(diff: &FleetDiff) -> &EntityChange {
    assert_eq!(diff.changes.len(), 1, "{:#?}", diff.changes);
    &diff.changes[0]
}

#[test]
fn identical_fleets_have_no_changes_even_when_defaults_are_spelled_out() {
    let base = fleet(false, "skip", "quick", A);
    // `lifecycle: active`, `protected: false` and `reimage.generation: 0` are the defaults.
    let head = fleet(
        false,
        "skip",
        "quick",
        "    - {hostname: a, bmc: {ipmiIp: 10.1.0.1}, lifecycle: active, protected: false, reimage: {generation: 0}}\n",
    );
    assert!(diff(&base, &head).is_empty());
}

#[test]
fn removal_destroys_nothing_while_pruning_is_not_carried_out() {
    let kept = diff(
        &fleet(false, "skip", "quick", &format!("{A}{B}")),
        &fleet(false, "skip", "quick", A),
    );
    let change = only(&kept);
    assert_eq!(
        (change.id.as_str(), change.change),
        ("dc1/b", ChangeKind::Removed)
    );
    assert!(!change.is_destructive());
    assert!(change.notes[0].contains("does not prune"));

    let pruned = diff(
        &fleet(true, "skip", "quick", &format!("{A}{B}")),
        &fleet(true, "skip", "quick", A),
    );
    // The planner leaves removed nodes alone even where the site prunes (docs/plan.md): the
    // review must not promise a decommission.
    let change = only(&pruned);
    assert!(!change.is_destructive());
    assert_eq!(
        change.notes,
        [
            "site dc1 prunes, but pruning is not carried out yet: the machine is left as it is and no longer managed; to decommission it (erase quick), set `lifecycle: decommissioned` and remove it once that finished"
        ]
    );

    let already = "    - {hostname: b, bmc: {ipmiIp: 10.1.0.2}, lifecycle: decommissioned}\n";
    let done = diff(
        &fleet(true, "skip", "quick", &format!("{A}{already}")),
        &fleet(true, "skip", "quick", A),
    );
    assert!(
        !only(&done).is_destructive(),
        "removing an already decommissioned node destroys nothing"
    );
}

#[test]
fn turning_pruning_on_is_noted_on_the_site() {
    let d = diff(
        &fleet(false, "skip", "quick", A),
        &fleet(true, "skip", "quick", A),
    );
    let change = only(&d);
    assert_eq!(change.id, "dc1");
    assert!(!change.is_destructive());
    assert!(change.notes[0].starts_with("pruning turned on: not carried out yet"));
}

#[test]
fn profile_erase_and_data_disk_changes_are_flagged() {
    let d = diff(
        &fleet(false, "skip", "quick", A),
        &fleet(false, "initialize", "secure", A),
    );
    let change = only(&d);
    assert_eq!(change.id, "gpu");
    assert_eq!(change.destructive.len(), 2, "{:?}", change.destructive);
    assert!(change.destructive[0].starts_with(
        "erase mode changed quick → secure: applies to every release of the 1 node(s)"
    ));
    assert!(change.destructive[1].starts_with("dataDisks → initialize"));
    // initialize -> skip destroys nothing.
    let back = diff(
        &fleet(false, "initialize", "quick", A),
        &fleet(false, "skip", "quick", A),
    );
    assert!(!only(&back).is_destructive());
}

#[test]
fn node_rules_protection_generation_and_notes() {
    let protected = "    - {hostname: a, bmc: {ipmiIp: 10.1.0.1}, protected: true}\n";
    let unprotect = diff(
        &fleet(false, "skip", "quick", protected),
        &fleet(false, "skip", "quick", A),
    );
    assert!(only(&unprotect).destructive[0].starts_with("protection turned off"));

    // A reimage requested on a protected node is flagged, with a note that it stays blocked.
    let bumped =
        "    - {hostname: a, bmc: {ipmiIp: 10.1.0.1}, protected: true, reimage: {generation: 1}}\n";
    let d = diff(
        &fleet(false, "skip", "quick", protected),
        &fleet(false, "skip", "quick", bumped),
    );
    let change = only(&d);
    assert_eq!(
        change.destructive,
        ["reimage requested (generation 0 → 1): the OS is reinstalled, erase quick"]
    );
    assert_eq!(
        change.notes,
        ["protected: the destructive action stays blocked until protected is false"]
    );

    // Going down is noted, not flagged.
    let down = diff(
        &fleet(false, "skip", "quick", bumped),
        &fleet(false, "skip", "quick", protected),
    );
    assert!(!only(&down).is_destructive());
    assert!(only(&down).notes[0].contains("generations only count up"));

    // A node's own erase mode.
    let secure = "    - {hostname: a, bmc: {ipmiIp: 10.1.0.1}, decommission: {erase: secure}}\n";
    let d = diff(
        &fleet(false, "skip", "quick", A),
        &fleet(false, "skip", "quick", secure),
    );
    let change = only(&d);
    assert_eq!(change.fields[0].path, "decommission.erase");
    assert_eq!(change.destructive, ["erase mode changed quick → secure"]);
}
