//! The daemon's status pages over HTTP (issue 19): a real daemon converges two nodes of a
//! simulated MAAS site; the pages need the admin token (Bearer, or Basic for a browser), show
//! the fleet by coarse state, filter the node list, show a node's jobs with their stage
//! timeline and the current plan, escape every value, answer bad input with an HTML error, and
//! serve many viewers from one store read.

use crate::daemon_support;
use crate::web_support;

use std::sync::Arc;
use std::time::Duration;

use daemon_support::{ADMIN_TOKEN, AGENT_TOKEN};
use metalform::web::{DaemonView, LatestPlan, WebState};
use reqwest::StatusCode;
use web_support::{HOSTILE_HOST, HOSTILE_SITE, Pages};

async fn get(url: &str, auth: Auth<'_>) -> reqwest::Response {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let request = client.get(url);
    let request = match auth {
        Auth::None => request,
        Auth::Bearer(token) => request.bearer_auth(token),
        Auth::Basic(user, token) => request.basic_auth(user, Some(token)),
    };
    request.send().await.expect("the daemon answers")
}

#[derive(Clone, Copy)]
enum Auth<'a> {
    None,
    Bearer(&'a str),
    Basic(&'a str, &'a str),
}

async fn page(url: &str) -> (StatusCode, String) {
    let response = get(url, Auth::Bearer(ADMIN_TOKEN)).await;
    let status = response.status();
    let content_type = response.headers()[reqwest::header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(content_type, "text/html; charset=utf-8", "{url}");
    (status, response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_show_the_converged_fleet_and_escape_every_value() {
    let p = Pages::start().await;
    let ui = format!("{}/ui", p.base);

    // Auth: none → 401 asking a browser for Basic credentials, as HTML; an agent token → 403;
    // the admin token as Bearer or as a Basic password → the page.
    let refused = get(&format!("{ui}/"), Auth::None).await;
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        refused.headers()[reqwest::header::WWW_AUTHENTICATE],
        "Basic realm=\"metalform\", charset=\"UTF-8\""
    );
    let text = refused.text().await.unwrap();
    assert!(text.contains("sign in with an admin API token"), "{text}");
    let agent = get(&format!("{ui}/"), Auth::Bearer(AGENT_TOKEN)).await;
    assert_eq!(agent.status(), StatusCode::FORBIDDEN);
    assert!(
        agent.text().await.unwrap().contains("agent role"),
        "the guard's reason is shown"
    );
    let wrong = get(&format!("{ui}/"), Auth::Basic("ops", "not-a-token-at-all")).await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);

    let (status, overview) = page(&format!("{ui}/")).await;
    assert_eq!(status, StatusCode::OK);
    let by_basic = get(&format!("{ui}/"), Auth::Basic("anyone", ADMIN_TOKEN)).await;
    assert_eq!(by_basic.status(), StatusCode::OK);
    let headers = by_basic.headers().clone();
    assert_eq!(
        by_basic.text().await.unwrap(),
        overview,
        "one shared snapshot"
    );
    let csp = headers[reqwest::header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("default-src 'none'"),
        "{csp}"
    );
    assert_eq!(headers["x-content-type-options"], "nosniff");

    // The overview counts dc1's two active nodes, links each count to the filtered list, and
    // shows the hostile row's site as text.
    assert!(
        overview.contains(r#"<a href="/ui/nodes?site=dc1&amp;state=active">2</a>"#),
        "{overview}"
    );
    assert!(overview.contains("lab&amp;co"), "{overview}");
    assert!(!overview.contains("lab&co"));
    assert!(overview.contains("Fleet <code>commit "));

    // The list: every node, the hostile hostname as text and never as a tag.
    let (_, list) = page(&format!("{ui}/nodes")).await;
    assert!(list.contains("3 of 3 nodes"), "{list}");
    assert!(
        list.contains("&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;"),
        "{list}"
    );
    assert!(!list.contains("<script>alert"), "{list}");
    for host in &p.hosts {
        assert!(list.contains(&format!(">{host}</a>")), "{host} listed");
    }
    // Filters: site + state, group, drift, failed, not onboarded.
    for (query, expected) in [
        ("site=dc1&state=active", "2 of 3 nodes"),
        ("group=dc1-rack", "2 of 3 nodes"),
        ("state=enrolling", "1 of 3 nodes"),
        ("site=lab%26co", "1 of 3 nodes"),
        ("drift=1", "0 of 3 nodes"),
        ("failed=1", "0 of 3 nodes"),
        ("state=not_onboarded", "0 of 3 nodes"),
        ("site=&state=&group=", "3 of 3 nodes"),
    ] {
        let (status, text) = page(&format!("{ui}/nodes?{query}")).await;
        assert_eq!(status, StatusCode::OK, "{query}");
        assert!(text.contains(expected), "{query}: want {expected}\n{text}");
    }
    // Bad filters are refused with what is allowed.
    for (query, message) in [
        (
            "state=bogus",
            "unknown state `bogus`; the states are bootstrap_issued, enrolling, active",
        ),
        (
            "colour=red",
            "unknown filter `colour`; the filters are site, state, group, drift and failed",
        ),
        (
            "failed=maybe",
            "`failed=maybe`: use failed=1 or leave it out",
        ),
        ("state=%3Cb%3E", "unknown state `&lt;b&gt;`"),
    ] {
        let (status, text) = page(&format!("{ui}/nodes?{query}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}");
        assert!(text.contains(message), "{query}: want {message}\n{text}");
        assert!(text.contains("hint: open /ui/nodes and pick the filters"));
    }

    // A converged node: its onboarding completed, every stage succeeded up to the agent's
    // enrollment, MAAS says Deployed (ACTIVE), the agent was heard from, events are listed.
    let (status, node) = page(&format!("{ui}/nodes/dc1/{}", p.hosts[0])).await;
    assert_eq!(status, StatusCode::OK);
    for needle in [
        "state state-active",
        "onboarding <span class=\"state state-completed\">completed</span>",
        "<li class=\"step step-succeeded current\"><span class=\"stage\">wait_for_agent_enrollment</span>",
        "<span class=\"stage\">deploy_via_maas</span> <span class=\"status\">succeeded</span>",
        "<code>ACTIVE</code>",
        "Deployed (power on)",
        "<code>node.transition</code>",
        "group <code>dc1-rack</code>",
        "No drift recorded.",
    ] {
        assert!(node.contains(needle), "no `{needle}` in\n{node}");
    }
    assert!(!node.contains("never"), "the agent enrolled: {node}");

    // The hostile node's own page renders it as text.
    let (status, hostile) = page(&format!(
        "{}{}",
        p.base,
        Pages::node_path(HOSTILE_SITE, HOSTILE_HOST)
    ))
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(hostile.contains("&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;"));
    assert!(!hostile.contains("<script>alert"));
    assert!(hostile.contains("not in the manifests"));

    // Unknown node: 404 with a hint.
    let (status, missing) = page(&format!("{ui}/nodes/dc1/nope")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        missing.contains("no node `nope` in site `dc1`"),
        "{missing}"
    );

    // The plan: dc1's last plan, the age of the MAAS observation it used. The page may still
    // show the plan made while the nodes ran (resume); the reconcile after it plans nothing.
    let mut plan = String::new();
    for _ in 0..40 {
        plan = page(&format!("{ui}/plan")).await.1;
        if plan.contains("Plan: no changes; 2 unchanged.") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(plan.contains("id=\"site-dc1\""), "{plan}");
    assert!(plan.contains("MAAS observed <time"), "{plan}");
    assert!(plan.contains("Plan: no changes; 2 unchanged."), "{plan}");
    assert!(plan.contains("2 node(s) in service as the manifests want them."));

    // An unchanged page costs a 304.
    let first = get(&format!("{ui}/plan"), Auth::Bearer(ADMIN_TOKEN)).await;
    let etag = first.headers()[reqwest::header::ETAG].clone();
    let again = reqwest::Client::new()
        .get(format!("{ui}/plan"))
        .bearer_auth(ADMIN_TOKEN)
        .header(reqwest::header::IF_NONE_MATCH, etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);

    // A browser opening the daemon's address lands on the pages; the assets are served.
    let root = get(&format!("{}/", p.base), Auth::None).await;
    assert_eq!(root.status(), StatusCode::SEE_OTHER);
    assert_eq!(root.headers()[reqwest::header::LOCATION], "/ui/");
    let js = get(&format!("{ui}/assets/status.js"), Auth::Bearer(ADMIN_TOKEN)).await;
    assert_eq!(js.status(), StatusCode::OK);
    assert!(js.text().await.unwrap().contains("data-refresh"));
    p.daemon.shutdown().await;
}

/// A daemon view with no fleet and no plan (the pages read the inventory alone).
struct NoFleet;

impl DaemonView for NoFleet {
    fn fleet(&self) -> Option<Arc<metalform::api::FleetRevision>> {
        None
    }

    fn plans(&self) -> Vec<(metalform::model::SiteName, Arc<LatestPlan>)> {
        Vec::new()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_viewers_share_one_store_read_per_refresh() {
    let dir = tempfile::tempdir().unwrap();
    let store = metalform::store::Store::open(
        &format!("sqlite://{}", dir.path().join("state.db").display()),
        Arc::new(metalform::clock::SystemClock),
    )
    .await
    .unwrap();
    let web = WebState::new(store, Arc::new(NoFleet), Duration::from_secs(1));
    let viewers: Vec<_> = (0..20)
        .map(|_| {
            let web = web.clone();
            tokio::spawn(async move { web.snapshot().await.unwrap() })
        })
        .collect();
    for viewer in viewers {
        viewer.await.unwrap();
    }
    assert_eq!(web.store_reads(), 1, "twenty viewers, one read");
    for _ in 0..5 {
        web.node("dc1", "c07u43").await.unwrap();
    }
    assert_eq!(web.store_reads(), 2, "a node page is cached too");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    web.snapshot().await.unwrap();
    web.snapshot().await.unwrap();
    assert_eq!(web.store_reads(), 3, "read again once the interval passed");
}
