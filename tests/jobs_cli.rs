//! `metalform jobs …` (issue 13): one set of commands over every kind of job. An onboarding and
//! a failed soft reset of the same node are listed together with their kinds; each is shown
//! without naming its kind; an action the kind does not offer is refused before anything is
//! recorded; a cancel the kind compensates with the store alone needs no execution flags; the
//! retry of a decommission runs through the same engine as `apply`.

use crate::onboard_support;

use metalform::apply::decommission::{
    Decommission, DecommissionJob, DecommissionWork, request_soft_reset,
};
use metalform::lifecycle::{JobKind, JobState, NodeState};
use metalform::sim::{TaskFault, TaskFaultMode};
use metalform::stages::decommission::DecommissionTarget;
use metalform::store::Actor;
use onboard_support::{Bed, Setup, SiteSetup, free_port};

fn run(command: &mut std::process::Command) -> (i32, String, String) {
    let out = command.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The standard output of a command that must succeed.
fn stdout(bed: &Bed, args: &[&str]) -> String {
    let (code, out, err) = run(&mut bed.cli_store(args));
    assert_eq!(code, 0, "{args:?}: {err}");
    out
}

/// Every drain task fails from now on (with `message`), or none does.
fn drains_fail(bed: &Bed, fail: bool, message: Option<&str>) {
    let faults: Vec<TaskFault> = fail
        .then(|| TaskFault {
            task: "node.drain".into(),
            machine: None,
            times: None,
            mode: TaskFaultMode::Fail,
            message: message.map(str::to_owned),
        })
        .into_iter()
        .collect();
    bed.sim("dc1")
        .with_world(move |w| w.replace_task_faults(faults));
}

/// A soft reset of gpu00001, requested as the admin API does and run by the engine; its drain
/// fails while `drains_fail` says so.
async fn soft_reset(bed: &Bed) -> uuid::Uuid {
    let onboarded = bed.job_of("dc1", "gpu00001").await;
    let node = bed.store.node(onboarded.node_id.unwrap()).await.unwrap();
    let actor = Actor::admin("api");
    let job = request_soft_reset(&bed.store, node.id, None, &actor, Some("tenant turnover"))
        .await
        .unwrap();
    let target = DecommissionTarget {
        node_id: node.id,
        site: node.site,
        hostname: node.hostname,
        resolved: Some(bed.target("dc1", "gpu00001")),
    };
    let work = DecommissionWork {
        target,
        job: DecommissionJob::Existing(job.id),
    };
    bed.executor().of::<Decommission>().run(vec![work]).await;
    job.id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_kind_through_one_set_of_commands() {
    let bed = Bed::start(Setup::one_site(SiteSetup::generated("dc1", 41, 1, 0))).await;
    assert!(bed.executor().run(bed.onboard_all()).await.all_converged());
    let onboarding = bed.job_of("dc1", "gpu00001").await.id;
    drains_fail(&bed, true, Some("drain hook exited 1"));
    let reset = soft_reset(&bed).await;

    // Both kinds in one list, newest first, with their kinds.
    let listed = stdout(&bed, &["jobs", "list"]);
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 5, "{listed}");
    assert!(lines[0].starts_with("SITE  HOSTNAME  KIND                       STATE"));
    let kinds = "decommission (soft_reset)  failed_manual_intervention  drain_node#3";
    assert!(lines[1].contains(kinds) && lines[1].ends_with(&reset.to_string()));
    assert!(lines[2].contains("onboarding                 completed"));
    assert_eq!(lines[4], "2 job(s)");
    let (_, out, _) =
        run(&mut bed.cli_store(&["jobs", "list", "--kind", "onboarding", "--format", "json"]));
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["onboardings"][0]["id"], onboarding.to_string(), "{doc}");
    assert_eq!(doc["onboardings"].as_array().unwrap().len(), 1);
    let (_, out, _) = run(&mut bed.cli_store(&["jobs", "list", "--open", "--format", "json"]));
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    let kinds: Vec<&str> = doc["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["decommission"], "{doc}");

    // Shown by id without naming the kind; the kind's own lines and fields come along.
    let out = stdout(&bed, &["jobs", "show", &reset.to_string()]);
    for line in [
        &format!("job            decommission {reset}\n"),
        "mode           soft_reset\n",
        "failure class  post_deploy_connectivity_failure\n",
        "error          agent_task_failed: the node agent reported node.drain failed: drain hook exited 1\n",
    ] {
        assert!(out.contains(line), "missing {line:?} in\n{out}");
    }
    let (_, out, _) =
        run(&mut bed.cli_store(&["jobs", "show", &onboarding.to_string(), "--format", "json"]));
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["job"]["kind"], "onboarding");
    assert_eq!(doc["job"]["state"], "completed");
    assert!(doc.get("follow_ups").is_none(), "{doc}");
    assert!(!doc["events"].as_array().unwrap().is_empty());

    // An action the kind does not offer: refused, nothing recorded.
    let before = bed.audit_of(reset).await.len();
    let (code, _, err) = run(&mut bed.cli_store(&[
        "jobs",
        "rerun",
        &reset.to_string(),
        "--reason",
        "try from the top",
    ]));
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        err,
        "error: decommissions take no rerun: they offer retry, resume, cancel, mark-manual\n"
    );
    assert_eq!(bed.audit_of(reset).await.len(), before);

    // Retry through `jobs`, with apply's execution flags: the same engine runs the rest.
    drains_fail(&bed, false, None);
    let (code, out, err) = run(&mut bed.cli(
        &[
            "jobs",
            "retry",
            "gpu00001",
            "--kind",
            "decommission",
            "--reason",
            "drain hook fixed",
        ],
        free_port(),
    ));
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        err.contains(&format!(
            "retry_stage: decommission {reset} failed_manual_intervention -> running at drain_node"
        )),
        "{err}"
    );
    let done = bed.store.job(JobKind::Decommission, reset).await.unwrap();
    assert_eq!(done.state, JobState::Completed);

    // A cancel the kind compensates with the store alone: no execution flags needed.
    drains_fail(&bed, true, None);
    let second = soft_reset(&bed).await.to_string();
    let cancel = [
        "jobs",
        "cancel",
        &second,
        "--reason=tenant stays",
        "--as=ops",
    ];
    let (code, out, err) = run(&mut bed.cli_store(&cancel));
    assert_eq!((code, err.as_str()), (0, ""));
    let was = "was failed_manual_intervention at drain_node; audited as ops";
    assert_eq!(out, format!("decommission {second} is cancelled ({was})\n"));
    let node = done.node_id.unwrap();
    assert_eq!(
        bed.store.node(node).await.unwrap().status,
        NodeState::Active
    );
}
