//! The provider-neutral view and the provisioning verbs over the admin API (issue 18, seed
//! 002) on a running daemon with the simulator: the view of an active node, a verb illegal in
//! its state refused 409 with the state and nothing changed, a manifest-owned verb 409
//! `owned_by_git`, an unsupported one 400 `not_supported`, bad input 400, and rescue carried
//! out on MAAS and audited with the token's name.

use crate::daemon_support;
use crate::onboard_support;

use std::time::Duration;

use daemon_support::{ADMIN_TOKEN, DaemonBed, call};
use onboard_support::{Setup, SiteSetup, hostname_of};
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_states_and_provision_verbs() {
    let mut site = SiteSetup::generated("dc1", 97, 1, 0);
    site.config.time_scale = 60.0;
    let host = hostname_of(&site.config, 0);
    let d = DaemonBed::start(
        Setup::one_site(site).profile("  timeouts: {enrollment: 60s}\n"),
        "",
    )
    .await;
    let daemon = metalform::daemon::start(d.config(), Default::default())
        .await
        .unwrap();
    let base = format!("http://{}/api/v1/admin/nodes", daemon.local_addr());
    let api = |method: Method, path: String, body: Option<Value>| {
        let url = format!("{base}{path}");
        async move { call(method, url, Some(ADMIN_TOKEN), body).await }
    };
    d.converged(&[("dc1", host.as_str())], Duration::from_secs(120))
        .await;
    let node = d.bed.store.find_node("dc1", &host).await.unwrap().unwrap();
    let id = node.id.to_string();

    let (status, body) = api(Method::GET, format!("/{id}/states"), None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["provision_state"], "ACTIVE");
    assert_eq!(body["target_provision_state"], Value::Null);
    assert_eq!(body["retired"], false);
    assert_eq!(body["state"], "active");

    let writes = d.bed.maas_writes("dc1");
    let put = |target: &str, reason: Option<&str>| {
        let mut body = json!({"target": target});
        if let Some(reason) = reason {
            body["reason"] = json!(reason);
        }
        api(Method::PUT, format!("/{id}/states/provision"), Some(body))
    };
    let (status, body) = put("provide", Some("x")).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("invalid_state"))
    );
    assert_eq!(
        body["message"],
        "verb `provide` is not allowed in state ACTIVE"
    );
    let (status, body) = put("rebuild", Some("x")).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("owned_by_git"))
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("bump `reimage.generation`"),
        "{body}"
    );
    let (status, body) = put("rescue", None).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("bad_request")));
    let (status, body) = put("fly", Some("x")).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("bad_request")));
    assert_eq!(body["message"], "`fly` is not a provisioning verb");
    let (status, _) = api(
        Method::PUT,
        format!("/{}/states/provision", Uuid::new_v4()),
        Some(json!({"target": "rescue", "reason": "x"})),
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(d.bed.maas_writes("dc1"), writes, "refusals change nothing");

    let (status, body) = put("rescue", Some("fsck the root disk")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["provision"]["operation"], "rescue");
    assert_eq!(body["provision"]["maas_status"], "Entering rescue mode");
    assert_eq!(body["provision"]["after"]["provision_state"], "RESCUING");
    let writes_now = d.bed.maas_writes("dc1");
    assert!(
        writes_now[writes.len()..]
            .iter()
            .any(|w| w.contains("rescue_mode")),
        "{writes_now:?}"
    );
    let audit = d.bed.store.audit_log("node", &id).await.unwrap();
    let row = audit
        .iter()
        .find(|r| r.action == "node.provision.rescue")
        .expect("audited");
    assert_eq!(row.reason.as_deref(), Some("fsck the root disk"));
    assert_eq!(row.prior_state.as_deref(), Some("ACTIVE"));
    daemon.shutdown().await;
}
