//! Redfish provisioning end to end on simulated BMCs (seed 003 "Acceptance Criteria"; issue
//! 14): a job requested through the API runs queued → provisioning → succeeded | failed →
//! complete on the provisioning workers — task ISO, CD1 and CD2 mounted, one-time boot from
//! CD, reset, the maintenance OS's report on the webhook, cleanup — with terminal errors and
//! the stuck timeout failing the job into cleanup, a killed controller taken over without a
//! second mount or reset, and two controllers never running one job. Hermetic: the built-in ISO
//! writer, the simulated BMCs of `metalform sim`.

mod provisioning_support;

use std::time::Duration;

use metalform::lifecycle::ProvisioningStatus;
use metalform::provider::redfish::profile::Vendor;
use metalform::sim::redfish::{FaultRule, MaintenanceBehaviour};
use metalform::store::JobSpec;
use provisioning_support::{Bed, Options, recipe};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);

fn failed_step(job: &metalform::store::Job) -> Option<String> {
    match &job.spec {
        JobSpec::Provisioning { failed_step, .. } => failed_step.clone(),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_runs_from_request_to_complete_on_every_vendor() {
    let bed = Bed::start(Options {
        bmcs: 5,
        vendor: None,
        ..Options::default()
    })
    .await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let (status, body) = bed.post_job(&bed.serial(i), recipe()).await;
        assert_eq!(status, 202, "{body}");
        assert_eq!(body["status"], "queued");
        assert_eq!(body["server_serial"], bed.serial(i));
        assert!(body["created_at"].as_str().unwrap().ends_with('Z'));
        ids.push(body["job_id"].as_str().unwrap().to_owned());
    }
    for (i, id) in ids.iter().enumerate() {
        let job = bed.complete(id, LIMIT).await;
        let serial = bed.serial(i);
        assert_eq!(failed_step(&job), None);
        let (status, view) = bed
            .call(reqwest::Method::GET, &format!("api/v1/jobs/{id}"), None)
            .await;
        assert_eq!(status, 200);
        assert_eq!(view["status"], "complete", "{view}");
        assert_eq!(view["failed_step"], json!(null));
        assert!(view["last_update"].as_str().is_some());
        let events = bed.events(id).await;
        let text = events.join("\n");
        for needle in [
            "info queued by ops",
            "info picked by worker worker-a",
            "info task ISO built: ",
            "CD1 (maintenance) mounted: ",
            "CD2 (task) mounted: ",
            "one-time boot from",
            "host reset (",
            "info the maintenance OS reported success",
            "cleanup: ejected CD2 (task) and CD1 (maintenance)",
            "cleanup: host rebooted into its installed OS",
        ] {
            assert!(text.contains(needle), "{serial}: no `{needle}` in\n{text}");
        }
        assert!(
            !text.contains("signature="),
            "signed URLs stay out of events"
        );
        assert!(view["events"].as_array().unwrap().len() >= events.len().min(500));
        // One insert per drive, both ejected again, and two resets' worth of power actions at
        // most (the reset into the maintenance OS, the cleanup reboot).
        let (inserts, ejects, _) = bed.media_calls(&serial);
        assert_eq!(inserts, 2, "{serial}: {:?}", bed.sims.requests(&serial));
        assert!(ejects >= 2, "{serial}");
        let drives = bed
            .sims
            .with_bmc(&serial, |b| {
                b.slots.iter().map(|s| s.inserted).collect::<Vec<_>>()
            })
            .unwrap();
        assert!(
            drives.iter().all(|inserted| !inserted),
            "{serial}: {drives:?}"
        );
    }
    let deliveries = bed.sims.webhooks();
    assert_eq!(deliveries.len(), 5);
    assert!(
        deliveries.iter().all(|d| d.result == Ok(200)),
        "{deliveries:?}"
    );
    // The seed's metrics were counted.
    let statuses = bed.recorder.statuses.lock().unwrap().clone();
    for status in [
        ProvisioningStatus::Queued,
        ProvisioningStatus::Provisioning,
        ProvisioningStatus::Succeeded,
        ProvisioningStatus::Complete,
    ] {
        assert_eq!(
            statuses.iter().filter(|s| **s == status).count(),
            5,
            "{status}: {statuses:?}"
        );
    }
    assert_eq!(bed.recorder.isos.lock().unwrap().len(), 5);
    assert_eq!(bed.recorder.latencies.lock().unwrap().len(), 5);
    let finished = bed.recorder.finished.lock().unwrap().clone();
    assert!(
        finished
            .iter()
            .all(|(o, _)| *o == ProvisioningStatus::Succeeded)
    );
    let ops: std::collections::BTreeSet<&str> = bed
        .recorder
        .requests
        .lock()
        .unwrap()
        .iter()
        .map(|(op, _)| *op)
        .collect();
    for op in [
        "discover",
        "insert_media",
        "eject_media",
        "boot_once_cd",
        "reset",
    ] {
        assert!(ops.contains(op), "{op}: {ops:?}");
    }
}
