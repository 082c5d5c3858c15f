//! Plan files and staleness (DESIGN.md §4): a plan file reads back to the same plan, an edited
//! or foreign file is refused with what to do, and `check_fresh` says exactly what moved —
//! the fleet revision, a part of the observed snapshot, the store serial.

use crate::plan_support;

use metalform::lifecycle::{JobState, MaasStatus, NodeState};
use metalform::manifest;
use metalform::model::{Provenance, Revision};
use metalform::observe::SiteFilter;
use metalform::plan::{self, Moved, PlanFileError, PlanOptions};
use metalform::source::FleetSource;
use plan_support::*;

fn options(sites: &[&str]) -> PlanOptions {
    PlanOptions {
        sites: SiteFilter::from_names(sites.iter().copied()),
        ..PlanOptions::default()
    }
}

#[test]
fn model_values_round_trip_through_json() {
    // Every site, profile and node of the sample fleet, as plan targets carry them.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fleet");
    let fleet = manifest::load_fleet(&FleetSource::Directory(root))
        .unwrap()
        .fleet;
    for site in fleet.sites.values() {
        let back: metalform::model::Site =
            serde_json::from_value(serde_json::to_value(site).unwrap()).unwrap();
        assert_eq!(
            back,
            metalform::model::Site {
                provenance: Provenance::default(),
                ..site.clone()
            }
        );
    }
    for profile in fleet.profiles.values() {
        let back: metalform::model::Profile =
            serde_json::from_value(serde_json::to_value(profile).unwrap()).unwrap();
        assert_eq!(
            back,
            metalform::model::Profile {
                provenance: Provenance::default(),
                ..profile.clone()
            }
        );
    }
    for node in fleet.nodes.values() {
        let back: metalform::model::Node =
            serde_json::from_value(serde_json::to_value(node).unwrap()).unwrap();
        assert_eq!(
            back,
            metalform::model::Node {
                provenance: Provenance::default(),
                ..node.clone()
            }
        );
    }
    // Bad values are refused, not guessed.
    let mut bad = serde_json::to_value(fleet.profiles.values().next().unwrap()).unwrap();
    bad["storage"]["bootDisk"]["match"] = serde_json::json!("(unclosed");
    assert!(serde_json::from_value::<metalform::model::Profile>(bad).is_err());
}

#[test]
fn a_saved_plan_loads_back_and_an_edited_one_is_refused() {
    let fleet = fixture_fleet();
    let snapshot = World::new()
        .machines(
            "dc1",
            vec![machine("aaa001", "n01", MaasStatus::Ready, "10.176.16.11")],
        )
        .done();
    let plan = plan::plan(&fleet, &snapshot, &options(&[]));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plan.json");
    plan::save(&plan, &path).unwrap();
    assert_eq!(plan::load(&path).unwrap(), plan);

    // Someone "fixes" a reason by hand: the content no longer matches the id.
    let text = std::fs::read_to_string(&path).unwrap();
    let edited = text.replacen("onboard (find or enlist", "onboard (just create", 1);
    assert_ne!(edited, text);
    std::fs::write(&path, edited).unwrap();
    let err = plan::load(&path).unwrap_err();
    assert!(matches!(err, PlanFileError::Modified { .. }));
    assert_eq!(
        err.to_string(),
        format!(
            "{}: the plan's content does not match its id {} (the file was changed after `metalform plan` wrote it)",
            path.display(),
            plan.id
        )
    );
    assert_eq!(
        err.hint(),
        "plan again with `metalform plan --out PLANFILE`; plan files are not edited by hand"
    );

    std::fs::write(&path, text.replacen("\"format\": 1", "\"format\": 9", 1)).unwrap();
    assert_eq!(
        plan::load(&path).unwrap_err().to_string(),
        format!(
            "{}: plan format 9 is not the format this metalform reads (1)",
            path.display()
        )
    );

    std::fs::write(&path, "{\n  \"format\": 1,\n  \"id\": 7\n}\n").unwrap();
    let err = plan::load(&path).unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("{}:3:", path.display())),
        "{err}"
    );

    // A target naming a site the document does not resolve.
    let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    doc["resolved"]["sites"] = serde_json::json!({});
    std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    let err = plan::load(&path).unwrap_err().to_string();
    assert!(
        err.contains(
            "not a metalform plan: the target of dc1/n01 names site `dc1`, which `resolved` lacks"
        ),
        "{err}"
    );

    let missing = dir.path().join("nope.json");
    assert!(
        plan::load(&missing)
            .unwrap_err()
            .to_string()
            .starts_with(&format!("cannot read the plan file {}", missing.display()))
    );
}

#[test]
fn a_plan_is_fresh_until_something_it_planned_on_moves() {
    let fleet = fixture_fleet();
    let snapshot = World::new()
        .machines(
            "dc1",
            vec![machine("aaa001", "n01", MaasStatus::Ready, "10.176.16.11")],
        )
        .node(inventory("dc1", "n02", NodeState::Enrolling))
        .job(job("dc1", "n02", JobState::Running, "commission_node"))
        .done();
    let plan = plan::plan(&fleet, &snapshot, &options(&["dc1"]));
    let revision = plan::revision_id(&fleet.revision);
    assert!(revision.starts_with("sha256:"), "{revision}");

    // Observed again with nothing planning-relevant changed: fresh. Other sites, power state
    // and timestamps do not count.
    let mut again = snapshot.clone();
    again.taken_at = at(10);
    again.sites.remove(&metalform::model::SiteName::new("dc2"));
    plan::check_fresh(&plan, &revision, &again, snapshot.store_serial).unwrap();

    // The fleet moved.
    let moved_fleet = plan::revision_id(&Revision::Commit {
        id: "0123456789abcdef0123456789abcdef01234567".into(),
    });
    let stale =
        plan::check_fresh(&plan, &moved_fleet, &snapshot, snapshot.store_serial).unwrap_err();
    assert_eq!(stale.moved.len(), 1);
    assert_eq!(
        stale.to_string(),
        format!(
            "the plan {} is stale: the fleet moved from {} to commit 0123456789ab",
            plan::short_id(&plan.id),
            plan::describe_revision(&revision)
        )
    );
    assert_eq!(
        stale.hint(),
        "make a new plan (`metalform plan --out PLANFILE`), review it, and apply that file"
    );

    // MAAS of dc1 moved: a machine changed status.
    let moved_maas = World::new()
        .machines(
            "dc1",
            vec![machine(
                "aaa001",
                "n01",
                MaasStatus::Commissioning,
                "10.176.16.11",
            )],
        )
        .node(inventory("dc1", "n02", NodeState::Enrolling))
        .job(job("dc1", "n02", JobState::Running, "commission_node"))
        .done();
    let stale =
        plan::check_fresh(&plan, &revision, &moved_maas, snapshot.store_serial).unwrap_err();
    assert_eq!(
        stale.moved,
        [Moved::Observed {
            part: "site/dc1".into()
        }]
    );
    assert!(
        stale
            .to_string()
            .ends_with("is stale: MAAS of site dc1 changed"),
        "{stale}"
    );

    // The jobs moved (the running job failed) and the store serial with them.
    let moved_jobs = World::new()
        .machines(
            "dc1",
            vec![machine("aaa001", "n01", MaasStatus::Ready, "10.176.16.11")],
        )
        .node(inventory("dc1", "n02", NodeState::Enrolling))
        .job(job(
            "dc1",
            "n02",
            JobState::FailedRetryable,
            "commission_node",
        ))
        .done();
    let stale =
        plan::check_fresh(&plan, &revision, &moved_jobs, snapshot.store_serial + 3).unwrap_err();
    assert_eq!(
        stale.to_string(),
        format!(
            "the plan {} is stale: the jobs changed; the store changed (serial 7 → 10)",
            plan::short_id(&plan.id)
        )
    );

    // Only the store serial moved (a write the snapshot does not show, e.g. an audit row).
    let stale =
        plan::check_fresh(&plan, &revision, &snapshot, snapshot.store_serial + 1).unwrap_err();
    assert_eq!(
        stale.moved,
        [Moved::StoreSerial {
            planned: 7,
            current: 8
        }]
    );
    assert!(
        stale
            .to_string()
            .ends_with("is stale: the store changed (serial 7 → 8)")
    );

    // The inventory moved.
    let moved_inventory = World::new()
        .machines(
            "dc1",
            vec![machine("aaa001", "n01", MaasStatus::Ready, "10.176.16.11")],
        )
        .node(inventory("dc1", "n02", NodeState::Quarantined))
        .job(job("dc1", "n02", JobState::Running, "commission_node"))
        .done();
    let stale =
        plan::check_fresh(&plan, &revision, &moved_inventory, snapshot.store_serial).unwrap_err();
    assert_eq!(
        stale.moved,
        [Moved::Observed {
            part: "inventory".into()
        }]
    );
    assert!(
        stale
            .to_string()
            .ends_with("is stale: the inventory changed")
    );

    // A re-observation that lacks a planned site is stale too, never "empty".
    let mut lost = snapshot.clone();
    lost.sites.remove(&metalform::model::SiteName::new("dc1"));
    let stale = plan::check_fresh(&plan, &revision, &lost, snapshot.store_serial).unwrap_err();
    assert!(
        stale
            .to_string()
            .ends_with("is stale: dc1 was planned but is not observed now"),
        "{stale}"
    );
}

#[test]
fn the_parent_is_the_plan_the_latest_job_ran_under() {
    let fleet = fixture_fleet();
    let mut old = job(
        "dc1",
        "n01",
        JobState::Completed,
        "wait_for_agent_enrollment",
    );
    old.plan_id = Some("sha256:older".into());
    old.updated_at = at(-100);
    let mut newer = job("dc1", "n02", JobState::Running, "deploy_via_maas");
    newer.plan_id = Some("sha256:newer".into());
    newer.updated_at = at(-5);
    let snapshot = World::new().job(old).job(newer).done();
    let plan = plan::plan(&fleet, &snapshot, &options(&["dc1"]));
    assert_eq!(plan.parent.as_deref(), Some("sha256:newer"));
    let none = plan::plan(&fleet, &World::new().done(), &options(&["dc1"]));
    assert_eq!(none.parent, None);
}

#[test]
fn a_plan_whose_parent_moved_is_stale_and_says_which_plan_ran_since() {
    let fleet = fixture_fleet();
    let mut earlier = job(
        "dc1",
        "n01",
        JobState::Completed,
        "wait_for_agent_enrollment",
    );
    earlier.plan_id = Some("sha256:aaaaaaaaaaaa0000".into());
    let snapshot = World::new().job(earlier.clone()).done();
    let plan = plan::plan(&fleet, &snapshot, &options(&["dc1"]));
    assert_eq!(plan.parent.as_deref(), Some("sha256:aaaaaaaaaaaa0000"));
    let revision = plan::revision_id(&fleet.revision);

    // A plan file claiming another parent than the store's latest job: refused, naming both.
    let mut claimed = plan.clone();
    claimed.parent = Some("sha256:bbbbbbbbbbbb0000".into());
    let stale =
        plan::check_fresh(&claimed, &revision, &snapshot, snapshot.store_serial).unwrap_err();
    assert_eq!(
        stale.moved,
        [Moved::Parent {
            planned: Some("sha256:bbbbbbbbbbbb0000".into()),
            current: Some("sha256:aaaaaaaaaaaa0000".into()),
        }]
    );
    assert!(
        stale.to_string().ends_with(
            "is stale: plan sha256:aaaaaaaaaaaa ran since (this plan followed plan sha256:bbbbbbbbbbbb)"
        ),
        "{stale}"
    );
}
