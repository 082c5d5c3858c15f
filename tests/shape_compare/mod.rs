//! How a simulator answer is compared with a real MAAS response (tests/fixtures/maas): field
//! names and JSON types, tolerant only of the variations API_REFERENCE.md documents (§3.2
//! field additions by version, §3.3 variability, §5.x "only if present" fields). Used by
//! tests/sim_shape.rs and the table of tests/sim_conformance.rs.
#![allow(dead_code)]

use serde_json::Value;

use crate::sim_support::fixtures_dir;

/// Fields MAAS ≥ 3.2 emits that the (older) captures predate (API_REFERENCE.md §3.2), the
/// 3.x `workload_annotations` alias of `owner_data`, and the subnet's
/// `disabled_boot_architectures` (§5.20 DISPLAYED_SUBNET_FIELDS).
pub const ADDED_IN_3X: &[&str] = &[
    "disabled_boot_architectures",
    "last_sync",
    "next_sync",
    "sync_interval",
    "enable_hw_sync",
    "ephemeral_deploy",
    "parent",
    "error_description",
    "enable_kernel_crash_dump",
    "workload_annotations",
];

/// Fields of old captures that a 3.6 machine does not have (§3.3: ≤2.9 `iscsiblockdevice_set`,
/// controller-only `service_set`/`version`; `constraints_by_type` only on allocate answers).
pub const ONLY_IN_OLD_OR_OTHER: &[&str] = &[
    "iscsiblockdevice_set",
    "service_set",
    "version",
    "constraints_by_type",
];

/// Link fields present only when assigned/linked (§5.19).
pub const OPTIONAL_IN_LINKS: &[&str] = &["ip_address", "subnet"];

pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// How strictly a capture is compared.
#[derive(Clone, Copy, PartialEq)]
pub enum Mode {
    /// Same field set both ways (modulo the documented variations): captures of MAAS 2.9+.
    Exact,
    /// Every field of the capture must be there with its type; extra simulator fields are
    /// fine. For the 2.5-era API examples, which predate fields added in 2.6–3.0.
    Subset,
}

/// Compares `sim` against `real`, collecting every difference MAAS does not document.
pub fn compare(sim: &Value, real: &Value, path: &str, diffs: &mut Vec<String>) {
    compare_in(sim, real, path, diffs, Mode::Exact)
}

pub fn compare_in(sim: &Value, real: &Value, path: &str, diffs: &mut Vec<String>, mode: Mode) {
    let field = path.rsplit('.').next().unwrap_or(path);
    match (sim, real) {
        (Value::Null, _) | (_, Value::Null) => {} // nullable fields (§3.3)
        // interface `params`: "" or {} (§3.3).
        (Value::String(_), Value::Object(_)) | (Value::Object(_), Value::String(_))
            if field == "params" => {}
        (Value::Object(s), Value::Object(r)) => {
            let in_links = path.ends_with("links[]");
            for key in r.keys() {
                let documented = ONLY_IN_OLD_OR_OTHER.contains(&key.as_str())
                    || (in_links && OPTIONAL_IN_LINKS.contains(&key.as_str()));
                if !s.contains_key(key) && !documented {
                    diffs.push(format!("{path}.{key}: in MAAS, missing in the simulator"));
                }
            }
            for (key, value) in s {
                match r.get(key) {
                    Some(real_value) => {
                        compare_in(value, real_value, &format!("{path}.{key}"), diffs, mode)
                    }
                    None if ADDED_IN_3X.contains(&key.as_str()) || mode == Mode::Subset => {}
                    None if in_links && OPTIONAL_IN_LINKS.contains(&key.as_str()) => {}
                    None => diffs.push(format!("{path}.{key}: in the simulator, not in MAAS")),
                }
            }
        }
        (Value::Array(s), Value::Array(r)) => {
            if let (Some(first_sim), Some(first_real)) = (s.first(), r.first()) {
                compare_in(first_sim, first_real, &format!("{path}[]"), diffs, mode);
            }
        }
        (s, r) if kind(s) == kind(r) => {}
        (s, r) => diffs.push(format!("{path}: simulator {} vs MAAS {}", kind(s), kind(r))),
    }
}

pub fn fixture(name: &str) -> Value {
    let text = std::fs::read_to_string(fixtures_dir().join(name)).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

pub fn assert_same_shape(what: &str, sim: &Value, real: &Value) {
    assert_shape(what, sim, real, Mode::Exact);
}

/// For the 2.5-era MAAS API examples.
pub fn assert_has_shape(what: &str, sim: &Value, real: &Value) {
    assert_shape(what, sim, real, Mode::Subset);
}

pub fn assert_shape(what: &str, sim: &Value, real: &Value, mode: Mode) {
    let mut diffs = Vec::new();
    compare_in(sim, real, what, &mut diffs, mode);
    assert!(
        diffs.is_empty(),
        "{what} differs from the real MAAS response:\n{}",
        diffs.join("\n")
    );
}
