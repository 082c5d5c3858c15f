//! The provisioning recipe (seed 003 "Validation and Recipe Schema", 022): validated against
//! schema/recipe.schema.json (the current version) or the previous version,
//! schema/recipe.v1.schema.json ("the controller supports N-1 schemas").
//!
//! A recipe names its version with an optional `"$schema": "<the schema's $id>"`; without it
//! the current version applies. Validation returns every error at once, each with the JSON
//! path of the field (`$.partition_layout[1].size`) and a message that never quotes the value:
//! recipes carry user-data, which may hold passwords.

use std::sync::OnceLock;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{JsonType, ValidationError, Validator};
use serde::Serialize;
use serde_json::Value as Json;

/// One version of the recipe format.
#[derive(Debug)]
pub struct RecipeVersion {
    /// 1, 2, …
    pub version: u32,
    /// The schema's `$id`, which a recipe writes in `$schema` to name this version.
    pub id: &'static str,
    /// The schema document as shipped (written to the task ISO as recipe.schema.json).
    pub schema_text: &'static str,
    schema: Json,
    validator: Validator,
}

/// The schema files, newest first: the current version and the one before it.
const SCHEMAS: [&str; 2] = [
    include_str!("../../../schema/recipe.schema.json"),
    include_str!("../../../schema/recipe.v1.schema.json"),
];

fn versions() -> &'static [RecipeVersion] {
    static VERSIONS: OnceLock<Vec<RecipeVersion>> = OnceLock::new();
    VERSIONS.get_or_init(|| {
        SCHEMAS
            .iter()
            .map(|text| {
                let schema: Json = serde_json::from_str(text)
                    .unwrap_or_else(|e| panic!("embedded recipe schema is not JSON: {e}"));
                let id = schema["$id"]
                    .as_str()
                    .expect("every recipe schema has an $id");
                let version = id
                    .rsplit_once("/v")
                    .and_then(|(_, tail)| tail.strip_suffix(".json"))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("recipe schema $id `{id}` does not end in /vN.json"));
                let validator = jsonschema::options()
                    .with_draft(jsonschema::Draft::Draft202012)
                    .should_validate_formats(false)
                    .build(&schema)
                    .unwrap_or_else(|e| panic!("recipe schema {id} does not compile: {e}"));
                RecipeVersion {
                    version,
                    id: Box::leak(id.to_owned().into_boxed_str()),
                    schema_text: text,
                    schema,
                    validator,
                }
            })
            .collect()
    })
}

/// The current recipe version (what a recipe without `$schema` is checked against).
pub fn current() -> &'static RecipeVersion {
    &versions()[0]
}

/// Every accepted version, newest first.
pub fn accepted() -> &'static [RecipeVersion] {
    versions()
}

/// One reason a recipe was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecipeError {
    /// JSON path of the field, from the recipe's root: `$`, `$.target_disk`,
    /// `$.partition_layout[1].size`.
    pub path: String,
    /// A stable machine-readable code: missing-field, unknown-field, wrong-type,
    /// invalid-value, out-of-range, unsupported-version.
    pub code: &'static str,
    /// What is wrong and what was expected; never the value itself.
    pub message: String,
}

impl std::fmt::Display for RecipeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Validates a recipe against the version it names (or the current one): `Ok` with that
/// version, or every error found.
pub fn validate(recipe: &Json) -> Result<&'static RecipeVersion, Vec<RecipeError>> {
    let version = match recipe.get("$schema") {
        None => current(),
        Some(Json::String(id)) => match accepted().iter().find(|v| v.id == id) {
            Some(version) => version,
            None => return Err(vec![unsupported_version(id)]),
        },
        Some(other) => {
            return Err(vec![RecipeError {
                path: "$['$schema']".into(),
                code: "wrong-type",
                message: format!("expected a string, found {}", json_type_name(other)),
            }]);
        }
    };
    let mut errors = Vec::new();
    for error in version.validator.iter_errors(recipe) {
        explain(version, &error, &mut errors);
    }
    errors.sort_by(|a, b| a.path.cmp(&b.path).then(a.message.cmp(&b.message)));
    errors.dedup();
    if errors.is_empty() {
        Ok(version)
    } else {
        Err(errors)
    }
}

fn unsupported_version(id: &str) -> RecipeError {
    let known: Vec<&str> = accepted().iter().map(|v| v.id).collect();
    // An older version of ours is "no longer supported"; anything else is unknown.
    let ours = id
        .rsplit_once("/v")
        .filter(|(base, _)| current().id.starts_with(base))
        .is_some();
    RecipeError {
        path: "$['$schema']".into(),
        code: "unsupported-version",
        message: if ours {
            format!(
                "recipe format `{id}` is no longer supported: this controller accepts {}",
                known.join(" and ")
            )
        } else {
            format!(
                "unknown recipe format `{id}`: expected one of {}",
                known.join(", ")
            )
        },
    }
}

/// JSON path text of an instance location.
fn json_path(error: &ValidationError<'_>) -> String {
    let mut path = String::from("$");
    for segment in error.instance_path().iter() {
        match segment {
            jsonschema::paths::LocationSegment::Property(key) => push_key(&mut path, &key),
            jsonschema::paths::LocationSegment::Index(i) => path.push_str(&format!("[{i}]")),
        }
    }
    path
}

fn push_key(path: &mut String, key: &str) {
    let plain = !key.is_empty()
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !key.starts_with(|c: char| c.is_ascii_digit());
    if plain {
        path.push('.');
        path.push_str(key);
    } else {
        path.push_str(&format!("['{}']", key.replace('\'', "\\'")));
    }
}

/// The schema object holding the failing keyword (for its `x-expected` and `description`).
fn parent_schema<'a>(version: &'a RecipeVersion, error: &ValidationError<'_>) -> Option<&'a Json> {
    let location = error.absolute_keyword_location()?.as_str().to_owned();
    let (_, fragment) = location.split_once('#')?;
    let fragment = fragment.replace("%24", "$");
    let parent = fragment.rsplit_once('/').map_or("", |(parent, _)| parent);
    version.schema.pointer(parent)
}

fn explain(version: &RecipeVersion, error: &ValidationError<'_>, out: &mut Vec<RecipeError>) {
    let path = json_path(error);
    let parent = parent_schema(version, error);
    let expected = parent
        .and_then(|s| s.get("x-expected"))
        .and_then(Json::as_str);
    let push = |out: &mut Vec<RecipeError>, path: String, code, message: String| {
        out.push(RecipeError {
            path,
            code,
            message,
        })
    };
    let instance = error.instance();
    match error.kind() {
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            let known: Vec<String> = parent
                .and_then(|s| s.get("properties"))
                .and_then(Json::as_object)
                .map(|p| p.keys().cloned().collect())
                .unwrap_or_default();
            for name in unexpected {
                let mut field = path.clone();
                push_key(&mut field, name);
                let mut message = format!("unknown field `{name}`");
                if !known.is_empty() {
                    message.push_str(&format!(" (known fields: {})", known.join(", ")));
                }
                if name == "assets" && version.version < 2 {
                    message.push_str("; `assets` needs recipe format version 2");
                }
                push(out, field, "unknown-field", message);
            }
        }
        ValidationErrorKind::Required { property } => {
            let name = property.as_str().unwrap_or_default();
            let mut message = format!("missing required field `{name}`");
            if let Some(description) = parent
                .and_then(|s| s.pointer(&format!("/properties/{name}/description")))
                .and_then(Json::as_str)
            {
                message.push_str(&format!(": {description}"));
            }
            push(out, path, "missing-field", message);
        }
        ValidationErrorKind::Type { kind } => {
            let wanted: Vec<&str> = match kind {
                TypeKind::Single(t) => vec![type_name(*t)],
                TypeKind::Multiple(set) => set.iter().map(type_name).collect(),
            };
            push(
                out,
                path,
                "wrong-type",
                format!(
                    "expected {}, found {}",
                    wanted.join(" or "),
                    json_type_name(instance)
                ),
            );
        }
        ValidationErrorKind::Enum { options } => {
            let options: Vec<&str> = options
                .as_array()
                .map(|o| o.iter().filter_map(Json::as_str).collect())
                .unwrap_or_default();
            push(
                out,
                path,
                "invalid-value",
                format!("must be one of: {}", options.join(", ")),
            );
        }
        ValidationErrorKind::PropertyNames { error: inner } => {
            // The failing instance is a key of this object, not a value: name the key (keys
            // are names, not secrets).
            let name = inner.instance().as_str().unwrap_or_default();
            let what = parent
                .and_then(|s| s.pointer("/propertyNames/x-expected"))
                .and_then(Json::as_str)
                .unwrap_or("a different name");
            let mut field = path.clone();
            push_key(&mut field, name);
            push(
                out,
                field,
                "invalid-value",
                format!("`{name}` is not a valid name: expected {what}"),
            );
        }
        ValidationErrorKind::Pattern { .. } => {
            let what = expected.unwrap_or("a value matching the schema's pattern");
            push(
                out,
                path,
                "invalid-value",
                format!("not valid: expected {what}"),
            );
        }
        ValidationErrorKind::MinItems { limit } => push(
            out,
            path,
            "invalid-value",
            format!("needs at least {limit} item(s)"),
        ),
        ValidationErrorKind::MaxItems { limit } => push(
            out,
            path,
            "out-of-range",
            format!("has more than {limit} items"),
        ),
        ValidationErrorKind::MaxProperties { limit } => push(
            out,
            path,
            "out-of-range",
            format!("has more than {limit} entries"),
        ),
        _ => push(out, path, "invalid-value", error.masked().to_string()),
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
        JsonType::Object => "an object",
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
        Json::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The seed's Appendix A example.
    fn linux() -> Json {
        json!({
            "task_target": "install-linux.target",
            "target_disk": "/dev/sda",
            "oci_url": "controller.internal:8080/os-images/ubuntu-rootfs:22.04",
            "user_data": "IyEvYmluL2Jhc2gK",
            "partition_layout": [
                {"size": "512M", "type_guid": "ef00", "format": "vfat"},
                {"size": "100%", "type_guid": "8300", "format": "ext4"}
            ]
        })
    }

    fn paths(errors: &[RecipeError]) -> Vec<(&str, &str)> {
        errors
            .iter()
            .map(|e| (e.path.as_str(), e.message.as_str()))
            .collect()
    }

    #[test]
    fn the_seed_example_is_valid_in_both_versions() {
        assert_eq!(validate(&linux()).unwrap().version, 2);
        let mut v1 = linux();
        v1["$schema"] = json!("https://metalform.invalid/schema/recipe/v1.json");
        assert_eq!(validate(&v1).unwrap().version, 1);
        assert_eq!(
            current().id,
            "https://metalform.invalid/schema/recipe/v2.json"
        );
        assert_eq!(accepted().len(), 2, "N and N-1");
    }

    #[test]
    fn every_error_is_reported_with_its_path_and_without_the_value() {
        let recipe = json!({
            "task_target": "install-linux",
            "user_data": "not base64 ### hunter2",
            "oci_url": 7,
            "partition_layout": [
                {"size": "512M", "type_guid": "ef00", "format": "vfat"},
                {"size": "lots", "type_guid": "ef00", "format": "ntfs", "bootable": true}
            ],
            "assets": {".hidden": "AA==", "ok.xml": "AA=="}
        });
        let errors = validate(&recipe).unwrap_err();
        assert_eq!(
            paths(&errors),
            [
                (
                    "$",
                    "missing required field `target_disk`: The block device the task writes, e.g. /dev/sda or /dev/disk/by-id/...."
                ),
                (
                    "$.assets['.hidden']",
                    "`.hidden` is not a valid name: expected a file name of letters, digits, '_', '.' and '-', at most 64 characters, not starting with '.'"
                ),
                ("$.oci_url", "expected a string, found an integer"),
                (
                    "$.partition_layout[1].bootable",
                    "unknown field `bootable` (known fields: size, type_guid, format, label)"
                ),
                (
                    "$.partition_layout[1].format",
                    "must be one of: vfat, ext4, xfs, btrfs, swap, none"
                ),
                (
                    "$.partition_layout[1].size",
                    "not valid: expected a size such as 512M, 20G or 1T, or a percentage from 1% to 100%"
                ),
                (
                    "$.task_target",
                    "not valid: expected a systemd target name ending in .target, e.g. install-linux.target"
                ),
                (
                    "$.user_data",
                    "not valid: expected base64 text (A–Z, a–z, 0–9, +, / and = padding)"
                ),
            ]
        );
        let shown = format!("{errors:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn version_2_fields_are_refused_in_a_version_1_recipe() {
        let mut recipe = linux();
        recipe["$schema"] = json!("https://metalform.invalid/schema/recipe/v1.json");
        recipe["assets"] = json!({"unattend.xml": "PHhtbC8+"});
        recipe["partition_layout"][1]["format"] = json!("btrfs");
        let errors = validate(&recipe).unwrap_err();
        assert_eq!(
            paths(&errors),
            [
                (
                    "$.assets",
                    "unknown field `assets` (known fields: $schema, task_target, target_disk, oci_url, user_data, partition_layout); `assets` needs recipe format version 2"
                ),
                (
                    "$.partition_layout[1].format",
                    "must be one of: vfat, ext4, xfs, swap, none"
                ),
            ]
        );
        recipe.as_object_mut().unwrap().remove("$schema");
        assert_eq!(validate(&recipe).unwrap().version, 2);
    }

    #[test]
    fn unknown_and_retired_versions_are_named() {
        let mut recipe = linux();
        recipe["$schema"] = json!("https://metalform.invalid/schema/recipe/v0.json");
        let errors = validate(&recipe).unwrap_err();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].path, "$['$schema']");
        assert_eq!(errors[0].code, "unsupported-version");
        assert_eq!(
            errors[0].message,
            "recipe format `https://metalform.invalid/schema/recipe/v0.json` is no longer supported: this controller accepts https://metalform.invalid/schema/recipe/v2.json and https://metalform.invalid/schema/recipe/v1.json"
        );
        recipe["$schema"] = json!("https://example.com/other.json");
        assert!(
            validate(&recipe).unwrap_err()[0]
                .message
                .starts_with("unknown recipe format `https://example.com/other.json`")
        );
        recipe["$schema"] = json!(2);
        assert_eq!(
            validate(&recipe).unwrap_err()[0].message,
            "expected a string, found an integer"
        );
        assert_eq!(
            paths(&validate(&json!([])).unwrap_err()),
            [("$", "expected an object, found a list")]
        );
    }
}
