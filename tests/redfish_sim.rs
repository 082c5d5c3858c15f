//! The Redfish client against the simulated BMCs of every vendor flavour (seed 003 "Redfish
//! operations", "Compatibility and Vendor Quirks", "Error Handling and Retries"): discovery
//! by links, read-then-write virtual media and boot override (a repeat writes nothing),
//! graceful-then-forced reset, the maintenance OS's webhook, If-Match when the BMC asks for
//! it, transient vs terminal failures with retries. tests/redfish_sushy_services.rs holds the
//! simulator to sushy-tools.

use crate::redfish_support;

use std::time::Duration;

use metalform::provider::redfish::client::{
    Change, Drive, PowerState, RedfishClient, ResetOutcome, SystemSelector,
};
use metalform::provider::redfish::error::{RedfishError, TransientCause};
use metalform::provider::redfish::profile::{MediaLocation, Vendor};
use metalform::secrets::Secret;
use metalform::sim::redfish::{
    self, BmcSpec, FaultRule, MaintenanceBehaviour, RedfishSimConfig, RedfishSimHandle,
    WebhookTarget,
};
use redfish_support::{ImageServer, WebhookSink, client, fast_settings, login};
use uuid::Uuid;

const SECRET: &str = "webhook-secret-for-tests";

async fn sim(bmcs: Vec<BmcSpec>, webhook: Option<&WebhookSink>) -> RedfishSimHandle {
    redfish::start(RedfishSimConfig {
        bmcs,
        time_scale: 100.0,
        webhook: webhook.map(|w| WebhookTarget {
            base: w.url.clone(),
            secret: Secret::new(SECRET),
        }),
        ..RedfishSimConfig::default()
    })
    .await
    .unwrap()
}

fn client_of(handle: &RedfishSimHandle, serial: &str) -> RedfishClient {
    client(
        handle.url(serial).unwrap(),
        login(redfish::DEFAULT_USER, redfish::DEFAULT_PASSWORD),
        fast_settings(),
    )
}

/// Writes (non-GET requests) a BMC answered, as `METHOD path -> status`.
fn writes(handle: &RedfishSimHandle, serial: &str) -> Vec<String> {
    handle
        .requests(serial)
        .into_iter()
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {} -> {}", r.method, r.path, r.status))
        .collect()
}

#[tokio::test]
async fn every_flavour_is_discovered_where_its_vendor_keeps_virtual_media() {
    let specs: Vec<BmcSpec> = Vendor::ALL
        .iter()
        .map(|v| BmcSpec::new(format!("SN-{v}"), *v))
        .collect();
    let handle = sim(specs, None).await;
    let mut seen = Vec::new();
    for vendor in Vendor::ALL {
        let serial = format!("SN-{vendor}");
        let d = client_of(&handle, &serial)
            .discover(&SystemSelector::Serial(serial.clone()))
            .await
            .unwrap();
        assert_eq!(d.vendor, vendor, "detected from the service root");
        assert_eq!(d.serial.as_deref(), Some(serial.as_str()));
        seen.push(format!(
            "{vendor}: {} {:?} CD1={} CD2={} manager={}",
            d.system,
            d.media_location,
            d.slot(Drive::Maintenance).path,
            d.slot(Drive::Task).id,
            d.manager.as_deref().unwrap_or("-")
        ));
    }
    assert_eq!(
        seen,
        [
            "dell: /redfish/v1/Systems/System.Embedded.1 Systems CD1=/redfish/v1/Systems/System.Embedded.1/VirtualMedia/1 CD2=2 manager=/redfish/v1/Managers/iDRAC.Embedded.1",
            "hpe: /redfish/v1/Systems/1 Managers CD1=/redfish/v1/Managers/1/VirtualMedia/2 CD2=1 manager=/redfish/v1/Managers/1",
            "lenovo: /redfish/v1/Systems/1 Managers CD1=/redfish/v1/Managers/1/VirtualMedia/EXT1 CD2=EXT2 manager=/redfish/v1/Managers/1",
            "supermicro: /redfish/v1/Systems/1 Managers CD1=/redfish/v1/Managers/1/VirtualMedia/CD1 CD2=USB1 manager=/redfish/v1/Managers/1",
            "generic: /redfish/v1/Systems/6d660000-0000-4000-8000-000000000004 Systems CD1=/redfish/v1/Systems/6d660000-0000-4000-8000-000000000004/VirtualMedia/Cd CD2=Floppy manager=/redfish/v1/Managers/6d660000-0000-4000-8000-000000000004",
        ]
    );
    let err = client_of(&handle, "SN-dell")
        .discover(&SystemSelector::Serial("NOPE".into()))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "discover on {}: no system with serial number `NOPE` on this BMC",
            handle.url("SN-dell").unwrap().trim_start_matches("http://")
        )
    );
}

/// The whole provisioning sequence on one flavour; returns the BMC's writes.
async fn provision(vendor: Vendor) -> Vec<String> {
    let sink = WebhookSink::start().await;
    let images = ImageServer::start().await;
    let serial = format!("SN-{vendor}");
    let handle = sim(vec![BmcSpec::new(&serial, vendor)], Some(&sink)).await;
    let c = client_of(&handle, &serial);
    let d = c.discover(&SystemSelector::Only).await.unwrap();
    let maintenance = images.put(Uuid::from_u128(1), b"maintenance image");
    let task = images.put(Uuid::from_u128(2), b"not an ISO 9660 image");
    assert_eq!(
        c.insert_media(&d, Drive::Maintenance, &maintenance)
            .await
            .unwrap(),
        Change::Changed
    );
    assert_eq!(
        c.insert_media(&d, Drive::Task, &task).await.unwrap(),
        Change::Changed
    );
    // Read-then-write: the same images again (with freshly signed URLs) write nothing.
    assert_eq!(
        c.insert_media(&d, Drive::Maintenance, &images.url(Uuid::from_u128(1)))
            .await
            .unwrap(),
        Change::Unchanged
    );
    assert_eq!(
        c.insert_media(&d, Drive::Task, &task).await.unwrap(),
        Change::Unchanged
    );
    assert_eq!(c.boot_once_from_cd(&d).await.unwrap(), Change::Changed);
    assert_eq!(c.boot_once_from_cd(&d).await.unwrap(), Change::Unchanged);
    let boot = c.boot_state(&d).await.unwrap();
    assert_eq!(boot.target.as_deref(), Some(d.profile().boot.cd_target));
    assert_eq!(boot.enabled.as_deref(), Some("Once"));
    assert_eq!(c.reset(&d).await.unwrap(), ResetOutcome::Graceful);
    assert_eq!(c.power_state(&d).await.unwrap(), PowerState::On);
    // The host booted the maintenance OS from CD1 and the one-time override is spent.
    let boot = c.boot_state(&d).await.unwrap();
    assert_eq!(boot.enabled.as_deref(), Some("Disabled"));
    let hooks = sink.wait_for(1, Duration::from_secs(5)).await;
    assert_eq!(hooks.len(), 1, "one report");
    let (hook_serial, secret, body) = &hooks[0];
    assert_eq!(hook_serial, &serial);
    assert_eq!(secret.as_deref(), Some(SECRET));
    // The task image is not an ISO: the maintenance OS says which step failed.
    assert_eq!(
        body,
        &serde_json::json!({"status": "failed", "failed_step": "find-task-media"})
    );
    // Cleanup: eject both (a repeat writes nothing), reboot to disk.
    assert_eq!(
        c.eject_media(&d, Drive::Task).await.unwrap(),
        Change::Changed
    );
    assert_eq!(
        c.eject_media(&d, Drive::Maintenance).await.unwrap(),
        Change::Changed
    );
    assert_eq!(
        c.eject_media(&d, Drive::Maintenance).await.unwrap(),
        Change::Unchanged
    );
    assert!(
        c.media_states(&d)
            .await
            .unwrap()
            .iter()
            .all(|m| !m.inserted && m.image.is_none())
    );
    assert_eq!(c.reset(&d).await.unwrap(), ResetOutcome::Graceful);
    assert_eq!(handle.with_bmc(&serial, |b| b.boots).unwrap(), 2);
    writes(&handle, &serial)
}

#[tokio::test]
async fn provisioning_on_dell_writes_each_thing_once() {
    assert_eq!(
        provision(Vendor::Dell).await,
        [
            "POST /redfish/v1/Systems/System.Embedded.1/VirtualMedia/1/Actions/VirtualMedia.InsertMedia -> 204",
            "POST /redfish/v1/Systems/System.Embedded.1/VirtualMedia/2/Actions/VirtualMedia.InsertMedia -> 204",
            "PATCH /redfish/v1/Systems/System.Embedded.1 -> 204",
            "POST /redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset -> 204",
            "POST /redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset -> 204",
            "POST /redfish/v1/Systems/System.Embedded.1/VirtualMedia/2/Actions/VirtualMedia.EjectMedia -> 204",
            "POST /redfish/v1/Systems/System.Embedded.1/VirtualMedia/1/Actions/VirtualMedia.EjectMedia -> 204",
            "POST /redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset -> 204",
            "POST /redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset -> 204",
        ]
    );
}

#[tokio::test]
async fn provisioning_on_hpe_lenovo_supermicro_and_generic() {
    for vendor in [
        Vendor::Hpe,
        Vendor::Lenovo,
        Vendor::Supermicro,
        Vendor::Generic,
    ] {
        let writes = provision(vendor).await;
        assert_eq!(writes.len(), 9, "{vendor}: {writes:?}");
        assert!(
            writes.iter().all(|w| w.ends_with("-> 204")),
            "{vendor}: {writes:?}"
        );
    }
}

#[tokio::test]
async fn if_match_is_sent_when_the_bmc_asks_for_it() {
    let handle = sim(vec![BmcSpec::new("XCC", Vendor::Lenovo)], None).await;
    // The Lenovo profile sends If-Match from the start.
    let c = client_of(&handle, "XCC");
    let d = c.discover(&SystemSelector::Only).await.unwrap();
    c.boot_once_from_cd(&d).await.unwrap();
    assert_eq!(
        writes(&handle, "XCC"),
        ["PATCH /redfish/v1/Systems/1 -> 204"]
    );
    // Driven with the generic profile, the client learns it from the 428.
    let handle = sim(vec![BmcSpec::new("XCC", Vendor::Lenovo)], None).await;
    let c = client_of(&handle, "XCC").with_vendor(Some(Vendor::Generic));
    let d = c.discover(&SystemSelector::Only).await.unwrap();
    assert_eq!(
        d.media_location,
        MediaLocation::Managers,
        "links decide, whatever the profile"
    );
    assert_eq!(c.boot_once_from_cd(&d).await.unwrap(), Change::Changed);
    assert_eq!(
        writes(&handle, "XCC"),
        [
            "PATCH /redfish/v1/Systems/1 -> 428",
            "PATCH /redfish/v1/Systems/1 -> 204"
        ]
    );
}

#[tokio::test]
async fn a_wrong_boot_target_is_terminal_with_the_bmcs_words() {
    let handle = sim(vec![BmcSpec::new("SMC", Vendor::Supermicro)], None).await;
    let c = client_of(&handle, "SMC").with_vendor(Some(Vendor::Generic));
    let d = c.discover(&SystemSelector::Only).await.unwrap();
    let err = c.boot_once_from_cd(&d).await.unwrap_err();
    assert!(!err.is_transient());
    assert_eq!(err.status(), Some(400));
    assert!(
        err.to_string().ends_with("the BMC refused (HTTP 400): the value Cd for the property BootSourceOverrideTarget is not in the list of acceptable values"),
        "{err}"
    );
    assert_eq!(writes(&handle, "SMC").len(), 1, "a 4xx is not retried");
}

#[tokio::test]
async fn transient_failures_are_retried_and_terminal_ones_are_not() {
    let images = ImageServer::start().await;
    let url = images.put(Uuid::from_u128(9), b"image");
    let handle = sim(vec![BmcSpec::new("S", Vendor::Dell)], None).await;
    let c = client_of(&handle, "S");
    let d = c.discover(&SystemSelector::Only).await.unwrap();
    // Two 503s then success: retried, and the insert happens once.
    handle.inject(
        "S",
        FaultRule::parse("insert:status=503,retry_after=0,count=2").unwrap(),
    );
    assert_eq!(
        c.insert_media(&d, Drive::Maintenance, &url).await.unwrap(),
        Change::Changed
    );
    let inserts: Vec<u16> = handle
        .requests("S")
        .iter()
        .filter(|r| r.path.ends_with("InsertMedia"))
        .map(|r| r.status)
        .collect();
    assert_eq!(inserts, [503, 503, 204]);
    // 5xx on every try: the retries (3) are spent and the error says so.
    handle.inject("S", FaultRule::parse("eject:status=500").unwrap());
    let err = c.eject_media(&d, Drive::Maintenance).await.unwrap_err();
    match &err {
        RedfishError::Transient {
            cause, attempts, ..
        } => {
            assert_eq!((cause, *attempts), (&TransientCause::Status(500), 4));
        }
        other => panic!("{other:?}"),
    }
    assert!(err.is_transient());
    // A 4xx is terminal at once.
    handle.inject("S", FaultRule::parse("media:status=404,count=1").unwrap());
    let err = c.media_state(&d, Drive::Task).await.unwrap_err();
    assert_eq!((err.is_transient(), err.status()), (false, Some(404)));
}

#[tokio::test]
async fn a_bmc_that_hangs_times_out_as_transient() {
    let handle = sim(vec![BmcSpec::new("S", Vendor::Hpe)], None).await;
    let mut settings = fast_settings();
    settings.timeout = Duration::from_millis(200);
    settings.retries = 1;
    let c = client(
        handle.url("S").unwrap(),
        login(redfish::DEFAULT_USER, redfish::DEFAULT_PASSWORD),
        settings,
    );
    let d = c.discover(&SystemSelector::Only).await.unwrap();
    handle.inject("S", FaultRule::parse("system:hang").unwrap());
    let err = c.power_state(&d).await.unwrap_err();
    match err {
        RedfishError::Transient {
            cause: TransientCause::Timeout,
            attempts: 2,
            ..
        } => {}
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn wrong_credentials_are_terminal_with_a_credentials_hint() {
    let handle = sim(vec![BmcSpec::new("S", Vendor::Generic)], None).await;
    let c = client(
        handle.url("S").unwrap(),
        login("admin", "wrong"),
        fast_settings(),
    );
    let err = c.discover(&SystemSelector::Only).await.unwrap_err();
    assert_eq!(err.status(), Some(401));
    assert_eq!(
        err.hint(),
        "check the BMC credentials in the secret store and the account's Redfish role"
    );
    assert!(
        !format!("{err} {err:?}").contains("wrong"),
        "no password in errors"
    );
}

#[tokio::test]
async fn a_host_that_ignores_graceful_shutdown_is_forced_off_after_the_grace_period() {
    let mut spec = BmcSpec::new("S", Vendor::Generic);
    spec.ignores_graceful_shutdown = true;
    let handle = sim(vec![spec], None).await;
    let mut settings = fast_settings();
    settings.reset_grace = Duration::from_millis(300);
    let c = client(
        handle.url("S").unwrap(),
        login(redfish::DEFAULT_USER, redfish::DEFAULT_PASSWORD),
        settings,
    );
    let d = c.discover(&SystemSelector::Only).await.unwrap();
    assert_eq!(c.reset(&d).await.unwrap(), ResetOutcome::Forced);
    let resets: Vec<String> = handle
        .requests("S")
        .iter()
        .filter(|r| r.method == "POST")
        .map(|r| r.path.rsplit('/').next().unwrap().to_owned())
        .collect();
    assert_eq!(
        resets, ["ComputerSystem.Reset"; 3],
        "graceful, forced off, on"
    );
    assert_eq!(c.power_state(&d).await.unwrap(), PowerState::On);
    // A host that is off is only powered on.
    handle.with_bmc("S", |b| b.power = redfish::Power::Off);
    assert_eq!(c.reset(&d).await.unwrap(), ResetOutcome::PoweredOn);
}

#[tokio::test]
async fn the_client_waits_out_the_bmc_after_a_reset() {
    let handle = sim(vec![BmcSpec::new("S", Vendor::Supermicro)], None).await;
    // Supermicro settles 20 s, 0.2 s at 100×; the client leaves it alone 0.25 s.
    let c = client_of(&handle, "S");
    let d = c.discover(&SystemSelector::Only).await.unwrap();
    c.reset(&d).await.unwrap();
    c.media_states(&d).await.unwrap();
    let after_on = handle.requests("S");
    assert!(after_on.iter().all(|r| r.status != 503), "{after_on:?}");
    // Without the wait, the 503s of the settling BMC are retried.
    let handle = sim(vec![BmcSpec::new("S", Vendor::Supermicro)], None).await;
    let mut settings = fast_settings();
    settings.settle_after_reset = Some(Duration::ZERO);
    settings.retries = 10;
    let c = client(
        handle.url("S").unwrap(),
        login(redfish::DEFAULT_USER, redfish::DEFAULT_PASSWORD),
        settings,
    );
    let d = c.discover(&SystemSelector::Only).await.unwrap();
    c.reset(&d).await.unwrap();
    c.media_states(&d).await.unwrap();
    assert!(handle.requests("S").iter().any(|r| r.status == 503));
}

#[tokio::test]
async fn another_image_in_the_drive_is_replaced() {
    let images = ImageServer::start().await;
    let handle = sim(vec![BmcSpec::new("S", Vendor::Hpe)], None).await;
    let c = client_of(&handle, "S");
    let d = c.discover(&SystemSelector::Only).await.unwrap();
    let old = images.put(Uuid::from_u128(1), b"old");
    let new = images.put(Uuid::from_u128(2), b"new");
    c.insert_media(&d, Drive::Task, &old).await.unwrap();
    assert_eq!(
        c.insert_media(&d, Drive::Task, &new).await.unwrap(),
        Change::Changed
    );
    let state = c.media_state(&d, Drive::Task).await.unwrap();
    assert!(state.holds(&new));
    assert_eq!(
        writes(&handle, "S"),
        [
            "POST /redfish/v1/Managers/1/VirtualMedia/1/Actions/VirtualMedia.InsertMedia -> 204",
            "POST /redfish/v1/Managers/1/VirtualMedia/1/Actions/VirtualMedia.EjectMedia -> 204",
            "POST /redfish/v1/Managers/1/VirtualMedia/1/Actions/VirtualMedia.InsertMedia -> 204",
        ]
    );
    // An image the BMC cannot download is refused (400), terminal.
    let gone = images.url(Uuid::from_u128(77));
    let err = c
        .insert_media(&d, Drive::Maintenance, &gone)
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(400));
    assert!(
        err.to_string()
            .contains("cannot download virtual media: got error 404"),
        "{err}"
    );
}

#[tokio::test]
async fn a_failing_or_silent_maintenance_os() {
    let sink = WebhookSink::start().await;
    let images = ImageServer::start().await;
    let mut failing = BmcSpec::new("FAIL", Vendor::Generic);
    failing.maintenance = MaintenanceBehaviour::Fail("bootloader-linux.service".into());
    let mut silent = BmcSpec::new("QUIET", Vendor::Generic);
    silent.maintenance = MaintenanceBehaviour::Silent;
    let handle = sim(vec![failing, silent], Some(&sink)).await;
    for serial in ["FAIL", "QUIET"] {
        let c = client_of(&handle, serial);
        let d = c.discover(&SystemSelector::Only).await.unwrap();
        c.insert_media(
            &d,
            Drive::Maintenance,
            &images.put(Uuid::from_u128(1), b"m"),
        )
        .await
        .unwrap();
        c.boot_once_from_cd(&d).await.unwrap();
        c.reset(&d).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    let hooks = sink.wait_for(1, Duration::from_secs(2)).await;
    assert_eq!(hooks.len(), 1, "the silent one never reports: {hooks:?}");
    assert_eq!(hooks[0].0, "FAIL");
    // Without a task medium the maintenance OS cannot even read a recipe; a configured
    // failure is reported only once it could.
    assert_eq!(hooks[0].2["status"], "failed");
    assert_eq!(handle.webhooks().len(), 1);
    assert_eq!(handle.webhooks()[0].result, Ok(200));
}

#[tokio::test]
async fn the_login_comes_from_the_secret_store_at_use_time() {
    use metalform::provider::redfish::client::Endpoint;
    use metalform::secrets::{FileStore, SecretRef, SecretStore};
    let handle = sim(vec![BmcSpec::new("S", Vendor::Hpe)], None).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("secrets.json");
    let write = |pass: &str| {
        std::fs::write(
            &file,
            format!(r#"{{"kv/bmc/S": {{"user": "admin", "pass": "{pass}"}}}}"#),
        )
        .unwrap();
    };
    let store = FileStore::new(&file);
    let reference = SecretRef::new("kv/bmc/S", None);
    write("stale");
    let endpoint = Endpoint::from_secrets(
        handle.url("S").unwrap(),
        &store as &dyn SecretStore,
        &reference,
    )
    .await
    .unwrap();
    let err = RedfishClient::new(endpoint, fast_settings())
        .discover(&SystemSelector::Only)
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(401));
    // Rotated in the store: the next read picks it up.
    write(redfish::DEFAULT_PASSWORD);
    let endpoint = Endpoint::from_secrets(
        handle.url("S").unwrap(),
        &store as &dyn SecretStore,
        &reference,
    )
    .await
    .unwrap();
    RedfishClient::new(endpoint, fast_settings())
        .discover(&SystemSelector::Only)
        .await
        .unwrap();
    let missing = SecretRef::new("kv/bmc/other", None);
    let err = Endpoint::from_secrets("10.0.0.9", &store as &dyn SecretStore, &missing)
        .await
        .unwrap_err();
    assert!(!err.is_transient());
    assert!(
        err.to_string()
            .starts_with("cannot read the login of BMC 10.0.0.9: secret `kv/bmc/other` not found"),
        "{err}"
    );
}
