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

/// A YAML value as JSON (numbers, strings, booleans, null, sequences, mappings).
fn json_of(yaml: &Yaml) -> serde_json::Value {
    use serde_json::Value;
    if let Some(mapping) = yaml.as_mapping() {
        return Value::Object(
            mapping
                .iter()
                .map(|(k, v)| (k.as_str().expect("a string key").to_owned(), json_of(v)))
                .collect(),
        );
    }
    if let Some(items) = yaml.as_sequence() {
        return Value::Array(items.iter().map(json_of).collect());
    }
    if let Some(b) = yaml.as_bool() {
        return Value::Bool(b);
    }
    if let Some(i) = yaml.as_integer() {
        return Value::from(i);
    }
    if let Some(f) = yaml.as_floating_point() {
        return Value::from(f);
    }
    if yaml.is_null() {
        return Value::Null;
    }
    Value::String(yaml.as_str().expect("a scalar").to_owned())
}

/// The jobs API's recipe in the document is the shipped recipe schemas (this version and the
/// previous one), each naming its version in `$schema`: a client (and schemathesis) knows from
/// the document alone which recipes the provisioner accepts.
#[test]
fn the_documented_recipe_is_the_shipped_recipe_schema() {
    let docs = Yaml::load_from_str(metalform::api::OPENAPI_YAML).expect("openapi.yaml parses");
    let schemas = docs[0]
        .as_mapping_get("components")
        .and_then(|c| c.as_mapping_get("schemas"))
        .expect("components.schemas");
    for (name, file, schema_required) in [
        ("RecipeV2", "schema/recipe.schema.json", false),
        ("RecipeV1", "schema/recipe.v1.schema.json", true),
    ] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
        let shipped: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        // The file, as the document writes it: its partitions a component of their own, its
        // `$schema` the version's id, required where it tells the version apart.
        let mut expected = shipped.clone();
        let object = expected.as_object_mut().unwrap();
        for key in ["$schema", "$id", "title", "$defs"] {
            object.remove(key);
        }
        let text = expected.to_string().replace(
            "\"#/$defs/partition\"",
            &format!("\"#/components/schemas/{name}Partition\""),
        );
        let mut expected: serde_json::Value = serde_json::from_str(&text).unwrap();
        expected["properties"]["$schema"] = serde_json::json!({
            "description": shipped["properties"]["$schema"]["description"],
            "const": shipped["$id"],
        });
        if schema_required {
            expected["required"]
                .as_array_mut()
                .unwrap()
                .push("$schema".into());
        }
        let documented = json_of(schemas.as_mapping_get(name).expect(name));
        assert_eq!(
            documented, expected,
            "openapi.yaml's {name} is not {file}: update the document"
        );
        let partition = json_of(
            schemas
                .as_mapping_get(&format!("{name}Partition"))
                .expect("the partition component"),
        );
        assert_eq!(partition, shipped["$defs"]["partition"], "{name}Partition");
    }
}
