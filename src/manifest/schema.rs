//! The JSON Schemas of schema/ (DESIGN.md §2): embedded at build time, compiled once, and the
//! single source of truth for the shape of every manifest kind. A schema error is turned into a
//! finding an operator can act on: it names the field, says what was expected (the schema's
//! `x-expected` annotation), suggests the closest known field for a typo, explains YAML 1.2
//! booleans, and never quotes a value written where a secret reference belongs.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{JsonType, Retrieve, Uri, ValidationError, Validator};
use serde_json::Value as Json;

use super::suggest::did_you_mean;
use super::tree::PathSegment;
#[cfg(test)]
use super::tree::display_path;

/// Every schema file, by name, as shipped in schema/.
pub const SCHEMA_FILES: &[(&str, &str)] = &[
    (
        "common.schema.json",
        include_str!("../../schema/common.schema.json"),
    ),
    (
        "site.schema.json",
        include_str!("../../schema/site.schema.json"),
    ),
    (
        "profile.schema.json",
        include_str!("../../schema/profile.schema.json"),
    ),
    (
        "node.schema.json",
        include_str!("../../schema/node.schema.json"),
    ),
    (
        "nodegroup.schema.json",
        include_str!("../../schema/nodegroup.schema.json"),
    ),
    (
        "fleet.schema.json",
        include_str!("../../schema/fleet.schema.json"),
    ),
];

/// Schemas reference each other by relative file name (so editors resolve them next to each
/// other); at run time they are served from memory under this never-resolving base.
const BASE_URI: &str = "https://metalform.invalid/schema/";

/// The manifest kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Site,
    Profile,
    Node,
    NodeGroup,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Site, Kind::Profile, Kind::Node, Kind::NodeGroup];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Site => "Site",
            Kind::Profile => "Profile",
            Kind::Node => "Node",
            Kind::NodeGroup => "NodeGroup",
        }
    }

    pub fn parse(text: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == text)
    }

    /// The schema file of this kind in schema/.
    pub fn schema_file(self) -> &'static str {
        match self {
            Kind::Site => "site.schema.json",
            Kind::Profile => "profile.schema.json",
            Kind::Node => "node.schema.json",
            Kind::NodeGroup => "nodegroup.schema.json",
        }
    }
}

/// One schema violation, located by its JSON instance path.
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaFinding {
    /// Instance path segments (`spec`, `nodes`, `3`, ...).
    pub path: Vec<PathSegment>,
    /// Point at the mapping key of `path` rather than at its value (unknown fields).
    pub at_key: bool,
    pub code: &'static str,
    pub message: String,
    pub hint: Option<String>,
    /// For `unknown-field`: the known field it probably meant; for `missing-field`: the field
    /// that is missing. Lets a typo be reported once, as the typo.
    pub field: Option<String>,
}

struct Schemas {
    documents: BTreeMap<&'static str, Json>,
    validators: BTreeMap<Kind, Validator>,
}

/// Serves the embedded schema files to the validator's `$ref` resolution.
struct Embedded;

impl Retrieve for Embedded {
    fn retrieve(
        &self,
        uri: &Uri<String>,
    ) -> Result<Json, Box<dyn std::error::Error + Send + Sync>> {
        let text = uri.as_str();
        let name = text.strip_prefix(BASE_URI).unwrap_or(text);
        let name = name.split('#').next().unwrap_or(name);
        SCHEMA_FILES
            .iter()
            .find(|(file, _)| *file == name)
            .map(|(_, body)| serde_json::from_str(body))
            .transpose()?
            .ok_or_else(|| format!("no embedded schema `{text}`").into())
    }
}

fn schemas() -> &'static Schemas {
    static SCHEMAS: OnceLock<Schemas> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        let documents: BTreeMap<&'static str, Json> = SCHEMA_FILES
            .iter()
            .map(|(name, body)| {
                let json = serde_json::from_str(body)
                    .unwrap_or_else(|err| panic!("embedded schema/{name} is not JSON: {err}"));
                (*name, json)
            })
            .collect();
        let validators = Kind::ALL
            .into_iter()
            .map(|kind| {
                let file = kind.schema_file();
                let validator = jsonschema::options()
                    .with_draft(jsonschema::Draft::Draft202012)
                    .with_base_uri(format!("{BASE_URI}{file}"))
                    .with_retriever(Embedded)
                    .should_validate_formats(false)
                    .build(&documents[file])
                    .unwrap_or_else(|err| panic!("embedded schema/{file} does not compile: {err}"));
                (kind, validator)
            })
            .collect();
        Schemas {
            documents,
            validators,
        }
    })
}

/// The parsed schema file `name` (e.g. `site.schema.json`).
pub fn schema_document(name: &str) -> Option<&'static Json> {
    schemas().documents.get(name)
}

/// Validate one document against its kind's schema.
pub fn validate(kind: Kind, document: &Json) -> Vec<SchemaFinding> {
    let validator = &schemas().validators[&kind];
    let mut findings = Vec::new();
    for error in validator.iter_errors(document) {
        explain(&error, &mut findings);
    }
    // `ipmiip` written for `ipmiIp` is one mistake: report the unknown field with its
    // suggestion, not also the "missing" field it was meant to be.
    let suggested: Vec<(Vec<PathSegment>, String)> = findings
        .iter()
        .filter(|f| f.code == "unknown-field")
        .filter_map(|f| {
            let parent = f.path[..f.path.len().saturating_sub(1)].to_vec();
            f.field.clone().map(|field| (parent, field))
        })
        .collect();
    findings.retain(|f| {
        f.code != "missing-field"
            || !suggested
                .iter()
                .any(|(parent, field)| *parent == f.path && Some(field) == f.field.as_ref())
    });
    findings
}

fn explain(error: &ValidationError<'_>, out: &mut Vec<SchemaFinding>) {
    let path: Vec<PathSegment> = error
        .instance_path()
        .iter()
        .map(|segment| match segment {
            jsonschema::paths::LocationSegment::Property(key) => PathSegment::from(key.to_string()),
            jsonschema::paths::LocationSegment::Index(i) => PathSegment::Index(i),
        })
        .collect();
    let keyword_location = error
        .absolute_keyword_location()
        .map(|uri| uri.as_str().to_string())
        .unwrap_or_default();
    let subschema = parent_schema(&keyword_location);
    let expected = subschema
        .and_then(|s| s.get("x-expected"))
        .and_then(Json::as_str);
    let field = path.iter().rev().find_map(|s| match s {
        PathSegment::Key(k) => Some(k.as_ref()),
        PathSegment::Index(_) => None,
    });
    let instance = error.instance();
    let secret = keyword_location.contains("/$defs/secretRef");
    let finding = |code, message: String, hint: Option<String>| SchemaFinding {
        path: path.clone(),
        at_key: false,
        code,
        message,
        hint,
        field: None,
    };

    // A value where a secret reference belongs: say so without ever quoting the value.
    if secret && !instance.is_object() && path_ends_at_secret(&keyword_location) {
        out.push(finding(
            "inline-secret",
            format!(
                "a secret cannot be written inline: `{}` takes a Vault reference {{vault: <mount>/<path>, key: <field>}} (the value written here is not shown)",
                field.unwrap_or("this field")
            ),
            Some(
                "store the value in Vault (`bao kv put <mount>/<path> <field>=...`) and write {vault: <mount>/<path>, key: <field>} here"
                    .into(),
            ),
        ));
        return;
    }

    match error.kind() {
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
            let known = known_properties(subschema);
            for name in unexpected {
                let mut key_path = path.clone();
                key_path.push(PathSegment::from(name.clone()));
                let suggestion = did_you_mean(name, known.iter().map(String::as_str));
                let hint = suggestion
                    .map(|best| format!("did you mean `{best}`?"))
                    .or_else(|| {
                        (!known.is_empty())
                            .then(|| format!("known fields here: {}", known.join(", ")))
                    });
                out.push(SchemaFinding {
                    path: key_path,
                    at_key: true,
                    code: "unknown-field",
                    message: format!("unknown field `{name}`"),
                    hint,
                    field: suggestion.map(str::to_string),
                });
            }
        }
        ValidationErrorKind::Required { property } => {
            let name = property.as_str().unwrap_or_default();
            let property_schema = subschema
                .and_then(|s| s.get("properties"))
                .and_then(|p| p.get(name));
            let hint = property_schema
                .and_then(|p| p.get("description"))
                .and_then(Json::as_str)
                .map(str::to_string);
            out.push(SchemaFinding {
                path: path.clone(),
                at_key: !path.is_empty(),
                code: "missing-field",
                message: format!("missing required field `{name}`"),
                hint,
                field: Some(name.to_string()),
            });
        }
        ValidationErrorKind::Type { kind } => {
            let wanted = type_names(kind);
            let (message, hint) = type_message(instance, &wanted, expected, secret);
            out.push(finding("wrong-type", message, hint));
        }
        ValidationErrorKind::Enum { options } => {
            let options: Vec<&str> = options
                .as_array()
                .map(|o| o.iter().filter_map(Json::as_str).collect())
                .unwrap_or_default();
            let (message, hint) = match instance.as_str() {
                Some(value) => (
                    format!("`{value}` is not one of: {}", options.join(", ")),
                    did_you_mean(value, options.iter().copied())
                        .map(|b| format!("did you mean `{b}`?")),
                ),
                None => (
                    format!(
                        "expected one of: {}, found {}",
                        options.join(", "),
                        json_type_name(instance)
                    ),
                    None,
                ),
            };
            out.push(finding("invalid-value", message, hint));
        }
        ValidationErrorKind::Constant { expected_value } => {
            let wanted = expected_value.as_str().unwrap_or_default();
            let shown = short(instance);
            out.push(finding(
                "invalid-value",
                format!("must be `{wanted}`, found {shown}"),
                None,
            ));
        }
        // Values the model parses itself (addresses, the MAAS URL) get its precise message, and
        // the document stays in the run so its other problems are reported too.
        ValidationErrorKind::Pattern { .. }
            if subschema
                .and_then(|s| s.get("x-model-check"))
                .and_then(Json::as_bool)
                == Some(true) => {}
        ValidationErrorKind::Pattern { .. } => {
            let what = expected.unwrap_or("a value matching the schema's pattern");
            let message = if secret {
                format!("not valid here (the value is not shown): expected {what}")
            } else {
                format!("{} is not valid: expected {what}", short(instance))
            };
            out.push(finding("invalid-value", message, None));
        }
        ValidationErrorKind::Minimum { limit }
        | ValidationErrorKind::ExclusiveMinimum { limit } => {
            out.push(finding(
                "out-of-range",
                range_message(instance, "less than the minimum", limit, expected),
                None,
            ));
        }
        ValidationErrorKind::Maximum { limit }
        | ValidationErrorKind::ExclusiveMaximum { limit } => {
            out.push(finding(
                "out-of-range",
                range_message(instance, "greater than the maximum", limit, expected),
                None,
            ));
        }
        ValidationErrorKind::MinLength { .. } => {
            let what = expected.map_or(String::new(), |e| format!(": expected {e}"));
            out.push(finding(
                "invalid-value",
                format!("must not be empty{what}"),
                None,
            ));
        }
        ValidationErrorKind::MinItems { limit } => {
            let what = expected.map_or(String::new(), |e| format!(": expected {e}"));
            out.push(finding(
                "invalid-value",
                format!("needs at least {limit} item(s){what}"),
                None,
            ));
        }
        ValidationErrorKind::MinProperties { .. } | ValidationErrorKind::MaxProperties { .. } => {
            let what = expected.unwrap_or("a different number of fields");
            out.push(finding("invalid-value", format!("expected {what}"), None));
        }
        _ => {
            // Keywords the schemas do not use today; the validator's own words, values masked.
            out.push(finding("schema", error.masked().to_string(), None));
        }
    }
}

/// Whether the failing keyword applies to the reference object itself (`.../secretRef/type`)
/// rather than to one of its fields.
fn path_ends_at_secret(keyword_location: &str) -> bool {
    keyword_location.ends_with("/$defs/secretRef/type")
}

/// The schema object holding the failing keyword, found from its absolute location
/// (`https://.../site.schema.json#/properties/spec/.../pxeVlanVid/maximum`).
fn parent_schema(keyword_location: &str) -> Option<&'static Json> {
    let (uri, fragment) = keyword_location.split_once('#')?;
    let file = uri.rsplit('/').next()?;
    let fragment = fragment.replace("%24", "$").replace("%25", "%");
    let parent = fragment.rsplit_once('/').map_or("", |(parent, _)| parent);
    schema_document(file)?.pointer(parent)
}

/// Field names a schema object accepts: its own `properties` and those of a schema it `$ref`s
/// in the same breath (a Node spec: its fields plus the shared node fields).
fn known_properties(schema: Option<&'static Json>) -> Vec<String> {
    let Some(schema) = schema else {
        return Vec::new();
    };
    let mut names: Vec<String> = property_names(schema);
    if let Some(reference) = schema.get("$ref").and_then(Json::as_str)
        && let Some(target) = resolve_ref(reference)
    {
        names.extend(property_names(target));
    }
    names
}

fn property_names(schema: &Json) -> Vec<String> {
    schema
        .get("properties")
        .and_then(Json::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

fn resolve_ref(reference: &str) -> Option<&'static Json> {
    let (file, pointer) = reference.split_once('#')?;
    schema_document(file)?.pointer(pointer)
}

fn type_names(kind: &TypeKind) -> Vec<JsonType> {
    match kind {
        TypeKind::Single(t) => vec![*t],
        TypeKind::Multiple(set) => set.iter().collect(),
    }
}

fn type_name(t: JsonType) -> &'static str {
    match t {
        JsonType::Null => "null",
        JsonType::Boolean => "a boolean",
        JsonType::Integer => "an integer",
        JsonType::Number => "a number",
        JsonType::String => "a string",
        JsonType::Array => "a list",
        JsonType::Object => "a mapping",
    }
}

fn json_type_name(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "a mapping",
    }
}

/// A value as quoted in messages: scalars verbatim in backticks, containers by type.
fn short(value: &Json) -> String {
    match value {
        Json::String(s) => format!("`{s}`"),
        Json::Array(_) | Json::Object(_) => json_type_name(value).to_string(),
        other => format!("`{other}`"),
    }
}

fn type_message(
    instance: &Json,
    wanted: &[JsonType],
    expected: Option<&str>,
    secret: bool,
) -> (String, Option<String>) {
    let wanted_text = wanted
        .iter()
        .map(|t| type_name(*t))
        .collect::<Vec<_>>()
        .join(" or ");
    let found = if secret {
        json_type_name(instance).to_string()
    } else {
        match instance {
            Json::Array(_) | Json::Object(_) | Json::Null => json_type_name(instance).to_string(),
            other => format!("{} {}", json_type_name(other), short(other)),
        }
    };
    if wanted == [JsonType::Boolean]
        && let Some(text) = instance.as_str()
    {
        let lower = text.to_ascii_lowercase();
        if ["yes", "no", "on", "off", "y", "n"].contains(&lower.as_str()) {
            return (
                format!(
                    "`{text}` is a string, not a boolean: manifests follow YAML 1.2, where only true and false are booleans"
                ),
                Some("write true or false".into()),
            );
        }
        if lower == "true" || lower == "false" {
            return (
                format!("expected a boolean, found the quoted string `\"{text}\"`"),
                Some(format!("remove the quotes: {lower}")),
            );
        }
    }
    let hint = match (wanted, instance) {
        ([JsonType::Integer] | [JsonType::Number], Json::String(s))
            if s.trim().parse::<f64>().is_ok() =>
        {
            Some(format!("remove the quotes: {}", s.trim()))
        }
        ([JsonType::String], Json::Number(n)) => Some(format!("quote it: \"{n}\"")),
        _ => expected.map(|e| format!("expected {e}")),
    };
    (format!("expected {wanted_text}, found {found}"), hint)
}

fn range_message(instance: &Json, relation: &str, limit: &Json, expected: Option<&str>) -> String {
    let what = expected.map_or(String::new(), |e| format!(": expected {e}"));
    format!("{} is {relation} {limit}{what}", short(instance))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn site() -> Json {
        json!({
            "apiVersion": "metalform/v1",
            "kind": "Site",
            "metadata": {"name": "dc1"},
            "spec": {
                "region": "us-east-1",
                "maas": {"url": "http://maas:5240/MAAS", "apiKey": {"vault": "kv/maas/dc1", "key": "token"}},
                "power": {"defaultCredentials": {"vault": "kv/power/dc1"}},
                "network": {"pxeIface": "ens19", "pxeVlanVid": 46, "nodePxeIface": "eno8303"},
                "deploy": {"password": {"vault": "kv/deploy/dc1", "key": "password"}}
            }
        })
    }

    #[test]
    fn every_embedded_schema_compiles() {
        for kind in Kind::ALL {
            assert!(
                validate(kind, &json!({}))
                    .iter()
                    .any(|f| f.code == "missing-field")
            );
        }
        assert!(validate(Kind::Site, &site()).is_empty());
    }

    #[test]
    fn unknown_fields_point_at_the_key_with_a_suggestion() {
        let mut doc = site();
        doc["spec"]["network"]["pxeVlanVID"] = json!(46);
        let findings = validate(Kind::Site, &doc);
        let unknown = findings.iter().find(|f| f.code == "unknown-field").unwrap();
        assert_eq!(display_path(&unknown.path), "spec.network.pxeVlanVID");
        assert!(unknown.at_key);
        assert_eq!(unknown.hint.as_deref(), Some("did you mean `pxeVlanVid`?"));
    }

    #[test]
    fn inline_secrets_are_refused_without_the_value() {
        let mut doc = site();
        doc["spec"]["deploy"]["password"] = json!("hunter2");
        let findings = validate(Kind::Site, &doc);
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0].code, "inline-secret");
        let shown = format!("{findings:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn yaml_1_2_booleans_and_ranges_are_explained() {
        let mut doc = site();
        doc["spec"]["reconcile"] = json!({"prune": "yes"});
        doc["spec"]["network"]["pxeVlanVid"] = json!(5000);
        let findings = validate(Kind::Site, &doc);
        let messages: Vec<&str> = findings.iter().map(|f| f.message.as_str()).collect();
        assert!(messages.contains(&"`yes` is a string, not a boolean: manifests follow YAML 1.2, where only true and false are booleans"), "{messages:?}");
        assert!(
            messages
                .contains(&"`5000` is greater than the maximum 4094: expected a VLAN id, 1–4094"),
            "{messages:?}"
        );
    }
}
