//! The JSON Schemas in schema/ and metalform's typed documents agree (issue 2: "a test checks
//! that schema and Rust model agree — every schema property maps to a model field and back").
//!
//! For each kind, a maximal document is generated from the schema itself — every property
//! present, values from the schema's `examples`/`default`/`enum` — and checked against the
//! schema. It is then deserialised into the typed document and serialised back: a schema
//! property the model lacks would be dropped, and a model field the schema lacks would come back
//! as an extra `null`, so equality proves the two match in both directions. Keyword enums are
//! compared one by one, and the editor schema (fleet.schema.json) is checked like an editor
//! would use it: files resolved next to each other on disk.

use metalform::manifest::document::{
    NodeDocument, NodeGroupDocument, ProfileDocument, SiteDocument,
};
use metalform::manifest::schema::{self, Kind, SCHEMA_FILES};
use metalform::model::{DataDisks, EraseMode, Lifecycle, PowerType, SiteStatus, StorageLayout};
use serde_json::{Map, Value, json};

use crate::manifest_support;

fn schema_file(name: &str) -> &'static Value {
    schema::schema_document(name).unwrap_or_else(|| panic!("schema/{name} is embedded"))
}

/// Follow a `$ref` (relative file + pointer, or a local pointer) from `file`.
fn resolve<'a>(file: &'a str, reference: &'a str) -> (&'a str, &'static Value) {
    let (target_file, pointer) = reference.split_once('#').unwrap_or((reference, ""));
    let target_file = if target_file.is_empty() {
        file
    } else {
        target_file
    };
    let target = schema_file(target_file)
        .pointer(pointer)
        .unwrap_or_else(|| panic!("{reference} resolves from {file}"));
    (target_file, target)
}

/// A value for `schema` with every property filled in. An object that allows only one of its
/// properties (`maxProperties: 1`) takes property number `variant`; list items are generated
/// with variants 0, 1, 2, so together they cover every property.
fn maximal(file: &str, schema: &Value) -> Value {
    maximal_variant(file, schema, 0)
}

fn maximal_variant(file: &str, schema: &Value, variant: usize) -> Value {
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str)
        && schema.get("properties").is_none()
    {
        let (file, target) = resolve(file, reference);
        return maximal_variant(file, target, variant);
    }
    if let Some(value) = schema.get("const") {
        return value.clone();
    }
    if let Some(example) = schema.get("examples").and_then(|e| e.get(0)) {
        return example.clone();
    }
    if let Some(default) = schema.get("default") {
        return default.clone();
    }
    if let Some(options) = schema.get("enum") {
        return options[0].clone();
    }
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec!["object"],
    };
    match types[0] {
        "object" => {
            let mut object = Map::new();
            // A `$ref` next to `properties` contributes the referenced schema's properties.
            if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
                let (ref_file, target) = resolve(file, reference);
                if let Value::Object(inherited) = maximal(ref_file, target) {
                    object.extend(inherited);
                }
            }
            let only_one = schema.get("maxProperties").and_then(Value::as_u64) == Some(1);
            if let Some(Value::Object(properties)) = schema.get("properties") {
                for (i, (name, property)) in properties.iter().enumerate() {
                    if !only_one || i == variant % properties.len() {
                        object.insert(name.clone(), maximal(file, property));
                    }
                }
            }
            Value::Object(object)
        }
        "array" => {
            let items = schema.get("items").cloned().unwrap_or(json!({}));
            Value::Array((0..3).map(|v| maximal_variant(file, &items, v)).collect())
        }
        "integer" => json!(
            schema
                .get("minimum")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                .max(1)
        ),
        "boolean" => json!(true),
        "string" => json!("x"),
        other => panic!("no sample for type {other} in {file}"),
    }
}

fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(kind: Kind) -> (Value, Value) {
    let file = kind.schema_file();
    let instance = maximal(file, schema_file(file));
    let findings = schema::validate(kind, &instance);
    assert!(
        findings.is_empty(),
        "the maximal {kind:?} passes its schema: {findings:?}\n{instance:#}"
    );
    let typed: T = serde_json::from_value(instance.clone())
        .unwrap_or_else(|err| panic!("maximal {kind:?} fits the typed document: {err}"));
    (instance, serde_json::to_value(&typed).unwrap())
}

/// Every key path of a JSON value (`spec.nodes[].bmc.ipmiIp`), for readable failures.
fn key_paths(value: &Value, prefix: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                out.push(path.clone());
                key_paths(v, &path, out);
            }
        }
        Value::Array(items) => items
            .iter()
            .for_each(|v| key_paths(v, &format!("{prefix}[]"), out)),
        _ => {}
    }
}

fn assert_agree<T: serde::de::DeserializeOwned + serde::Serialize>(kind: Kind) {
    let (instance, back) = round_trip::<T>(kind);
    let (mut schema_keys, mut model_keys) = (Vec::new(), Vec::new());
    key_paths(&instance, "", &mut schema_keys);
    key_paths(&back, "", &mut model_keys);
    schema_keys.sort();
    model_keys.sort();
    let only_schema: Vec<_> = schema_keys
        .iter()
        .filter(|k| !model_keys.contains(k))
        .collect();
    let only_model: Vec<_> = model_keys
        .iter()
        .filter(|k| !schema_keys.contains(k))
        .collect();
    assert!(
        only_schema.is_empty() && only_model.is_empty(),
        "{kind:?}: schema-only properties {only_schema:?}, model-only fields {only_model:?}"
    );
    assert_eq!(instance, back, "{kind:?} round-trips with the same values");
    assert!(schema_keys.len() > 5, "{kind:?} has a real shape");
}

#[test]
fn site_schema_and_model_agree() {
    assert_agree::<SiteDocument>(Kind::Site);
}

#[test]
fn profile_schema_and_model_agree() {
    assert_agree::<ProfileDocument>(Kind::Profile);
}

#[test]
fn node_schema_and_model_agree() {
    assert_agree::<NodeDocument>(Kind::Node);
}

#[test]
fn node_group_schema_and_model_agree() {
    assert_agree::<NodeGroupDocument>(Kind::NodeGroup);
}

#[test]
fn keyword_enums_match_the_schema_enums() {
    let common = schema_file("common.schema.json");
    let site = schema_file("site.schema.json");
    let profile = schema_file("profile.schema.json");
    let enum_at = |doc: &Value, pointer: &str| -> Vec<String> {
        doc.pointer(pointer)
            .and_then(Value::as_array)
            .unwrap_or_else(|| panic!("enum at {pointer}"))
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(enum_at(common, "/$defs/lifecycle/enum"), Lifecycle::ALL);
    assert_eq!(enum_at(common, "/$defs/eraseMode/enum"), EraseMode::ALL);
    assert_eq!(
        enum_at(site, "/properties/spec/properties/status/enum"),
        SiteStatus::ALL
    );
    assert_eq!(
        enum_at(
            site,
            "/properties/spec/properties/power/properties/type/enum"
        ),
        PowerType::ALL
    );
    assert_eq!(
        enum_at(
            profile,
            "/properties/spec/properties/storage/properties/layout/enum"
        ),
        StorageLayout::ALL
    );
    assert_eq!(
        enum_at(
            profile,
            "/properties/spec/properties/storage/properties/dataDisks/enum"
        ),
        DataDisks::ALL
    );
}

#[test]
fn embedded_schemas_are_the_files_in_schema_dir() {
    let dir = manifest_support::repo_root().join("schema");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        // The Redfish provisioning recipe's schemas are not manifests: provider::redfish::recipe
        // embeds and checks them.
        .filter(|name| !name.starts_with("recipe"))
        .collect();
    on_disk.sort();
    let mut embedded: Vec<String> = SCHEMA_FILES.iter().map(|(n, _)| n.to_string()).collect();
    embedded.sort();
    assert_eq!(on_disk, embedded);
    for (name, body) in SCHEMA_FILES {
        assert_eq!(
            std::fs::read_to_string(dir.join(name)).unwrap(),
            *body,
            "{name}"
        );
        let json: Value = serde_json::from_str(body).unwrap();
        assert_eq!(
            json["$schema"], "https://json-schema.org/draft/2020-12/schema",
            "{name}"
        );
    }
}

#[test]
fn editor_schema_accepts_the_sample_fleet_and_rejects_a_bad_document() {
    let root = manifest_support::repo_root();
    let validator = manifest_support::editor_validator(true);
    let snapshot = metalform::source::read(&metalform::source::FleetSource::Directory(
        root.join("fleet"),
    ))
    .unwrap();
    let mut checked = 0;
    for file in &snapshot.files {
        let text = String::from_utf8(file.bytes.clone()).unwrap();
        let documents: Vec<Value> = metalform::manifest::parse_documents(&file.path, &text)
            .unwrap()
            .iter()
            .map(|doc| doc.to_json())
            .collect();
        for document in documents {
            let errors: Vec<String> = validator
                .iter_errors(&document)
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "{}: {errors:?}", file.path);
            checked += 1;
        }
    }
    assert!(checked >= 10, "checked {checked} documents");
    let bad = json!({"apiVersion": "metalform/v1", "kind": "Node", "metadata": {"name": "a"}, "spec": {"site": "dc1"}});
    assert!(!validator.is_valid(&bad));
    assert!(!validator.is_valid(&json!({"kind": "Rack"})));
}
