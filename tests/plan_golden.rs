//! Golden-file tests of plan output (issue 5 "Show"; issue 6 declarative decommissions): fixed (fleet, snapshot) scenarios, each
//! rendered as text, JSON and markdown and compared with tests/golden/plan/<scenario>.{txt,
//! json,md}. Each scenario also asserts the decisions it is about, so a golden file rewritten
//! by mistake cannot hide a wrong plan.

use crate::plan_support;

use metalform::lifecycle::{
    DecommissionMode, FailureClass, JobKind, JobState, MaasStatus, NodeState, RecoveryAction,
};
use metalform::model::{EraseMode, Fleet, Lifecycle, NodeId, SiteName, SiteStatus};
use metalform::observe::{InventoryNode, ObservedMachine, ObservedStatus, SiteFilter, Snapshot};
use metalform::plan::{
    self, Action, BlockCause, MatchKey, PauseSource, Plan, PlanItem, PlanOptions,
    render::{self, TextOptions},
};
use plan_support::*;

fn run(name: &str, fleet: &Fleet, snapshot: &Snapshot, sites: &[&str]) -> Plan {
    let options = PlanOptions {
        sites: SiteFilter::from_names(sites.iter().copied()),
        ..PlanOptions::default()
    };
    run_with(name, fleet, snapshot, &options)
}

fn run_with(name: &str, fleet: &Fleet, snapshot: &Snapshot, options: &PlanOptions) -> Plan {
    let options = options.clone();
    let plan = plan::plan(fleet, snapshot, &options);
    // Pure and deterministic: the same inputs give the same plan.
    assert_eq!(plan::plan(fleet, snapshot, &options), plan);
    golden(
        &format!("{name}.txt"),
        &render::render_text(&plan, TextOptions::default()),
    );
    golden(&format!("{name}.json"), &render::render_json(&plan));
    golden(
        &format!("{name}.md"),
        &render::render_markdown(&plan, 60_000),
    );
    // The JSON is the plan file: it reads back to the same plan.
    let back = plan::from_json(&render::render_json(&plan), "plan.json".as_ref()).unwrap();
    assert_eq!(back, plan);
    plan
}

fn item<'p>(plan: &'p Plan, node: &str) -> &'p PlanItem {
    let (site, host) = node.split_once('/').unwrap();
    plan.items
        .iter()
        .find(|i| i.node == NodeId::new(site, host))
        .unwrap_or_else(|| panic!("no item for {node}"))
}

fn cause(item: &PlanItem) -> &BlockCause {
    match &item.action {
        Action::Blocked { cause } => cause,
        other => panic!("{} is {other:?}, not blocked", item.node),
    }
}

#[test]
fn empty_maas_onboards_every_active_node() {
    let fleet = fixture_fleet();
    let plan = run("empty_maas", &fleet, &World::new().done(), &[]);
    for node in ["dc1/n01", "dc1/n02", "dc1/n03", "dc2/m01", "dc2/m02"] {
        let item = item(&plan, node);
        assert_eq!(item.action, Action::Onboard, "{node}");
        assert!(!item.destructive);
        let target = item.target.as_ref().expect("onboard carries its target");
        assert_eq!(target.system_id, None);
        assert_eq!(target.node.id.to_string(), node);
    }
    // Power credentials resolved with the override order (000 §3.2.1): n03 by hostname.
    assert_eq!(
        item(&plan, "dc1/n03")
            .target
            .as_ref()
            .unwrap()
            .power_credentials
            .path,
        "kv/maas-sites/dc1/power/overrides/n03"
    );
    assert_eq!(
        item(&plan, "dc1/n01")
            .target
            .as_ref()
            .unwrap()
            .power_credentials
            .path,
        "kv/maas-sites/dc1/power/default"
    );
    assert_eq!(plan.summary.onboard, 5);
    assert_eq!(plan.summary.noop, 1, "the retired node");
    assert!(plan.has_changes());
}

#[test]
fn active_nodes_are_unchanged_and_drift_is_reported() {
    let fleet = fixture_fleet();
    let snapshot = World::new()
        .machines(
            "dc1",
            vec![
                machine("aaa001", "n01", MaasStatus::Deployed, "10.176.16.11"),
                machine("aaa002", "n02", MaasStatus::Ready, "10.176.16.12"),
                machine("aaa003", "n03", MaasStatus::Ready, "10.176.16.13"),
                machine("zzz999", "spare", MaasStatus::New, "10.176.16.99"),
            ],
        )
        .node(inventory("dc1", "n01", NodeState::Active))
        .node(inventory("dc1", "n02", NodeState::Active))
        .done();
    let plan = run("some_active", &fleet, &snapshot, &["dc1"]);
    assert_eq!(item(&plan, "dc1/n01").action, Action::Noop);
    assert_eq!(item(&plan, "dc1/n01").drift, None);
    let n02 = item(&plan, "dc1/n02");
    assert_eq!(n02.action, Action::Noop);
    assert_eq!(
        n02.drift.as_deref(),
        Some("MAAS shows Ready, expected Deployed")
    );
    assert_eq!(item(&plan, "dc1/n03").action, Action::Onboard);
    assert_eq!(
        item(&plan, "dc1/n03")
            .target
            .as_ref()
            .unwrap()
            .system_id
            .as_deref(),
        Some("aaa003")
    );
    assert_eq!(plan.sites[0].unmanaged_machines, 1);
    assert_eq!(plan.sites.len(), 1, "--site dc1 plans dc1 only");
}

#[test]
fn a_killed_apply_resumes_at_the_recorded_stage() {
    let fleet = fixture_fleet();
    let mut running = job("dc1", "n01", JobState::Running, "wait_for_deployed");
    running.maas_system_id = Some("aaa001".into());
    running.attempt = 2;
    let snapshot = World::new()
        .machines(
            "dc1",
            vec![machine(
                "aaa001",
                "n01",
                MaasStatus::Deploying,
                "10.176.16.11",
            )],
        )
        .job(running.clone())
        .job(job("dc1", "n02", JobState::Pending, "load_site_config"))
        .done();
    let plan = run("killed_apply", &fleet, &snapshot, &["dc1"]);
    let n01 = item(&plan, "dc1/n01");
    assert_eq!(
        n01.action,
        Action::Resume {
            job_id: running.id,
            stage: "wait_for_deployed".into()
        }
    );
    // A machine running our own deploy is not "in use by someone else".
    assert!(!n01.destructive);
    let target = n01.target.as_ref().unwrap();
    assert_eq!(target.job_id, Some(running.id));
    assert_eq!(target.system_id.as_deref(), Some("aaa001"));
    assert!(
        matches!(item(&plan, "dc1/n02").action, Action::Resume { ref stage, .. } if stage == "load_site_config")
    );
}

#[test]
fn failed_retryable_jobs_resume_or_rerun_as_recommended() {
    let fleet = fixture_fleet();
    let commission = failed(
        job("dc1", "n01", JobState::FailedRetryable, "wait_for_ready"),
        FailureClass::PxeDiscoveryFailure,
        "failed_commission_timeout",
        "the machine did not reach Ready within 40m",
    );
    let deploy = failed(
        job("dc1", "n02", JobState::FailedRetryable, "wait_for_deployed"),
        FailureClass::DeployCloudInitFailure,
        "failed_deploy_timeout",
        "the machine did not reach Deployed within 1h",
    );
    let snapshot = World::new()
        .job(commission.clone())
        .job(deploy.clone())
        .done();
    let plan = run("failed_retryable", &fleet, &snapshot, &["dc1"]);
    assert_eq!(
        item(&plan, "dc1/n01").action,
        Action::Resume {
            job_id: commission.id,
            stage: "wait_for_ready".into()
        }
    );
    assert_eq!(
        item(&plan, "dc1/n02").action,
        Action::Rerun { job_id: deploy.id }
    );
    assert_eq!(plan.summary.resume, 1);
    assert_eq!(plan.summary.rerun, 1);
}

/// A failed job that backs off (`failures` in a row, next try at `minutes` from the snapshot),
/// failed under the spec the fixture fleet gives its node now, or under `spec`.
fn backing_off(
    fleet: &Fleet,
    job: metalform::observe::ObservedJob,
    failures: i64,
    minutes: i64,
    spec: Option<&str>,
) -> metalform::observe::ObservedJob {
    let node = &fleet.nodes[&NodeId::new(&job.site, &job.hostname)];
    metalform::observe::ObservedJob {
        retry_failures: failures,
        next_try_at: Some(at(minutes)),
        retry_spec: Some(
            spec.map_or_else(|| plan::node_spec_hash(fleet, node).unwrap(), str::to_owned),
        ),
        ..job
    }
}

#[test]
fn failed_retryable_jobs_wait_for_their_next_try_unless_the_manifests_change() {
    let fleet = fixture_fleet();
    let transient = |host: &str, stage: &str| {
        failed(
            job("dc1", host, JobState::FailedRetryable, stage),
            FailureClass::UpstreamTransient,
            "maas_unavailable",
            "MAAS answered 503 five times",
        )
    };
    // n01 waits 4 more minutes; n02's wait is over; n03's manifests changed since it failed.
    let waiting = backing_off(&fleet, transient("n01", "configure_storage"), 2, 4, None);
    let due = backing_off(&fleet, transient("n02", "deploy_via_maas"), 1, -1, None);
    let changed = backing_off(
        &fleet,
        transient("n03", "deploy_via_maas"),
        5,
        30,
        Some("sha256:the-spec-it-failed-under"),
    );
    let snapshot = World::new()
        .job(waiting.clone())
        .job(due.clone())
        .job(changed.clone())
        .done();
    let plan = run("retry_backoff", &fleet, &snapshot, &["dc1"]);
    let n01 = item(&plan, "dc1/n01");
    assert_eq!(
        cause(n01),
        &BlockCause::RetryBackoff {
            job_id: waiting.id,
            failures: 2,
            next_try_at: at(4),
            would: "resume".into(),
        }
    );
    assert!(!cause(n01).needs_operator());
    assert!(
        n01.reason
            .starts_with("retry waits: next try in 4m (attempt 3); would resume: onboarding "),
        "{}",
        n01.reason
    );
    assert_eq!(render::symbol(n01), "@");
    let n02 = item(&plan, "dc1/n02");
    assert_eq!(
        n02.action,
        Action::Resume {
            job_id: due.id,
            stage: "deploy_via_maas".into()
        }
    );
    assert!(
        n02.reason
            .ends_with(" (attempt 2, after 1 failure in a row and its backoff)"),
        "{}",
        n02.reason
    );
    let n03 = item(&plan, "dc1/n03");
    assert_eq!(
        n03.action,
        Action::Resume {
            job_id: changed.id,
            stage: "deploy_via_maas".into()
        }
    );
    assert!(
        n03.reason.ends_with(
            " (the node's manifests changed since it failed: retried now, its backoff starts again)"
        ),
        "{}",
        n03.reason
    );
    assert_eq!((plan.summary.resume, plan.summary.blocked), (2, 1));
    assert!(plan.needing_operator().next().is_none());

    // The same snapshot planned at another moment (a deterministic clock), or with other
    // manifests.
    let dc1_at = |fleet: &Fleet, now: Option<i64>| {
        plan::plan(
            fleet,
            &snapshot,
            &PlanOptions {
                sites: SiteFilter::from_names(["dc1"]),
                now: now.map(at),
                ..PlanOptions::default()
            },
        )
    };
    let resumes_n01 = Action::Resume {
        job_id: waiting.id,
        stage: "configure_storage".into(),
    };
    // Once the wait is over, n01 is retried.
    let later = dc1_at(&fleet, Some(4));
    assert_eq!(item(&later, "dc1/n01").action, resumes_n01);
    assert!(
        item(&later, "dc1/n01")
            .reason
            .ends_with(" (attempt 3, after 2 failures in a row and its backoff)")
    );
    // A minute before it: still waiting, and saying so.
    let before = dc1_at(&fleet, Some(3));
    assert!(
        item(&before, "dc1/n01")
            .reason
            .starts_with("retry waits: next try in 1m (attempt 3)")
    );

    // Editing the node's manifest (anything the node is planned from) retries it at once.
    let mut edited = fleet.clone();
    edit(&mut edited, "dc1/n01", |n| n.gpus += 1);
    assert_eq!(item(&dc1_at(&edited, None), "dc1/n01").action, resumes_n01);
    // Paused wins over the wait: nothing is said about a retry the node would not get.
    let mut paused = fleet.clone();
    edit(&mut paused, "dc1/n02", |n| n.paused = true);
    assert!(matches!(
        cause(item(&dc1_at(&paused, None), "dc1/n02")),
        BlockCause::Paused { .. }
    ));
}

#[test]
fn failed_manual_intervention_is_blocked_with_the_recommended_action() {
    let fleet = fixture_fleet();
    let storage = failed(
        job(
            "dc1",
            "n01",
            JobState::FailedManualIntervention,
            "configure_storage",
        ),
        FailureClass::HardwareMismatch,
        "boot_disk_not_found",
        "no block device matches (?i)boss|boot optimized|m\\.2",
    );
    let snapshot = World::new()
        .machines(
            "dc1",
            vec![machine("aaa001", "n01", MaasStatus::Ready, "10.176.16.11")],
        )
        .job(storage.clone())
        .done();
    let plan = run("failed_manual", &fleet, &snapshot, &["dc1"]);
    let n01 = item(&plan, "dc1/n01");
    match cause(n01) {
        BlockCause::ManualIntervention {
            job_id,
            failure_class,
            recommended_action,
            recommendation,
            ..
        } => {
            assert_eq!(*job_id, storage.id);
            assert_eq!(*failure_class, Some(FailureClass::HardwareMismatch));
            assert_eq!(*recommended_action, Some(RecoveryAction::Rerun));
            assert!(
                recommendation.contains("storage.bootDisk.match"),
                "{recommendation}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(n01.target.is_none());
    assert!(!plan.has_changes() || plan.summary.onboard > 0);
}

#[test]
fn a_disabled_site_takes_no_new_onboarding_but_work_in_flight_continues() {
    let mut fleet = fixture_fleet();
    fleet.sites.get_mut(&SiteName::new("dc2")).unwrap().status = SiteStatus::Disabled;
    let running = job("dc2", "m02", JobState::Running, "commission_node");
    let snapshot = World::new().job(running.clone()).done();
    let plan = run("site_disabled", &fleet, &snapshot, &["dc2"]);
    assert_eq!(cause(item(&plan, "dc2/m01")), &BlockCause::SiteDisabled);
    assert!(
        matches!(item(&plan, "dc2/m02").action, Action::Resume { job_id, .. } if job_id == running.id)
    );
    assert!(plan.sites[0].disabled);
}

#[test]
fn an_unreadable_site_is_never_treated_as_empty() {
    let fleet = fixture_fleet();
    let snapshot = World::new()
        .unreadable(
            "dc2",
            "cannot list the machines from MAAS at https://10.180.46.1:5443/MAAS/api/2.0/: connection refused",
            true,
        )
        .node(inventory("dc2", "m01", NodeState::Active))
        .done();
    let plan = run("site_unreadable", &fleet, &snapshot, &[]);
    for node in ["dc2/m01", "dc2/m02"] {
        assert!(
            matches!(
                cause(item(&plan, node)),
                BlockCause::SiteUnreadable {
                    transient: true,
                    ..
                }
            ),
            "{node}"
        );
    }
    let dc2 = plan
        .sites
        .iter()
        .find(|s| s.site.as_str() == "dc2")
        .unwrap();
    assert!(!dc2.readable);
    assert!(dc2.guard.is_some());
    // The readable site is planned as usual.
    assert_eq!(item(&plan, "dc1/n01").action, Action::Onboard);
}

#[test]
fn ambiguous_discovery_fails_closed() {
    let fleet = fixture_fleet();
    let snapshot = World::new()
        .machines(
            "dc1",
            vec![
                // n01: one machine by hostname, another by its BMC.
                machine("aaa001", "n01", MaasStatus::Ready, "10.176.16.201"),
                machine("bbb001", "maas-enlisted-1", MaasStatus::New, "10.176.16.11"),
                // n02 and n03: one machine carries n02's hostname and n03's BMC.
                machine("ccc002", "n02", MaasStatus::Ready, "10.176.16.13"),
            ],
        )
        .done();
    let plan = run("discovery_ambiguity", &fleet, &snapshot, &["dc1"]);
    match cause(item(&plan, "dc1/n01")) {
        BlockCause::DiscoveryAmbiguity { candidates } => {
            let ids: Vec<&str> = candidates.iter().map(|c| c.system_id.as_str()).collect();
            assert_eq!(ids, ["aaa001", "bbb001"]);
            assert_eq!(candidates[0].matched_by, [MatchKey::Hostname]);
            assert_eq!(candidates[1].matched_by, [MatchKey::BmcAddress]);
        }
        other => panic!("{other:?}"),
    }
    for (node, other) in [("dc1/n02", "dc1/n03"), ("dc1/n03", "dc1/n02")] {
        match cause(item(&plan, node)) {
            BlockCause::DiscoveryAmbiguity { candidates } => {
                assert_eq!(candidates.len(), 1);
                let (site, host) = other.split_once('/').unwrap();
                assert!(candidates[0].matched_by.contains(&MatchKey::AlsoMatches {
                    node: NodeId::new(site, host)
                }));
            }
            c => panic!("{node}: {c:?}"),
        }
    }
    assert_eq!(plan.summary.changes, 0);
}

#[test]
fn paused_nodes_hold_back_what_would_be_done() {
    let mut fleet = fixture_fleet();
    fleet
        .nodes
        .get_mut(&NodeId::new("dc1", "n01"))
        .unwrap()
        .paused = true;
    let mut row = inventory("dc1", "n02", NodeState::Enrolling);
    row.paused = true;
    let snapshot = World::new()
        .node(row)
        .job(job("dc1", "n02", JobState::Running, "deploy_via_maas"))
        .done();
    let plan = run("paused", &fleet, &snapshot, &["dc1"]);
    assert_eq!(
        cause(item(&plan, "dc1/n01")),
        &BlockCause::Paused {
            source: PauseSource::Manifest,
            would: "onboard".into()
        }
    );
    assert_eq!(
        cause(item(&plan, "dc1/n02")),
        &BlockCause::Paused {
            source: PauseSource::Inventory,
            would: "resume".into()
        }
    );
    assert_eq!(item(&plan, "dc1/n03").action, Action::Onboard);
}

#[test]
fn deployed_and_enrolled_machines_are_adopted() {
    let fleet = fixture_fleet();
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
    let snapshot = World::new()
        .machines(
            "dc1",
            vec![
                machine("aaa001", "n01", MaasStatus::Deployed, "10.176.16.11"),
                machine("aaa002", "n02", MaasStatus::Deployed, "10.176.16.12"),
            ],
        )
        .node(n01.clone())
        .node(n02.clone())
        .job(late.clone())
        .done();
    let plan = run("adopt", &fleet, &snapshot, &["dc1"]);
    let a = item(&plan, "dc1/n01");
    assert_eq!(
        a.action,
        Action::Adopt {
            job_id: Some(late.id),
            system_id: "aaa001".into()
        }
    );
    assert_eq!(a.target.as_ref().unwrap().node_id, Some(n01.id));
    assert!(!a.destructive);
    assert_eq!(
        item(&plan, "dc1/n02").action,
        Action::Adopt {
            job_id: None,
            system_id: "aaa002".into()
        }
    );
}

#[test]
fn a_deployed_machine_without_a_record_is_adopted_not_redeployed() {
    // Issue 15: a fleet that already runs is adopted as it is; the agent enrollment follows.
    let fleet = fixture_fleet();
    let mut theirs = machine("aaa001", "n01", MaasStatus::Deployed, "10.176.16.11");
    theirs.owner = Some("alice".into());
    let snapshot = World::new().machines("dc1", vec![theirs]).done();
    let plan = run("adopt_existing", &fleet, &snapshot, &["dc1"]);
    let n01 = item(&plan, "dc1/n01");
    assert_eq!(
        n01.action,
        Action::Adopt {
            job_id: None,
            system_id: "aaa001".into()
        }
    );
    assert!(!n01.destructive);
    assert!(n01.reason.contains("no metalform record"), "{}", n01.reason);
    assert!(n01.reason.contains("no redeploy"), "{}", n01.reason);
    assert_eq!(
        n01.target.as_ref().unwrap().system_id.as_deref(),
        Some("aaa001")
    );
    assert_eq!(plan.summary.destructive, 0);
}

#[test]
fn only_an_explicit_reimage_generation_redeploys_a_deployed_machine() {
    let mut fleet = fixture_fleet();
    fleet
        .nodes
        .get_mut(&NodeId::new("dc1", "n01"))
        .unwrap()
        .reimage
        .generation = 1;
    let mut theirs = machine("aaa001", "n01", MaasStatus::Deployed, "10.176.16.11");
    theirs.owner = Some("alice".into());
    let snapshot = World::new().machines("dc1", vec![theirs]).done();
    let plan = run("not_ours", &fleet, &snapshot, &["dc1"]);
    let n01 = item(&plan, "dc1/n01");
    assert_eq!(n01.action, Action::Onboard);
    assert!(n01.destructive);
    assert!(n01.reason.contains("owner alice"), "{}", n01.reason);
    assert!(
        n01.reason
            .contains("reimage.generation 1 asks for a redeploy"),
        "{}",
        n01.reason
    );
    assert_eq!(plan.summary.destructive, 1);
    assert!(render::summary_line(&plan.summary).contains("apply needs --allow-destructive"));
    assert!(render::render_text(&plan, TextOptions::default()).contains("-/+ dc1/n01"));
}

#[test]
fn a_retired_node_is_not_onboarded() {
    let fleet = fixture_fleet();
    let snapshot = World::new()
        .machines(
            "dc1",
            vec![machine(
                "rrr001",
                "r01",
                MaasStatus::Deployed,
                "10.176.16.21",
            )],
        )
        .done();
    let plan = run("retired", &fleet, &snapshot, &["dc1"]);
    let r01 = item(&plan, "dc1/r01");
    assert_eq!(r01.action, Action::Noop);
    assert_eq!(
        r01.reason,
        "lifecycle retired (\"mainboard failure (HW-2291)\"): not onboarded"
    );
    assert!(r01.target.is_none());
    assert_eq!(
        plan.sites[0].unmanaged_machines, 0,
        "r01's machine is matched"
    );
}

#[test]
fn the_guard_holds_when_maas_lists_none_of_our_machines() {
    let fleet = fixture_fleet();
    let mut done = job(
        "dc1",
        "n01",
        JobState::Completed,
        "wait_for_agent_enrollment",
    );
    done.maas_system_id = Some("aaa001".into());
    // Allocated to someone else: taking it over is destructive.
    let mut theirs = machine("other02", "n02", MaasStatus::Allocated, "10.176.16.12");
    theirs.owner = Some("bob".into());
    let snapshot = World::new()
        .machines("dc1", vec![theirs])
        .node(inventory("dc1", "n01", NodeState::Active))
        .job(done)
        .done();
    let plan = run("guard_partial_read", &fleet, &snapshot, &["dc1"]);
    let guard = plan.sites[0].guard.as_deref().expect("the guard holds");
    assert!(
        guard.contains("MAAS listed none of the 1 machine(s)"),
        "{guard}"
    );
    let n02 = item(&plan, "dc1/n02");
    assert!(matches!(cause(n02), BlockCause::DestructionGuard { .. }));
    assert!(!n02.destructive && n02.target.is_none());
    assert_eq!(plan.summary.destructive, 0);
    // Non-destructive work goes on.
    assert_eq!(item(&plan, "dc1/n03").action, Action::Onboard);
}

#[test]
fn the_guard_holds_when_a_sites_desired_set_is_empty() {
    let mut fleet = fixture_fleet();
    fleet.nodes.retain(|id, _| id.site.as_str() != "dc2");
    let snapshot = World::new()
        .machines(
            "dc2",
            vec![machine(
                "mmm001",
                "m01",
                MaasStatus::Deployed,
                "10.180.16.11",
            )],
        )
        .node(recorded(
            inventory("dc2", "m01", NodeState::Active),
            "dc2-gpu",
            EraseMode::Quick,
            "10.180.16.11",
        ))
        .done();
    let plan = run("guard_empty_desired", &fleet, &snapshot, &["dc2"]);
    let guard = plan.sites[0].guard.as_deref().expect("the guard holds");
    assert!(
        guard.contains("the manifests name no node of site dc2"),
        "{guard}"
    );
    // dc2 prunes removed nodes, but an empty desired set is a bad read, not a decision.
    let m01 = item(&plan, "dc2/m01");
    assert!(!m01.in_manifests);
    assert!(
        matches!(cause(m01), BlockCause::DestructionGuard { .. }),
        "{m01:?}"
    );
    assert!(
        m01.reason.starts_with(
            "the mass-destruction guard holds for this site; would prune: removed from the manifests and pruning is on"
        ),
        "{}",
        m01.reason
    );
    assert!(m01.target.is_none());
    assert_eq!(plan.summary.changes, 0);
}

// --- Declarative decommissions (issue 6): reimage, decommission, retire ---

/// The fixture fleet with one node changed.
fn edit(fleet: &mut Fleet, node: &str, change: impl FnOnce(&mut metalform::model::Node)) {
    let (site, host) = node.split_once('/').unwrap();
    change(fleet.nodes.get_mut(&NodeId::new(site, host)).unwrap());
}

fn applied(mut node: InventoryNode, generation: u64) -> InventoryNode {
    node.reimage_generation = Some(generation);
    node
}

fn deployed(site_prefix: &str, hosts: &[(&str, &str)]) -> Vec<ObservedMachine> {
    hosts
        .iter()
        .enumerate()
        .map(|(i, (host, bmc))| {
            machine(
                &format!("{site_prefix}{:03}", i + 1),
                host,
                MaasStatus::Deployed,
                bmc,
            )
        })
        .collect()
}

const DC1: &[(&str, &str)] = &[
    ("n01", "10.176.16.11"),
    ("n02", "10.176.16.12"),
    ("n03", "10.176.16.13"),
];

#[test]
fn a_bumped_reimage_generation_plans_a_destructive_reimage() {
    let mut fleet = fixture_fleet();
    edit(&mut fleet, "dc1/n01", |n| n.reimage.generation = 2);
    edit(&mut fleet, "dc1/n03", |n| n.reimage.generation = 3);
    let snapshot = World::new()
        .machines("dc1", deployed("aaa", DC1))
        .node(applied(inventory("dc1", "n01", NodeState::Active), 1))
        .node(applied(inventory("dc1", "n02", NodeState::Active), 0))
        // A row from before the store recorded generations: nothing is guessed.
        .node(inventory("dc1", "n03", NodeState::Active))
        .done();
    let plan = run("reimage", &fleet, &snapshot, &["dc1"]);
    let n01 = item(&plan, "dc1/n01");
    assert_eq!(
        n01.action,
        Action::Reimage {
            generation: 2,
            applied: 1
        }
    );
    assert!(n01.destructive);
    let target = n01.target.as_ref().expect("a reimage carries its target");
    assert_eq!(target.node_id, Some(id("node/dc1/n01")), "same node id");
    assert_eq!(target.system_id.as_deref(), Some("aaa001"));
    assert!(
        n01.reason
            .starts_with("reimage.generation 1 → 2; the node is active"),
        "{}",
        n01.reason
    );
    // The generation the inventory holds is the one the manifest asks for: settled.
    let n02 = item(&plan, "dc1/n02");
    assert_eq!(n02.action, Action::Noop);
    assert!(n02.settled);
    let n03 = item(&plan, "dc1/n03");
    assert_eq!(n03.action, Action::Noop);
    assert!(!n03.settled);
    assert!(
        n03.reason
            .contains("reimage.generation 3 is not compared: no applied generation is recorded"),
        "{}",
        n03.reason
    );
    assert_eq!(plan.summary.reimage, 1);
    assert_eq!(plan.summary.changes, 1);
    assert_eq!(plan.summary.destructive, 1);
    let text = render::render_text(&plan, TextOptions::default());
    assert!(text.contains("  ~/+ dc1/n01  reimage "), "{text}");
    assert!(
        render::summary_line(&plan.summary)
            .starts_with("Plan: 1 to reimage; 3 unchanged. 1 item is destructive")
    );
}

#[test]
fn lifecycle_retired_retires_an_in_service_node_and_leaves_a_retired_one() {
    let mut fleet = fixture_fleet();
    edit(&mut fleet, "dc1/n02", |n| {
        n.lifecycle = Lifecycle::Retired;
        n.retired_reason = Some("PSU failure (HW-3001)".into());
    });
    edit(&mut fleet, "dc1/n03", |n| {
        n.lifecycle = Lifecycle::Retired;
        n.retired_reason = Some("lease ended".into());
    });
    let mut machines = deployed("aaa", DC1);
    machines[1].status = ObservedStatus {
        code: i64::from(MaasStatus::Ready.code()),
        name: MaasStatus::Ready.name().into(),
    };
    machines.push(machine(
        "rrr001",
        "r01",
        MaasStatus::Deployed,
        "10.176.16.21",
    ));
    let mut n03 = inventory("dc1", "n03", NodeState::Active);
    n03.protected = true;
    let snapshot = World::new()
        .machines("dc1", machines)
        .node(applied(inventory("dc1", "n01", NodeState::Active), 0))
        .node(inventory("dc1", "n02", NodeState::Retired))
        .node(n03)
        .node(inventory("dc1", "r01", NodeState::Active))
        .done();
    let plan = run("retire", &fleet, &snapshot, &["dc1"]);
    let r01 = item(&plan, "dc1/r01");
    assert_eq!(r01.action, Action::Retire);
    assert!(r01.destructive);
    assert_eq!(
        r01.target.as_ref().unwrap().node_id,
        Some(id("node/dc1/r01"))
    );
    // Already retired, its machine released: as the manifests want it.
    let n02 = item(&plan, "dc1/n02");
    assert_eq!(n02.action, Action::Noop);
    assert!(n02.settled, "{n02:?}");
    // Protected in the inventory: held back, and says what it would do.
    let n03 = item(&plan, "dc1/n03");
    assert_eq!(
        cause(n03),
        &BlockCause::Protected {
            source: PauseSource::Inventory,
            would: "retire".into()
        }
    );
    assert!(!n03.destructive && n03.target.is_none());
    assert_eq!(plan.summary.retire, 1);
    assert_eq!(plan.summary.changes, 1);
    assert_eq!(plan.summary.blocked, 1);
    let text = render::render_text(&plan, TextOptions::default());
    assert!(text.contains("    x dc1/r01  retire "), "{text}");
}

#[test]
fn lifecycle_decommissioned_removes_in_service_and_retired_nodes() {
    let mut fleet = fixture_fleet();
    for node in ["dc1/n01", "dc1/n02", "dc1/n03"] {
        edit(&mut fleet, node, |n| {
            n.lifecycle = Lifecycle::Decommissioned
        });
    }
    edit(&mut fleet, "dc1/n02", |n| n.protected = true);
    let snapshot = World::new()
        .machines("dc1", deployed("aaa", &DC1[..2]))
        .node(applied(inventory("dc1", "n01", NodeState::Active), 0))
        .node(inventory("dc1", "n02", NodeState::Offline))
        .node(inventory("dc1", "r01", NodeState::Retired))
        .done();
    // r01 goes from retired to decommissioned too.
    edit(&mut fleet, "dc1/r01", |n| {
        n.lifecycle = Lifecycle::Decommissioned
    });
    let plan = run("decommission", &fleet, &snapshot, &["dc1"]);
    for node in ["dc1/n01", "dc1/r01"] {
        let it = item(&plan, node);
        assert_eq!(it.action, Action::Decommission, "{node}");
        assert!(it.destructive, "{node}");
        assert!(it.target.as_ref().unwrap().node_id.is_some(), "{node}");
    }
    assert_eq!(
        cause(item(&plan, "dc1/n02")),
        &BlockCause::Protected {
            source: PauseSource::Manifest,
            would: "decommission".into()
        }
    );
    // Never onboarded, or removed already: nothing to do.
    let n03 = item(&plan, "dc1/n03");
    assert_eq!(n03.action, Action::Noop);
    assert!(
        n03.reason.contains("not in the inventory"),
        "{}",
        n03.reason
    );
    assert_eq!(plan.summary.decommission, 2);
    assert_eq!(plan.summary.destructive, 2);
    let markdown = render::render_markdown(&plan, 60_000);
    assert!(
        markdown.contains("| reimage | decommission | retire |"),
        "{markdown}"
    );
}

#[test]
fn an_open_decommission_is_resumed_and_a_failed_one_blocks() {
    let mut fleet = fixture_fleet();
    edit(&mut fleet, "dc1/n01", |n| n.reimage.generation = 1);
    edit(&mut fleet, "dc1/n03", |n| {
        n.lifecycle = Lifecycle::Decommissioned
    });
    let mut reimage = job("dc1", "n01", JobState::Running, "release_maas_node");
    reimage.kind = JobKind::Decommission;
    reimage.mode = Some(DecommissionMode::Reimage);
    reimage.node_id = Some(id("node/dc1/n01"));
    reimage.maas_system_id = Some("aaa001".into());
    let mut failed_retire = failed(
        job(
            "dc1",
            "n02",
            JobState::FailedManualIntervention,
            "drain_node",
        ),
        FailureClass::PostDeployConnectivityFailure,
        "agent_unreachable",
        "the node agent did not finish node.drain within 10m",
    );
    failed_retire.kind = JobKind::Decommission;
    failed_retire.mode = Some(DecommissionMode::Retire);
    failed_retire.node_id = Some(id("node/dc1/n02"));
    let onboarding = job("dc1", "n03", JobState::FailedRetryable, "wait_for_ready");
    let snapshot = World::new()
        .machines("dc1", deployed("aaa", &DC1[..2]))
        .node(applied(inventory("dc1", "n01", NodeState::Quarantined), 0))
        .node(inventory("dc1", "n02", NodeState::Draining))
        .node(inventory("dc1", "n03", NodeState::Enrolling))
        .job(reimage.clone())
        .job(failed_retire.clone())
        .job(onboarding.clone())
        .done();
    let plan = run("decommission_open", &fleet, &snapshot, &["dc1"]);
    let n01 = item(&plan, "dc1/n01");
    assert_eq!(
        n01.action,
        Action::ResumeDecommission {
            job_id: reimage.id,
            mode: Some(DecommissionMode::Reimage),
            stage: "release_maas_node".into()
        }
    );
    assert!(n01.destructive, "continuing a reimage still destroys");
    assert_eq!(n01.target.as_ref().unwrap().job_id, Some(reimage.id));
    assert_eq!(
        cause(item(&plan, "dc1/n02")),
        &BlockCause::DecommissionInProgress {
            job_id: failed_retire.id,
            mode: Some(DecommissionMode::Retire),
            state: JobState::FailedManualIntervention
        }
    );
    assert!(
        item(&plan, "dc1/n02")
            .reason
            .contains("`metalform decommissions retry"),
    );
    assert_eq!(
        cause(item(&plan, "dc1/n03")),
        &BlockCause::OnboardingInProgress {
            job_id: onboarding.id,
            state: JobState::FailedRetryable
        }
    );
    assert_eq!(plan.summary.resume, 1);
    assert_eq!(plan.summary.blocked, 2);
}

#[test]
fn the_guard_blocks_decommissions_on_a_partial_read() {
    let mut fleet = fixture_fleet();
    edit(&mut fleet, "dc1/n01", |n| {
        n.lifecycle = Lifecycle::Decommissioned
    });
    edit(&mut fleet, "dc1/n02", |n| n.reimage.generation = 1);
    let mut done = job(
        "dc1",
        "n01",
        JobState::Completed,
        "wait_for_agent_enrollment",
    );
    done.maas_system_id = Some("aaa001".into());
    // MAAS answers without any machine metalform deployed: a wrong region, or a cut list.
    let snapshot = World::new()
        .machines(
            "dc1",
            vec![machine("zzz009", "x99", MaasStatus::Ready, "10.9.9.9")],
        )
        .node(applied(inventory("dc1", "n01", NodeState::Active), 0))
        .node(applied(inventory("dc1", "n02", NodeState::Active), 0))
        .job(done)
        .done();
    let plan = run("guard_decommission", &fleet, &snapshot, &["dc1"]);
    assert!(plan.sites[0].guard.is_some());
    for (node, would) in [("dc1/n01", "decommission"), ("dc1/n02", "reimage")] {
        let it = item(&plan, node);
        assert!(
            matches!(cause(it), BlockCause::DestructionGuard { .. }),
            "{node}"
        );
        assert!(
            it.reason.starts_with(&format!(
                "the mass-destruction guard holds for this site; would {would}"
            )),
            "{}",
            it.reason
        );
    }
    // Only the onboarding of n03, which destroys nothing, goes on.
    assert_eq!(plan.summary.changes, 1);
    assert_eq!(item(&plan, "dc1/n03").action, Action::Onboard);
    assert_eq!(plan.summary.destructive, 0);
}

// --- Issue 18: no dead ends (reactivation, quarantine exits, pruning, windows, protection) ---

fn ready(system_id: &str, host: &str, bmc: &str) -> ObservedMachine {
    machine(system_id, host, MaasStatus::Ready, bmc)
}

#[test]
fn lifecycle_active_on_a_retired_node_reactivates_it() {
    let mut fleet = fixture_fleet();
    edit(&mut fleet, "dc1/r01", |n| {
        n.lifecycle = Lifecycle::Active;
        n.retired_reason = None;
    });
    let mut r01 = inventory("dc1", "r01", NodeState::Retired);
    r01.retired = true;
    r01.retired_reason = Some("mainboard failure (HW-2291)".into());
    let snapshot = World::new()
        .machines("dc1", vec![ready("rrr001", "r01", "10.176.16.21")])
        .node(applied(r01, 0))
        .done();
    let plan = run("reactivate", &fleet, &snapshot, &["dc1"]);
    let r01 = item(&plan, "dc1/r01");
    assert_eq!(r01.action, Action::Reactivate);
    assert!(
        !r01.destructive,
        "its machine is Ready: nothing is destroyed"
    );
    assert_eq!(
        r01.reason,
        "lifecycle active, but the node is retired and flagged retired (\"mainboard failure (HW-2291)\"); Ready in MAAS (rrr001): clear the flag, clean it and redeploy it with the same node id"
    );
    let target = r01.target.as_ref().unwrap();
    assert_eq!(target.node_id, Some(id("node/dc1/r01")));
    assert_eq!(target.system_id.as_deref(), Some("rrr001"));
    assert_eq!(plan.summary.reactivate, 1);
    let text = render::render_text(&plan, TextOptions::default());
    assert!(text.contains("    ^ dc1/r01  reactivate  "), "{text}");
}

#[test]
fn a_quarantined_node_is_reimaged_from_its_manifest_or_told_how_out() {
    let mut fleet = fixture_fleet();
    edit(&mut fleet, "dc1/n01", |n| n.reimage.generation = 1);
    let mut machines = deployed("aaa", DC1);
    machines[0] = ready("aaa001", "n01", "10.176.16.11");
    let snapshot = World::new()
        .machines("dc1", machines)
        .node(applied(inventory("dc1", "n01", NodeState::Quarantined), 0))
        .node(applied(inventory("dc1", "n02", NodeState::Quarantined), 0))
        .done();
    let plan = run("quarantine_exits", &fleet, &snapshot, &["dc1"]);
    let n01 = item(&plan, "dc1/n01");
    assert_eq!(
        n01.action,
        Action::Reimage {
            generation: 1,
            applied: 0
        }
    );
    assert!(n01.destructive);
    assert!(
        n01.reason.starts_with(
            "reimage.generation 0 → 1; the node is quarantined, Ready in MAAS (aaa001)"
        ),
        "{}",
        n01.reason
    );
    let n02 = item(&plan, "dc1/n02");
    assert!(matches!(cause(n02), BlockCause::InventoryState { .. }));
    assert_eq!(
        n02.reason,
        "the inventory holds it quarantined; Deployed in MAAS (aaa002): bump reimage.generation to reimage it, set lifecycle: retired or decommissioned to release it, or return it to service as it is with `metalform drift resolve n02 --site dc1 --action reactivate --reason …`"
    );
}

/// dc2 prunes removed nodes: m03 (recorded policy: secure erase) is pruned — one node of six,
/// within the share of one pass —; m04 has no recorded policy, m05 was protected when it left,
/// m06 is paused: each blocked, saying why.
#[test]
fn pruning_decommissions_a_removed_node_with_its_recorded_policy() {
    let fleet = fixture_fleet();
    let removed = |host: &str, bmc: &str| {
        recorded(
            inventory("dc2", host, NodeState::Active),
            "dc2-gpu",
            EraseMode::Secure,
            bmc,
        )
    };
    let mut m04 = inventory("dc2", "m04", NodeState::Active);
    m04.ipmi_ip = Some("10.180.16.14".into());
    let mut m05 = removed("m05", "10.180.16.15");
    m05.policy.as_mut().unwrap().protected = true;
    let mut m06 = removed("m06", "10.180.16.16");
    m06.paused = true;
    let mut world = World::new()
        .machines(
            "dc2",
            deployed(
                "mmm",
                &[
                    ("m01", "10.180.16.11"),
                    ("m02", "10.180.16.12"),
                    ("m03", "10.180.16.13"),
                ],
            ),
        )
        .node(inventory("dc2", "m01", NodeState::Active))
        .node(inventory("dc2", "m02", NodeState::Active))
        .node(removed("m03", "10.180.16.13"))
        .node(m04)
        .node(m05)
        .node(m06);
    let mut onboarded = job(
        "dc2",
        "m03",
        JobState::Completed,
        "wait_for_agent_enrollment",
    );
    onboarded.maas_system_id = Some("mmm003".into());
    world = world.job(onboarded);
    let snapshot = world.done();
    let plan = run("prune", &fleet, &snapshot, &["dc2"]);
    let m03 = item(&plan, "dc2/m03");
    assert!(!m03.in_manifests);
    assert_eq!(m03.action, Action::Prune);
    assert!(m03.destructive);
    let target = m03.target.as_ref().expect("a prune carries its target");
    assert_eq!(
        target.node.decommission.erase,
        EraseMode::Secure,
        "the recorded erase"
    );
    assert_eq!(target.profile.name.as_str(), "dc2-gpu");
    assert_eq!(target.system_id.as_deref(), Some("mmm003"));
    assert_eq!(target.node_id, Some(id("node/dc2/m03")));
    assert_eq!(
        m03.reason,
        "removed from the manifests and pruning is on; the node is active: decommission it (release with erase secure as its profile dc2-gpu recorded, power off, remove the node record)"
    );
    assert_eq!(cause(item(&plan, "dc2/m04")), &BlockCause::NoReleasePolicy);
    assert!(matches!(
        cause(item(&plan, "dc2/m05")),
        BlockCause::Protected { .. }
    ));
    assert!(matches!(
        cause(item(&plan, "dc2/m06")),
        BlockCause::Paused { .. }
    ));
    assert_eq!(plan.summary.prune, 1);
    let text = render::render_text(&plan, TextOptions::default());
    assert!(text.contains("   -- dc2/m03  prune  "), "{text}");
    assert!(text.contains("prune: removed from the manifests"), "{text}");
}

/// More removals than `reconcile.maxPrunePercent` allows in one pass: none is pruned.
#[test]
fn pruning_more_than_the_allowed_share_prunes_nothing() {
    let mut fleet = fixture_fleet();
    fleet
        .nodes
        .retain(|id, _| id.site.as_str() != "dc2" || id.hostname.as_str() == "m01");
    let mut world = World::new().machines("dc2", deployed("mmm", &[("m01", "10.180.16.11")]));
    for (host, bmc) in [("m02", "10.180.16.12"), ("m03", "10.180.16.13")] {
        world = world.node(recorded(
            inventory("dc2", host, NodeState::Active),
            "dc2-gpu",
            EraseMode::Quick,
            bmc,
        ));
    }
    let snapshot = world
        .node(inventory("dc2", "m01", NodeState::Active))
        .done();
    let plan = run("prune_limit", &fleet, &snapshot, &["dc2"]);
    for node in ["dc2/m02", "dc2/m03"] {
        let it = item(&plan, node);
        assert_eq!(
            cause(it),
            &BlockCause::PruneLimit {
                candidates: 2,
                allowed: 1,
                nodes: 3,
                max_percent: 10
            }
        );
        assert!(
            it.reason.starts_with(
                "pruning 2 of site dc2's 3 nodes in one pass is more than its reconcile.maxPrunePercent 10% allows (1): nothing is pruned; would prune: removed from the manifests"
            ),
            "{}",
            it.reason
        );
    }
    assert_eq!(plan.summary.changes, 0);
}

fn windows_fleet(onboarding: &str) -> Fleet {
    let mut fleet = fixture_fleet();
    let window = |name: &str, schedule: &str| metalform::model::MaintenanceWindow {
        name: name.into(),
        schedule: metalform::model::Schedule::parse(schedule).unwrap(),
        duration: std::time::Duration::from_secs(4 * 3600),
        time_zone: metalform::model::TimeZone::parse("Europe/Berlin").unwrap(),
        onboarding: match onboarding {
            "inWindow" => metalform::model::WindowOnboarding::InWindow,
            _ => metalform::model::WindowOnboarding::Anytime,
        },
    };
    // The snapshot is taken at 12:00 UTC (13:00 in Berlin): "sat-night" opens at 16:12 Berlin
    // time, 3h12m later; "weekly" opens next Wednesday.
    fleet
        .sites
        .get_mut(&SiteName::new("dc1"))
        .unwrap()
        .maintenance_windows = vec![
        window("weekly", "0 2 * * WED"),
        window("sat-night", "12 16 * * *"),
    ];
    edit(&mut fleet, "dc1/n01", |n| n.reimage.generation = 1);
    fleet
}

#[test]
fn a_reimage_waits_for_its_maintenance_window() {
    let fleet = windows_fleet("anytime");
    let mut machines = deployed("aaa", &DC1[..1]);
    machines.push(ready("aaa002", "n02", "10.176.16.12"));
    let snapshot = World::new()
        .machines("dc1", machines)
        .node(applied(inventory("dc1", "n01", NodeState::Active), 0))
        .done();
    let plan = run("window_waits", &fleet, &snapshot, &["dc1"]);
    let n01 = item(&plan, "dc1/n01");
    assert_eq!(
        cause(n01),
        &BlockCause::MaintenanceWindow {
            window: "sat-night".into(),
            opens_at: Some(at(192)),
            would: "reimage".into(),
        }
    );
    assert!(
        n01.reason.starts_with(
            "waits for window sat-night (opens in 3h12m); would reimage: reimage.generation 0 → 1"
        ),
        "{}",
        n01.reason
    );
    assert!(!n01.destructive && n01.target.is_none());
    // Onboarding a new machine does not wait for the window.
    assert_eq!(item(&plan, "dc1/n02").action, Action::Onboard);
    let text = render::render_text(&plan, TextOptions::default());
    assert!(
        text.contains("    @ dc1/n01  blocked  waits for window sat-night (opens in 3h12m)"),
        "{text}"
    );

    // Inside the window the reimage runs.
    let open = PlanOptions {
        sites: SiteFilter::from_names(["dc1"]),
        now: Some(at(200)),
        ..PlanOptions::default()
    };
    let later = plan::plan(&fleet, &snapshot, &open);
    assert!(matches!(
        item(&later, "dc1/n01").action,
        Action::Reimage { .. }
    ));

    // Overridden: the reimage is planned and says which window it overrides.
    let ignore = PlanOptions {
        sites: SiteFilter::from_names(["dc1"]),
        ignore_windows: true,
        ..PlanOptions::default()
    };
    let forced = plan::plan(&fleet, &snapshot, &ignore);
    let n01 = item(&forced, "dc1/n01");
    assert!(matches!(n01.action, Action::Reimage { .. }));
    assert_eq!(n01.window_ignored.as_deref(), Some("sat-night"));
    assert!(
        n01.reason.ends_with(
            "(maintenance window sat-night is closed, opens in 3h12m: overridden with --ignore-windows)"
        ),
        "{}",
        n01.reason
    );
    let back = plan::from_json(&render::render_json(&forced), "plan.json".as_ref()).unwrap();
    assert_eq!(back, forced, "the override survives the plan file");
}

#[test]
fn a_window_that_holds_onboarding_holds_new_machines_too() {
    let fleet = windows_fleet("inWindow");
    let snapshot = World::new()
        .machines("dc1", vec![ready("aaa002", "n02", "10.176.16.12")])
        .done();
    let options = PlanOptions {
        sites: SiteFilter::from_names(["dc1"]),
        ..PlanOptions::default()
    };
    let plan = plan::plan(&fleet, &snapshot, &options);
    let n02 = item(&plan, "dc1/n02");
    assert!(
        matches!(cause(n02), BlockCause::MaintenanceWindow { would, .. } if would == "onboard"),
        "{n02:?}"
    );
}

#[test]
fn protection_blocks_every_destructive_item() {
    let mut fleet = fixture_fleet();
    // A reimage generation asks for the Deployed machine to be redeployed, not adopted.
    edit(&mut fleet, "dc1/n01", |n| {
        n.protected = true;
        n.reimage.generation = 1;
    });
    let mut theirs = machine("other01", "n01", MaasStatus::Deployed, "10.176.16.11");
    theirs.owner = Some("bob".into());
    let snapshot = World::new().machines("dc1", vec![theirs]).done();
    let plan = run("protected", &fleet, &snapshot, &["dc1"]);
    let n01 = item(&plan, "dc1/n01");
    assert_eq!(
        cause(n01),
        &BlockCause::Protected {
            source: PauseSource::Manifest,
            would: "onboard".into()
        }
    );
    assert!(
        n01.reason
            .starts_with("protected in the manifest (set protected: false to proceed); would onboard: MAAS lists it Deployed"),
        "{}",
        n01.reason
    );
    assert_eq!(plan.summary.destructive, 0);
}

// --- User-data in the plan (issue 12 "Install path") ---

const CA_PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIBdTCCARugAwIBAgIUQ2Fmb3JtIGRldiBDQSBmb3IgdGVzdHMwCgYIKoZIzj0E\n-----END CERTIFICATE-----\n";
const ENROLL: &str = "https://10.176.46.5:8741/agent/v1/enroll";

fn agent(version: &str, sha: char) -> metalform::cloudinit::AgentInstall {
    metalform::cloudinit::AgentInstall {
        binary: Some(metalform::cloudinit::AgentBinary {
            url: format!("https://mirror.example/metalform-agent-{version}"),
            sha256: sha.to_string().repeat(64),
        }),
        ca_bundle: Some(CA_PEM.into()),
    }
}

/// What the onboarding of `node` recorded when it rendered the payload it deployed, with
/// `install` as the agent install then.
fn payload_record(
    fleet: &Fleet,
    node: &str,
    system_id: &str,
    install: metalform::cloudinit::AgentInstall,
) -> metalform::cloudinit::PayloadRecord {
    use metalform::cloudinit::{self, CloudInitInput, NodeRuntime};
    let (site, host) = node.split_once('/').unwrap();
    let node = &fleet.nodes[&NodeId::new(site, host)];
    let profile = fleet.profile_of(node).unwrap();
    let runtime = NodeRuntime::for_review(
        profile,
        system_id.into(),
        ENROLL.into(),
        Some("/dev/disk/by-id/ata-Dell_BOSS-N1_S1A2B3".into()),
        install,
    );
    let input = CloudInitInput::for_node(fleet.site_of(node).unwrap(), profile, node, runtime);
    let digest = cloudinit::render_review(&input).unwrap().digest;
    input.record(&digest)
}

fn onboarded(
    fleet: &Fleet,
    node: &str,
    system_id: &str,
    install: metalform::cloudinit::AgentInstall,
) -> metalform::observe::ObservedJob {
    let (site, host) = node.split_once('/').unwrap();
    let mut job = job(site, host, JobState::Completed, "completed");
    job.node_id = Some(id(&format!("node/{node}")));
    job.maas_system_id = Some(system_id.into());
    job.payload = Some(payload_record(fleet, node, system_id, install));
    job
}

/// No secret of a payload reaches any rendering: the token and password hash are redacted.
fn no_secrets(plan: &Plan) {
    for out in [
        render::render_text(plan, TextOptions::default()),
        render::render_json(plan),
        render::render_markdown(plan, 60_000),
    ] {
        assert!(!out.contains("$6$"), "a password hash in\n{out}");
        assert!(
            !out.contains("<enrollment-token>"),
            "the token stand-in in\n{out}"
        );
        assert!(!out.contains("not-read"), "the password stand-in in\n{out}");
    }
}

#[test]
fn a_new_agent_release_shows_as_a_user_data_diff_of_the_nodes_it_reaches() {
    let mut fleet = fixture_fleet();
    edit(&mut fleet, "dc1/n01", |n| n.reimage.generation = 2);
    let (v1, v2) = (agent("1.4.0", 'a'), agent("1.5.0", 'b'));
    let snapshot = World::new()
        .machines("dc1", deployed("aaa", DC1))
        .machines("dc2", vec![])
        .node(applied(inventory("dc1", "n01", NodeState::Active), 1))
        .node(applied(inventory("dc1", "n02", NodeState::Active), 0))
        .node(applied(inventory("dc1", "n03", NodeState::Active), 0))
        .job(onboarded(&fleet, "dc1/n01", "aaa001", v1.clone()))
        .job(onboarded(&fleet, "dc1/n02", "aaa002", v1.clone()))
        // Deployed before the server had an agent to install: it only enrolled with curl.
        .job(onboarded(&fleet, "dc1/n03", "aaa003", Default::default()))
        .done();
    let options = PlanOptions {
        sites: SiteFilter::from_names(["dc1", "dc2"]),
        payload: Some(plan::PayloadSettings {
            enroll_url: Some(ENROLL.into()),
            agent: v2,
        }),
        ..PlanOptions::default()
    };
    let plan = run_with("user_data_agent_release", &fleet, &snapshot, &options);
    no_secrets(&plan);

    // The reimage deploys the new payload; the settled node gets it at its next reimage.
    let n01 = item(&plan, "dc1/n01");
    assert!(matches!(n01.action, Action::Reimage { .. }));
    let change = n01.user_data.as_ref().expect("n01's user-data changes");
    assert_eq!(change.applies, plan::UserDataApplies::ThisDeploy);
    let n02 = item(&plan, "dc1/n02");
    assert_eq!(n02.action, Action::Noop);
    let change = n02.user_data.as_ref().expect("n02's user-data changes");
    assert_eq!(change.applies, plan::UserDataApplies::NextDeploy);
    assert_ne!(change.before.as_deref(), Some(change.after.as_str()));
    // The agent section of the diff: its URL and pin change, the CA and unit stay.
    let diff = change.diff.join("\n");
    // (`-`/`+`, then the line of /etc/metalform/agent.env as the document indents it.)
    for line in [
        "-      METALFORM_AGENT_URL=\"https://mirror.example/metalform-agent-1.4.0\"",
        "+      METALFORM_AGENT_URL=\"https://mirror.example/metalform-agent-1.5.0\"",
        &format!("-      METALFORM_AGENT_SHA256=\"{}\"", "a".repeat(64)),
        &format!("+      METALFORM_AGENT_SHA256=\"{}\"", "b".repeat(64)),
    ] {
        assert!(diff.lines().any(|l| l == line), "{line} in\n{diff}");
    }
    assert!(
        !diff.contains("BEGIN CERTIFICATE"),
        "the CA did not change:\n{diff}"
    );
    assert_eq!(
        change.layers,
        [format!(
            "b agent-bootstrap v2: enroll at {ENROLL}; agent https://mirror.example/metalform-agent-1.5.0 (sha256 bbbbbbbbbbbb), pinned CA"
        )]
    );
    // The first agent install: the pin in agent.env, the CA it trusts and the unit the
    // bootstrap enables all arrive.
    let diff = item(&plan, "dc1/n03")
        .user_data
        .as_ref()
        .expect("n03")
        .diff
        .clone();
    let added = |what: &str| diff.iter().any(|l| l.starts_with('+') && l.contains(what));
    for what in [
        "METALFORM_AGENT_URL=\"https://mirror.example/metalform-agent-1.5.0\"",
        &format!("METALFORM_AGENT_SHA256=\"{}\"", "b".repeat(64)),
        "path: /etc/metalform/ca.pem",
        "-----BEGIN CERTIFICATE-----",
        "path: /etc/systemd/system/metalform-agent.service",
        "ExecStart=/usr/local/bin/metalform-agent run",
    ] {
        assert!(added(what), "{what} added in\n{}", diff.join("\n"));
    }

    // A new onboarding shows the payload it deploys: the agent install, CA pin and unit.
    let m01 = item(&plan, "dc2/m01");
    assert_eq!(m01.action, Action::Onboard);
    let change = m01.user_data.as_ref().expect("a new payload");
    assert_eq!(change.before, None);
    assert!(change.diff.is_empty());
    assert!(
        change
            .layers
            .iter()
            .any(|l| l.starts_with("b agent-bootstrap v2: enroll at")
                && l.ends_with("(sha256 bbbbbbbbbbbb), pinned CA")),
        "{:?}",
        change.layers
    );

    let text = render::render_text(&plan, TextOptions::default());
    assert!(text.contains("    * dc1/n02"), "{text}");
    assert!(
        text.contains("reaches the host at its next reimage"),
        "{text}"
    );
    let md = render::render_markdown(&plan, 60_000);
    assert!(
        md.contains("<details><summary>User-data (secrets redacted) (5)</summary>"),
        "{md}"
    );
    assert!(md.contains("```diff\n"), "{md}");
}

#[test]
fn a_manifest_change_shows_as_a_user_data_diff_against_the_recorded_agent_install() {
    let mut fleet = fixture_fleet();
    let v1 = agent("1.4.0", 'a');
    let snapshot = World::new()
        .machines("dc1", deployed("aaa", DC1))
        .node(applied(inventory("dc1", "n01", NodeState::Active), 0))
        .node(applied(inventory("dc1", "n02", NodeState::Active), 0))
        .node(applied(inventory("dc1", "n03", NodeState::Active), 0))
        .job(onboarded(&fleet, "dc1/n01", "aaa001", v1.clone()))
        .job(onboarded(&fleet, "dc1/n02", "aaa002", v1.clone()))
        .job(onboarded(&fleet, "dc1/n03", "aaa003", v1))
        .done();
    // Nothing changed: nothing is shown, and the plan reads as before.
    let same = plan::plan(
        &fleet,
        &snapshot,
        &PlanOptions {
            sites: SiteFilter::from_names(["dc1"]),
            ..PlanOptions::default()
        },
    );
    assert!(same.items.iter().all(|i| i.user_data.is_none()));
    assert!(!render::render_json(&same).contains("user_data"));

    // The site bundle moves to version 4: every node of the profile shows it, and the plan is
    // told no agent install, so each keeps the one it was deployed with.
    let profile = fleet
        .profiles
        .get_mut(&metalform::model::ProfileName::new("dc1-gpu"))
        .unwrap();
    profile.cloud_init.site_bundle.as_mut().unwrap().version = "4".into();
    let plan = run("user_data_manifest_change", &fleet, &snapshot, &["dc1"]);
    no_secrets(&plan);
    for node in ["dc1/n01", "dc1/n02", "dc1/n03"] {
        let change = item(&plan, node).user_data.as_ref().expect(node);
        assert_eq!(
            change.layers,
            ["a site-bundle v4: bundles/dc1-base@4"],
            "{node}"
        );
        let diff = change.diff.join("\n");
        assert!(
            diff.contains("+      METALFORM_SITE_BUNDLE_VERSION=\"4\""),
            "{diff}"
        );
        assert!(!diff.contains("METALFORM_AGENT_URL"), "{diff}");
    }
    // The user-data is a preview: a plan that shows it and one that does not decide the same,
    // so applying a plan file re-planned without it is not refused.
    assert_ne!(plan.id, same.id);
    assert_eq!(plan::differences(&plan, &same), Vec::<String>::new());
}
