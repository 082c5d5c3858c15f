//! Redfish provisioning end to end against sushy-tools (issue 14 "Real peers"; seed 003
//! "Acceptance Criteria"): jobs posted to the API run on the provisioning workers against
//! `sushy-emulator` (fake driver, vmedia) with task ISOs from Debian's xorriso — CD1 and CD2
//! inserted on the emulator, one-time boot from CD, reset — and the test plays the maintenance
//! OS: it reads the emulator's state as a booting host would find it, then reports success or
//! failure on the webhook; cleanup ejects both drives on the emulator and reboots, and the job
//! is `complete`. A controller killed while the job waits is taken over with no second mount or
//! reset; two controllers never run one job. Needs the variables of
//! scripts/services/50-xorriso.sh and 51-sushy-tools.sh; fails, never skips, without them.
#![cfg(feature = "services")]

use crate::provisioning_support;

use std::time::Duration;

use metalform::provider::redfish::iso::IsoTool;
use metalform::provider::redfish::settings::RedfishSettings;
use metalform::secrets::SecretRef;
use metalform::store::{JobSpec, Server};
use provisioning_support::{Bed, Options, recipe};
use serde_json::{Value, json};

/// sushy's fake driver lands power changes 1–11 s later.
const LIMIT: Duration = Duration::from_secs(180);
const SUSHY_CREDENTIALS: &str = "kv/bmc/sushy";

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run scripts/test-all (it sources scripts/services/51-sushy-tools.sh)")
    })
}

/// Fake systems 0–2 belong to tests/redfish_sushy_services.rs; these tests use 3–7.
fn sushy_system(index: usize) -> String {
    env("METALFORM_TEST_SUSHY_SYSTEMS")
        .split(',')
        .nth(index)
        .unwrap_or_else(|| panic!("sushy-emulator has no fake system #{index}"))
        .to_owned()
}

fn serial(index: usize) -> String {
    format!("SUSHY-{index}")
}

/// A bed with no simulated BMC: its servers are sushy's fake systems `systems`.
async fn sushy_bed(systems: &[usize], options: Options) -> Bed {
    let xorriso = std::path::PathBuf::from(env("METALFORM_XORRISO"));
    let bed = Bed::start(Options {
        bmcs: 0,
        iso_tool: IsoTool::Xorriso,
        xorriso: Some(xorriso),
        secrets: vec![(
            SUSHY_CREDENTIALS.into(),
            json!({"user": env("METALFORM_TEST_SUSHY_USER"),
                   "pass": env("METALFORM_TEST_SUSHY_PASSWORD")}),
        )],
        // Graceful shutdown, then power on, each landing 1–11 s later on the fake driver.
        cleanup_timeout: Duration::from_secs(90),
        redfish: RedfishSettings {
            timeout: Duration::from_secs(10),
            retries: 3,
            base_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            reset_grace: Duration::from_secs(20),
            poll_interval: Duration::from_millis(200),
            settle_after_reset: Some(Duration::ZERO),
            insecure_tls: false,
        },
        ..options
    })
    .await;
    let base = env("METALFORM_TEST_SUSHY_URL");
    let servers: Vec<Server> = systems
        .iter()
        .map(|&i| Server {
            serial: serial(i),
            bmc_address: format!("{base}/redfish/v1/Systems/{}", sushy_system(i)),
            credentials: SecretRef::new(SUSHY_CREDENTIALS, None),
            vendor: Some("generic".into()),
            last_seen: None,
            site: "dc1".into(),
            hostname: format!("sushy{i}"),
        })
        .collect();
    bed.store.upsert_servers(&servers).await.unwrap();
    bed
}

/// GET a path of the emulator.
async fn sushy(path: &str) -> Value {
    let response = provisioning_support::http()
        .get(format!("{}{path}", env("METALFORM_TEST_SUSHY_URL")))
        .basic_auth(
            env("METALFORM_TEST_SUSHY_USER"),
            Some(env("METALFORM_TEST_SUSHY_PASSWORD")),
        )
        .send()
        .await
        .unwrap();
    assert!(
        response.status().is_success(),
        "GET {path}: {}",
        response.status()
    );
    response.json().await.unwrap()
}

/// The emulator's virtual media of fake system `index`: (Id, Image, Inserted) per device.
async fn media(index: usize) -> Vec<(String, String, bool)> {
    let path = format!("/redfish/v1/Systems/{}/VirtualMedia", sushy_system(index));
    let collection = sushy(&path).await;
    let mut out = Vec::new();
    for member in collection["Members"].as_array().unwrap() {
        let slot = sushy(member["@odata.id"].as_str().unwrap()).await;
        out.push((
            slot["Id"].as_str().unwrap().to_owned(),
            slot["Image"].as_str().unwrap_or("").to_owned(),
            slot["Inserted"].as_bool().unwrap_or(false),
        ));
    }
    out
}

fn failed_step(job: &metalform::store::Job) -> Option<String> {
    match &job.spec {
        JobSpec::Provisioning { failed_step, .. } => failed_step.clone(),
        _ => None,
    }
}

/// What a host booting from the emulator's virtual CD would find: CD1 holds the maintenance
/// image, CD2 this job's task ISO, the one-time override points at the CD, and the task ISO
/// URL the BMC was given serves the image xorriso built.
async fn check_booting_from_cd(bed: &Bed, index: usize, job_id: &str) {
    let drives = media(index).await;
    let cd = drives.iter().find(|d| d.0 == "Cd").expect("a Cd device");
    assert_eq!(
        (cd.1.as_str(), cd.2),
        (bed.maintenance_url.as_str(), true),
        "{drives:?}"
    );
    let task = drives
        .iter()
        .find(|d| d.0 != "Cd")
        .expect("a second device");
    assert!(task.2, "{drives:?}");
    assert!(
        task.1
            .contains(&format!("/media/tasks/{job_id}/task.iso?expires=")),
        "{drives:?}"
    );
    let system = sushy(&format!("/redfish/v1/Systems/{}", sushy_system(index))).await;
    assert_eq!(system["Boot"]["BootSourceOverrideTarget"], "Cd", "{system}");
    let image = provisioning_support::http()
        .get(&task.1)
        .send()
        .await
        .unwrap();
    assert_eq!(image.status().as_u16(), 200);
    let bytes = image.bytes().await.unwrap();
    assert_eq!(&bytes[32769..32774], b"CD001", "an ISO 9660 image");
}

async fn check_cleaned_up(index: usize) {
    let drives = media(index).await;
    assert!(drives.iter().all(|d| !d.2 && d.1.is_empty()), "{drives:?}");
}

/// The emulator's own access log from a point on. The emulator may have served earlier runs
/// of the suite, so its requests are counted from where the log ended when the test began.
struct AccessLog {
    from: usize,
}

impl AccessLog {
    fn path() -> std::path::PathBuf {
        std::path::Path::new(&env("METALFORM_SERVICES_DIR")).join("sushy/emulator.log")
    }

    fn from_now() -> Self {
        let from = std::fs::metadata(Self::path()).map_or(0, |m| m.len() as usize);
        AccessLog { from }
    }

    /// Successful POSTs of `action` on fake system `index` since the log was marked.
    fn posts(&self, index: usize, action: &str) -> usize {
        let log = Self::path();
        let bytes = std::fs::read(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let text = String::from_utf8_lossy(&bytes[self.from.min(bytes.len())..]);
        let system = sushy_system(index);
        text.lines()
            .filter(|l| {
                l.contains(&format!("POST /redfish/v1/Systems/{system}/"))
                    && l.contains(action)
                    && (l.contains("\" 204 ") || l.contains("\" 200 "))
            })
            .count()
    }
}

fn count(events: &[String], needle: &str) -> usize {
    events.iter().filter(|e| e.contains(needle)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn jobs_on_two_controllers_run_once_each_against_sushy_and_complete() {
    let systems = [3, 4, 5];
    let access = AccessLog::from_now();
    let mut bed = sushy_bed(&systems, Options::default()).await;
    let other = bed
        .controller("worker-b", "127.0.0.1:0".parse().unwrap())
        .await;
    let mut ids = Vec::new();
    for &i in &systems {
        let (status, body) = bed.post_job(&serial(i), recipe()).await;
        assert_eq!(status, 202, "{body}");
        ids.push(body["job_id"].as_str().unwrap().to_owned());
    }
    for (&i, id) in systems.iter().zip(&ids) {
        bed.at_stage(id, "await_webhook", LIMIT).await;
        check_booting_from_cd(&bed, i, id).await;
        let (status, body) = bed.report(&serial(i), json!({"status": "success"})).await;
        assert_eq!((status, body), (200, json!({"ok": true})));
    }
    for (&i, id) in systems.iter().zip(&ids) {
        let job = bed.complete(id, LIMIT).await;
        assert_eq!(failed_step(&job), None);
        check_cleaned_up(i).await;
        let events = bed.events(id).await;
        let text = events.join("\n");
        assert_eq!(count(&events, "picked by worker"), 1, "{text}");
        assert_eq!(count(&events, "taken over"), 0, "{text}");
        for needle in [
            "info task ISO built: ",
            "CD1 (maintenance) mounted: ",
            "CD2 (task) mounted: ",
            "host reset (",
            "info the maintenance OS reported success",
            "cleanup: ejected CD2 (task) and CD1 (maintenance)",
            "cleanup: host rebooted",
        ] {
            assert_eq!(count(&events, needle), 1, "`{needle}` once in\n{text}");
        }
        // A repeated report of a finished job is answered and changes nothing.
        let (status, body) = bed.report(&serial(i), json!({"status": "success"})).await;
        assert_eq!((status, body), (200, json!({"ok": true})));
        assert_eq!(bed.events(id).await, events);
    }
    for &i in &systems {
        assert_eq!(
            access.posts(i, "InsertMedia"),
            2,
            "one insert per drive on system #{i}"
        );
        assert_eq!(
            access.posts(i, "EjectMedia"),
            2,
            "one eject per drive on system #{i}"
        );
    }
    other.shutdown().await;
    bed.controller.take().unwrap().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failure_report_from_the_maintenance_os_is_cleaned_up_on_sushy() {
    let bed = sushy_bed(&[6], Options::default()).await;
    let (_, body) = bed.post_job(&serial(6), recipe()).await;
    let id = body["job_id"].as_str().unwrap().to_owned();
    bed.at_stage(&id, "await_webhook", LIMIT).await;
    check_booting_from_cd(&bed, 6, &id).await;
    let report = json!({"status": "failed", "failed_step": "bootloader-linux.service"});
    assert_eq!(bed.report(&serial(6), report.clone()).await.0, 200);
    // The maintenance OS retries; the repeat is harmless.
    assert_eq!(bed.report(&serial(6), report).await.0, 200);
    let job = bed.complete(&id, LIMIT).await;
    assert_eq!(
        failed_step(&job).as_deref(),
        Some("bootloader-linux.service")
    );
    check_cleaned_up(6).await;
    let events = bed.events(&id).await;
    let text = events.join("\n");
    assert_eq!(
        count(
            &events,
            "error the maintenance OS reported a failure at bootloader-linux.service"
        ),
        1,
        "{text}"
    );
    assert!(text.contains("cleanup: ejected"), "{text}");
    assert!(text.contains("cleanup: host rebooted"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_controller_is_taken_over_on_sushy_without_a_second_mount_or_reset() {
    let access = AccessLog::from_now();
    let mut bed = sushy_bed(
        &[7],
        Options {
            lease_ttl: Duration::from_secs(1),
            ..Options::default()
        },
    )
    .await;
    let (_, body) = bed.post_job(&serial(7), recipe()).await;
    let id = body["job_id"].as_str().unwrap().to_owned();
    bed.at_stage(&id, "await_webhook", LIMIT).await;
    let resets_before = access.posts(7, "ComputerSystem.Reset");
    assert!(resets_before >= 1);
    bed.restart_controller("worker-b").await;
    let deadline = tokio::time::Instant::now() + LIMIT;
    while count(&bed.events(&id).await, "taken over by worker worker-b") == 0 {
        assert!(tokio::time::Instant::now() < deadline, "never taken over");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The new worker found both drives still holding this job's images on the emulator.
    check_booting_from_cd(&bed, 7, &id).await;
    assert_eq!(
        bed.report(&serial(7), json!({"status": "success"})).await.0,
        200
    );
    let job = bed.complete(&id, LIMIT).await;
    assert_eq!(failed_step(&job), None);
    check_cleaned_up(7).await;
    let events = bed.events(&id).await;
    let text = events.join("\n");
    assert_eq!(count(&events, "CD1 (maintenance) mounted: "), 1, "{text}");
    assert_eq!(count(&events, "CD2 (task) mounted: "), 1, "{text}");
    assert_eq!(count(&events, "host reset ("), 1, "{text}");
    assert_eq!(count(&events, "mounting it again"), 0, "{text}");
    // On the emulator itself: one insert per drive, and resets only for the restart into
    // the maintenance OS (before the kill) and the cleanup reboot — none from the takeover.
    assert_eq!(access.posts(7, "InsertMedia"), 2, "one insert per drive");
    let resets = access.posts(7, "ComputerSystem.Reset");
    assert!(resets > resets_before, "cleanup rebooted the host");
    assert!(
        resets <= 2 * resets_before,
        "{resets} resets: the takeover reset the host again"
    );
}
