//! The decommission routes of the admin API (seed 000 §5.7, issue 6 items 3 and 5) on a running
//! daemon with the simulator: auth (401, 403), a soft reset and a storage cleanup requested
//! over HTTP run by the daemon to completion (node back active, job completed, audited with the
//! token's name, role and reason), a second request while one is open refused 409, cancel and
//! retry with and without a reason, reimage / decommission / retire refused as owned by git
//! naming the node's manifest, unknown ids 404, and the `metalform_jobs` gauge counting
//! decommission jobs.

use crate::daemon_support;
use crate::onboard_support;

use std::time::{Duration, Instant};

use daemon_support::{ADMIN_TOKEN, AGENT_TOKEN, DaemonBed, call};
use metalform::lifecycle::NodeState;
use metalform::sim::{TaskFault, TaskFaultMode};
use metalform::store::AuditRecord;
use onboard_support::{Setup, SiteSetup, hostname_of};
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

fn fault(task: &str, machine: &str, times: Option<u32>, mode: TaskFaultMode) -> TaskFault {
    TaskFault {
        task: task.into(),
        machine: Some(machine.into()),
        times,
        mode,
        message: Some(format!("{task} broke (test)")),
    }
}

struct Api {
    base: String,
}

impl Api {
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        call(
            method,
            format!("{}/api/v1/admin{path}", self.base),
            Some(ADMIN_TOKEN),
            body,
        )
        .await
    }

    /// Poll the decommission until `done` holds for its state, or fail with the job.
    async fn wait_job(&self, id: &str, done: impl Fn(&str) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let (status, body) = self
                .call(Method::GET, &format!("/decommissions/{id}"), None)
                .await;
            assert_eq!(status, 200, "{body}");
            if done(body["decommission"]["state"].as_str().unwrap()) {
                return body;
            }
            assert!(Instant::now() < deadline, "decommission {id}: {body:#}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn audited<'a>(rows: &'a [AuditRecord], action: &str) -> &'a AuditRecord {
    rows.iter()
        .find(|r| r.action == action)
        .unwrap_or_else(|| panic!("no audit row {action}: {rows:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decommission_routes_run_soft_reset_and_storage_cleanup_retry_cancel_and_refuse() {
    let mut site = SiteSetup::generated("dc1", 93, 2, 0);
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
    let api = Api { base: base.clone() };
    let reset_url = |node: &str| format!("{base}/api/v1/admin/nodes/{node}/soft-reset");

    // Auth: no token 401, an agent token 403 — on reads and on requests.
    let nil = Uuid::nil().to_string();
    for (method, url) in [
        (Method::GET, format!("{base}/api/v1/admin/decommissions")),
        (Method::POST, reset_url(&nil)),
    ] {
        let (status, body) = call(method.clone(), url.clone(), None, None).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (401, Some("unauthorized"))
        );
        let (status, body) = call(method, url, Some(AGENT_TOKEN), None).await;
        assert_eq!((status, body["error"].as_str()), (403, Some("forbidden")));
    }

    d.converged(
        &[("dc1", hosts[0].as_str()), ("dc1", hosts[1].as_str())],
        Duration::from_secs(120),
    )
    .await;
    let node = |i: usize| {
        let store = d.bed.store.clone();
        let host = hosts[i].clone();
        async move { store.find_node("dc1", &host).await.unwrap().unwrap() }
    };
    let (a, b) = (node(0).await, node(1).await);

    // Unknown ids: 404; malformed ids: 400.
    let unknown = Uuid::new_v4().to_string();
    let reason = json!({"reason": "tenant turnover (TKT-1)"});
    for (method, path, body) in [
        (Method::GET, format!("/decommissions/{unknown}"), None),
        (
            Method::POST,
            format!("/decommissions/{unknown}/retry"),
            Some(reason.clone()),
        ),
        (
            Method::POST,
            format!("/decommissions/{unknown}/cancel"),
            Some(reason.clone()),
        ),
        (
            Method::POST,
            format!("/nodes/{unknown}/soft-reset"),
            Some(reason.clone()),
        ),
        (
            Method::POST,
            format!("/nodes/{unknown}/storage-cleanup"),
            Some(reason.clone()),
        ),
        (Method::POST, format!("/nodes/{unknown}/reimage"), None),
    ] {
        let (status, body) = api.call(method, &path, body).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (404, Some("not_found")),
            "{path}: {body}"
        );
    }
    let (status, body) = api.call(Method::GET, "/decommissions/c07u43", None).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["message"],
        "`c07u43` is not a decommission id (a UUID)"
    );
    let (status, body) = api
        .call(Method::GET, "/decommissions?status=broken", None)
        .await;
    assert_eq!((status, body["error"].as_str()), (400, Some("bad_request")));

    // Reimage, full decommission and retire are declarative: refused, naming the manifest.
    for (segment, change) in [
        ("reimage", "bump `reimage.generation`"),
        ("decommission", "set `lifecycle: decommissioned`"),
        ("retire", "set `lifecycle: retired`"),
    ] {
        let (status, body) = api
            .call(
                Method::POST,
                &format!("/nodes/{}/{segment}", a.id),
                Some(reason.clone()),
            )
            .await;
        assert_eq!(status, 409, "{body}");
        assert_eq!(body["error"], "owned_by_git");
        let message = body["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!(
                "{segment} of dc1/{} is declared in the manifests: {change}",
                hosts[0]
            )) && message.contains("nodes/dc1.yaml:"),
            "{message}"
        );
        assert_eq!(
            body["hint"],
            "change nodes/dc1.yaml in the fleet repository and commit; the daemon applies it"
        );
    }

    // A request without a reason, or with an unknown scope: 400, nothing recorded.
    let (status, body) = api
        .call(Method::POST, &format!("/nodes/{}/soft-reset", a.id), None)
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["message"], "this request needs a JSON body");
    let (status, body) = api
        .call(
            Method::POST,
            &format!("/nodes/{}/soft-reset", a.id),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["message"],
        "`reason` is required: every recovery action is audited"
    );
    let (status, body) = api
        .call(
            Method::POST,
            &format!("/nodes/{}/storage-cleanup", a.id),
            Some(json!({"reason": "x", "scope": "nfs"})),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["message"], "storage cleanup scope `nfs` is not known");
    let (_, list) = api.call(Method::GET, "/decommissions", None).await;
    assert_eq!(list["decommissions"], json!([]), "{list}");

    // A soft reset through the API: the daemon runs it, the node is back active.
    let (status, body) = api
        .call(
            Method::POST,
            &format!("/nodes/{}/soft-reset", a.id),
            Some(json!({"reason": "tenant turnover (TKT-1)", "storage_cleanup": "local"})),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["execution"], "queued");
    assert_eq!(body["decommission"]["spec"]["mode"], "soft_reset", "{body}");
    let reset = body["decommission"]["id"].as_str().unwrap().to_owned();
    let done = api.wait_job(&reset, |s| s == "completed").await;
    let stages: Vec<&str> = done["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["stage"].as_str().unwrap())
        .collect();
    assert!(
        stages.contains(&"cleanup_storage") && stages.contains(&"enable_node"),
        "{done:#}"
    );
    assert_eq!(node(0).await.status, NodeState::Active);
    let rows = d.bed.store.audit_log("decommission", &reset).await.unwrap();
    let row = audited(&rows, "decommission.request_soft_reset");
    assert_eq!(
        (row.actor.as_str(), row.role.as_str(), row.reason.as_deref()),
        ("ops-alice", "admin", Some("tenant turnover (TKT-1)"))
    );

    // A storage cleanup whose agent never answers stays open: a second request is refused.
    d.bed.sim("dc1").with_world(|w| {
        w.replace_task_faults(vec![fault(
            "node.storage_cleanup",
            &hosts[1],
            None,
            TaskFaultMode::Hang,
        )])
    });
    let (status, body) = api
        .call(
            Method::POST,
            &format!("/nodes/{}/storage-cleanup", b.id),
            Some(json!({"reason": "weka tenant left", "scope": "weka"})),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let stuck = body["decommission"]["id"].as_str().unwrap().to_owned();
    api.wait_job(&stuck, |s| s == "running").await;
    let (status, body) = api
        .call(
            Method::POST,
            &format!("/nodes/{}/soft-reset", b.id),
            Some(json!({"reason": "again"})),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"], "decommission_open", "{body}");
    let (_, open) = api
        .call(
            Method::GET,
            &format!("/decommissions?node_id={}&open=true", b.id),
            None,
        )
        .await;
    assert_eq!(open["decommissions"].as_array().unwrap().len(), 1, "{open}");

    // Cancel: a reason is required; then the job ends cancelled and the node is back.
    let (status, body) = api
        .call(
            Method::POST,
            &format!("/decommissions/{stuck}/cancel"),
            None,
        )
        .await;
    assert_eq!((status, body["error"].as_str()), (400, Some("bad_request")));
    let (status, body) = api
        .call(
            Method::POST,
            &format!("/decommissions/{stuck}/cancel"),
            Some(json!({"reason": "the tenant stays"})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["prior_state"], "running");
    assert_eq!(body["decommission"]["state"], "cancelled", "{body}");
    assert_eq!(node(1).await.status, NodeState::Active);
    let rows = d.bed.store.audit_log("decommission", &stuck).await.unwrap();
    let row = audited(&rows, "decommission.cancel");
    assert_eq!(
        (row.actor.as_str(), row.role.as_str(), row.reason.as_deref()),
        ("ops-alice", "admin", Some("the tenant stays"))
    );
    // A finished job takes no cancel.
    let (status, body) = api
        .call(
            Method::POST,
            &format!("/decommissions/{reset}/cancel"),
            Some(json!({"reason": "late"})),
        )
        .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("job_state")),
        "{body}"
    );

    // Validation finds residue once: manual intervention; retry (reason required) completes.
    d.bed.sim("dc1").with_world(|w| {
        w.replace_task_faults(vec![fault(
            "node.validate_clean",
            &hosts[1],
            Some(1),
            TaskFaultMode::Fail,
        )])
    });
    let (status, body) = api
        .call(
            Method::POST,
            &format!("/nodes/{}/storage-cleanup", b.id),
            Some(json!({"reason": "between tenants"})),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let cleanup = body["decommission"]["id"].as_str().unwrap().to_owned();
    let failed = api.wait_job(&cleanup, |s| s.starts_with("failed")).await;
    assert_eq!(
        failed["decommission"]["error_code"], "validation_residue",
        "{failed:#}"
    );
    let (_, list) = api
        .call(Method::GET, "/decommissions?status=failed", None)
        .await;
    let ids: Vec<&str> = list["decommissions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [cleanup.as_str()]);
    let (status, body) = api
        .call(
            Method::POST,
            &format!("/decommissions/{cleanup}/retry"),
            None,
        )
        .await;
    assert_eq!((status, body["error"].as_str()), (400, Some("bad_request")));
    let (status, body) = api
        .call(
            Method::POST,
            &format!("/decommissions/{cleanup}/retry"),
            Some(json!({"reason": "residue removed by hand (OPS-7)"})),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["prior_state"], "failed_manual_intervention");
    api.wait_job(&cleanup, |s| s == "completed").await;
    assert_eq!(node(1).await.status, NodeState::Active);
    let rows = d
        .bed
        .store
        .audit_log("decommission", &cleanup)
        .await
        .unwrap();
    let row = audited(&rows, "decommission.retry_stage");
    assert_eq!(
        (row.actor.as_str(), row.role.as_str(), row.reason.as_deref()),
        (
            "ops-alice",
            "admin",
            Some("residue removed by hand (OPS-7)")
        )
    );
    audited(&rows, "decommission.request_storage_cleanup");

    // The read model: by node, by state.
    let (_, list) = api
        .call(
            Method::GET,
            &format!("/decommissions?node_id={}", a.id),
            None,
        )
        .await;
    assert_eq!(list["decommissions"][0]["id"], reset.as_str(), "{list}");
    assert_eq!(list["decommissions"].as_array().unwrap().len(), 1);
    let (_, list) = api
        .call(
            Method::GET,
            "/decommissions?status=completed&site=dc1",
            None,
        )
        .await;
    assert_eq!(list["decommissions"].as_array().unwrap().len(), 2, "{list}");

    // The jobs gauge counts decommissions (set by the next reconcile).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, metrics) = call(Method::GET, format!("{base}/metrics"), None, None).await;
        let text = metrics.as_str().unwrap();
        if text.contains("metalform_jobs{kind=\"decommission\",site=\"dc1\",state=\"completed\"} 2")
            && text.contains(
                "metalform_jobs{kind=\"decommission\",site=\"dc1\",state=\"cancelled\"} 1",
            )
        {
            break;
        }
        assert!(Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    daemon.shutdown().await;
}
