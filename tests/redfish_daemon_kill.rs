//! A real `metalform daemon` process killed with SIGKILL while a Redfish provisioning job waits
//! for the maintenance OS (issue 14 "Real peers"; seed 003 "Idempotency and Recovery"): the
//! daemon's own plan queues the job for a Redfish node of the fleet, its workers mount both
//! drives on a simulated BMC and reset the host; kill -9; a new daemon process on the same
//! store takes the job over once the dead one's lease expires, receives the maintenance OS's
//! report and cleans up — and the BMC saw one insert per drive and no reset from the takeover.

use crate::daemon_support;
use crate::provisioning_support;

use std::process::Child;
use std::time::{Duration, Instant};

use daemon_support::{ADMIN_TOKEN, DaemonBed, one_site, signal};
use metalform::lifecycle::ProvisioningStatus;
use metalform::provider::redfish::profile::Vendor;
use metalform::secrets::Secret;
use metalform::sim::redfish::{self as rsim, RedfishSimConfig, WebhookTarget};
use metalform::store::{Job, ProvisioningFilter};

const SERIAL: &str = "RF-0001";
const WEBHOOK_SECRET: &str = "webhook-secret-0123456789abcdef";
const LIMIT: Duration = Duration::from_secs(60);

/// The node rf01 as the daemon's node list shows it (`filters` added to `?site=dc1`).
async fn listed_rf01(listen: &str, filters: &str) -> serde_json::Value {
    let (status, body) = daemon_support::call(
        reqwest::Method::GET,
        format!("http://{listen}/api/v1/admin/nodes?site=dc1{filters}"),
        Some(ADMIN_TOKEN),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["hostname"] == "rf01")
        .cloned()
        .unwrap_or_else(|| panic!("rf01 is listed: {body}"))
}

async fn the_job(d: &DaemonBed) -> Option<Job> {
    let filter = ProvisioningFilter {
        serial: Some(SERIAL.into()),
        ..ProvisioningFilter::default()
    };
    d.bed
        .store
        .list_provisioning(&filter)
        .await
        .unwrap()
        .into_iter()
        .next()
}

async fn events(d: &DaemonBed, job: &Job) -> String {
    d.bed
        .store
        .provisioning_events(job.id, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| format!("{} {}", e.level, e.message))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Wait until `done` holds for the job, or panic with the daemon's log (at once when the
/// daemon exited).
async fn wait_for(
    d: &DaemonBed,
    daemon: &mut Child,
    log: &std::path::Path,
    what: &str,
    done: impl Fn(&Job) -> bool,
) {
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Some(job) = the_job(d).await
            && done(&job)
        {
            return;
        }
        let exited = daemon.try_wait().unwrap();
        if exited.is_some() || Instant::now() > deadline {
            let job = the_job(d).await;
            let text = match &job {
                Some(job) => events(d, job).await,
                None => String::new(),
            };
            panic!(
                "the job never {what} (daemon exited: {exited:?}): {job:#?}\n{text}\n--- daemon log ---\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_while_a_server_installs_is_taken_over_without_a_second_mount_or_reset() {
    let maintenance = provisioning_support::serve_maintenance_image().await;
    let d = DaemonBed::start(
        one_site(71, vec![0]),
        &format!(
            r#"
[provisioner]
maintenance_iso_url = "{maintenance}"
iso_builder = "builtin"
job_lease_ttl = "2s"
job_poll_interval = "100ms"
job_cleanup_timeout = "30s"
redfish_settle_after_reset = "10ms"
webhook_secret = {{ vault = "kv/metalform/provisioner", key = "webhook_secret" }}
media_url_key = {{ vault = "kv/metalform/provisioner", key = "media_url_key" }}
"#
        ),
    )
    .await;
    d.bed.put_secret(
        "kv/metalform/provisioner",
        serde_json::json!({"webhook_secret": WEBHOOK_SECRET,
                           "media_url_key": "media-url-key-0123456789abcdef0123"}),
    );
    d.bed.put_secret(
        "kv/dc1/redfish-bmc",
        serde_json::json!({"user": rsim::DEFAULT_USER, "pass": rsim::DEFAULT_PASSWORD}),
    );
    let listen = d.listen_on_free_port();

    // The BMC's host runs its maintenance OS for 6 s before it reports to the daemon: time to
    // kill the daemon while the job waits, and to start another. Its report is retried until
    // a daemon answers, as a real installer's would be.
    let mut config = RedfishSimConfig::generated(1, Some(Vendor::Dell));
    config.power_delay = Duration::from_millis(200);
    config.maintenance_run = Duration::from_secs(6);
    config.settle = false;
    config.webhook = Some(WebhookTarget {
        base: url::Url::parse(&format!("http://{listen}/")).unwrap(),
        secret: Secret::new(WEBHOOK_SECRET),
    });
    let bmcs = rsim::start(config).await.unwrap();
    let bmc = &bmcs.bmcs[0];
    std::fs::write(
        d.bed.fleet_dir.join("nodes/rf01.yaml"),
        format!(
            "apiVersion: metalform/v1\nkind: Node\nmetadata:\n  name: rf01\nspec:\n  site: dc1\n  \
             sku: mi300x.192g.8gpu\n  gpus: 8\n  bmc: {{ipmiIp: 10.176.99.10}}\n  provisioner:\n    \
             type: redfish\n    serial: {SERIAL}\n    redfishUrl: {url}\n    vendor: dell\n    \
             credentials: {{vault: kv/dc1/redfish-bmc}}\n    maintenanceIsoUrl: {maintenance}\n    \
             recipe:\n      task_target: install-linux.target\n      target_disk: /dev/sda\n",
            url = bmc.url,
        ),
    )
    .unwrap();
    daemon_support::commit(&d.bed.fleet_dir, "fleet: a server installed over its BMC");

    let log = d.bed.dir.path().join("daemon.log");
    let mut first = d.spawn(&log);
    wait_for(
        &d,
        &mut first,
        &log,
        "waited for the maintenance OS",
        |job| job.stage == "await_webhook",
    )
    .await;
    let inserts = |name: &str| {
        bmcs.requests(SERIAL)
            .iter()
            .filter(|r| r.method == "POST" && r.path.ends_with(name) && r.status < 300)
            .count()
    };
    let resets_before = inserts("ComputerSystem.Reset");
    assert_eq!(
        inserts("VirtualMedia.InsertMedia"),
        2,
        "CD1 and CD2 mounted"
    );
    assert!(
        resets_before >= 1,
        "the host was reset into the maintenance OS"
    );
    assert!(
        bmcs.webhooks().is_empty(),
        "the kill comes before the report"
    );

    // Listed with its open provisioning job; not installed yet.
    let rf01 = listed_rf01(&listen, "").await;
    assert_eq!(rf01["state"], "not_onboarded", "{rf01}");
    assert_eq!(rf01["job"]["kind"], "provisioning", "{rf01}");

    signal(&first, "KILL");
    let _ = first.wait();
    let mut second = d.spawn(&log);
    wait_for(&d, &mut second, &log, "completed", |job| {
        job.provisioning_status() == Some(ProvisioningStatus::Complete)
    })
    .await;
    let job = the_job(&d).await.unwrap();
    let text = events(&d, &job).await;
    assert!(text.contains("taken over by worker"), "{text}");
    assert!(
        text.contains("the maintenance OS reported success"),
        "{text}"
    );
    assert_eq!(
        text.matches("CD1 (maintenance) mounted: ").count(),
        1,
        "{text}"
    );
    assert_eq!(text.matches("CD2 (task) mounted: ").count(), 1, "{text}");
    assert_eq!(text.matches("mounting it again").count(), 0, "{text}");
    // On the BMC: one insert per drive over both processes; the resets after the kill are the
    // cleanup reboot only (as many as the boot into the maintenance OS took), none from the
    // takeover.
    assert_eq!(
        inserts("VirtualMedia.InsertMedia"),
        2,
        "{:?}",
        bmcs.requests(SERIAL)
    );
    assert_eq!(
        inserts("ComputerSystem.Reset"),
        2 * resets_before,
        "{:?}",
        bmcs.requests(SERIAL)
    );
    // The daemon API tells the same story.
    let (status, body) = daemon_support::call(
        reqwest::Method::GET,
        format!("http://{listen}/api/v1/jobs/{}", job.id),
        Some(ADMIN_TOKEN),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "complete", "{body}");
    // Installed: listed as provisioned (it has no inventory row: no MAAS machine, no agent),
    // by the status page too.
    let rf01 = listed_rf01(&listen, "&state=provisioned").await;
    assert_eq!(rf01["state"], "provisioned", "{rf01}");
    assert_eq!(rf01["node_id"], serde_json::Value::Null, "{rf01}");
    assert_eq!(rf01["job"], serde_json::Value::Null, "{rf01}");
    let page = reqwest::Client::new()
        .get(format!("http://{listen}/ui/nodes/dc1/rf01"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    assert!(
        page.contains(r#"<span class="state state-provisioned">provisioned</span>"#),
        "{page}"
    );
    assert!(page.contains("provisioning"), "its job is listed: {page}");
    signal(&second, "TERM");
    let _ = second.wait();
}
