//! Declarative decommissions through `metalform plan` and `metalform apply` as processes against
//! the simulator (issue 6 "Show"): the fleet is edited — one node's `reimage.generation`
//! bumped, one `lifecycle: retired`, one `lifecycle: decommissioned` — the plan shows a
//! reimage, a retirement and a decommission, apply refuses them without
//! `--allow-destructive`, then runs them: the reimaged node is active again with the same node
//! id and a second deploy, the retired one is retired with its machine released and off, the
//! decommissioned one is deleted; a second plan is empty. A `metalform apply` killed (SIGKILL)
//! while MAAS erases resumes on the next apply without a second release or erase.

use crate::onboard_support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use metalform::lifecycle::{DecommissionMode, JobKind, JobState, NodeState};
use metalform::stages::decommission::DecommissionFacts;
use metalform::store::{Job, JobFilter};
use onboard_support::{Bed, Setup, SiteSetup, free_port};

fn text(out: &std::process::Output) -> String {
    format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A bed whose nodes were onboarded (by the in-process executor: their agents keep talking to
/// the bed's endpoint, which outlives every CLI process).
async fn onboarded(seed: u64, nodes: usize, tune: impl FnOnce(&mut SiteSetup)) -> Bed {
    let mut site = SiteSetup::generated("dc1", seed, nodes, 0);
    tune(&mut site);
    let bed = Bed::start(Setup::one_site(site)).await;
    let report = bed.executor().run(bed.onboard_all()).await;
    assert!(report.all_converged(), "{report:#?}");
    bed
}

async fn decommissions(bed: &Bed) -> Vec<Job> {
    bed.store
        .list_jobs(JobKind::Decommission, &JobFilter::default())
        .await
        .unwrap()
}

/// (MAAS status, power state) of a machine in the simulator.
fn machine_state(bed: &Bed, hostname: &str) -> (String, String) {
    bed.sim("dc1").with_world(|w| {
        let m = w
            .machines
            .values()
            .find(|m| m.hostname == hostname)
            .unwrap();
        (m.status.name().to_owned(), format!("{:?}", m.power_state))
    })
}

fn counters(bed: &Bed, hostname: &str) -> metalform::sim::Counters {
    let sim = bed.sim("dc1");
    let system_id = sim.with_world(|w| {
        w.machines
            .values()
            .find(|m| m.hostname == hostname)
            .unwrap()
            .system_id
            .clone()
    });
    sim.counters().get(&system_id).cloned().unwrap_or_default()
}

/// `metalform plan --detailed-exitcode`: exit 0 and nothing to do.
fn assert_plan_is_empty(bed: &Bed) -> String {
    let out = bed
        .cli_plan(&["plan", "--detailed-exitcode"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(stdout.contains("Plan: no changes;"), "{stdout}");
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reimage_retire_and_decommission_from_the_manifests_through_plan_and_apply() {
    let bed = onboarded(61, 3, |_| {}).await;
    let port = free_port();
    let ids: Vec<uuid::Uuid> = {
        let mut ids = Vec::new();
        for host in ["gpu00001", "gpu00002", "gpu00003"] {
            let node = bed.store.find_node("dc1", host).await.unwrap().unwrap();
            // Onboarding records the generation it deployed.
            assert_eq!(node.reimage_generation, Some(0), "{host}");
            ids.push(node.id);
        }
        ids
    };
    assert_plan_is_empty(&bed);

    bed.edit_fleet(
        "nodes/dc1.yaml",
        "{hostname: gpu00001, ",
        "{hostname: gpu00001, reimage: {generation: 1}, ",
    );
    bed.edit_fleet(
        "nodes/dc1.yaml",
        "{hostname: gpu00002, ",
        "{hostname: gpu00002, lifecycle: retired, retiredReason: \"PSU failure (HW-3001)\", ",
    );
    bed.edit_fleet(
        "nodes/dc1.yaml",
        "{hostname: gpu00003, ",
        "{hostname: gpu00003, lifecycle: decommissioned, ",
    );

    let out = bed
        .cli_plan(&["plan", "--detailed-exitcode"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for line in [
        "  ~/+ dc1/gpu00001  reimage       reimage.generation 0 → 1; the node is active, Deployed in MAAS (",
        "    x dc1/gpu00002  retire        lifecycle retired (\"PSU failure (HW-3001)\"); the node is active, Deployed in MAAS (",
        "    - dc1/gpu00003  decommission  lifecycle decommissioned; the node is active, Deployed in MAAS (",
        "Plan: 1 to reimage, 1 to decommission, 1 to retire; 0 unchanged. 3 items are destructive: apply needs --allow-destructive.",
    ] {
        assert!(stdout.contains(line), "no `{line}` in\n{stdout}");
    }

    // Without --allow-destructive: refused before anything changes.
    let serial = bed.store.serial().await.unwrap();
    let writes = bed.maas_writes("dc1").len();
    let refused = bed
        .cli(&["apply", "--auto-approve"], port)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("destructive item(s): dc1/gpu00001 (reimage.generation 0 → 1;"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "hint: review each destructive item; to go ahead, apply again with --allow-destructive"
        ),
        "{stderr}"
    );
    assert!(decommissions(&bed).await.is_empty());
    assert_eq!(bed.store.serial().await.unwrap(), serial);
    assert_eq!(bed.maas_writes("dc1").len(), writes);

    let out = bed
        .cli(&["apply", "--auto-approve", "--allow-destructive"], port)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("Apply: 3 converged, 0 failed, 0 not run."),
        "{stdout}"
    );

    let jobs = decommissions(&bed).await;
    assert_eq!(jobs.len(), 3, "{jobs:#?}");
    for job in &jobs {
        assert_eq!(job.state, JobState::Completed, "{job:#?}");
        assert!(job.plan_id.is_some(), "created under the plan");
    }
    let mode_of = |host: &str| {
        jobs.iter()
            .find(|j| j.hostname == host)
            .and_then(|j| j.mode())
    };
    assert_eq!(mode_of("gpu00001"), Some(DecommissionMode::Reimage));
    assert_eq!(mode_of("gpu00002"), Some(DecommissionMode::Retire));
    assert_eq!(
        mode_of("gpu00003"),
        Some(DecommissionMode::FullDecommission)
    );

    // Reimaged: the same node, active again, its generation recorded; MAAS deployed it twice.
    let n1 = bed.store.node(ids[0]).await.unwrap();
    assert_eq!(n1.status, NodeState::Active);
    assert_eq!(n1.reimage_generation, Some(1));
    assert_eq!(
        bed.store
            .find_node("dc1", "gpu00001")
            .await
            .unwrap()
            .unwrap()
            .id,
        ids[0],
        "a reimage keeps the node id"
    );
    assert_eq!(bed.deploys("dc1")["gpu00001"], 2);
    assert_eq!(machine_state(&bed, "gpu00001").0, "Deployed");
    // Retired: identity kept, machine released and off.
    assert_eq!(
        bed.store.node(ids[1]).await.unwrap().status,
        NodeState::Retired
    );
    assert_eq!(
        machine_state(&bed, "gpu00002"),
        ("Ready".into(), "Off".into())
    );
    // Decommissioned: the node record is deleted, the machine released and off.
    assert_eq!(
        bed.store.node(ids[2]).await.unwrap().status,
        NodeState::Deleted
    );
    assert!(
        bed.store
            .find_node("dc1", "gpu00003")
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        machine_state(&bed, "gpu00003"),
        ("Ready".into(), "Off".into())
    );
    for host in ["gpu00001", "gpu00002", "gpu00003"] {
        let c = counters(&bed, host);
        assert_eq!(c.release, 1, "{host}: {c:?}");
    }

    // Converged: the next plan has nothing to do, and says where each node stands.
    let plan = assert_plan_is_empty(&bed);
    assert!(
        plan.contains(
            "dc1/gpu00003  noop     lifecycle decommissioned: not in the inventory (never onboarded, or removed already)"
        ),
        "{plan}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_killed_while_maas_erases_resumes_without_a_second_release_or_erase() {
    let bed = onboarded(62, 1, |site| {
        // A quick erase of a few seconds real time: the apply is killed while MAAS erases.
        site.config.timings.quick_erase_secs = 2400.0;
    })
    .await;
    let port = free_port();
    let node = bed
        .store
        .find_node("dc1", "gpu00001")
        .await
        .unwrap()
        .unwrap()
        .id;
    bed.edit_fleet(
        "nodes/dc1.yaml",
        "{hostname: gpu00001, ",
        "{hostname: gpu00001, lifecycle: decommissioned, ",
    );
    let log = bed.dir.path().join("apply.log");
    let log_file = || {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap()
    };
    let mut first = bed
        .cli(&["apply", "--auto-approve", "--allow-destructive"], port)
        .stdout(Stdio::null())
        .stderr(log_file())
        .spawn()
        .unwrap();
    // Kill it once MAAS has taken the release and is erasing.
    let started = Instant::now();
    let job_id = loop {
        let jobs = decommissions(&bed).await;
        if let Some(job) = jobs.first()
            && DecommissionFacts::from_details(&job.stage_details)
                .release()
                .is_some_and(|r| r.received)
        {
            break job.id;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no release reached MAAS\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    first.kill().unwrap();
    first.wait().unwrap();
    let killed = bed.store.job(JobKind::Decommission, job_id).await.unwrap();
    assert_eq!(
        (killed.state, killed.stage.as_str()),
        (JobState::Running, "release_maas_node"),
        "killed while MAAS erases"
    );
    assert_eq!(machine_state(&bed, "gpu00001").0, "Disk erasing");

    // The next plan resumes that job rather than starting another one.
    let out = bed.cli_plan(&["plan"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "    > dc1/gpu00001  resume   full_decommission {} was left running at release_maas_node",
            &job_id.to_string()[..8]
        )),
        "{stdout}"
    );

    // Apply again until it converges (the dead apply's lease expires first).
    let started = Instant::now();
    loop {
        let out = bed
            .cli(&["apply", "--auto-approve", "--allow-destructive"], port)
            .stderr(log_file())
            .output()
            .unwrap();
        if out.status.success() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "apply keeps failing\n{}\n{}",
            text(&out),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let jobs = decommissions(&bed).await;
    assert_eq!(jobs.len(), 1, "the killed job was resumed, not replaced");
    assert_eq!(jobs[0].state, JobState::Completed, "{:#?}", jobs[0]);
    assert_eq!(
        bed.store.node(node).await.unwrap().status,
        NodeState::Deleted
    );
    let c = counters(&bed, "gpu00001");
    assert_eq!((c.release, c.erase), (1, 1), "{c:?}");
    let starts = bed
        .store
        .job_events(JobKind::Decommission, job_id, 200)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.stage == "release_maas_node" && e.status == "started")
        .count();
    assert_eq!(
        starts, 1,
        "the release attempt was continued, not restarted"
    );
    assert_plan_is_empty(&bed);
}
