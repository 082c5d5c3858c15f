//! Shape test: simulator responses have the field names and JSON types of the real MAAS
//! responses in tests/fixtures/maas (copied from ../shared/maas/fixtures) (machines, interfaces, block devices, subnets, events,
//! version), tolerant only of the variations API_REFERENCE.md documents (§3.2 field
//! additions by version, §3.3 variability, §5.x "only if present" fields).
//!
//! Exact both ways against the captures of a real MAAS 2.9 on physical servers (yorc: machine,
//! interface_set, links, embedded subnet and VLAN, blockdevice_set, physicalblockdevice_set,
//! boot_disk, partitions), the events and version examples and gomaasapi's version. The
//! 2.5-era MAAS API examples and the gomaasclient captures predate fields that §3.1/§5.x list
//! for 3.6 (`link_connected`, `numa_node`, subnet `description`, …): against those, every
//! captured field must be present with its type, and extra fields are allowed.

mod sim_support;

use serde_json::Value;
use sim_support::{Sim, fixtures_dir, fleet};

/// Fields MAAS ≥ 3.2 emits that the (older) captures predate (API_REFERENCE.md §3.2), the
/// 3.x `workload_annotations` alias of `owner_data`, and the subnet's
/// `disabled_boot_architectures` (§5.20 DISPLAYED_SUBNET_FIELDS).
const ADDED_IN_3X: &[&str] = &[
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
const ONLY_IN_OLD_OR_OTHER: &[&str] = &[
    "iscsiblockdevice_set",
    "service_set",
    "version",
    "constraints_by_type",
];

/// Link fields present only when assigned/linked (§5.19).
const OPTIONAL_IN_LINKS: &[&str] = &["ip_address", "subnet"];

fn kind(v: &Value) -> &'static str {
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
enum Mode {
    /// Same field set both ways (modulo the documented variations): captures of MAAS 2.9+.
    Exact,
    /// Every field of the capture must be there with its type; extra simulator fields are
    /// fine. For the 2.5-era API examples, which predate fields added in 2.6–3.0.
    Subset,
}

/// Compares `sim` against `real`, collecting every difference MAAS does not document.
fn compare(sim: &Value, real: &Value, path: &str, diffs: &mut Vec<String>) {
    compare_in(sim, real, path, diffs, Mode::Exact)
}

fn compare_in(sim: &Value, real: &Value, path: &str, diffs: &mut Vec<String>, mode: Mode) {
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

fn fixture(name: &str) -> Value {
    let text = std::fs::read_to_string(fixtures_dir().join(name)).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn assert_same_shape(what: &str, sim: &Value, real: &Value) {
    assert_shape(what, sim, real, Mode::Exact);
}

/// For the 2.5-era MAAS API examples.
fn assert_has_shape(what: &str, sim: &Value, real: &Value) {
    assert_shape(what, sim, real, Mode::Subset);
}

fn assert_shape(what: &str, sim: &Value, real: &Value, mode: Mode) {
    let mut diffs = Vec::new();
    compare_in(sim, real, what, &mut diffs, mode);
    assert!(
        diffs.is_empty(),
        "{what} differs from the real MAAS response:\n{}",
        diffs.join("\n")
    );
}

#[tokio::test]
async fn simulator_responses_have_the_shape_of_real_maas() {
    let sim = Sim::start(fleet(2)).await;
    let sids = sim.system_ids().await;
    let sid = &sids[0];
    let roce = sim
        .get(&format!("nodes/{sid}/interfaces/enp28s0np0/"), &[])
        .await
        .json();
    // A deployed machine with a flat layout, a STATIC RoCE link and an AUTO address.
    sim.op(
        &format!("machines/{sid}/"),
        "set_storage_layout",
        &[("storage_layout", "flat")],
    )
    .await
    .expect(200);
    sim.post(
        "subnets/",
        &[
            ("cidr", "172.30.9.60/31"),
            ("gateway_ip", "172.30.9.60"),
            ("vlan", &roce["vlan"]["id"].to_string()),
        ],
    )
    .await
    .expect(200);
    sim.op(
        &format!("nodes/{sid}/interfaces/enp28s0np0/"),
        "link_subnet",
        &[("mode", "STATIC"), ("subnet", "cidr:172.30.9.60/31")],
    )
    .await
    .expect(200);
    sim.op(&format!("machines/{sid}/"), "deploy", &[])
        .await
        .expect(200);
    sim.advance(601);
    let machine = sim.machine(sid).await;
    assert_eq!(machine["status_name"], "Deployed");

    // Machines: real hardware (yorc, MAAS 2.9) and MAAS's own API examples.
    assert_same_shape(
        "machine(yorc deployed)",
        &machine,
        &fixture("yorc__all_test_data__machineDeployed.json"),
    );
    let deploying = sim
        .op(&format!("machines/{}/", sids[1]), "deploy", &[])
        .await
        .expect(200)
        .json();
    assert_same_shape(
        "machine(yorc deploy answer)",
        &deploying,
        &fixture("yorc__all_test_data__deployResponse.json"),
    );
    let examples = fixture("maas-3.6__api-examples__machines.json");
    assert_has_shape(
        "machine(api-examples machines-deploy)",
        &machine,
        &examples["machines-deploy"],
    );
    let list = sim.get("machines/", &[]).await.json();
    assert_same_shape(
        "machines list",
        &list,
        &Value::Array(vec![fixture("yorc__all_test_data__machineDeployed.json")]),
    );

    // Interfaces.
    let interfaces = sim
        .get(&format!("nodes/{sid}/interfaces/"), &[])
        .await
        .json();
    assert_has_shape(
        "interfaces",
        &interfaces,
        &fixture("gomaasclient__interfaces.json"),
    );
    let nodes = fixture("maas-3.6__api-examples__nodes.json");
    assert_has_shape(
        "interfaces(api-examples)",
        &interfaces,
        &nodes["interfaces-read"],
    );
    let linked = sim
        .get(&format!("nodes/{sid}/interfaces/enp28s0np0/"), &[])
        .await
        .json();
    assert_has_shape(
        "interface(link-subnet)",
        &linked,
        &nodes["interfaces-link-subnet"],
    );

    // Block devices.
    let disks = sim
        .get(&format!("nodes/{sid}/blockdevices/"), &[])
        .await
        .json();
    assert_has_shape(
        "block devices",
        &disks,
        &fixture("gomaasclient__block_devices.json"),
    );
    assert_has_shape(
        "block devices(api-examples)",
        &disks,
        &nodes["block-devs-read"],
    );
    let disk = sim
        .get(&format!("nodes/{sid}/blockdevices/sda/"), &[])
        .await
        .json();
    assert_has_shape(
        "block device",
        &disk,
        &fixture("gomaasclient__block_device.json"),
    );

    // Subnets.
    let subnets = sim.get("subnets/", &[]).await.json();
    assert_has_shape("subnets", &subnets, &fixture("gomaasclient__subnets.json"));
    let subnet = sim.get("subnets/1/", &[]).await.json();
    assert_has_shape(
        "subnet(api-examples)",
        &subnet,
        &fixture("maas-3.6__api-examples__subnets.json")["subnets-read-by-id"],
    );

    // Events and version.
    let events = sim
        .get("events/", &[("op", "query"), ("limit", "5")])
        .await
        .json();
    assert_same_shape(
        "events",
        &events,
        &fixture("maas-3.6__api-examples__events.json")["events-query"],
    );
    let version = sim.get("version/", &[]).await.json();
    assert_same_shape(
        "version",
        &version,
        &fixture("maas-3.6__api-examples__version.json")["version"],
    );
    assert_same_shape(
        "version(gomaasapi)",
        &version,
        &fixture("gomaasapi__controller_test__versionResponse.json"),
    );

    // The token answer and the power state answer.
    let power = sim
        .get(&format!("machines/{sid}/"), &[("op", "query_power_state")])
        .await
        .json();
    assert_same_shape("query_power_state", &power, &nodes["query-power-state"]);
}

#[test]
fn the_comparison_catches_differences() {
    let mut diffs = Vec::new();
    let real: Value =
        serde_json::json!({"a": 1, "b": [{"c": "x"}], "iscsiblockdevice_set": [], "params": ""});
    let sim: Value =
        serde_json::json!({"a": "1", "b": [{"d": "x"}], "last_sync": null, "params": {}});
    compare(&sim, &real, "m", &mut diffs);
    assert_eq!(
        diffs,
        vec![
            "m.a: simulator string vs MAAS number",
            "m.b[].c: in MAAS, missing in the simulator",
            "m.b[].d: in the simulator, not in MAAS",
        ]
    );
}
