//! `metalform status` transcripts on SQLite (hermetic): empty stores, a seeded store (golden
//! text), filters, the detail view, and errors.

use std::process::Command;
use std::sync::Arc;

use chrono::{DateTime, Duration, SubsecRound as _, Utc};
use metalform::clock::ManualClock;
use metalform::lifecycle::{
    FailureClass, JobKind, JobState, MaasStatus, NodeState, Owner, Provider,
};
use metalform::store::{
    Actor, EventStatus, JobFailure, JobUpdate, MaasStateUpdate, NewNode, NewOnboarding,
    NodeTransition, Observed, RetryWait, StageEvent, Store,
};
use serde_json::json;

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn status(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_metalform"))
        .arg("status")
        .args(args)
        .env_remove("METALFORM_STATE")
        .env("NO_COLOR", "1")
        .output()
        .expect("run metalform");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

#[test]
fn no_store_prints_an_empty_table_and_creates_none() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state/new.db");
    let url = format!("sqlite://{}", path.display());
    for _ in 0..2 {
        let run = status(&["--state", &url]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert_eq!(
            run.stdout,
            "SITE  HOSTNAME  STATE  FLAGS  NODE ID\n\n0 nodes\n"
        );
        assert_eq!(
            run.stderr,
            format!(
                "note: no state store at {} yet (nothing was applied with it): reading an empty one\n",
                path.display()
            )
        );
        assert!(!path.exists(), "status only reads: it creates no store");
    }
    // Default location: outside the fleet, in the XDG state directory; not made by a read.
    let fleet = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_metalform"))
        .args(["status", "--fleet", fleet.path().to_str().unwrap()])
        .args(["--format", "json"])
        .env_remove("METALFORM_STATE")
        .env("XDG_STATE_HOME", dir.path().join("xdg"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!fleet.path().join(".metalform").exists());
    assert!(!dir.path().join("xdg").exists());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc,
        json!({"nodes": [], "summary": {"total": 0, "by_state": {}}})
    );
}

#[test]
fn two_processes_creating_a_fresh_store_at_once_both_succeed() {
    for _ in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/state.db", dir.path().display());
        // A command that writes creates the store (and then finds no such job).
        let spawn = || {
            Command::new(env!("CARGO_BIN_EXE_metalform"))
                .args([
                    "decommissions",
                    "cancel",
                    "00000000-0000-4000-8000-000000000000",
                ])
                .args(["--reason", "race", "--state", &url])
                .env_remove("METALFORM_STATE")
                .output()
                .unwrap()
        };
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(spawn);
            let b = s.spawn(spawn);
            (a.join().unwrap(), b.join().unwrap())
        });
        for out in [a, b] {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.starts_with(
                    "error: decommission `00000000-0000-4000-8000-000000000000` not found"
                ),
                "the store opened, the job was looked up: {stderr}"
            );
        }
        assert!(dir.path().join("state.db").exists());
    }
}

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-03-01T08:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

/// A small fleet: an active node, a retired+protected one, a failed onboarding, and a node in
/// another site. Returns the ids to replace in the transcript.
async fn seed(url: &str) -> Vec<(String, String)> {
    let clock = ManualClock::new(t0());
    let store = Store::open(url, Arc::new(clock.clone())).await.unwrap();
    let exec = Actor::system("apply");
    let node = |site: &str, host: &str| NewNode {
        site: site.into(),
        hostname: host.into(),
        provider: Provider::Maas,
        status: NodeState::Enrolling,
        sku: None,
        gpus: None,
        ipmi_ip: None,
    };
    let mut ids = Vec::new();
    for (site, host) in [
        ("dc1", "c07u43"),
        ("dc1", "c07u44"),
        ("dc1", "c07u45"),
        ("dc2", "d01u01"),
    ] {
        let n = store.create_node(&node(site, host), &exec).await.unwrap();
        ids.push((n.id.to_string(), format!("<{host}>")));
        let job = store
            .create_onboarding(&NewOnboarding {
                node_id: Some(n.id),
                site: site.into(),
                hostname: host.into(),
                ..NewOnboarding::default()
            })
            .await
            .unwrap();
        ids.push((job.id.to_string(), format!("<job-{host}>")));
        clock.advance(Duration::minutes(1));
        let mut run = JobUpdate::new(JobState::Running);
        run.stage = Some("configure_storage".into());
        run.attempt = Some(1);
        run.event = Some(StageEvent {
            stage: "configure_storage".into(),
            attempt: 1,
            status: EventStatus::Started,
            message: None,
            details: json!({}),
        });
        store
            .advance_job(JobKind::Onboarding, job.id, &run)
            .await
            .unwrap();
        clock.advance(Duration::minutes(1));
        if host == "c07u45" {
            let mut fail = JobUpdate::new(JobState::FailedManualIntervention);
            fail.failure = Some(JobFailure {
                class: FailureClass::HardwareMismatch,
                code: "boot_disk_not_found".into(),
                message: "no block device matches (?i)boss|boot optimized|m\\.2".into(),
                details: json!({"disks": ["sda"]}),
            });
            fail.observed = Some(Observed {
                status: Some("Ready".into()),
                power_state: Some("off".into()),
                ips: vec![],
            });
            fail.event = Some(StageEvent {
                stage: "configure_storage".into(),
                attempt: 1,
                status: EventStatus::Failed,
                message: Some("boot disk not found".into()),
                details: json!({}),
            });
            store
                .advance_job(JobKind::Onboarding, job.id, &fail)
                .await
                .unwrap();
            store
                .upsert_maas_state(&MaasStateUpdate {
                    node_id: n.id,
                    site: site.into(),
                    maas_system_id: "x7k3pa".into(),
                    status: Some(MaasStatus::Ready.name().into()),
                    power_state: Some("off".into()),
                    ips: vec![],
                    drift: None,
                })
                .await
                .unwrap();
            continue;
        }
        let mut done = JobUpdate::new(JobState::Completed);
        done.stage = Some("wait_for_agent_enrollment".into());
        done.node_transition = Some(NodeTransition::new(
            NodeState::Active,
            Owner::OnboardingWorkflow,
            exec.clone(),
        ));
        store
            .advance_job(JobKind::Onboarding, job.id, &done)
            .await
            .unwrap();
        store
            .upsert_maas_state(&MaasStateUpdate {
                node_id: n.id,
                site: site.into(),
                maas_system_id: format!("sys-{host}"),
                status: Some(MaasStatus::Deployed.name().into()),
                power_state: Some("on".into()),
                ips: vec!["10.176.46.20".into()],
                drift: None,
            })
            .await
            .unwrap();
        if host == "c07u44" {
            store
                .set_retired(n.id, "end of warranty", &Actor::admin("alice"))
                .await
                .unwrap();
            store
                .set_protected(n.id, Some("tenant run"), &Actor::admin("alice"))
                .await
                .unwrap();
        }
    }
    store.close().await;
    ids
}

fn scrub(text: &str, ids: &[(String, String)]) -> String {
    ids.iter()
        .fold(text.to_owned(), |t, (id, name)| t.replace(id, name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_store_inventory_and_detail_golden() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/state.db", dir.path().display());
    let ids = seed(&url).await;

    let run = status(&["--state", &url]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    insta::assert_snapshot!(scrub(&run.stdout, &ids), @r"
    SITE  HOSTNAME  STATE      FLAGS              NODE ID
    dc1   c07u43    active     -                  <c07u43>
    dc1   c07u44    active     retired,protected  <c07u44>
    dc1   c07u45    enrolling  -                  <c07u45>
    dc2   d01u01    active     -                  <d01u01>

    4 nodes: 1 enrolling, 3 active
    ");

    let run = status(&["--state", &url, "--site", "dc1", "--retired"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    insta::assert_snapshot!(scrub(&run.stdout, &ids), @r"
    SITE  HOSTNAME  STATE   FLAGS              NODE ID
    dc1   c07u44    active  retired,protected  <c07u44>

    1 node: 1 active
    ");

    let run = status(&["--state", &url, "c07u45"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    insta::assert_snapshot!(scrub(&run.stdout, &ids), @r"
    node           c07u45 (site dc1)
    id             <c07u45>
    state          enrolling
    provision      DEPLOYFAIL (target ACTIVE)
    provider       maas
    maas           Ready (power off), system x7k3pa, observed 2026-03-01 08:06:00Z
    job            onboarding <job-c07u45>
    job state      failed_manual_intervention
    stage          configure_storage (attempt 1)
    failure class  hardware_mismatch
    error          boot_disk_not_found: no block device matches (?i)boss|boot optimized|m\.2
    last maas      Ready (power off)
    next action    the hardware does not match the profile (configure_storage): fix the machine or the profile (e.g. storage.bootDisk.match), then rerun
    updated        2026-03-01 08:06:00Z

    recent events
      2026-03-01 08:05:00Z  configure_storage#1  started
      2026-03-01 08:06:00Z  configure_storage#1  failed  boot disk not found
    ");

    let node_id = ids.iter().find(|(_, n)| n == "<c07u44>").unwrap().0.clone();
    let run = status(&["--state", &url, &node_id]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    insta::assert_snapshot!(scrub(&run.stdout, &ids), @r"
    node         c07u44 (site dc1)
    id           <c07u44>
    state        active
    provision    ACTIVE
    flags        retired (end of warranty), protected (tenant run)
    provider     maas
    maas         Deployed (power on), system sys-c07u44, ips 10.176.46.20, observed 2026-03-01 08:04:00Z
    job          onboarding <job-c07u44>
    job state    completed
    stage        wait_for_agent_enrollment (attempt 1)
    next action  none
    updated      2026-03-01 08:04:00Z

    recent events
      2026-03-01 08:03:00Z  configure_storage#1  started
    ");

    let run = status(&["--state", &url, "c07u45", "--format", "json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(doc["node"]["status"], "enrolling");
    assert_eq!(doc["job"]["state"], "failed_manual_intervention");
    assert_eq!(doc["job"]["failure_class"], "hardware_mismatch");
    assert_eq!(doc["maas_state"]["last_maas_status"], "Ready");
    assert_eq!(doc["events"].as_array().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookup_errors_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/state.db", dir.path().display());
    let clock = ManualClock::new(t0());
    let store = Store::open(&url, Arc::new(clock)).await.unwrap();
    for site in ["dc1", "dc2"] {
        store
            .create_node(
                &NewNode {
                    site: site.into(),
                    hostname: "twin".into(),
                    provider: Provider::Maas,
                    status: NodeState::BootstrapIssued,
                    sku: None,
                    gpus: None,
                    ipmi_ip: None,
                },
                &Actor::system("t"),
            )
            .await
            .unwrap();
    }
    store.close().await;
    let run = status(&["--state", &url, "twin"]);
    assert_eq!(run.code, 1);
    assert_eq!(
        run.stderr,
        "error: hostname `twin` exists in several sites: dc1, dc2\nhint: pass --site SITE\n"
    );
    let run = status(&["--state", &url, "twin", "--site", "dc2"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("twin (site dc2)"));
    let run = status(&["--state", &url, "ghost", "--site", "dc1"]);
    assert_eq!(run.code, 1);
    assert_eq!(
        run.stderr,
        "error: no node `ghost` in site `dc1` in the inventory\nhint: run `metalform status` to list nodes; pass a hostname or a node id\n"
    );
    let run = status(&["--state", "mysql://db/x"]);
    assert_eq!(run.code, 1);
    assert_eq!(
        run.stderr,
        "error: invalid state URL `mysql://db/x`: expected sqlite://PATH or postgres://…\nhint: pass --state sqlite://PATH or --state postgres://USER@HOST:PORT/DB\n"
    );
    let run = status(&["--state", &url, "--format", "yaml"]);
    assert_eq!(run.code, 2);
    let missing = dir.path().join("no-such-fleet");
    let run = status(&["--fleet", missing.to_str().unwrap()]);
    assert_eq!(run.code, 1);
    assert_eq!(
        run.stderr,
        format!(
            "error: fleet directory `{}` does not exist\nhint: pass --fleet DIR (the fleet repository) or --state URL\n",
            missing.display()
        )
    );
    assert!(!missing.exists());
}

/// Issue 18: `status NODE` works for every node that has any record — one whose onboarding
/// failed before its inventory record was made (only the job knows it), and a deleted identity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_nodes_known_only_by_a_job_or_a_deleted_identity() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/state.db", dir.path().display());
    let clock = ManualClock::new(t0());
    let store = Store::open(&url, Arc::new(clock.clone())).await.unwrap();
    let exec = Actor::system("apply");
    // An onboarding that failed at create_or_find_in_maas: no node record.
    let job = store
        .create_onboarding(&NewOnboarding {
            site: "dc1".into(),
            hostname: "c09u01".into(),
            ..NewOnboarding::default()
        })
        .await
        .unwrap();
    let mut run = JobUpdate::new(JobState::Running);
    run.stage = Some("create_or_find_in_maas".into());
    store
        .advance_job(JobKind::Onboarding, job.id, &run)
        .await
        .unwrap();
    let mut failed = JobUpdate::new(JobState::FailedManualIntervention);
    failed.failure = Some(JobFailure {
        class: FailureClass::PxeDiscoveryFailure,
        code: "failed_discovery_timeout".into(),
        message: "the machine never PXE-booted".into(),
        details: json!({}),
    });
    store
        .advance_job(JobKind::Onboarding, job.id, &failed)
        .await
        .unwrap();
    // A node fully decommissioned: deleted.
    let node = store
        .create_node(
            &NewNode {
                site: "dc1".into(),
                hostname: "c09u02".into(),
                provider: Provider::Maas,
                status: NodeState::Enrolling,
                sku: None,
                gpus: None,
                ipmi_ip: None,
            },
            &exec,
        )
        .await
        .unwrap();
    store
        .transition_node(
            node.id,
            &NodeTransition::new(
                NodeState::Quarantined,
                Owner::OnboardingWorkflow,
                exec.clone(),
            ),
        )
        .await
        .unwrap();
    let decom = store
        .create_decommission(&metalform::store::NewDecommission {
            node_id: node.id,
            mode: metalform::lifecycle::DecommissionMode::FullDecommission,
            erase: None,
            storage_cleanup: None,
            reason: None,
            requested_by: None,
            plan_id: None,
        })
        .await
        .unwrap();
    for (stage, to, state) in [
        ("drain_node", NodeState::Draining, JobState::Running),
        ("retire_gpuaas_node", NodeState::Retired, JobState::Running),
        (
            "remove_gpuaas_node_record",
            NodeState::Removing,
            JobState::Running,
        ),
        (
            "remove_maas_record",
            NodeState::Deleted,
            JobState::Completed,
        ),
    ] {
        let mut step = JobUpdate::new(state);
        step.stage = Some(stage.into());
        step.node_transition = Some(NodeTransition::new(
            to,
            Owner::DecommissionWorkflow,
            exec.clone(),
        ));
        store
            .advance_job(JobKind::Decommission, decom.id, &step)
            .await
            .unwrap();
    }
    store.close().await;

    let run = status(&["--state", &url, "c09u01"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let shown = run.stdout.replace(&job.id.to_string(), "<job>");
    assert!(
        shown.starts_with(
            "node           c09u01 (site dc1)\nid             none: not in the inventory (its onboarding stopped before creating the record)\nprovision      ENROLL\njob            onboarding <job>\njob state      failed_manual_intervention\nstage          create_or_find_in_maas (attempt 0)\nfailure class  pxe_discovery_failure\n"
        ),
        "{shown}"
    );
    let run = status(&["--state", &url, "c09u02", "--site", "dc1"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let field = |name: &str| {
        run.stdout
            .lines()
            .find_map(|l| l.strip_prefix(name).map(str::trim).map(str::to_owned))
            .unwrap_or_default()
    };
    assert_eq!(field("state "), "deleted", "{}", run.stdout);
    assert_eq!(
        field("job "),
        format!("decommission (full_decommission) {}", decom.id),
        "{}",
        run.stdout
    );
    let run = status(&["--state", &url, "c09u03"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stderr.contains("no node `c09u03` in the inventory"),
        "{}",
        run.stderr
    );
}

/// A node whose onboarding failed retryably twice in a row and waits for its next try, 4m30s
/// from the wall clock `status` reads (the process runs on the system clock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_waiting_for_its_next_try_says_when() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/state.db", dir.path().display());
    let now = Utc::now();
    let store = Store::open(&url, Arc::new(ManualClock::new(now)))
        .await
        .unwrap();
    let exec = Actor::system("apply");
    let mut ids = Vec::new();
    for host in ["c07u46", "c07u47"] {
        let node = store
            .create_node(
                &NewNode {
                    site: "dc1".into(),
                    hostname: host.into(),
                    provider: Provider::Maas,
                    status: NodeState::Enrolling,
                    sku: None,
                    gpus: None,
                    ipmi_ip: None,
                },
                &exec,
            )
            .await
            .unwrap();
        ids.push((node.id.to_string(), format!("<{host}>")));
    }
    let node = store.find_node("dc1", "c07u46").await.unwrap().unwrap();
    let job = store
        .create_onboarding(&NewOnboarding {
            node_id: Some(node.id),
            site: "dc1".into(),
            hostname: "c07u46".into(),
            ..NewOnboarding::default()
        })
        .await
        .unwrap();
    ids.push((job.id.to_string(), "<job>".into()));
    store
        .advance_job(
            JobKind::Onboarding,
            job.id,
            &JobUpdate::new(JobState::Running),
        )
        .await
        .unwrap();
    let mut fail = JobUpdate::new(JobState::FailedRetryable);
    fail.failure = Some(JobFailure {
        class: FailureClass::UpstreamTransient,
        code: "maas_unavailable".into(),
        message: "MAAS answered 503".into(),
        details: json!({}),
    });
    fail.retry = Some(RetryWait {
        failures: 2,
        next_try_at: now + Duration::seconds(270),
        spec: "sha256:spec".into(),
    });
    store
        .advance_job(JobKind::Onboarding, job.id, &fail)
        .await
        .unwrap();
    store.close().await;

    let run = status(&["--state", &url]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    insta::assert_snapshot!(scrub(&run.stdout, &ids), @r"
    SITE  HOSTNAME  STATE      FLAGS  NODE ID                               RETRY
    dc1   c07u46    enrolling  -      <c07u46>  next try in 4m (attempt 3)
    dc1   c07u47    enrolling  -      <c07u47>  -

    2 nodes: 2 enrolling
    ");

    let run = status(&["--state", &url, "--format", "json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let next = &doc["nodes"][0]["next_try"];
    assert_eq!(next["text"], "next try in 4m (attempt 3)");
    assert_eq!(
        (next["failures"].as_i64(), next["attempt"].as_i64()),
        (Some(2), Some(3))
    );
    assert_eq!(
        next["at"]
            .as_str()
            .unwrap()
            .parse::<DateTime<Utc>>()
            .unwrap(),
        (now + Duration::seconds(270)).trunc_subsecs(6)
    );
    assert_eq!(doc["nodes"][1]["next_try"], serde_json::Value::Null);

    let run = status(&["--state", &url, "c07u46"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let text = scrub(&run.stdout, &ids);
    let line = text.lines().find(|l| l.starts_with("retry ")).unwrap();
    assert!(
        line.contains(" next try in 4m (attempt 3) at ")
            && line.ends_with(
                ", after 2 failures in a row (`metalform jobs retry <job>` does not wait)"
            ),
        "{text}"
    );
    let run = status(&["--state", &url, "c07u46", "--format", "json"]);
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(doc["next_try"]["attempt"], 3);
    assert_eq!(doc["job"]["retry_failures"], 2);
}
