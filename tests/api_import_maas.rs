//! `POST /api/v1/admin/maas-sites/{id}/import` (issue 15): the route of `metalform
//! import-maas` on a running daemon — admin only, the NodeGroup of the site's machines in the
//! answer (logins other than the default as Vault references, stored with `write_secrets`),
//! audited; a MAAS answer it cannot read is a 422 naming the endpoint, with nothing stored and
//! nothing audited.

use crate::daemon_support;
use crate::onboard_support;

use std::time::{Duration, Instant};

use daemon_support::{ADMIN_TOKEN, AGENT_TOKEN, DaemonBed, call};
use metalform::sim::InitialState;
use onboard_support::{Setup, SiteSetup};
use reqwest::Method;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_import_route_answers_the_manifest_stores_logins_and_audits() {
    let mut site = SiteSetup::generated("dc1", 61, 2, 0);
    for m in &mut site.config.machines {
        m.initial = InitialState::Deployed;
    }
    site.config.machines[0].power_pass = "other-bmc-pass".into();
    site.declared = Some(vec![1]);
    let d = DaemonBed::start(Setup::one_site(site), "").await;
    let daemon = metalform::daemon::start(d.config(), Default::default())
        .await
        .unwrap();
    let url = format!(
        "http://{}/api/v1/admin/maas-sites/dc1/import",
        daemon.local_addr()
    );
    let body = json!({"sku": "mi300x.192g.8gpu", "gpus": 8, "write_secrets": true, "reason": "adopt hall C"});

    // The first accepted revision must be there.
    let deadline = Instant::now() + Duration::from_secs(20);
    let answer = loop {
        let (status, answer) = call(
            Method::POST,
            url.clone(),
            Some(ADMIN_TOKEN),
            Some(body.clone()),
        )
        .await;
        if status != 503 {
            assert_eq!(status, 200, "{answer}");
            break answer;
        }
        assert!(Instant::now() < deadline, "{answer}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let manifest = answer["manifest"].as_str().unwrap();
    assert!(manifest.contains("kind: NodeGroup"), "{manifest}");
    assert!(manifest.contains("hostname: gpu00001"), "{manifest}");
    assert!(manifest.contains("hostname: gpu00002"), "{manifest}");
    assert!(!answer.to_string().contains("other-bmc-pass"), "{answer}");
    assert_eq!(
        answer["secrets_written"],
        json!(["kv/dc1/power/imported/gpu00001"])
    );
    let secrets: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&d.bed.secrets_path).unwrap()).unwrap();
    assert_eq!(
        secrets["kv/dc1/power/imported/gpu00001"]["pass"],
        "other-bmc-pass"
    );
    let audit = d.bed.store.audit_log("site", "dc1").await.unwrap();
    assert_eq!(audit.len(), 1, "{audit:#?}");
    assert_eq!(audit[0].action, "site.imported_from_maas");
    assert_eq!(audit[0].reason.as_deref(), Some("adopt hall C"));
    assert!(!audit[0].details.to_string().contains("other-bmc-pass"));

    // Roles and input.
    let (status, _) = call(
        Method::POST,
        url.clone(),
        Some(AGENT_TOKEN),
        Some(body.clone()),
    )
    .await;
    assert_eq!(status, 403);
    let (status, answer) = call(
        Method::POST,
        url.clone(),
        Some(ADMIN_TOKEN),
        Some(json!({"sku": "x", "gpus": 8, "secrets": true})),
    )
    .await;
    assert_eq!(status, 400, "{answer}");

    // A half-read MAAS answer: 422 naming the endpoint; nothing stored, nothing audited.
    d.bed
        .sim("dc1")
        .set_faults("machines.power_parameters:answer=truncated")
        .unwrap();
    let secrets_before = std::fs::read_to_string(&d.bed.secrets_path).unwrap();
    let (status, answer) = call(Method::POST, url.clone(), Some(ADMIN_TOKEN), Some(body)).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"], "import_failed");
    let message = answer["message"].as_str().unwrap_or_default().to_owned() + &answer.to_string();
    assert!(message.contains("truncated"), "{answer}");
    assert!(message.contains("/MAAS/api/2.0/machines/"), "{answer}");
    assert_eq!(
        std::fs::read_to_string(&d.bed.secrets_path).unwrap(),
        secrets_before
    );
    assert_eq!(d.bed.store.audit_log("site", "dc1").await.unwrap().len(), 1);
    daemon.shutdown().await;
}
