//! The simulated BMC held to sushy-tools, not only to our client (DESIGN.md §9, issue 14
//! "Real peers"): the same client operations run against `sushy-emulator` (fake driver,
//! vmedia) and against `metalform sim`'s generic BMC, and what each BMC then reports is
//! compared. `sushy-static` serves the vendor mockup trees of tests/fixtures/redfish/mockups/
//! to check each vendor profile's discovery and the requests it writes. Real task ISOs come
//! from xorriso and the simulated maintenance OS reads them. Needs the variables of
//! scripts/services/50-xorriso.sh and 51-sushy-tools.sh; fails, never skips, without them.
#![cfg(feature = "services")]

use crate::redfish_support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use metalform::provider::redfish::client::{
    Change, Discovery, Drive, PowerState, RedfishClient, ResetOutcome, SystemSelector,
};
use metalform::provider::redfish::error::RedfishError;
use metalform::provider::redfish::iso::{IsoBuilder, TaskIsoContents};
use metalform::provider::redfish::profile::{MediaLocation, Vendor};
use metalform::provider::redfish::recipe;
use metalform::provider::redfish::settings::RedfishSettings;
use metalform::secrets::Secret;
use metalform::sim::redfish::{self, BmcSpec, RedfishSimConfig, WebhookTarget};
use redfish_support::{ImageServer, WebhookSink, client, http, login, xorriso};
use serde_json::{Value as Json, json};
use uuid::Uuid;

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run scripts/test-all (it sources scripts/services/51-sushy-tools.sh)")
    })
}

/// A fake system of the shared emulator for this test alone (index into the configured list).
fn sushy_system(index: usize) -> String {
    env("METALFORM_TEST_SUSHY_SYSTEMS")
        .split(',')
        .nth(index)
        .unwrap_or_else(|| panic!("sushy-emulator has no fake system #{index}"))
        .to_owned()
}

/// sushy's fake driver lands power changes 1–11 s later: a grace period past that.
fn settings() -> RedfishSettings {
    RedfishSettings {
        timeout: Duration::from_secs(10),
        retries: 3,
        base_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_secs(1),
        reset_grace: Duration::from_secs(20),
        poll_interval: Duration::from_millis(200),
        settle_after_reset: Some(Duration::ZERO),
        insecure_tls: false,
    }
}

fn sushy_client() -> RedfishClient {
    client(
        &env("METALFORM_TEST_SUSHY_URL"),
        login(
            &env("METALFORM_TEST_SUSHY_USER"),
            &env("METALFORM_TEST_SUSHY_PASSWORD"),
        ),
        settings(),
    )
}

/// What a client can observe of one BMC after each step, with the BMC's own names taken out.
#[derive(Debug, Clone, PartialEq)]
struct Observed {
    steps: Vec<String>,
}

impl Observed {
    fn push(&mut self, step: impl Into<String>) {
        self.steps.push(step.into());
    }
}

/// The virtual media resource fields both BMCs must agree on.
fn media_view(slot: &Json, urls: &[(&str, &str)]) -> Json {
    let image = slot["Image"].as_str().unwrap_or_default();
    let named = urls
        .iter()
        .find(|(_, url)| !image.is_empty() && *url == image)
        .map_or(if image.is_empty() { "" } else { "other" }, |(name, _)| {
            name
        });
    json!({
        "Id": slot["Id"],
        "MediaTypes": slot["MediaTypes"],
        "Image": named,
        "ImageName": slot["ImageName"],
        "Inserted": slot["Inserted"],
        "WriteProtected": slot["WriteProtected"],
        "has_insert_action": slot["Actions"]["#VirtualMedia.InsertMedia"]["target"].is_string(),
        "has_eject_action": slot["Actions"]["#VirtualMedia.EjectMedia"]["target"].is_string(),
    })
}

async fn raw(base: &str, user: &str, pass: &str, path: &str) -> Json {
    http()
        .get(format!("{base}{path}"))
        .basic_auth(user, Some(pass))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The provisioning sequence, observed.
async fn run_sequence(
    c: &RedfishClient,
    selector: SystemSelector,
    base: &str,
    (user, pass): (&str, &str),
    urls: &[(&str, &str)],
) -> Observed {
    let mut seen = Observed { steps: Vec::new() };
    let d: Discovery = c.discover(&selector).await.unwrap();
    seen.push(format!(
        "discover: media {:?}, slots {:?}, CD1 {}, CD2 {}, reset types include graceful: {}",
        d.media_location,
        d.slots
            .iter()
            .map(|s| (&s.id, &s.media_types))
            .collect::<Vec<_>>(),
        d.slot(Drive::Maintenance).id,
        d.slot(Drive::Task).id,
        d.reset_types.iter().any(|t| t == "GracefulShutdown"),
    ));
    let view = async |seen: &mut Observed, label: &str| {
        for slot in &d.slots {
            let body = raw(base, user, pass, &slot.path).await;
            seen.push(format!("{label}: {}", media_view(&body, urls)));
        }
    };
    view(&mut seen, "fresh").await;
    let (maintenance, task) = (urls[0].1, urls[1].1);
    seen.push(format!(
        "insert CD1: {:?}",
        c.insert_media(&d, Drive::Maintenance, maintenance)
            .await
            .unwrap()
    ));
    seen.push(format!(
        "insert CD2: {:?}",
        c.insert_media(&d, Drive::Task, task).await.unwrap()
    ));
    seen.push(format!(
        "insert CD1 again: {:?}",
        c.insert_media(&d, Drive::Maintenance, maintenance)
            .await
            .unwrap()
    ));
    view(&mut seen, "mounted").await;
    seen.push(format!(
        "boot once: {:?}",
        c.boot_once_from_cd(&d).await.unwrap()
    ));
    let boot = c.boot_state(&d).await.unwrap();
    seen.push(format!("boot target: {:?}", boot.target));
    seen.push(format!("reset: {:?}", c.reset(&d).await.unwrap()));
    seen.push(format!("power: {:?}", c.power_state(&d).await.unwrap()));
    seen.push(format!(
        "eject CD2: {:?}",
        c.eject_media(&d, Drive::Task).await.unwrap()
    ));
    seen.push(format!(
        "eject CD1: {:?}",
        c.eject_media(&d, Drive::Maintenance).await.unwrap()
    ));
    seen.push(format!(
        "eject CD1 again: {:?}",
        c.eject_media(&d, Drive::Maintenance).await.unwrap()
    ));
    view(&mut seen, "ejected").await;
    seen
}

#[tokio::test]
async fn the_simulated_bmc_and_sushy_tools_agree() {
    let images = ImageServer::start().await;
    let maintenance = images.put(Uuid::from_u128(1), b"maintenance image bytes");
    let task = images.put(Uuid::from_u128(2), b"task image bytes");
    let urls = [
        ("maintenance", maintenance.as_str()),
        ("task", task.as_str()),
    ];

    let sushy_url = env("METALFORM_TEST_SUSHY_URL");
    let (user, pass) = (
        env("METALFORM_TEST_SUSHY_USER"),
        env("METALFORM_TEST_SUSHY_PASSWORD"),
    );
    let sushy = run_sequence(
        &sushy_client(),
        SystemSelector::Id(sushy_system(0)),
        &sushy_url,
        (&user, &pass),
        &urls,
    )
    .await;

    let handle = redfish::start(RedfishSimConfig {
        bmcs: vec![BmcSpec::new("SIM-1", Vendor::Generic)],
        time_scale: 20.0,
        ..RedfishSimConfig::default()
    })
    .await
    .unwrap();
    let sim_url = handle.url("SIM-1").unwrap().to_owned();
    let ours = run_sequence(
        &client(
            &sim_url,
            login(redfish::DEFAULT_USER, redfish::DEFAULT_PASSWORD),
            settings(),
        ),
        SystemSelector::Only,
        &sim_url,
        (redfish::DEFAULT_USER, redfish::DEFAULT_PASSWORD),
        &urls,
    )
    .await;

    eprintln!("observed on both:\n{}", sushy.steps.join("\n"));
    assert_eq!(ours, sushy, "same operations, same observations");
    // Pin what they agree on, so a change on both sides is still noticed.
    let text = sushy.steps.join("\n");
    for expected in [
        r#"discover: media Systems, slots [("Cd", ["CD", "DVD"]), ("Floppy", ["Floppy", "USBStick"])], CD1 Cd, CD2 Floppy, reset types include graceful: true"#,
        "insert CD1: Changed",
        "insert CD1 again: Unchanged",
        r#"mounted: {"Id":"Cd","MediaTypes":["CD","DVD"],"Image":"maintenance","ImageName":"task.iso","Inserted":true,"WriteProtected":true,"has_insert_action":true,"has_eject_action":true}"#,
        "boot target: Some(\"Cd\")",
        "reset: Graceful",
        "power: On",
        "eject CD1 again: Unchanged",
        r#"ejected: {"Id":"Cd","MediaTypes":["CD","DVD"],"Image":"","ImageName":"","Inserted":false,"WriteProtected":false,"has_insert_action":true,"has_eject_action":true}"#,
    ] {
        assert!(text.contains(expected), "missing `{expected}` in:\n{text}");
    }
}

/// sushy's fake driver reads `BootSourceOverrideEnabled` back as `Continuous` whatever was
/// set (DESIGN.md §9); real BMCs, and the simulator, read back `Once` until the boot. This is
/// the one difference the comparison leaves out, pinned here so it stays deliberate.
#[tokio::test]
async fn the_one_deliberate_difference_is_the_override_frequency() {
    let c = sushy_client();
    let d = c
        .discover(&SystemSelector::Id(sushy_system(1)))
        .await
        .unwrap();
    c.boot_once_from_cd(&d).await.unwrap();
    let boot = c.boot_state(&d).await.unwrap();
    assert_eq!(
        (boot.target.as_deref(), boot.enabled.as_deref()),
        (Some("Cd"), Some("Continuous"))
    );
    // So a repeat writes again on sushy (harmless: setting a one-time boot is idempotent).
    assert_eq!(c.boot_once_from_cd(&d).await.unwrap(), Change::Changed);
}

#[tokio::test]
async fn sushy_refuses_what_the_simulator_refuses() {
    let images = ImageServer::start().await;
    let gone = images.url(Uuid::from_u128(404));
    let handle = redfish::start(RedfishSimConfig {
        bmcs: vec![BmcSpec::new("SIM-2", Vendor::Generic)],
        ..RedfishSimConfig::default()
    })
    .await
    .unwrap();
    let ours = client(
        handle.url("SIM-2").unwrap(),
        login(redfish::DEFAULT_USER, redfish::DEFAULT_PASSWORD),
        settings(),
    );
    let sushy = sushy_client();
    let mut statuses = Vec::new();
    for (c, selector) in [
        (&sushy, SystemSelector::Id(sushy_system(2))),
        (&ours, SystemSelector::Only),
    ] {
        let d = c.discover(&selector).await.unwrap();
        // An image the BMC cannot download.
        let err = c
            .insert_media(&d, Drive::Maintenance, &gone)
            .await
            .unwrap_err();
        // Wrong credentials.
        let base = c.endpoint().base.as_str().trim_end_matches('/').to_owned();
        let bad = client(&base, login("admin", "wrong"), settings());
        let unauthorized = bad.discover(&selector).await.unwrap_err();
        statuses.push((err.status(), err.is_transient(), unauthorized.status()));
    }
    assert_eq!(statuses[0], statuses[1], "sushy, then the simulator");
    assert_eq!(statuses[0], (Some(400), false, Some(401)));
}

/// A real task ISO on the simulated BMC: the maintenance OS finds it by label, reads the
/// recipe and reports success with the secret.
#[tokio::test]
async fn the_maintenance_os_boots_a_real_task_iso_and_reports() {
    let images = ImageServer::start().await;
    let recipe = json!({"task_target": "install-linux.target", "target_disk": "/dev/sda"});
    let version = recipe::validate(&recipe).unwrap();
    let job = Uuid::from_u128(0xabc);
    IsoBuilder::new(xorriso())
        .build(
            &TaskIsoContents::from_recipe(&recipe, version).unwrap(),
            &images.service.store.iso_path(job),
        )
        .await
        .unwrap();
    let sink = WebhookSink::start().await;
    let handle = redfish::start(RedfishSimConfig {
        bmcs: vec![BmcSpec::new("XF-12345ABC", Vendor::Dell)],
        time_scale: 100.0,
        webhook: Some(WebhookTarget {
            base: sink.url.clone(),
            secret: Secret::new("s3cret"),
        }),
        ..RedfishSimConfig::default()
    })
    .await
    .unwrap();
    let mut s = settings();
    s.poll_interval = Duration::from_millis(20);
    s.settle_after_reset = Some(Duration::from_millis(200));
    let c = client(
        handle.url("XF-12345ABC").unwrap(),
        login(redfish::DEFAULT_USER, redfish::DEFAULT_PASSWORD),
        s,
    );
    let d = c
        .discover(&SystemSelector::Serial("XF-12345ABC".into()))
        .await
        .unwrap();
    c.insert_media(
        &d,
        Drive::Maintenance,
        &images.put(Uuid::from_u128(1), b"maintenance"),
    )
    .await
    .unwrap();
    c.insert_media(&d, Drive::Task, &images.url(job))
        .await
        .unwrap();
    c.boot_once_from_cd(&d).await.unwrap();
    assert_eq!(c.reset(&d).await.unwrap(), ResetOutcome::Graceful);
    let hooks = sink.wait_for(1, Duration::from_secs(5)).await;
    assert_eq!(
        hooks,
        [(
            "XF-12345ABC".to_owned(),
            Some("s3cret".to_owned()),
            json!({"status": "success"})
        )]
    );
    // A configured installer failure is reported with its step.
    handle.set_maintenance(
        "XF-12345ABC",
        redfish::MaintenanceBehaviour::Fail("bootloader-linux.service".into()),
    );
    c.boot_once_from_cd(&d).await.unwrap();
    c.reset(&d).await.unwrap();
    let hooks = sink.wait_for(2, Duration::from_secs(5)).await;
    assert_eq!(
        hooks[1].2,
        json!({"status": "failed", "failed_step": "bootloader-linux.service"})
    );
    assert_eq!(c.power_state(&d).await.unwrap(), PowerState::On);
}

/// `sushy-static` serving one vendor mockup tree; its stdout and stderr record the requests.
struct StaticBmc {
    child: Child,
    url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for StaticBmc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl StaticBmc {
    async fn start(vendor: &str) -> StaticBmc {
        let program = env("METALFORM_SUSHY_STATIC");
        let mockup = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/redfish/mockups")
            .join(vendor);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("requests.log");
        let out = std::fs::File::create(&log).unwrap();
        let child: Child = Command::new(&program)
            .args(["-i", "127.0.0.1", "-p", &port.to_string(), "-m"])
            .arg(&mockup)
            .env("PYTHONUNBUFFERED", "1")
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
        // Owned at once, so the process is killed and reaped on every path (Drop).
        let bmc = StaticBmc {
            child,
            url: format!("http://127.0.0.1:{port}"),
            log,
            _dir: dir,
        };
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return bmc;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("sushy-static did not start on port {port}: {}", bmc.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap()
    }
}

#[tokio::test]
async fn vendor_profiles_against_sushy_static_mockups() {
    let media_url = "http://127.0.0.1:9/media/tasks/00000000-0000-0000-0000-000000000001/task.iso?expires=1&signature=00";
    for (name, vendor, location, cd1, cd2, target) in [
        (
            "dell",
            Vendor::Dell,
            MediaLocation::Systems,
            "/redfish/v1/Systems/System.Embedded.1/VirtualMedia/1",
            "2",
            "Cd",
        ),
        (
            "hpe",
            Vendor::Hpe,
            MediaLocation::Managers,
            "/redfish/v1/Managers/1/VirtualMedia/2",
            "1",
            "Cd",
        ),
        (
            "lenovo",
            Vendor::Lenovo,
            MediaLocation::Managers,
            "/redfish/v1/Managers/1/VirtualMedia/EXT1",
            "EXT2",
            "Cd",
        ),
        (
            "supermicro",
            Vendor::Supermicro,
            MediaLocation::Managers,
            "/redfish/v1/Managers/1/VirtualMedia/CD1",
            "USB1",
            "UsbCd",
        ),
    ] {
        let bmc = StaticBmc::start(name).await;
        let c = client(&bmc.url, login("root", "mockup"), settings());
        let d = c
            .discover(&SystemSelector::Serial(format!(
                "MOCK-{}",
                name.to_uppercase()
            )))
            .await
            .unwrap();
        assert_eq!(d.vendor, vendor, "{name}: detected from the service root");
        assert_eq!(d.media_location, location, "{name}");
        assert_eq!(d.slot(Drive::Maintenance).path, cd1, "{name}");
        assert_eq!(d.slot(Drive::Task).id, cd2, "{name}");
        // A static tree accepts every write (204) but never changes: the client notices.
        let err = c
            .insert_media(&d, Drive::Maintenance, media_url)
            .await
            .unwrap_err();
        assert!(
            matches!(err, RedfishError::Protocol { .. }),
            "{name}: {err}"
        );
        assert!(
            err.to_string()
                .ends_with("CD1 (maintenance) accepted the image but reports no media"),
            "{name}: {err}"
        );
        let err = c.boot_once_from_cd(&d).await.unwrap_err();
        assert!(
            err.to_string().ends_with(&format!(
                "the boot override reads back as None after setting {target}"
            )),
            "{name}: {err}"
        );
        let log = bmc.log();
        assert!(
            log.contains(&format!(
                "\"POST {cd1}/Actions/VirtualMedia.InsertMedia HTTP/1.1\" 204"
            )),
            "{name}: {log}"
        );
        assert!(
            log.contains(&format!("\"PATCH {} HTTP/1.1\" 204", d.system)),
            "{name}: {log}"
        );
        assert!(
            log.contains(&format!("\"BootSourceOverrideTarget\":\"{target}\"")),
            "{name}: {log}"
        );
        match vendor {
            // Header names go over the wire in lower case.
            Vendor::Lenovo => assert!(log.contains("if-match: W/\"a1b2c3\""), "{name}: {log}"),
            _ => assert!(!log.to_lowercase().contains("if-match"), "{name}: {log}"),
        }
        if vendor == Vendor::Supermicro {
            assert!(
                log.contains("\"BootSourceOverrideMode\":\"UEFI\""),
                "{name}: {log}"
            );
        }
    }
}
