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

use crate::shape_compare;
use crate::sim_support;

use serde_json::Value;
use shape_compare::{assert_has_shape, assert_same_shape, compare, fixture};
use sim_support::{Sim, fleet};

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
