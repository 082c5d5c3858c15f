//! openapi.yaml is the committed contract of the daemon's HTTP API (issue 6): every route the
//! daemon serves is documented, with its method and access, and every documented operation is
//! served. (tests/daemon_e2e.rs also calls each documented route on a running daemon.)

use std::collections::BTreeSet;

use metalform::api::Access;
use saphyr::{LoadableYamlNode, Yaml};

fn documented() -> BTreeSet<(String, String, String)> {
    let docs = Yaml::load_from_str(metalform::api::OPENAPI_YAML).expect("openapi.yaml parses");
    let doc = &docs[0];
    assert_eq!(
        doc.as_mapping_get("openapi").and_then(|v| v.as_str()),
        Some("3.1.0")
    );
    let paths = doc
        .as_mapping_get("paths")
        .and_then(|p| p.as_mapping())
        .expect("paths");
    let mut out = BTreeSet::new();
    for (path, item) in paths {
        let path = path.as_str().expect("path").to_owned();
        for (method, operation) in item.as_mapping().expect("path item") {
            let access = operation
                .as_mapping_get("x-access")
                .and_then(|a| a.as_str())
                .unwrap_or_else(|| panic!("{path}: no x-access"))
                .to_owned();
            // Signed media URLs carry their own credentials; the agent API its token in the body.
            let secured = operation.as_mapping_get("security").is_some();
            assert_eq!(
                secured,
                matches!(access.as_str(), "admin" | "user" | "webhook"),
                "{method:?} {path}: security vs access"
            );
            out.insert((
                method.as_str().unwrap().to_uppercase(),
                path.clone(),
                access,
            ));
        }
    }
    out
}

fn served() -> BTreeSet<(String, String, String)> {
    metalform::daemon::server::served_routes()
        .into_iter()
        .map(|(method, path, access)| {
            let access = match access {
                Access::Public => "public",
                Access::Admin => "admin",
                Access::Agent => "agent",
                Access::User => "user",
                Access::Webhook => "webhook",
                Access::Signed => "signed",
            };
            (method.to_string(), path, access.to_owned())
        })
        .collect()
}

#[test]
fn every_served_route_is_documented_and_every_documented_route_is_served() {
    let documented = documented();
    let served = served();
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty(),
        "served but not in openapi.yaml: {undocumented:?}"
    );
    assert!(
        unserved.is_empty(),
        "in openapi.yaml but not served: {unserved:?}"
    );
    // The seed's operator surface is there (000 §3.4, §4.15, §6.6).
    for (method, path) in [
        ("POST", "/api/v1/admin/maas-sites/{id}/credentials"),
        (
            "POST",
            "/api/v1/admin/onboardings/{id}/mark-manual-intervention",
        ),
        ("POST", "/api/v1/admin/reconciliation/run"),
        ("GET", "/api/v1/admin/reconciliation/status"),
        ("GET", "/api/v1/admin/reconciliation/drift"),
        (
            "POST",
            "/api/v1/admin/reconciliation/drift/{node_id}/resolve",
        ),
        (
            "DELETE",
            "/api/v1/admin/maas-sites/{id}/roce-assignments/{aid}",
        ),
        // Seed 003's API.
        ("POST", "/api/v1/jobs"),
        ("GET", "/api/v1/jobs/{job_id}"),
        ("POST", "/api/v1/status-webhook/{server_serial}"),
        ("GET", "/media/tasks/{job_id}/task.iso"),
    ] {
        assert!(
            served.iter().any(|(m, p, _)| m == method && p == path),
            "{method} {path}"
        );
    }
}
