//! Issue 15 end to end: onboarding against the simulator where it behaves as real MAAS 3.x
//! does, each test written from what MAAS does (its handlers, forms and vendor-data, cited) and
//! checked through MAAS's own answers over raw HTTP — never through metalform's client.
//!
//! 1. RoCE: commissioning puts each unlinked NIC on a fabric of its own; the /31 must be on
//!    the port's VLAN and linked STATIC; an address MAAS will not give fails the node.
//! 2. Storage: MAAS applies its default flat layout on its first disk at commissioning; the
//!    profile's LVM layout must replace it on the boot disk.
//! 3. Hardware sync: metalform's payload replaces MAAS's vendor-data (cloud-init merge), so it
//!    must carry its own sync; a sync lost after onboarding gets `node.hw_sync_reseed`.
//! 4. Error shapes: MAAS's serialization conflict (409 + Retry-After 5) is retried, an address
//!    in use (404 from link_subnet) is the manifest's error, not a missing machine.
//! 5. Strictness: a whole onboarding sends nothing strict MAAS refuses.
//! 6. (tests/maas_sim_endpoints.rs: the endpoints operators use.)
//! 7. A datasource failure looks as on MAAS (Failed deployment, the cloud-init install event)
//!    and is classified from it.

use crate::onboard_support;

use metalform::lifecycle::{FailureClass, JobState, NodeState};
use metalform::sim::SimHandle;
use metalform::stages::onboard::Facts;
use metalform::store::TaskStatus;
use onboard_support::{Bed, Setup, SiteSetup};
use serde_json::Value;

/// A request below /MAAS/api/2.0/ with the admin key: MAAS's own JSON.
async fn maas_send(
    sim: &SimHandle,
    method: reqwest::Method,
    path: &str,
    form: &[(&str, &str)],
) -> Value {
    let url = format!("{}/api/2.0/{path}", sim.maas_url.trim_end_matches('/'));
    let auth = metalform::sim::auth::sign_header(
        sim.api_key().expose(),
        &uuid::Uuid::new_v4().to_string(),
        chrono::Utc::now().timestamp(),
    );
    let mut request = reqwest::Client::new()
        .request(method.clone(), &url)
        .header("Authorization", auth);
    if method != reqwest::Method::GET {
        request = request.form(form);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    assert_eq!(status, 200, "{method} {url}: {text}");
    serde_json::from_str(&text).unwrap()
}

async fn maas_get(sim: &SimHandle, path: &str) -> Value {
    maas_send(sim, reqwest::Method::GET, path, &[]).await
}

async fn machine_of(sim: &SimHandle, hostname: &str) -> Value {
    let list = maas_get(sim, &format!("machines/?hostname={hostname}")).await;
    list[0].clone()
}

fn interface<'a>(machine: &'a Value, name: &str) -> &'a Value {
    machine["interface_set"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {}", machine["hostname"]))
}

fn print_progress(bed: &Bed) {
    for line in bed.progress_lines() {
        eprintln!("{line}");
    }
}

/// Points 1, 3 and 5 on a plain onboarding.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn roce_on_the_ports_own_fabric_sync_from_metalforms_payload_nothing_refused() {
    let bed = Bed::start(Setup::one_site(SiteSetup::generated("dc1", 41, 2, 0))).await;
    let sim = bed.sim("dc1");
    // Before: MAAS put each RoCE port on a fabric of its own (not fabric-0, where a subnet
    // created with only a CIDR lands): models/interface.py ensure_link_up/
    // Fabric.objects.create for an unknown VLAN at commissioning.
    let before = machine_of(sim, "gpu00001").await;
    let port_vlan = interface(&before, "enp28s0np0")["vlan"].clone();
    assert_ne!(port_vlan["fabric_id"], 0, "{port_vlan}");
    let other = machine_of(sim, "gpu00002").await;
    assert_ne!(
        interface(&other, "enp28s0np0")["vlan"]["fabric_id"],
        port_vlan["fabric_id"],
        "one fabric per unlinked NIC"
    );

    let report = bed.executor().run(bed.onboard_all()).await;
    print_progress(&bed);
    assert!(report.all_converged(), "{report:#?}");

    for (hostname, address, cidr) in [
        ("gpu00001", "172.30.0.1", "172.30.0.0/31"),
        ("gpu00002", "172.30.0.3", "172.30.0.2/31"),
    ] {
        let machine = machine_of(sim, hostname).await;
        assert_eq!(machine["status_name"], "Deployed");
        let port = interface(&machine, "enp28s0np0");
        let link = port["links"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["mode"] == "static")
            .unwrap_or_else(|| panic!("{hostname}: no STATIC link on {port}"));
        assert_eq!(link["ip_address"], address);
        assert_eq!(link["subnet"]["cidr"], cidr);
        assert_eq!(
            link["subnet"]["vlan"]["id"], port["vlan"]["id"],
            "the /31 is on the port's own VLAN"
        );
        assert_ne!(port["vlan"]["fabric_id"], 0);

        // 3: metalform's user_data replaces MAAS's vendor-data (its write_files/runcmd win),
        // so MAAS's maas_hardware_sync units are not on the host — metalform's own are, and
        // MAAS keeps hearing from the host.
        let files = sim.with_world(|w| {
            w.find_machine(hostname)
                .map(|m| m.host_files.clone())
                .unwrap()
        });
        assert!(!files.contains_key("/lib/systemd/system/maas_hardware_sync.timer"));
        assert!(
            files.keys().any(|p| p.ends_with("metalform-hw-sync.timer")),
            "{:?}",
            files.keys().collect::<Vec<_>>()
        );
        assert!(machine["last_sync"].is_string(), "{}", machine["last_sync"]);
    }
    let deploys = bed.deploys("dc1");
    assert!(deploys.values().all(|d| *d == 1), "{deploys:?}");

    // 5: the strict simulator refused nothing metalform sent. A lookup of the node's /31 by
    // its `cidr:` specifier answers 404 before the stage creates it: a miss, not a refusal.
    let refused: Vec<String> = sim
        .ops()
        .into_iter()
        .filter(|op| op.status >= 400)
        .filter(|op| {
            !(op.method == "GET" && op.status == 404 && op.path.contains("/subnets/cidr%3A"))
        })
        .map(|op| format!("{} {} {:?} → {}", op.method, op.path, op.op, op.status))
        .collect();
    assert!(refused.is_empty(), "{refused:#?}");
}

/// Point 1 and 4: another machine already holds the node's RoCE address. MAAS answers
/// link_subnet with 404 "IP address is already in use." (StaticIPAddressUnavailable,
/// models/interface.py); the node fails with the manifest to fix, is never deployed without
/// RoCE, and the machine is not treated as gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_roce_address_maas_will_not_give_fails_the_node_before_deploy() {
    let mut site = SiteSetup::generated("dc1", 42, 2, 0);
    site.declared = Some(vec![0]);
    let bed = Bed::start(Setup::one_site(site)).await;
    let sim = bed.sim("dc1");
    // An operator gave 172.30.0.1 (gpu00001's address in the fleet) to gpu00002 by hand.
    let other = machine_of(sim, "gpu00002").await;
    let port = interface(&other, "enp28s0np0");
    let vlan = port["vlan"]["id"].to_string();
    maas_send(
        sim,
        reqwest::Method::POST,
        "subnets/",
        &[("cidr", "172.30.0.0/31"), ("vlan", &vlan)],
    )
    .await;
    let linked = maas_send(
        sim,
        reqwest::Method::POST,
        &format!(
            "nodes/{}/interfaces/{}/?op=link_subnet",
            other["system_id"].as_str().unwrap(),
            port["id"]
        ),
        &[
            ("mode", "STATIC"),
            ("subnet", "cidr:172.30.0.0/31"),
            ("ip_address", "172.30.0.1"),
        ],
    )
    .await;
    assert_eq!(linked["links"][0]["ip_address"], "172.30.0.1");

    let report = bed.executor().run(bed.onboard_all()).await;
    print_progress(&bed);
    assert!(!report.all_converged());
    let job = bed.job_of("dc1", "gpu00001").await;
    assert_eq!(job.state, JobState::FailedRetryable, "{job:#?}");
    assert_eq!(job.failure_class, Some(FailureClass::InputConfigError));
    assert_eq!(job.error_code.as_deref(), Some("roce_link_refused"));
    let message = job.error_message.unwrap();
    assert!(
        message.contains("IP address is already in use."),
        "{message}"
    );
    assert_eq!(
        bed.deploys("dc1")["gpu00001"],
        0,
        "never deployed without RoCE"
    );
    let machine = machine_of(sim, "gpu00001").await;
    assert_ne!(machine["status_name"], "Deployed");
}

/// Point 2: MAAS's default layout (flat, on get_boot_disk — the first disk, an NVMe here) is in
/// place after commissioning; the profile's LVM layout replaces it on the BOSS disk
/// (set_boot_disk, then set_storage_layout, storage_layouts.py LVMStorageLayout).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_profile_lvm_layout_replaces_maas_default_on_the_boss_disk() {
    let mut site = SiteSetup::generated("dc1", 43, 1, 0);
    // The BOSS card enumerates last: MAAS's default goes on the first disk.
    site.config.machines[0].disks.rotate_left(1);
    let mut bed = Bed::start(Setup::one_site(site)).await;
    bed.edit_fleet(
        "profiles/dc1.yaml",
        "storage: {dataDisks: skip}",
        "storage: {dataDisks: skip, layout: lvm}",
    );
    bed.fleet =
        metalform::manifest::load_fleet(&metalform::source::FleetSource::new(&bed.fleet_dir, None))
            .unwrap()
            .fleet;
    let sim = bed.sim("dc1");
    let before = machine_of(sim, "gpu00001").await;
    let first = &before["blockdevice_set"][0];
    assert!(
        first["name"].as_str().unwrap().starts_with("nvme"),
        "{first}"
    );
    assert_eq!(
        before["boot_disk"]["id"], first["id"],
        "MAAS's get_boot_disk"
    );
    let mounts: Vec<&str> = first["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["filesystem"]["mount_point"].as_str())
        .collect();
    assert_eq!(mounts, ["/boot/efi", "/"], "MAAS's default flat layout");

    let report = bed.executor().run(bed.onboard_all()).await;
    print_progress(&bed);
    assert!(report.all_converged(), "{report:#?}");

    let machine = machine_of(sim, "gpu00001").await;
    assert_eq!(machine["status_name"], "Deployed");
    let boss = machine["blockdevice_set"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["model"].as_str().unwrap().contains("BOSS"))
        .unwrap();
    assert_eq!(machine["boot_disk"]["id"], boss["id"]);
    // LVM: the BOSS disk's partition is a physical volume of vgroot, whose LV holds "/".
    let pv = boss["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["filesystem"]["fstype"] == "lvm-pv")
        .unwrap_or_else(|| panic!("no PV on {boss}"));
    assert!(pv["used_for"].as_str().unwrap().contains("vgroot"), "{pv}");
    let root = machine["blockdevice_set"]
        .as_array()
        .unwrap()
        .iter()
        .chain(
            machine["virtualblockdevice_set"]
                .as_array()
                .into_iter()
                .flatten(),
        )
        .find(|d| d["filesystem"]["mount_point"] == "/")
        .unwrap_or_else(|| panic!("nothing mounted at /: {machine}"));
    assert_eq!(root["type"], "virtual", "{root}");
    // The default flat layout is gone from the NVMe disk.
    let nvme = machine["blockdevice_set"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == first["id"])
        .unwrap();
    assert_eq!(nvme["partitions"].as_array().unwrap().len(), 0, "{nvme}");
    let job = bed.job_of("dc1", "gpu00001").await;
    assert_eq!(job.state, JobState::Completed);
}

/// Point 3: the host's sync timer stops after onboarding's own sync check passed (someone
/// disabled it); when the agent enrolls, MAAS shows the sync stale (1.5 intervals,
/// Node.is_sync_healthy): the server queues `node.hw_sync_reseed`, the agent restarts the
/// units, MAAS hears from the host again and only then is the node active.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sync_lost_after_onboarding_is_reseeded_by_the_agent() {
    let mut site =
        SiteSetup::generated("dc1", 44, 1, 0).faults("hwsync_lost:machines=gpu00001,after=1200s");
    site.config.timings.jitter = 0.0;
    // The agent starts late: after the timer stopped and MAAS noticed.
    site.config.machines[0].agent = metalform::sim::AgentBehaviour::Late { delay_secs: 4800.0 };
    let bed = Bed::start(
        Setup::one_site(site).profile("  timeouts: {hwSyncHealth: 30s, enrollment: 30s}\n"),
    )
    .await;
    let report = bed.executor().run(bed.onboard_all()).await;
    print_progress(&bed);
    assert!(report.all_converged(), "{report:#?}");
    let job = bed.job_of("dc1", "gpu00001").await;
    assert_eq!(job.state, JobState::Completed, "{job:#?}");
    let facts = Facts::from_details(&job.stage_details);
    assert!(facts.enrollment.reseeds_queued >= 1, "{facts:#?}");
    let node_id = job.node_id.unwrap();
    // The job ends when MAAS hears from the host; the agent's report of the task may land a
    // moment later (on a loaded machine, after the job): wait for it, bounded.
    let mut waited = 0;
    let reseed = loop {
        let tasks = bed.store.tasks_for_node(node_id).await.unwrap();
        let reseed = tasks
            .into_iter()
            .find(|t| t.task_type == "node.hw_sync_reseed")
            .expect("a reseed task");
        if reseed.status != TaskStatus::Dispatched || waited >= 100 {
            break reseed;
        }
        waited += 1;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(reseed.status, TaskStatus::Succeeded, "{reseed:#?}");
    assert_eq!(
        reseed.owner_job.as_deref(),
        Some(job.id.to_string().as_str())
    );
    assert!(
        !reseed.params.to_string().contains("token_secret"),
        "no secret in task parameters: {}",
        reseed.params
    );
    let node = bed.store.node(node_id).await.unwrap();
    assert_eq!(node.status, NodeState::Active);
    let machine = machine_of(bed.sim("dc1"), "gpu00001").await;
    let last_sync: chrono::DateTime<chrono::Utc> =
        machine["last_sync"].as_str().unwrap().parse().unwrap();
    assert!(last_sync >= reseed.completed_at.unwrap() - chrono::Duration::seconds(1));
}

/// Point 4: MAAS's serialization conflict (utils/views.py: 409, Retry-After 5, its HTML page)
/// on deploy is retried and the node converges with one deployment.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_serialization_conflict_on_deploy_is_retried() {
    let site = SiteSetup::generated("dc1", 45, 1, 0)
        .faults("machine.deploy:status=409,retry_after=5,count=1");
    let bed = Bed::start(Setup::one_site(site)).await;
    let report = bed.executor().run(bed.onboard_all()).await;
    print_progress(&bed);
    assert!(report.all_converged(), "{report:#?}");
    let deploy_answers: Vec<u16> = bed
        .sim("dc1")
        .ops()
        .into_iter()
        .filter(|op| op.op.as_deref() == Some("deploy"))
        .map(|op| op.status)
        .collect();
    assert_eq!(deploy_answers, vec![409, 200]);
    assert_eq!(bed.deploys("dc1")["gpu00001"], 1);
}

/// Point 7: a datasource failure as MAAS shows it — the deployment fails (Failed deployment,
/// mark_failed's event) with cloud-init's install failure in the event log — and the job says
/// so (deploy/cloud-init failure, the event quoted).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_datasource_failure_reads_as_on_maas() {
    let site = SiteSetup::generated("dc1", 46, 1, 0).faults("datasource_failure");
    let bed = Bed::start(Setup::one_site(site)).await;
    // The first deployment fails; the executor's bounded retry redeploys.
    let report = bed.executor().run(bed.onboard_all()).await;
    print_progress(&bed);
    let sim = bed.sim("dc1");
    let machine = machine_of(sim, "gpu00001").await;
    let events = maas_get(
        sim,
        &format!(
            "events/?op=query&id={}&level=DEBUG&limit=100",
            machine["system_id"].as_str().unwrap()
        ),
    )
    .await;
    let types: Vec<(String, String)> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_owned(),
                e["description"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        types
            .iter()
            .any(|(t, d)| t == "Node installation failure" && d.contains("cloudinit")),
        "{types:#?}"
    );
    assert!(
        types.iter().any(|(t, _)| t == "Marking node failed"),
        "{types:#?}"
    );
    assert!(
        !types.iter().any(|(t, _)| t == "Failed deployment"),
        "MAAS has no such event type: {types:#?}"
    );
    // datasource_failure fails the first deployment only: one bounded redeploy converges.
    assert!(report.all_converged(), "{report:#?}");
    let job = bed.job_of("dc1", "gpu00001").await;
    assert_eq!(job.state, JobState::Completed, "{job:#?}");
    let facts = Facts::from_details(&job.stage_details);
    assert_eq!(facts.datasource_retries, 1, "{facts:#?}");
    assert_eq!(bed.deploys("dc1")["gpu00001"], 2);
}
