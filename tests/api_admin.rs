//! The admin API on a running daemon (issue 6 "API tests"): bearer auth with roles (no or
//! unknown token 401, an agent token 403), writes that fight git refused with 409 naming the
//! file, credentials probed against MAAS before they are written (422 otherwise), body limits
//! (413), and every mutation in the audit log with the token's name, role and reason —
//! including a recovery action run through the same library code as `metalform onboardings`.

use crate::daemon_support;
use crate::onboard_support;

use std::time::{Duration, Instant};

use daemon_support::{ADMIN_TOKEN, AGENT_TOKEN, DaemonBed, call};
use metalform::lifecycle::{JobKind, JobState};
use onboard_support::{Setup, SiteSetup, hostname_of};
use reqwest::Method;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_api_auth_git_ownership_credentials_recovery_and_audit() {
    let mut site = SiteSetup::generated("dc1", 91, 2, 0);
    site.config.time_scale = 60.0;
    let hosts: Vec<String> = (0..2).map(|i| hostname_of(&site.config, i)).collect();
    let d = DaemonBed::start(
        Setup::one_site(site).profile("  timeouts: {enrollment: 60s}\n"),
        "",
    )
    .await;
    let daemon = metalform::daemon::start(d.config(), Default::default())
        .await
        .unwrap();
    let base = format!("http://{}", daemon.local_addr());
    let url = |p: &str| format!("{base}/api/v1/admin{p}");

    // Auth.
    let (status, body) = call(Method::GET, url("/maas-sites"), None, None).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("unauthorized")),
        "{body}"
    );
    let (status, _) = call(
        Method::GET,
        url("/maas-sites"),
        Some("not-a-token-at-all"),
        None,
    )
    .await;
    assert_eq!(status, 401);
    let (status, body) = call(Method::GET, url("/maas-sites"), Some(AGENT_TOKEN), None).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (403, Some("forbidden")),
        "{body}"
    );
    // Wait for the first accepted revision.
    let deadline = Instant::now() + Duration::from_secs(20);
    let sites = loop {
        let (status, body) = call(Method::GET, url("/maas-sites"), Some(ADMIN_TOKEN), None).await;
        if status == 200 {
            break body;
        }
        assert!(Instant::now() < deadline, "{status} {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(sites["sites"][0]["id"], "dc1");
    assert_eq!(
        sites["sites"][0]["manifest"], "sites/dc1.yaml:1:1",
        "{sites}"
    );

    // Writes that fight git name the file to change; nothing is audited.
    let (status, body) = call(
        Method::PATCH,
        url("/maas-sites/dc1"),
        Some(ADMIN_TOKEN),
        Some(json!({"status": "disabled"})),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"], "owned_by_git");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("change spec.status in sites/dc1.yaml"),
        "{body}"
    );
    let (status, body) = call(
        Method::DELETE,
        url(&format!(
            "/maas-sites/dc1/roce-assignments/{}:enp28s0np0",
            hosts[0]
        )),
        Some(ADMIN_TOKEN),
        None,
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("owned_by_git")),
        "{body}"
    );
    assert!(
        body["message"].as_str().unwrap().contains("nodes/dc1.yaml"),
        "{body}"
    );
    let (status, body) = call(
        Method::POST,
        url("/onboardings"),
        Some(ADMIN_TOKEN),
        Some(json!({"hostname": "x"})),
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("owned_by_git")),
        "{body}"
    );
    let (_, roce) = call(
        Method::GET,
        url("/maas-sites/dc1/roce-assignments"),
        Some(ADMIN_TOKEN),
        None,
    )
    .await;
    assert_eq!(roce["items"].as_array().unwrap().len(), 2, "{roce}");
    assert!(
        d.bed
            .store
            .audit_log("site", "dc1")
            .await
            .unwrap()
            .is_empty()
    );

    // Credentials: a key MAAS refuses is 422 and writes nothing; the real key is written.
    let secrets_before = std::fs::read_to_string(&d.bed.secrets_path).unwrap();
    let (status, body) = call(
        Method::POST,
        url("/maas-sites/dc1/credentials"),
        Some(ADMIN_TOKEN),
        Some(json!({"maas_api_key": "wrong-consumer:wrong-token-key:wrong-token-secret", "reason": "rotation"})),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"], "maas_probe_failed");
    assert_eq!(
        std::fs::read_to_string(&d.bed.secrets_path).unwrap(),
        secrets_before
    );
    let key = d.bed.sim("dc1").api_key().expose().to_owned();
    let big = "x".repeat(70 * 1024);
    let (status, body) = call(
        Method::POST,
        url("/maas-sites/dc1/credentials"),
        Some(ADMIN_TOKEN),
        Some(json!({"maas_api_key": key, "reason": big})),
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (413, Some("payload_too_large")),
        "{body}"
    );
    let (status, body) = call(
        Method::POST,
        url("/maas-sites/dc1/credentials"),
        Some(ADMIN_TOKEN),
        Some(json!({"maas_api_key": key, "power": {"user": "root", "pass": "new-bmc-pass"}, "reason": "quarterly rotation"})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        !body.to_string().contains("new-bmc-pass"),
        "no secret echoed: {body}"
    );
    let secrets: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&d.bed.secrets_path).unwrap()).unwrap();
    assert_eq!(secrets["kv/dc1/power/default"]["pass"], "new-bmc-pass");
    assert_eq!(secrets["kv/dc1/api-token"]["token"], key.as_str());
    let audit = d.bed.store.audit_log("site", "dc1").await.unwrap();
    assert_eq!(audit.len(), 1, "{audit:#?}");
    assert_eq!(
        (
            audit[0].actor.as_str(),
            audit[0].role.as_str(),
            audit[0].action.as_str()
        ),
        ("ops-alice", "admin", "site.credentials_written")
    );
    assert_eq!(audit[0].reason.as_deref(), Some("quarterly rotation"));
    assert!(!audit[0].details.to_string().contains("new-bmc-pass"));
    let (status, body) = call(
        Method::POST,
        url("/maas-sites/dc1/probe"),
        Some(ADMIN_TOKEN),
        None,
    )
    .await;
    assert_eq!((status, body["ok"].as_bool()), (200, Some(true)), "{body}");

    // Recovery: freeze a running onboarding, then resume it; both audited by the store.
    let deadline = Instant::now() + Duration::from_secs(30);
    let job = loop {
        let (_, list) = call(
            Method::GET,
            url(&format!("/onboardings?hostname={}", hosts[1])),
            Some(ADMIN_TOKEN),
            None,
        )
        .await;
        if let Some(job) = list["onboardings"]
            .as_array()
            .and_then(|a| a.first())
            .filter(|j| j["state"] == "running")
        {
            break job["id"].as_str().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "no running onboarding: {list}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (status, body) = call(
        Method::POST,
        url(&format!("/onboardings/{job}/mark-manual-intervention")),
        Some(ADMIN_TOKEN),
        Some(json!({})),
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("bad_request")),
        "reason required: {body}"
    );
    let (status, body) = call(
        Method::POST,
        url(&format!("/onboardings/{job}/mark-manual-intervention")),
        Some(ADMIN_TOKEN),
        Some(json!({"reason": "checking the BMC cabling"})),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["onboarding"]["state"], "failed_manual_intervention");
    let (status, body) = call(
        Method::POST,
        url(&format!("/onboardings/{job}/cancel-everything")),
        Some(ADMIN_TOKEN),
        Some(json!({"reason": "x"})),
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("not_found")),
        "{body}"
    );
    let (status, body) = call(
        Method::POST,
        url(&format!("/onboardings/{job}/resume")),
        Some(ADMIN_TOKEN),
        Some(json!({"reason": "cabling fine"})),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["execution"], "queued");
    let pairs: Vec<(&str, &str)> = hosts.iter().map(|h| ("dc1", h.as_str())).collect();
    d.converged(&pairs, Duration::from_secs(90)).await;
    let job_id: uuid::Uuid = job.parse().unwrap();
    let finished = d.bed.store.job(JobKind::Onboarding, job_id).await.unwrap();
    assert_eq!(finished.state, JobState::Completed);
    let audit = d.bed.store.audit_log("onboarding", &job).await.unwrap();
    let actions: Vec<(&str, &str, Option<&str>)> = audit
        .iter()
        .filter(|a| a.actor == "ops-alice")
        .map(|a| (a.action.as_str(), a.role.as_str(), a.reason.as_deref()))
        .collect();
    assert_eq!(actions.len(), 2, "{audit:#?}");
    assert!(actions.iter().all(|(_, role, _)| *role == "admin"));
    assert_eq!(actions[0].2, Some("checking the BMC cabling"));
    assert_eq!(actions[1].2, Some("cabling fine"));
    let (status, body) = call(
        Method::POST,
        url(&format!("/onboardings/{job}/retry")),
        Some(ADMIN_TOKEN),
        Some(json!({"reason": "again"})),
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("invalid_recovery")),
        "{body}"
    );

    // An immediate reconcile is audited too.
    let (status, body) = call(
        Method::POST,
        url("/reconciliation/run"),
        Some(ADMIN_TOKEN),
        Some(json!({"site": "dc1", "reason": "after the rotation"})),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let audit = d
        .bed
        .store
        .audit_log("reconciliation", "dc1")
        .await
        .unwrap();
    assert_eq!(
        (
            audit.len(),
            audit[0].actor.as_str(),
            audit[0].reason.as_deref()
        ),
        (1, "ops-alice", Some("after the rotation"))
    );
    let (status, body) = call(
        Method::POST,
        url("/reconciliation/run"),
        Some(ADMIN_TOKEN),
        Some(json!({"site": "dc9"})),
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("not_found")),
        "{body}"
    );
    daemon.shutdown().await;
}
