//! The whole enrollment path with the simulator's node agents (docs/contracts.md §4–§5): a
//! payload rendered by `cloudinit::render` is deployed through metalform's MAAS client to
//! simulated machines whose agents enroll on time, late, never, or with a wrong token, against
//! a real `AgentServer` (TLS with a development CA the payload carries) over a SQLite store.
//! The hardware-sync credentials rendered for the post-deploy push revive a machine whose sync
//! went stale.

use crate::agent_suite;

use metalform::lifecycle::MaasStatus;
use std::time::{Duration, Instant};

use metalform::cloudinit::{self, CloudInitInput, NodeRuntime};
use metalform::lifecycle::{FailureClass, JobKind, JobState};
use metalform::manifest;
use metalform::model::{Fleet, NodeId};
use metalform::provider::maas::{DeployParams, MaasClient, MaasClientOptions, MachineFilter};
use metalform::secrets::Secret;
use metalform::sim::{AgentBehaviour, AgentRecord, FleetOptions, InitialState, SimConfig};
use metalform::source::FleetSource;
use metalform::store::{JobFailure, JobUpdate, Store};
use serde_json::json;

fn sample_fleet() -> Fleet {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fleet");
    manifest::load_fleet(&FleetSource::new(dir, None))
        .expect("the sample fleet loads")
        .fleet
}

/// Poll `check` every 50 ms for up to 20 s.
async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn agent_records(log: &[AgentRecord], system_id: &str) -> Vec<AgentRecord> {
    log.iter()
        .filter(|r| r.system_id == system_id)
        .cloned()
        .collect()
}

struct Deployed {
    hostname: String,
    system_id: String,
    onboarding: agent_suite::Onboarding,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_agents_enroll_on_time_late_never_and_with_a_wrong_token() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // The machines: MAAS durations / 1000 (deploy ~0.6 s, agent boot 30 ms). The late agent
    // calls 5 s after its boot: the stage must have given up on it first, on a loaded runner too.
    let mut config = SimConfig::generated(
        11,
        &FleetOptions {
            machines: 4,
            initial: InitialState::Ready,
            no_boss_every: 0,
            unknown: 0,
        },
    );
    config.time_scale = 1000.0;
    config.faults = "hwsync_stale:machines=gpu00001".into();
    let behaviours = [
        AgentBehaviour::OnTime,
        AgentBehaviour::Late { delay_secs: 5000.0 },
        AgentBehaviour::Never,
        AgentBehaviour::WrongToken,
    ];
    for (machine, behaviour) in config.machines.iter_mut().zip(&behaviours) {
        machine.agent = behaviour.clone();
    }
    let sim = metalform::sim::start(config)
        .await
        .expect("simulator starts");
    let maas = MaasClient::new(
        &sim.maas_url,
        sim.api_key().clone(),
        MaasClientOptions::default(),
    )
    .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        &format!("sqlite://{}", dir.path().join("state.db").display()),
        std::sync::Arc::new(metalform::clock::SystemClock),
    )
    .await
    .unwrap();
    let server = agent_suite::tls_server(&store, &dir.path().join("agent-ca")).await;

    // Each machine gets the payload of a sample-fleet node of dc1 (its site, profile and deploy
    // user), with the machine's own hostname and system id and a fresh token.
    let fleet = sample_fleet();
    let template = &fleet.nodes[&NodeId::new("dc1", "c07u27")];
    let site = fleet.site_of(template).unwrap();
    let profile = fleet.profile_of(template).unwrap();
    let mut machines = maas.list_machines(&MachineFilter::all()).await.unwrap();
    machines.sort_by(|a, b| a.hostname.cmp(&b.hostname));
    assert_eq!(machines.len(), 4);
    let mut deployed = Vec::new();
    for machine in &machines {
        let onboarding =
            agent_suite::onboarding(&store, &machine.hostname, &machine.system_id).await;
        let mut node = template.clone();
        node.id = NodeId::new("dc1", machine.hostname.as_str());
        let input = CloudInitInput::for_node(
            site,
            profile,
            &node,
            NodeRuntime {
                system_id: machine.system_id.clone(),
                enroll_url: server.enroll_url(),
                enroll_token: onboarding.token.clone(),
                deploy_password: Some(Secret::new("dc1-deploy-password")),
                boot_disk_hint: None,
                agent_install: metalform::cloudinit::AgentInstall {
                    binary: None,
                    ca_bundle: server.client_ca().map(str::to_owned),
                },
            },
        );
        let rendered = cloudinit::render(&input).unwrap();
        maas.deploy(
            &machine.system_id,
            &DeployParams {
                user_data: Some(rendered.user_data.clone()),
                distro_series: Some(profile.image.distro_series.clone()),
                enable_hw_sync: Some(true),
                ..DeployParams::default()
            },
        )
        .await
        .unwrap();
        deployed.push(Deployed {
            hostname: machine.hostname.clone(),
            system_id: machine.system_id.clone(),
            onboarding,
        });
    }
    let [on_time, late, never, wrong] = &deployed[..] else {
        unreachable!()
    };
    for d in &deployed {
        eventually("Deployed", async || {
            let m = maas.read_machine(&d.system_id).await.unwrap();
            (m.status == MaasStatus::Deployed).then_some(())
        })
        .await;
    }
    // The stage waiting for the late agent gives up (its enrollment timeout), token still valid.
    let mut failed = JobUpdate::new(JobState::FailedManualIntervention);
    failed.failure = Some(JobFailure {
        class: FailureClass::AgentEnrollmentFailure,
        code: "failed_enrollment".into(),
        message: "no enrollment within the timeout".into(),
        details: json!({}),
    });
    store
        .advance_job(JobKind::Onboarding, late.onboarding.job, &failed)
        .await
        .unwrap();
    assert!(
        agent_records(&sim.agent_log(), &late.system_id).is_empty(),
        "the late agent has not called yet"
    );

    // On time: enrolled, recorded, the node still `enrolling` (the stage activates it).
    let enrollment = eventually("the on-time enrollment", async || {
        store
            .agent_enrollment(on_time.onboarding.node)
            .await
            .unwrap()
    })
    .await;
    assert_eq!(enrollment.system_id, on_time.system_id);
    assert_eq!(enrollment.hostname, on_time.hostname);
    assert_eq!(enrollment.agent_version, "metalform-sim-agent/0.1");
    assert_eq!(enrollment.onboarding_state, Some(JobState::Running));
    assert!(!enrollment.is_late());
    let records = eventually("the on-time agent's record", async || {
        let r = agent_records(&sim.agent_log(), &on_time.system_id);
        (!r.is_empty()).then_some(r)
    })
    .await;
    assert_eq!(records.len(), 1);
    assert_eq!(
        (records[0].status, records[0].outcome.as_str()),
        (Some(200), "enrolled")
    );
    assert_eq!(
        records[0].tasks_url.as_deref(),
        Some(
            server
                .enroll_url()
                .replace(
                    "/enroll",
                    &format!("/nodes/{}/tasks", on_time.onboarding.node)
                )
                .as_str()
        )
    );
    assert_eq!(
        store.node(on_time.onboarding.node).await.unwrap().status,
        metalform::lifecycle::NodeState::Enrolling
    );

    // Wrong token: one 401, the agent stops, nothing recorded, the real token still unused.
    let records = eventually("the wrong-token agent's record", async || {
        let r = agent_records(&sim.agent_log(), &wrong.system_id);
        (!r.is_empty()).then_some(r)
    })
    .await;
    assert_eq!(
        (records[0].status, records[0].outcome.as_str()),
        (Some(401), "refused: invalid token")
    );
    assert_eq!(
        store.agent_enrollment(wrong.onboarding.node).await.unwrap(),
        None
    );
    assert!(
        store
            .enrollment_token_expiry(wrong.onboarding.node)
            .await
            .unwrap()
            .is_some(),
        "the deployed token is still valid"
    );

    // Late: accepted after the stage gave up, recorded as late for a later adoption.
    let enrollment = eventually("the late enrollment", async || {
        store.agent_enrollment(late.onboarding.node).await.unwrap()
    })
    .await;
    assert_eq!(
        enrollment.onboarding_state,
        Some(JobState::FailedManualIntervention)
    );
    assert!(enrollment.is_late());
    // The store records the enrollment before the agent has read the answer and logged it.
    let records = eventually("the late agent's record", async || {
        let r = agent_records(&sim.agent_log(), &late.system_id);
        (!r.is_empty()).then_some(r)
    })
    .await;
    assert_eq!(records[0].outcome, "enrolled");

    // Never: the host booted with the payload, but no call and no enrollment.
    assert!(agent_records(&sim.agent_log(), &never.system_id).is_empty());
    assert_eq!(
        store.agent_enrollment(never.onboarding.node).await.unwrap(),
        None
    );
    let files = sim.with_world(|w| {
        w.machine(&never.system_id)
            .map(|m| m.host_files.clone())
            .unwrap_or_default()
    });
    for path in [
        cloudinit::AGENT_ENV_PATH,
        "/usr/local/lib/metalform/run-layer",
        "/etc/systemd/system/metalform-hw-sync.timer",
        "/etc/metalform/roce.conf",
    ] {
        assert!(
            files.contains_key(path),
            "{path} is on the host: {:?}",
            files.keys()
        );
    }

    // Hardware sync (layer c): gpu00001's sync went stale after the first one; the credentials
    // file rendered from its machine token, pushed over the SSH stand-in, revives it.
    let before = maas
        .read_machine(&on_time.system_id)
        .await
        .unwrap()
        .hardware_sync()
        .last_sync;
    let token = maas
        .get_token(&on_time.system_id)
        .await
        .unwrap()
        .expect("a deployed machine has a token");
    let layer = cloudinit::HwSyncLayer {
        maas_url: sim.maas_url.trim_end_matches('/').to_string(),
        system_id: on_time.system_id.clone(),
        interval: Duration::from_secs(900),
    };
    let creds = cloudinit::hw_sync_credentials(&layer, &token);
    let pushed = agent_suite::http()
        .post(format!(
            "{}/sim/v1/machines/{}/host/files",
            sim.base_url(),
            on_time.system_id
        ))
        .json(&json!({"path": cloudinit::MAAS_CREDS_PATH, "content": creds.expose()}))
        .send()
        .await
        .unwrap();
    assert!(pushed.status().is_success(), "{}", pushed.status());
    eventually("a fresh hardware sync", async || {
        let now = maas
            .read_machine(&on_time.system_id)
            .await
            .unwrap()
            .hardware_sync()
            .last_sync;
        (now > before).then_some(())
    })
    .await;

    server.shutdown().await;
    sim.shutdown();
}
