//! Redfish provisioning end to end on simulated BMCs (seed 003 "Acceptance Criteria"; issue
//! 14): a job requested through the API runs queued → provisioning → succeeded | failed →
//! complete on the provisioning workers — task ISO, CD1 and CD2 mounted, one-time boot from
//! CD, reset, the maintenance OS's report on the webhook, cleanup — with terminal errors and
//! the stuck timeout failing the job into cleanup, a killed controller taken over without a
//! second mount or reset, and two controllers never running one job. Hermetic: the built-in ISO
//! writer, the simulated BMCs of `metalform sim`.

use crate::provisioning_support;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failure_report_is_cleaned_up_and_completes() {
    let bed = Bed::start(Options::default()).await;
    let serial = bed.serial(0);
    bed.sims.set_maintenance(
        &serial,
        MaintenanceBehaviour::Fail("bootloader-linux.service".into()),
    );
    let (_, body) = bed.post_job(&serial, recipe()).await;
    let id = body["job_id"].as_str().unwrap().to_owned();
    let job = bed.complete(&id, LIMIT).await;
    assert_eq!(
        failed_step(&job).as_deref(),
        Some("bootloader-linux.service")
    );
    let text = bed.events(&id).await.join("\n");
    assert!(
        text.contains("error the maintenance OS reported a failure at bootloader-linux.service"),
        "{text}"
    );
    assert!(text.contains("cleanup: ejected"), "{text}");
    assert!(text.contains("cleanup: host rebooted"), "{text}");
    let finished = bed.recorder.finished.lock().unwrap().clone();
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0].0, ProvisioningStatus::Failed);
    // The report came once; a repeat of it is answered and changes nothing.
    let before = bed.events(&id).await;
    let response = bed
        .http
        .post(
            bed.controller_url()
                .join(&format!("api/v1/status-webhook/{serial}"))
                .unwrap(),
        )
        .header("X-Webhook-Secret", provisioning_support::WEBHOOK_SECRET)
        .json(&json!({"status": "failed", "failed_step": "bootloader-linux.service"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        response.json::<serde_json::Value>().await.unwrap(),
        json!({"ok": true})
    );
    assert_eq!(bed.events(&id).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_terminal_redfish_error_fails_the_job_and_cleanup_still_runs() {
    let bed = Bed::start(Options::default()).await;
    let serial = bed.serial(0);
    bed.sims.inject(
        &serial,
        FaultRule::parse("insert:status=400,count=1").unwrap(),
    );
    let (_, body) = bed.post_job(&serial, recipe()).await;
    let id = body["job_id"].as_str().unwrap().to_owned();
    let job = bed.complete(&id, LIMIT).await;
    assert_eq!(failed_step(&job).as_deref(), Some("mount_maintenance"));
    let text = bed.events(&id).await.join("\n");
    assert!(
        text.contains("error failed: insert_media on ")
            && text.contains("the BMC refused (HTTP 400)"),
        "{text}"
    );
    // Nothing after the failed step was done, cleanup was.
    assert!(!text.contains("host reset ("), "{text}");
    assert!(text.contains("cleanup: host rebooted"), "{text}");
    assert_eq!(bed.media_calls(&serial).0, 0, "no insert took");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_stuck_timeout_fails_a_silent_job_and_cleans_up() {
    let bed = Bed::start(Options {
        stuck_timeout: Duration::from_secs(2),
        ..Options::default()
    })
    .await;
    let serial = bed.serial(0);
    bed.sims
        .set_maintenance(&serial, MaintenanceBehaviour::Silent);
    let (_, body) = bed.post_job(&serial, recipe()).await;
    let id = body["job_id"].as_str().unwrap().to_owned();
    let job = bed.complete(&id, LIMIT).await;
    assert_eq!(failed_step(&job).as_deref(), Some("await_webhook"));
    let text = bed.events(&id).await.join("\n");
    assert!(
        text.contains("error failed: webhook timeout: no report from the maintenance OS within 2s"),
        "{text}"
    );
    assert!(text.contains("cleanup: ejected"), "{text}");
    // A late report finds no provisioning job.
    let response = bed
        .http
        .post(
            bed.controller_url()
                .join(&format!("api/v1/status-webhook/{serial}"))
                .unwrap(),
        )
        .header("X-Webhook-Secret", provisioning_support::WEBHOOK_SECRET)
        .json(&json!({"status": "success"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_controller_is_taken_over_without_a_second_mount_or_reset() {
    let mut bed = Bed::start(Options {
        lease_ttl: Duration::from_secs(1),
        // The maintenance OS runs 1.5 s: long enough to kill the controller while it waits.
        time_scale: 20.0,
        ..Options::default()
    })
    .await;
    let serial = bed.serial(0);
    let (_, body) = bed.post_job(&serial, recipe()).await;
    let id = body["job_id"].as_str().unwrap().to_owned();
    bed.at_stage(&id, "await_webhook", LIMIT).await;
    // kill -9, and a restart where the maintenance OS reports.
    bed.restart_controller("worker-b").await;
    let job = bed.complete(&id, LIMIT).await;
    assert_eq!(failed_step(&job), None);
    let text = bed.events(&id).await.join("\n");
    assert!(
        text.contains("taken over by worker worker-b: the lease of worker-a expired"),
        "{text}"
    );
    assert!(
        text.contains("info the maintenance OS reported success"),
        "{text}"
    );
    // One insert per drive, and exactly two restarts (into the maintenance OS, and the
    // cleanup reboot): graceful shutdown and power-on each.
    let (inserts, _, resets) = bed.media_calls(&serial);
    assert_eq!(inserts, 2, "{:?}", bed.sims.requests(&serial));
    assert_eq!(resets, 4, "{:?}", bed.sims.requests(&serial));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_controllers_never_run_one_job() {
    let mut bed = Bed::start(Options {
        bmcs: 10,
        vendor: Some(Vendor::Generic),
        concurrency: 3,
        ..Options::default()
    })
    .await;
    let other = bed
        .controller("worker-b", "127.0.0.1:0".parse().unwrap())
        .await;
    let mut ids = Vec::new();
    for i in 0..10 {
        let (status, body) = bed.post_job(&bed.serial(i), recipe()).await;
        assert_eq!(status, 202);
        ids.push(body["job_id"].as_str().unwrap().to_owned());
    }
    let mut pickers = std::collections::BTreeSet::new();
    for (i, id) in ids.iter().enumerate() {
        bed.complete(id, LIMIT).await;
        let events = bed.events(id).await;
        let picks: Vec<&String> = events.iter().filter(|e| e.contains("picked by")).collect();
        assert_eq!(picks.len(), 1, "{events:#?}");
        assert!(
            !events.iter().any(|e| e.contains("taken over")),
            "{events:#?}"
        );
        pickers.insert(picks[0].clone());
        assert_eq!(bed.media_calls(&bed.serial(i)).0, 2);
    }
    other.shutdown().await;
    bed.controller.take().unwrap().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_input_gets_typed_errors_and_changes_nothing() {
    let bed = Bed::start(Options {
        run_workers: false,
        ..Options::default()
    })
    .await;
    let serial = bed.serial(0);
    let base = bed.controller_url();
    let jobs = |bed: &Bed| {
        let store = bed.store.clone();
        async move {
            store
                .list_provisioning(&Default::default())
                .await
                .unwrap()
                .len()
        }
    };
    let serial_before = bed.store.serial().await.unwrap();

    // Invalid recipe: 400 with every error and its JSON path.
    let (status, body) = bed
        .post_job(
            &serial,
            json!({"task_target": "install", "target_disk": "/dev/sda",
                   "partition_layout": [{"size": "lots", "type_guid": "ef00", "format": "vfat"}],
                   "surprise": 1}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"], "invalid_recipe");
    let paths: Vec<&str> = body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        ["$.partition_layout[0].size", "$.surprise", "$.task_target"],
        "{body}"
    );
    assert_eq!(body["message"], "the recipe is not valid: 3 problem(s)");
    assert_eq!(
        body["errors"][1]["message"],
        "unknown field `surprise` (known fields: $schema, task_target, target_disk, oci_url, \
         user_data, partition_layout, assets)"
    );
    // Unknown serial: 404.
    let (status, body) = bed.post_job("NO-SUCH-SERIAL", recipe()).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("unknown_server")),
        "{body}"
    );
    // Missing fields, wrong types, unknown fields, malformed JSON, not JSON.
    for (sent, want) in [
        (json!({"recipe": recipe()}), "`server_serial` is required"),
        (json!({"server_serial": serial}), "`recipe` is required"),
        (
            json!({"server_serial": 7, "recipe": recipe()}),
            "`server_serial` must be a string, not a number",
        ),
        (
            json!({"server_serial": serial, "recipe": "x"}),
            "`recipe` must be an object, not a string",
        ),
        (
            json!({"server_serial": serial, "recipe": recipe(), "extra": 1}),
            "unknown field `extra`; expected server_serial, recipe",
        ),
    ] {
        let (status, body) = bed
            .call(reqwest::Method::POST, "api/v1/jobs", Some(sent))
            .await;
        assert_eq!(
            (status, body["message"].as_str()),
            (400, Some(want)),
            "{body}"
        );
    }
    let raw = bed
        .http
        .post(base.join("api/v1/jobs").unwrap())
        .bearer_auth(provisioning_support::TOKEN)
        .header("Content-Type", "application/json")
        .body("{\"server_serial\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status().as_u16(), 400);
    let body: serde_json::Value = raw.json().await.unwrap();
    assert_eq!(body["error"], "bad_request");
    let raw = bed
        .http
        .post(base.join("api/v1/jobs").unwrap())
        .bearer_auth(provisioning_support::TOKEN)
        .header("Content-Type", "text/plain")
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status().as_u16(), 415);
    // Auth: none, wrong, an agent's token; Basic with the token's name works, another name not.
    let post = |auth: Option<(&str, Option<&str>)>| {
        let mut request = bed
            .http
            .post(base.join("api/v1/jobs").unwrap())
            .json(&json!({"server_serial": serial, "recipe": recipe()}));
        match auth {
            Some((token, None)) => request = request.bearer_auth(token),
            Some((token, Some(name))) => request = request.basic_auth(name, Some(token)),
            None => {}
        }
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let header = response
                .headers()
                .get("www-authenticate")
                .map(|v| v.to_str().unwrap().to_owned());
            (
                status,
                header,
                response.json::<serde_json::Value>().await.unwrap(),
            )
        }
    };
    let (status, header, body) = post(None).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("unauthorized"))
    );
    assert!(header.unwrap().contains("Basic"));
    assert_eq!(post(Some(("wrong-token-0123456789", None))).await.0, 401);
    let (status, _, body) = post(Some((provisioning_support::AGENT_TOKEN, None))).await;
    assert_eq!((status, body["error"].as_str()), (403, Some("forbidden")));
    assert_eq!(
        post(Some((provisioning_support::TOKEN, Some("mallory"))))
            .await
            .0,
        401
    );
    assert_eq!(jobs(&bed).await, 0);
    assert_eq!(
        bed.store.serial().await.unwrap(),
        serial_before,
        "nothing changed"
    );

    // Basic auth with the token's name is accepted; the same idempotency key again answers
    // 200 with the same job; another recipe under it is a conflict; another job is refused
    // while this one is active.
    let keyed = |recipe: serde_json::Value| {
        bed.http
            .post(base.join("api/v1/jobs").unwrap())
            .basic_auth("ops", Some(provisioning_support::TOKEN))
            .header("Idempotency-Key", "ticket-42")
            .json(&json!({"server_serial": serial, "recipe": recipe}))
            .send()
    };
    let first = keyed(recipe()).await.unwrap();
    assert_eq!(first.status().as_u16(), 202);
    let first: serde_json::Value = first.json().await.unwrap();
    let again = keyed(recipe()).await.unwrap();
    assert_eq!(again.status().as_u16(), 200);
    let again: serde_json::Value = again.json().await.unwrap();
    assert_eq!(again["job_id"], first["job_id"]);
    let mut other = recipe();
    other["target_disk"] = json!("/dev/sdb");
    let conflict = keyed(other).await.unwrap();
    assert_eq!(conflict.status().as_u16(), 409);
    assert_eq!(
        conflict.json::<serde_json::Value>().await.unwrap()["error"],
        "idempotency_conflict"
    );
    let (status, body) = bed.post_job(&serial, recipe()).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("server_busy")),
        "{body}"
    );
    assert_eq!(jobs(&bed).await, 1);

    // Lists and reads.
    let (status, list) = bed
        .call(
            reqwest::Method::GET,
            &format!("api/v1/jobs?status=queued&server_serial={serial}"),
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(list["jobs"].as_array().unwrap().len(), 1);
    let (status, body) = bed
        .call(reqwest::Method::GET, "api/v1/jobs?status=done", None)
        .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("bad_request")),
        "{body}"
    );
    let (status, body) = bed
        .call(
            reqwest::Method::GET,
            &format!("api/v1/jobs/{}", uuid::Uuid::nil()),
            None,
        )
        .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("not_found")),
        "{body}"
    );
    let (status, _) = bed
        .call(reqwest::Method::GET, "api/v1/jobs/not-a-uuid", None)
        .await;
    assert_eq!(status, 404);

    // The webhook: no secret, a wrong one, an invalid payload, a serial with no provisioning
    // job (this one is queued).
    let webhook = |secret: Option<&str>, body: serde_json::Value, serial: &str| {
        let mut request = bed
            .http
            .post(
                base.join(&format!("api/v1/status-webhook/{serial}"))
                    .unwrap(),
            )
            .json(&body);
        if let Some(secret) = secret {
            request = request.header("X-Webhook-Secret", secret);
        }
        async move {
            let response = request.send().await.unwrap();
            (
                response.status().as_u16(),
                response.json::<serde_json::Value>().await.unwrap(),
            )
        }
    };
    let good = Some(provisioning_support::WEBHOOK_SECRET);
    let ok = json!({"status": "success"});
    let serial_before = bed.store.serial().await.unwrap();
    let (status, body) = webhook(None, ok.clone(), &serial).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("unauthorized"))
    );
    let (status, body) = webhook(Some("not-the-secret"), ok.clone(), &serial).await;
    assert_eq!((status, body["error"].as_str()), (403, Some("forbidden")));
    for bad in [
        json!({"status": "done"}),
        json!({}),
        json!({"status": "success", "failed_step": "x"}),
        json!({"status": "failed", "why": "x"}),
        json!({"status": "failed", "failed_step": 3}),
    ] {
        let (status, body) = webhook(good, bad.clone(), &serial).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("invalid_payload")),
            "{bad}: {body}"
        );
    }
    let (status, body) = webhook(good, ok.clone(), &serial).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("no_active_job")),
        "{body}"
    );
    let (status, _) = webhook(good, ok.clone(), "NO-SUCH-SERIAL").await;
    assert_eq!(status, 404);
    assert_eq!(
        bed.store.serial().await.unwrap(),
        serial_before,
        "nothing changed"
    );
    let job = bed.job(first["job_id"].as_str().unwrap()).await;
    assert_eq!(job.provisioning_status(), Some(ProvisioningStatus::Queued));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn task_isos_are_served_signed_and_ranged_and_collected_after_retention() {
    let bed = Bed::start(Options::default()).await;
    let serial = bed.serial(0);
    let (_, body) = bed.post_job(&serial, recipe()).await;
    let id: uuid::Uuid = body["job_id"].as_str().unwrap().parse().unwrap();
    let job = bed.complete(&id.to_string(), LIMIT).await;
    let controller = bed.controller.as_ref().unwrap();
    let url = controller
        .provisioner
        .task_iso_url(id, chrono::Utc::now() + chrono::Duration::hours(1));
    let image = bed.http.get(url.clone()).send().await.unwrap();
    assert_eq!(image.status().as_u16(), 200);
    assert_eq!(
        image.headers()["content-type"].to_str().unwrap(),
        "application/x-iso9660-image"
    );
    let bytes = image.bytes().await.unwrap();
    let recorded = metalform::stages::provision::ProvisionFacts::from_details(&job.stage_details);
    use metalform::stages::JournalFacts;
    use sha2::Digest;
    assert_eq!(
        hex::encode(sha2::Sha256::digest(&bytes)),
        recorded.iso.unwrap().sha256
    );
    let past = bed
        .http
        .get(url.clone())
        .header("Range", format!("bytes={}-", bytes.len()))
        .send()
        .await
        .unwrap();
    assert_eq!(past.status().as_u16(), 416);
    let mut altered = url.clone();
    altered.set_query(Some(
        &url.query().unwrap().replace("signature=", "signature=00"),
    ));
    let forbidden = bed.http.get(altered).send().await.unwrap();
    assert_eq!(forbidden.status().as_u16(), 403);
    let expired = controller
        .provisioner
        .task_iso_url(id, chrono::Utc::now() - chrono::Duration::seconds(1));
    assert_eq!(
        bed.http
            .get(expired)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        403
    );
    // Complete, and kept for the retention window (7 days here): collection keeps it.
    let report = controller.workers.collect_garbage().await.unwrap();
    assert!(report.removed.is_empty());
    assert!(controller.provisioner.media.iso_path(id).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_iso_build_tool_fails_the_job_with_its_stderr() {
    // A stand-in for a broken xorriso install: it complains and exits 5.
    let tools = tempfile::tempdir().unwrap();
    let tool = tools.path().join("xorriso");
    std::fs::write(
        &tool,
        "#!/bin/sh\necho 'xorriso : FAILURE : Cannot determine attributes of source file' >&2\nexit 5\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bed = Bed::start(Options {
        iso_tool: metalform::provider::redfish::iso::IsoTool::Xorriso,
        xorriso: Some(tool),
        ..Options::default()
    })
    .await;
    let serial = bed.serial(0);
    let (_, body) = bed.post_job(&serial, recipe()).await;
    let id = body["job_id"].as_str().unwrap().to_owned();
    let job = bed.complete(&id, LIMIT).await;
    assert_eq!(failed_step(&job).as_deref(), Some("build_task_iso"));
    let events = bed.events(&id).await;
    let text = events.join("\n");
    assert!(
        text.contains("Cannot determine attributes of source file"),
        "xorriso's stderr is in the events:\n{text}"
    );
    // Terminal: one attempt, and nothing was mounted.
    assert_eq!(
        events
            .iter()
            .filter(|e| e.contains("build_task_iso started"))
            .count(),
        1,
        "{text}"
    );
    assert_eq!(bed.media_calls(&serial).0, 0);
}
