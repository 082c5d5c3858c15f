//! `apply::work_items` (issue 5): a plan's change items become the executor's work — onboard,
//! resume, rerun, adopt with or without a job — each carrying its resolved target, the plan's
//! id and the item's reason; noop and blocked items are nothing to run; destructive items are
//! refused, all of them named, unless allowed.

use crate::plan_support;

use metalform::apply::{FromPlan, PlanRefused, Work, work_items};
use metalform::lifecycle::{FailureClass, JobState, MaasStatus, NodeState};
use metalform::model::NodeId;
use metalform::observe::{SiteFilter, Snapshot};
use metalform::plan::{self, Action, Plan, PlanOptions};
use plan_support::*;

fn plan_of(snapshot: &Snapshot) -> Plan {
    plan::plan(
        &fixture_fleet(),
        snapshot,
        &PlanOptions {
            sites: SiteFilter::All,
            ..PlanOptions::default()
        },
    )
}

#[test]
fn every_change_item_becomes_work_with_its_target_plan_and_reason() {
    let mut late = failed(
        job(
            "dc1",
            "n01",
            JobState::FailedManualIntervention,
            "wait_for_agent_enrollment",
        ),
        FailureClass::AgentEnrollmentFailure,
        "failed_enrollment",
        "the node agent did not enroll within 30m",
    );
    late.maas_system_id = Some("aaa001".into());
    let mut n01 = inventory("dc1", "n01", NodeState::Enrolling);
    n01.agent_contact_at = Some(at(-5));
    let mut n02 = inventory("dc1", "n02", NodeState::Enrolling);
    n02.agent_contact_at = Some(at(-3));
    let mut running = job("dc1", "n03", JobState::Running, "wait_for_deployed");
    running.maas_system_id = Some("aaa003".into());
    let deploy_timeout = failed(
        job("dc2", "m01", JobState::FailedRetryable, "wait_for_deployed"),
        FailureClass::DeployCloudInitFailure,
        "failed_deploy_timeout",
        "the machine did not reach Deployed within 1h",
    );
    let snapshot = World::new()
        .machines(
            "dc1",
            vec![
                machine("aaa001", "n01", MaasStatus::Deployed, "10.176.16.11"),
                machine("aaa002", "n02", MaasStatus::Deployed, "10.176.16.12"),
                machine("aaa003", "n03", MaasStatus::Deploying, "10.176.16.13"),
            ],
        )
        .node(n01)
        .node(n02)
        .job(late.clone())
        .job(running.clone())
        .job(deploy_timeout.clone())
        .done();
    let plan = plan_of(&snapshot);
    let items = work_items(&plan, false).unwrap().onboarding;

    let works: Vec<(String, Work)> = items
        .iter()
        .map(|w| (w.target.label(), w.work.clone()))
        .collect();
    assert_eq!(
        works,
        vec![
            (
                "dc1/n01".into(),
                Work::Adopt {
                    job_id: Some(late.id),
                    system_id: "aaa001".into()
                }
            ),
            (
                "dc1/n02".into(),
                Work::Adopt {
                    job_id: None,
                    system_id: "aaa002".into()
                }
            ),
            ("dc1/n03".into(), Work::Resume { job_id: running.id }),
            (
                "dc2/m01".into(),
                Work::Rerun {
                    job_id: deploy_timeout.id
                }
            ),
            ("dc2/m02".into(), Work::Onboard),
        ],
        "in plan order; the retired dc1/r01 (noop) is not work"
    );
    for work in &items {
        let item = plan
            .items
            .iter()
            .find(|i| i.node == work.target.node.id)
            .unwrap();
        assert_eq!(Some(&work.target), item.target.as_deref());
        assert_eq!(
            work.plan,
            Some(FromPlan {
                plan_id: plan.id.clone(),
                reason: item.reason.clone(),
                takes_over: None,
            })
        );
    }
    let audit = items[0].plan.as_ref().unwrap().audit_reason();
    assert!(
        audit.starts_with(&format!("plan {}: onboarding ", plan::short_id(&plan.id))),
        "{audit}"
    );
}

#[test]
fn blocked_and_unchanged_items_are_no_work() {
    let storage = failed(
        job(
            "dc1",
            "n01",
            JobState::FailedManualIntervention,
            "configure_storage",
        ),
        FailureClass::HardwareMismatch,
        "boot_disk_not_found",
        "no block device matches",
    );
    let snapshot = World::new()
        .job(storage)
        .node(inventory("dc1", "n02", NodeState::Active))
        .node(inventory("dc1", "n03", NodeState::Active))
        .node(inventory("dc2", "m01", NodeState::Active))
        .node(inventory("dc2", "m02", NodeState::Active))
        .unreadable("dc2", "connection refused", true)
        .done();
    let plan = plan_of(&snapshot);
    assert!(!plan.has_changes(), "{:#?}", plan.items);
    assert!(
        plan.items
            .iter()
            .any(|i| matches!(i.action, Action::Blocked { .. }))
    );
    assert!(work_items(&plan, false).unwrap().is_empty());
    assert!(work_items(&plan, true).unwrap().is_empty());
}

#[test]
fn destructive_items_are_refused_unless_allowed_and_all_are_named() {
    // In use by others: deploying (a Deployed one would be adopted, issue 15) and allocated.
    let mut theirs = machine("aaa001", "n01", MaasStatus::Deploying, "10.176.16.11");
    theirs.owner = Some("alice".into());
    let mut allocated = machine("aaa002", "n02", MaasStatus::Allocated, "10.176.16.12");
    allocated.owner = Some("bob".into());
    let snapshot = World::new().machines("dc1", vec![theirs, allocated]).done();
    let plan = plan_of(&snapshot);
    assert_eq!(plan.summary.destructive, 2);

    let refused = work_items(&plan, false).unwrap_err();
    let PlanRefused::Destructive { plan_id, items } = &refused else {
        panic!("{refused:?}");
    };
    assert_eq!(plan_id, &plan.id);
    let nodes: Vec<&NodeId> = items.iter().map(|(node, _)| node).collect();
    assert_eq!(
        nodes,
        vec![&NodeId::new("dc1", "n01"), &NodeId::new("dc1", "n02")]
    );
    assert_eq!(
        refused.to_string(),
        format!(
            "the plan {} has 2 destructive item(s): dc1/n01 (MAAS lists it Deploying (aaa001, owner alice, matched by hostname, BMC address) and metalform did not deploy it: onboarding releases and redeploys it, destroying what runs there); dc1/n02 (MAAS lists it Allocated (aaa002, owner bob, matched by hostname, BMC address) and metalform did not deploy it: onboarding releases and redeploys it, destroying what runs there)",
            plan::short_id(&plan.id)
        )
    );
    assert_eq!(
        refused.hint(),
        "review each destructive item; to go ahead, apply again with --allow-destructive"
    );

    // Allowed: each destructive onboarding may take over the machine the plan saw in use, and
    // only that one; the other items get no such permission.
    let allowed = work_items(&plan, true).unwrap().onboarding;
    let takes_over: Vec<(String, Option<String>)> = allowed
        .iter()
        .map(|w| {
            assert_eq!(w.work, Work::Onboard);
            (
                w.target.label(),
                w.plan.as_ref().unwrap().takes_over.clone(),
            )
        })
        .collect();
    assert_eq!(
        takes_over,
        vec![
            ("dc1/n01".into(), Some("aaa001".into())),
            ("dc1/n02".into(), Some("aaa002".into())),
            ("dc1/n03".into(), None),
            ("dc2/m01".into(), None),
            ("dc2/m02".into(), None),
        ]
    );
}

#[test]
fn a_change_item_without_a_target_is_refused() {
    let mut plan = plan_of(&World::new().done());
    let item = plan
        .items
        .iter_mut()
        .find(|i| i.action == Action::Onboard)
        .unwrap();
    item.target = None;
    let node = item.node.clone();
    let refused = work_items(&plan, true).unwrap_err();
    assert_eq!(
        refused,
        PlanRefused::Unresolved {
            plan_id: plan.id.clone(),
            node: node.clone(),
            action: "onboard",
        }
    );
    assert!(
        refused
            .to_string()
            .ends_with(&format!("would onboard {node}, but carries no target for it (its site or profile was not resolved)")),
        "{refused}"
    );
}

/// Issue 6: reimage, decommission, retire and the resumption of an open decommission become
/// the decommission executor's work — a new job of the item's mode, on the inventory node, with
/// the plan's id and the item's reason — and all of them are destructive.
#[test]
fn decommission_items_become_decommission_work_and_need_allow_destructive() {
    use metalform::apply::decommission::DecommissionJob;
    use metalform::lifecycle::{DecommissionMode, JobKind};
    use metalform::model::Lifecycle;

    let mut fleet = fixture_fleet();
    let mut set = |node: &str, change: &dyn Fn(&mut metalform::model::Node)| {
        let (site, host) = node.split_once('/').unwrap();
        change(fleet.nodes.get_mut(&NodeId::new(site, host)).unwrap());
    };
    set("dc1/n01", &|n| n.reimage.generation = 4);
    set("dc1/n02", &|n| n.lifecycle = Lifecycle::Decommissioned);
    set("dc2/m02", &|n| n.reimage.generation = 1);
    let mut n01 = inventory("dc1", "n01", NodeState::Active);
    n01.reimage_generation = Some(3);
    let mut open = job("dc2", "m02", JobState::Running, "drain_node");
    open.kind = JobKind::Decommission;
    open.mode = Some(DecommissionMode::SoftReset);
    open.node_id = Some(id("node/dc2/m02"));
    let snapshot = World::new()
        .node(n01)
        .node(inventory("dc1", "n02", NodeState::Active))
        .node(inventory("dc1", "r01", NodeState::Active))
        .node(inventory("dc2", "m02", NodeState::Quarantined))
        .job(open.clone())
        .done();
    let plan = plan::plan(
        &fleet,
        &snapshot,
        &PlanOptions {
            sites: SiteFilter::All,
            ..PlanOptions::default()
        },
    );

    let refused = work_items(&plan, false).unwrap_err();
    let PlanRefused::Destructive { items, .. } = &refused else {
        panic!("{refused:?}");
    };
    let named: Vec<String> = items.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(named, vec!["dc1/n01", "dc1/n02", "dc1/r01"], "{refused}");

    let work = work_items(&plan, true).unwrap();
    let jobs: Vec<(String, Option<DecommissionMode>, Option<uuid::Uuid>)> = work
        .decommissions
        .iter()
        .map(|w| {
            assert!(w.target.resolved.is_some(), "{}", w.target.label());
            let (mode, existing) = match &w.job {
                DecommissionJob::New(new) => {
                    assert_eq!(new.node_id, w.target.node_id);
                    assert_eq!(new.plan_id.as_deref(), Some(plan.id.as_str()));
                    assert!(new.reason.is_some());
                    (Some(new.mode), None)
                }
                DecommissionJob::Existing(id) => (None, Some(*id)),
            };
            (w.target.label(), mode, existing)
        })
        .collect();
    assert_eq!(
        jobs,
        vec![
            ("dc1/n01".into(), Some(DecommissionMode::Reimage), None),
            (
                "dc1/n02".into(),
                Some(DecommissionMode::FullDecommission),
                None
            ),
            ("dc1/r01".into(), Some(DecommissionMode::Retire), None),
            // The open soft reset is continued (not destructive), not replaced by a reimage.
            ("dc2/m02".into(), None, Some(open.id)),
        ]
    );
    assert_eq!(work.decommissions[0].target.node_id, id("node/dc1/n01"));
    // The other nodes are onboardings (n03 and m01 are not in the inventory).
    let onboarding: Vec<String> = work.onboarding.iter().map(|w| w.target.label()).collect();
    assert_eq!(onboarding, vec!["dc1/n03", "dc2/m01"]);
    assert_eq!(work.len(), 6);
}

#[test]
fn a_decommission_whose_destructive_flag_was_cleared_is_still_refused() {
    use metalform::model::Lifecycle;

    let mut fleet = fixture_fleet();
    fleet
        .nodes
        .get_mut(&NodeId::new("dc1", "n02"))
        .unwrap()
        .lifecycle = Lifecycle::Decommissioned;
    let snapshot = World::new()
        .node(inventory("dc1", "n02", NodeState::Active))
        .done();
    let mut plan = plan::plan(
        &fleet,
        &snapshot,
        &PlanOptions {
            sites: SiteFilter::All,
            ..PlanOptions::default()
        },
    );
    let item = plan
        .items
        .iter_mut()
        .find(|i| i.action == Action::Decommission)
        .unwrap();
    // The flag says harmless; the action says otherwise.
    item.destructive = false;
    let refused = work_items(&plan, false).unwrap_err();
    assert!(
        matches!(&refused, PlanRefused::Destructive { items, .. } if items.iter().any(|(n, _)| n.to_string() == "dc1/n02")),
        "{refused:?}"
    );
}
