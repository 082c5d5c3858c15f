//! Validation gaps (issue 16 point 9, docs/security.md "What validation lets through"): the
//! published schema is what editors and CI linters check manifests with, so every scalar type
//! in it says what it accepts; and a duplicate is reported at the line that defines the first.

use crate::manifest_support;

use manifest_support::{metalform, repo_root, stderr, stdout};
use serde_json::{Value, json};

/// The fleet schema as a permissive editor compiles it: `format` is an annotation only (the
/// 2020-12 default), so only patterns, enums and bounds hold a value back.
fn editor_validator() -> jsonschema::Validator {
    manifest_support::editor_validator(false)
}

fn node(ipmi: &str, extra: Value) -> Value {
    let mut spec =
        json!({"site": "dc1", "sku": "mi300x.192g.8gpu", "gpus": 8, "bmc": {"ipmiIp": ipmi}});
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    json!({"apiVersion": "metalform/v1", "kind": "Node", "metadata": {"name": "c01u01"}, "spec": spec})
}

#[test]
fn five_octet_ipv4_is_not_a_bmc_address_for_the_schema_or_validate() {
    let validator = editor_validator();
    assert!(validator.is_valid(&node("10.1.0.1", json!({}))));
    for bad in [
        "10.1.0.1.5",
        "10.1.0.300",
        "010.1.0.1",
        "10.1.0",
        " 10.1.0.1",
        "10.1.0.1\n",
    ] {
        assert!(
            !validator.is_valid(&node(bad, json!({}))),
            "the published schema accepts `{bad:?}` as a BMC address"
        );
    }
    // The other address types, and where each would land.
    for (field, bad) in [
        ("pxeMac", json!("3c:ec:ef:12:34:56:78")),
        ("pxeMac", json!("3c:ec:ef-12:34:56")),
        (
            "roce",
            json!([{"interface": "enp1s0", "address": "172.30.9.61/33"}]),
        ),
        (
            "roce",
            json!([{"interface": "enp1s0", "address": "172.30.9.61.1/31"}]),
        ),
        ("retiredReason", json!("line one\nline two")),
        ("retiredReason", json!("bell \u{7}")),
    ] {
        assert!(
            !validator.is_valid(&node("10.1.0.1", json!({field: bad.clone()}))),
            "the published schema accepts {field}: {bad}"
        );
    }

    // validate says which field and why, at the value.
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(repo_root().join("examples/invalid/invalid-bmc-ip.yaml"))
        .unwrap()
        .replace("10.1.0.300", "10.1.0.1.5");
    std::fs::write(dir.path().join("fleet.yaml"), text).unwrap();
    let out = metalform(dir.path(), &["validate", "--fleet", "."]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains(
            "fleet.yaml:15:65: error: spec.bmc.ipmiIp: `10.1.0.1.5` is not an IPv4 address"
        ),
        "{}",
        stdout(&out)
    );
}

#[test]
fn secret_reference_walking_out_with_dot_dot_is_refused() {
    let validator = editor_validator();
    let site = |vault: &str| {
        json!({"apiVersion": "metalform/v1", "kind": "Site", "metadata": {"name": "dc1"},
               "spec": {"region": "r1", "maas": {"url": "https://maas.example/MAAS", "apiKey": {"vault": vault, "key": "token"}},
                        "power": {"defaultCredentials": {"vault": "kv/power/dc1"}},
                        "network": {"pxeIface": "ens19", "pxeVlanVid": 46, "nodePxeIface": "eno8303"},
                        "deploy": {"password": {"vault": "kv/deploy/dc1", "key": "password"}}}})
    };
    assert!(validator.is_valid(&site("kv/maas/dc1")));
    for bad in ["kv/../sys/raw", "kv/maas/../../x", "kv/./a", ".kv/a"] {
        assert!(!validator.is_valid(&site(bad)), "{bad}");
    }
    // The model refuses it too, so a plan file or an API body cannot bring one in.
    assert!(metalform::secrets::SecretRef::split("kv/maas/../../sys/x").is_err());
}

#[test]
fn hostname_defined_in_two_files_is_reported_at_its_definition() {
    let dir = tempfile::tempdir().unwrap();
    let example =
        std::fs::read_to_string(repo_root().join("examples/invalid/duplicate-hostname.yaml"))
            .unwrap();
    let docs: Vec<&str> = example.split("\n---\n").collect();
    std::fs::write(
        dir.path().join("a-site.yaml"),
        format!("{}\n---\n{}\n", docs[0], docs[1]),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("b-rack.yaml"),
        format!("# rack c01\n\n{}\n", docs[2]),
    )
    .unwrap();
    // A Node document whose name comes several lines below the document's start.
    std::fs::write(
        dir.path().join("0-node.yaml"),
        "# moved here\napiVersion: metalform/v1\nkind: Node\nspec: {site: dc1, sku: mi300x.192g.8gpu, gpus: 8, bmc: {ipmiIp: 10.1.0.3}}\nmetadata:\n  name: c01u02\n",
    )
    .unwrap();
    let out = metalform(dir.path(), &["validate", "--fleet", "."]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    // The first definition (file order) is 0-node.yaml, line 6, column 9: `name: c01u02`.
    assert!(
        text.contains(
            "b-rack.yaml:12:18: error: spec.nodes[1].hostname: hostname `c01u02` is already defined at site `dc1` at 0-node.yaml:6:9"
        ),
        "{text}"
    );
}

/// Every string in the published schema says what it accepts: a pattern, an enum or a
/// constant — or, for free text, a maximum length.
#[test]
fn every_scalar_string_of_the_schema_is_bounded() {
    fn walk(node: &Value, path: String, out: &mut Vec<String>) {
        match node {
            Value::Object(map) => {
                let is_string = map.get("type") == Some(&json!("string"))
                    || map.get("type") == Some(&json!(["string", "null"]));
                let bounded = ["pattern", "enum", "const", "maxLength"]
                    .iter()
                    .any(|k| map.contains_key(*k));
                if is_string && !bounded {
                    out.push(path.clone());
                }
                for (k, v) in map {
                    walk(v, format!("{path}/{k}"), out);
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    walk(v, format!("{path}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
    let mut unbounded = Vec::new();
    for entry in std::fs::read_dir(repo_root().join("schema")).unwrap() {
        let path = entry.unwrap().path();
        let json: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        walk(
            &json,
            path.file_name().unwrap().to_string_lossy().into_owned(),
            &mut unbounded,
        );
    }
    assert!(
        unbounded.is_empty(),
        "strings that take anything: {unbounded:?}"
    );
}
