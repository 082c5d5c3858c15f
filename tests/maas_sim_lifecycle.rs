//! The whole MAAS lifecycle of one node driven through metalform's MAAS client against the
//! simulator (seed 000 §4.3 onboarding stages, as MAAS sees them): an unknown BMC PXE-boots
//! and enlists as New → hostname and IPMI credentials → commission → Ready → boot disk and
//! flat layout → PXE AUTO + RoCE /31 STATIC links → deploy with user_data and hardware sync →
//! Deployed, the node agent enrolls and hardware sync is healthy → release with erase → Ready.

use crate::maas_sim_support;
use crate::sim_support;

use metalform::lifecycle::MaasStatus;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::routing::post;
use maas_sim_support::*;
use metalform::provider::maas::*;
use metalform::secrets::Secret;
use serde_json::{Value, json};
use sim_support::Sim;

/// metalform's enrollment endpoint, standing in (docs/contracts.md §5): records each call.
async fn enrollment_endpoint() -> (Arc<Mutex<Vec<Value>>>, String) {
    async fn enroll(
        State(calls): State<Arc<Mutex<Vec<Value>>>>,
        Json(body): Json<Value>,
    ) -> Json<Value> {
        calls.lock().unwrap().push(body);
        Json(json!({
            "node_id": "node-c07u43",
            "agent_token": "agent-token-1",
            "tasks_url": "http://127.0.0.1:1/tasks",
            "heartbeat_interval_seconds": 30,
        }))
    }
    let calls: Arc<Mutex<Vec<Value>>> = Arc::default();
    let app = axum::Router::new()
        .route("/enroll", post(enroll))
        .with_state(calls.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/enroll", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (calls, url)
}

/// The cloud-config metalform deploys with: the agent's env file (docs/contracts.md §4) and,
/// since its `write_files`/`runcmd` replace MAAS's vendor-data, its own hardware-sync timer.
fn user_data(enroll_url: &str) -> String {
    format!(
        "#cloud-config\nwrite_files:\n  - path: /etc/metalform/agent.env\n    permissions: '0600'\n    content: |\n      METALFORM_ENROLL_URL={enroll_url}\n      METALFORM_ENROLL_TOKEN=enroll-token-c07u43\n      METALFORM_NODE=gpu-c07u43\n  - path: /etc/systemd/system/metalform-hw-sync.timer\n    content: |\n      [Timer]\n      OnUnitActiveSec=15min\nruncmd:\n  - systemctl enable --now metalform-hw-sync.timer\n"
    )
}

#[tokio::test]
async fn discovered_to_deployed_to_released_through_the_client() {
    // One BMC MAAS does not know; the agent calls as soon as the host boots.
    let mut config = site(0);
    config.machines = metalform::sim::SimConfig::generated(
        5,
        &metalform::sim::FleetOptions {
            machines: 0,
            initial: metalform::sim::InitialState::Unknown,
            no_boss_every: 0,
            unknown: 1,
        },
    )
    .machines;
    config.timings.agent_boot_secs = 0.0;
    let hardware = config.machines[0].clone();
    let bmc = hardware.bmc_ip.clone().unwrap();
    let pxe_mac = hardware.interfaces[0].mac.clone();
    let sim = Sim::start(config).await;
    let maas = admin(&sim);
    let (enrollments, enroll_url) = enrollment_endpoint().await;

    // --- discovery: power-cycling the BMC into PXE makes MAAS enlist the machine (New).
    assert!(
        maas.list_machines(&MachineFilter::all().mac_address(&pxe_mac))
            .await
            .unwrap()
            .is_empty()
    );
    let answer = sim.handle.bmc_power(&bmc, "cycle", true).unwrap();
    assert_eq!(answer["enlisting"], true);
    sim.advance(150);
    let found = maas
        .list_machines(&MachineFilter::all().mac_address(&pxe_mac))
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "enlisted through PXE");
    let new = &found[0];
    let sid = new.system_id.clone();
    assert_eq!(new.status, MaasStatus::New);
    assert_eq!(new.owner, None);
    assert!(
        new.physicalblockdevice_set.is_empty(),
        "storage unknown until commissioned"
    );

    // --- CreateOrFindInMaas found it: name it and give MAAS the IPMI credentials.
    let mut power = IpmiPower::new(bmc.clone(), "root", Secret::new("bmc-password"));
    power.power_driver = Some("LAN_2_0".into());
    let named = maas
        .update_machine(
            &sid,
            &UpdateMachineParams {
                hostname: Some("gpu-c07u43".into()),
                power: Some(PowerParameters::Ipmi(power)),
                ..UpdateMachineParams::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(named.hostname, "gpu-c07u43");

    // --- CommissionNode: New → Commissioning → Testing → Ready.
    let commissioning = maas
        .commission(
            &sid,
            &CommissionParams {
                skip_bmc_config: Some(true),
                ..CommissionParams::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(commissioning.status, MaasStatus::Commissioning);
    wait_for(&sim, &maas, &sid, MaasStatus::Testing, 30, 600).await;
    let ready = wait_for(&sim, &maas, &sid, MaasStatus::Ready, 30, 600).await;
    assert_eq!(ready.physicalblockdevice_set.len(), 5);

    // --- ConfigureStorage: the BOSS disk boots and holds the root filesystem.
    let devices = maas.list_block_devices(&sid).await.unwrap();
    let boss = devices
        .iter()
        .find(|d| {
            d.model.contains("BOSS") || d.id_path.as_deref().is_some_and(|p| p.contains("BOSS"))
        })
        .expect("a BOSS/M.2 disk");
    maas.set_boot_disk(&sid, boss.id).await.unwrap();
    let laid_out = maas
        .set_storage_layout(&sid, &StorageLayoutParams::flat(Some(boss.id)))
        .await
        .unwrap();
    let boot = laid_out.boot_disk.as_ref().unwrap();
    assert_eq!(boot.id, boss.id);
    let mounts: Vec<Option<&str>> = boot
        .partitions
        .iter()
        .map(|p| p.filesystem.as_ref().and_then(|f| f.mount_point.as_deref()))
        .collect();
    assert_eq!(mounts, [Some("/boot/efi"), Some("/")]);

    // --- EnsurePxeInterfaceAuto (already AUTO after commissioning) and RoCE /31 links.
    let interfaces = maas.list_interfaces(&sid).await.unwrap();
    let pxe = interfaces.iter().find(|i| i.name == "eno8303").unwrap();
    let pxe_subnet = pxe.links[0].subnet.as_ref().unwrap().id;
    assert!(pxe.has_link(&LinkMode::Auto, Some(pxe_subnet)));
    let mut roce_ips = Vec::new();
    for (index, name) in ["enp28s0np0", "enp41s0np0"].into_iter().enumerate() {
        let cidr = format!("172.30.9.{}/31", 60 + 2 * index);
        let iface = interfaces.iter().find(|i| i.name == name).unwrap();
        // Commissioning put the unlinked RoCE port on a fabric of its own: its /31 belongs on
        // that VLAN, or MAAS will not offer it to link_subnet.
        let vlan = iface.vlan.as_ref().expect("the RoCE port has a VLAN");
        assert_ne!(vlan.fabric_id, pxe.vlan.as_ref().unwrap().fabric_id);
        if maas
            .list_subnets()
            .await
            .unwrap()
            .iter()
            .all(|s| s.cidr != cidr)
        {
            let mut create = CreateSubnetParams::new(cidr.clone());
            create.vlan = Some(vlan.id);
            maas.create_subnet(&create).await.unwrap();
        }
        let ip = format!("172.30.9.{}", 61 + 2 * index);
        let linked = maas
            .link_subnet(
                &sid,
                iface.id,
                &LinkSubnetParams::new(LinkRequest::Static {
                    subnet: SubnetRef::Cidr(cidr),
                    ip_address: Some(ip.parse().unwrap()),
                }),
            )
            .await
            .unwrap();
        assert_eq!(linked.links[0].ip_address.as_deref(), Some(ip.as_str()));
        roce_ips.push(ip);
    }

    // --- DeployViaMaas: user_data with the enrollment token, hardware sync on.
    let deploying = maas
        .deploy(
            &sid,
            &DeployParams {
                user_data: Some(Secret::new(user_data(&enroll_url))),
                distro_series: Some("jammy".into()),
                enable_hw_sync: Some(true),
                ..DeployParams::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(deploying.status, MaasStatus::Deploying);
    let token = maas.get_token(&sid).await.unwrap().expect("machine token");
    let deployed = wait_for(&sim, &maas, &sid, MaasStatus::Deployed, 60, 1200).await;
    assert_eq!(deployed.distro_series, "jammy");
    assert_eq!(deployed.power_state, PowerState::On);
    let mut ips = deployed.ip_addresses.clone();
    ips.sort();
    assert_eq!(ips.len(), 3, "{ips:?}");
    assert!(
        ips.iter().any(|ip| ip.starts_with("10.176.")),
        "the AUTO address"
    );
    assert!(roce_ips.iter().all(|ip| ips.contains(ip)));

    // WaitForAgentEnrollment: the booted host's agent calls with the token from user_data.
    let mut waited = 0;
    while enrollments.lock().unwrap().is_empty() {
        assert!(
            waited < 100,
            "the agent never enrolled: {:?}",
            sim.handle.agent_log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        waited += 1;
    }
    let call = enrollments.lock().unwrap()[0].clone();
    assert_eq!(call["token"], "enroll-token-c07u43");
    assert_eq!(call["hostname"], "gpu-c07u43");
    assert_eq!(call["system_id"], sid.as_str());

    // WaitForHardwareSyncHealthy: MAAS's end-of-deployment stamp, then nothing until the
    // machine's credentials are on the host (user-data replaced vendor-data's), then a sync
    // every interval.
    assert!(deployed.hardware_sync().is_healthy(now(&sim)));
    sim.advance(3 * 900 + 30);
    let stale = maas.read_machine(&sid).await.unwrap();
    assert_eq!(stale.last_sync, deployed.last_sync);
    assert!(!stale.hardware_sync().is_healthy(now(&sim)));
    let creds = format!(
        "reporting:\n  maas:\n    consumer_key: {}\n    token_key: {}\n    token_secret: {}\n",
        token.consumer_key,
        token.token_key,
        token.token_secret.expose()
    );
    sim.handle
        .write_host_file(&sid, "/etc/maas/maas-machine-creds.yml", &creds)
        .unwrap();
    sim.advance(3 * 900 + 30);
    let later = maas.read_machine(&sid).await.unwrap();
    assert!(later.last_sync > stale.last_sync);
    assert!(later.hardware_sync().is_healthy(now(&sim)));
    assert_eq!(
        maas.get_token(&sid).await.unwrap(),
        Some(token),
        "same ownership, same token"
    );
    let events = maas
        .query_events(&EventsQuery::machine(&sid, EventLevel::Info, 50))
        .await
        .unwrap();
    let types: Vec<&str> = events
        .events
        .iter()
        .map(|e| e.event_type.as_str())
        .collect();
    for expected in ["Deployed", "Deploying", "Ready", "Commissioning", "New"] {
        assert!(types.contains(&expected), "{expected} in {types:?}");
    }

    // --- Decommission: release with a quick erase → Disk erasing → Ready.
    let erasing = maas
        .release(&sid, &ReleaseParams::erasing(EraseMode::Quick))
        .await
        .unwrap();
    assert_eq!(erasing.status, MaasStatus::DiskErasing);
    let released = wait_for(&sim, &maas, &sid, MaasStatus::Ready, 15, 300).await;
    assert_eq!(released.owner, None);
    assert_eq!(released.osystem, "");
    assert_eq!(
        released.hardware_sync().health(now(&sim)),
        SyncHealth::Disabled
    );
    let mut left = released.ip_addresses.clone();
    left.sort();
    assert_eq!(
        left, roce_ips,
        "AUTO released; STATIC addresses stay assigned"
    );
    assert_eq!(maas.get_token(&sid).await.unwrap(), None);

    let counters = sim.counters(&sid).await;
    assert_eq!(
        counters,
        json!({"deploy": 1, "release": 1, "commission": 1, "erase": 1, "power_on": 0,
               "power_off": 0, "abort": 0, "create": 0, "delete": 0})
    );
    // Every request the client made was answered 2xx the first time.
    let metrics = maas.metrics().snapshot();
    assert!(
        metrics
            .keys()
            .all(|(_, status)| matches!(status, RequestStatus::Http(200..=299))),
        "{metrics:?}"
    );
    assert_eq!(maas.metrics().get("deploy", RequestStatus::Http(200)), 1);
}

/// ClassifyDeployFailure + RecoverForDatasourceRetry (seed 000 §4.3) through the client: the
/// first deployment fails with cloud-init's "no datasource" events, the machine is released
/// and the second deployment succeeds.
#[tokio::test]
async fn a_datasource_failure_is_classified_from_events_and_recovered() {
    let mut config = site(1);
    config.faults = "datasource_failure".to_string();
    let sim = Sim::start(config).await;
    let maas = admin(&sim);
    let sid = nth(&maas, 0).await;
    maas.deploy(&sid, &DeployParams::default()).await.unwrap();
    let failed = wait_for(&sim, &maas, &sid, MaasStatus::FailedDeployment, 60, 1200).await;
    assert!(failed.status.is_failed());
    assert_eq!(
        failed.error_description.as_deref(),
        Some("Installation failed (refer to the installation log for more information).")
    );
    let errors = maas
        .query_events(&EventsQuery::machine(&sid, EventLevel::Error, 20))
        .await
        .unwrap();
    assert!(errors.events.iter().all(|e| e.level >= EventLevel::Error));
    let install = errors
        .events
        .iter()
        .find(|e| e.event_type == "Node installation failure")
        .expect("the installation failure event");
    // cloud-init's failed stage, as MAAS records what the host reports.
    assert!(
        install
            .description
            .starts_with("'cloudinit' searching for network data"),
        "{install:?}"
    );
    assert!(
        errors
            .events
            .iter()
            .any(|e| e.event_type == "Marking node failed")
    );

    // Recover: release back to Ready, deploy once more.
    maas.release(&sid, &ReleaseParams::default()).await.unwrap();
    wait_for(&sim, &maas, &sid, MaasStatus::Ready, 5, 60).await;
    maas.deploy(&sid, &DeployParams::default()).await.unwrap();
    wait_for(&sim, &maas, &sid, MaasStatus::Deployed, 60, 1200).await;
    assert_eq!(sim.counters(&sid).await["deploy"], 2);
}

/// EnsureHardwareSyncConfigured / WaitForHardwareSyncHealthy (seed 000 §9.1): with the sync
/// timer stopped (`hwsync_stale`), the computed health turns Stale after 1.5 intervals; writing
/// the machine's current token to the host (the credential reseed) makes it healthy again.
#[tokio::test]
async fn stale_hardware_sync_is_detected_and_healed_by_a_reseed() {
    let mut config = site(1);
    config.faults = "hwsync_stale".to_string();
    let sim = Sim::start(config).await;
    let maas = admin(&sim);
    let sid = nth(&maas, 0).await;
    let params = DeployParams {
        enable_hw_sync: Some(true),
        ..DeployParams::default()
    };
    maas.deploy(&sid, &params).await.unwrap();
    let deployed = wait_for(&sim, &maas, &sid, MaasStatus::Deployed, 60, 1200).await;
    let last = deployed.last_sync.unwrap();
    assert!(deployed.hardware_sync().is_healthy(now(&sim)));

    sim.advance(1400);
    let machine = maas.read_machine(&sid).await.unwrap();
    assert_eq!(machine.last_sync, Some(last), "no sync since deployment");
    match machine.hardware_sync().health(now(&sim)) {
        SyncHealth::Stale {
            deadline,
            overdue_by,
        } => {
            assert_eq!(deadline, last + chrono::Duration::seconds(1350));
            assert_eq!(overdue_by, now(&sim) - deadline);
        }
        other => panic!("expected Stale, got {other:?}"),
    }

    // Reseed /etc/maas/maas-machine-creds.yml with the machine's current token.
    let token = maas.get_token(&sid).await.unwrap().unwrap();
    let creds = format!(
        "consumer_key: {}\ntoken_key: {}\ntoken_secret: {}\n",
        token.consumer_key,
        token.token_key,
        token.token_secret.expose()
    );
    sim.handle
        .write_host_file(&sid, "/etc/maas/maas-machine-creds.yml", &creds)
        .unwrap();
    let healed = maas.read_machine(&sid).await.unwrap();
    assert_eq!(healed.last_sync, Some(now(&sim)));
    assert!(healed.hardware_sync().is_healthy(now(&sim)));
}
