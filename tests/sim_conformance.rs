//! Conformance table: every simulator endpoint metalform's MAAS client calls, one row per
//! request, each compared with the real MAAS response that answers it in
//! ../shared/maas/fixtures (copied to tests/fixtures/maas) — the MAAS 3.6 API examples, the
//! gomaasapi/gomaasclient captures — or, where no capture exists, with the fields MAAS's
//! handler declares (cited). The comparison (tests/shape_compare) is by field names and JSON
//! types, tolerant only of what API_REFERENCE.md documents.
//!
//! The rows run in order against one simulator: a Ready fleet where the first machine gets a
//! RoCE /31, an LVM layout and owner data, then is deployed and released.

use crate::shape_compare;
use crate::sim_support;

use serde_json::{Value, json};
use shape_compare::{Mode, assert_shape, fixture};
use sim_support::{Sim, fleet};

/// What a row's answer is compared with.
#[derive(Clone, Copy)]
enum Real {
    /// A whole capture file.
    File(&'static str),
    /// One example of a capture file keyed by example name.
    Example(&'static str, &'static str),
    /// No capture exists: the fields the MAAS handler declares.
    Declared(&'static str, fn() -> Value),
}

/// Which part of the simulator's answer is compared.
#[derive(Clone, Copy)]
enum Part {
    Whole,
    /// The first element of a list answer.
    First,
    Field(&'static str),
}

struct Row {
    name: &'static str,
    method: &'static str,
    /// Below /MAAS/api/2.0/; placeholders `{sid}`, `{sid2}`, `{fabric}`, `{vid}`, `{vlan}`,
    /// `{iface}`, `{disk}`, `{link}`.
    path: &'static str,
    op: Option<&'static str>,
    form: &'static [(&'static str, &'static str)],
    part: Part,
    real: Real,
    mode: Mode,
}

const fn get(name: &'static str, path: &'static str, real: Real, mode: Mode) -> Row {
    Row {
        name,
        method: "GET",
        path,
        op: None,
        form: &[],
        part: Part::Whole,
        real,
        mode,
    }
}

const FABRICS: &str = "maas-3.6__api-examples__fabrics.json";
const NODES: &str = "maas-3.6__api-examples__nodes.json";
const MACHINES: &str = "maas-3.6__api-examples__machines.json";
const SUBNETS: &str = "maas-3.6__api-examples__subnets.json";

/// api/tags.py TagHandler.fields plus the handler's resource_uri.
fn tag_fields() -> Value {
    json!({"name": "", "definition": "", "comment": "", "kernel_opts": "", "resource_uri": ""})
}

/// api/tags.py TagHandler.update_nodes: `{"added": n, "removed": n}`.
fn tag_nodes_changed() -> Value {
    json!({"added": 0, "removed": 0})
}

use Mode::{Exact, Subset};

const ROWS: &[Row] = &[
    // The catalog: fabrics, VLANs, zones, pools, domains.
    get(
        "fabrics",
        "fabrics/",
        Real::Example(FABRICS, "fabrics-read"),
        Exact,
    ),
    get(
        "fabrics (gomaasapi)",
        "fabrics/",
        Real::File("gomaasapi__fabric_test__fabricResponse.json"),
        Subset,
    ),
    get(
        "fabric",
        "fabrics/{fabric}/",
        Real::Example(FABRICS, "fabrics-read-by-id"),
        Exact,
    ),
    Row {
        method: "PUT",
        form: &[("class_type", "roce")],
        ..get(
            "fabric update",
            "fabrics/{fabric}/",
            Real::Example(FABRICS, "fabrics-update"),
            Exact,
        )
    },
    get(
        "vlans",
        "fabrics/{fabric}/vlans/",
        Real::Example(FABRICS, "vlan-list"),
        Exact,
    ),
    get(
        "vlans (gomaasclient)",
        "fabrics/{fabric}/vlans/",
        Real::File("gomaasclient__vlans.json"),
        Exact,
    ),
    get(
        "vlan",
        "fabrics/{fabric}/vlans/{vid}/",
        Real::Example(FABRICS, "vlan-read"),
        Exact,
    ),
    get(
        "vlan (gomaasclient)",
        "fabrics/{fabric}/vlans/{vid}/",
        Real::File("gomaasclient__vlan.json"),
        Exact,
    ),
    get(
        "vlan by id",
        "vlans/{vlan}/",
        Real::Example(FABRICS, "vlan-read"),
        Exact,
    ),
    Row {
        method: "PUT",
        form: &[("mtu", "9000")],
        ..get(
            "vlan update",
            "fabrics/{fabric}/vlans/{vid}/",
            Real::Example(FABRICS, "vlan-update"),
            Exact,
        )
    },
    get(
        "zones",
        "zones/",
        Real::File("gomaasapi__zone_test__zoneResponse.json"),
        Subset,
    ),
    get(
        "zone",
        "zones/default/",
        Real::File("gomaasclient__zone.json"),
        Exact,
    ),
    get(
        "resource pools",
        "resourcepools/",
        Real::File("gomaasclient__resource_pools.json"),
        Exact,
    ),
    get(
        "resource pool",
        "resourcepool/0/",
        Real::File("gomaasclient__resource_pool.json"),
        Exact,
    ),
    get(
        "domains",
        "domains/",
        Real::File("gomaasclient__domains.json"),
        Subset,
    ),
    // Tags: no capture; the handler's fields.
    Row {
        method: "POST",
        form: &[("name", "gpu-h100"), ("comment", "metalform")],
        ..get(
            "tag create",
            "tags/",
            Real::Declared("api/tags.py TagHandler.fields", tag_fields),
            Exact,
        )
    },
    get(
        "tag",
        "tags/gpu-h100/",
        Real::Declared("api/tags.py TagHandler.fields", tag_fields),
        Exact,
    ),
    Row {
        method: "POST",
        op: Some("update_nodes"),
        form: &[("add", "{sid}")],
        ..get(
            "tag update_nodes",
            "tags/gpu-h100/",
            Real::Declared("api/tags.py TagHandler.update_nodes", tag_nodes_changed),
            Exact,
        )
    },
    Row {
        part: Part::First,
        ..get(
            "tag machines",
            "tags/gpu-h100/?op=machines",
            Real::Example(MACHINES, "machines-allocate"),
            Subset,
        )
    },
    // The RoCE port: a /31 on its VLAN, the port linked, read back, unlinked.
    Row {
        method: "POST",
        form: &[("cidr", "172.30.9.62/31"), ("vlan", "{vlan}")],
        ..get(
            "subnet create",
            "subnets/",
            Real::Example(SUBNETS, "subnets-create"),
            Subset,
        )
    },
    get(
        "subnet (gomaasclient)",
        "subnets/cidr:172.30.9.62/31/",
        Real::File("gomaasclient__subnet.json"),
        Subset,
    ),
    get(
        "subnets (gomaasapi)",
        "subnets/",
        Real::File("gomaasapi__subnet_test__subnetResponse.json"),
        Subset,
    ),
    Row {
        method: "PUT",
        form: &[("vlan", "{vlan}")],
        ..get(
            "interface update",
            "nodes/{sid}/interfaces/{iface}/",
            Real::Example(NODES, "interfaces-update"),
            Subset,
        )
    },
    Row {
        method: "POST",
        op: Some("link_subnet"),
        form: &[("mode", "STATIC"), ("subnet", "cidr:172.30.9.62/31")],
        ..get(
            "link_subnet",
            "nodes/{sid}/interfaces/{iface}/",
            Real::Example(NODES, "interfaces-link-subnet"),
            Subset,
        )
    },
    get(
        "interface",
        "nodes/{sid}/interfaces/{iface}/",
        Real::File("gomaasclient__interface.json"),
        Subset,
    ),
    get(
        "interface (gomaasapi)",
        "nodes/{sid}/interfaces/{iface}/",
        Real::File("gomaasapi__interface_test__interfaceResponse.json"),
        Subset,
    ),
    Row {
        part: Part::Field("links"),
        ..get(
            "interface links (gomaasapi)",
            "nodes/{sid}/interfaces/{iface}/",
            Real::File("gomaasapi__link_test__linksResponse.json"),
            Subset,
        )
    },
    get(
        "interface by id",
        "nodes/{sid}/interfaces/{iface}/",
        Real::Example(NODES, "interfaces-read-by-id"),
        Subset,
    ),
    // Storage: MAAS's LVM layout on the boot disk.
    Row {
        method: "POST",
        op: Some("set_storage_layout"),
        form: &[
            ("storage_layout", "lvm"),
            ("vg_name", "vgroot"),
            ("lv_name", "lvroot"),
        ],
        ..get(
            "set_storage_layout",
            "machines/{sid}/",
            Real::Example(MACHINES, "machines-set-storage"),
            Subset,
        )
    },
    get(
        "block devices with partitions",
        "nodes/{sid}/blockdevices/",
        Real::Example(NODES, "partitions-read"),
        Subset,
    ),
    get(
        "block devices (gomaasapi)",
        "nodes/{sid}/blockdevices/",
        Real::File("gomaasapi__blockdevice_test__blockdevicesResponse.json"),
        Subset,
    ),
    get(
        "block device",
        "nodes/{sid}/blockdevices/{disk}/",
        Real::Example(NODES, "block-devs-read-by-id"),
        Subset,
    ),
    Row {
        part: Part::Field("partitions"),
        ..get(
            "partitions (gomaasapi)",
            "nodes/{sid}/blockdevices/{disk}/",
            Real::File("gomaasapi__partition_test__partitionsResponse.json"),
            Subset,
        )
    },
    // Owner data and the machine answers along deploy and release. (yorc's allocate answer
    // carries `constraints_by_type.storage`, which MAAS adds only for a `storage` constraint —
    // api/machines.py allocate — and metalform sends none.)
    Row {
        method: "POST",
        op: Some("allocate"),
        form: &[("system_id", "{sid}")],
        ..get(
            "allocate",
            "machines/",
            Real::Example(MACHINES, "machines-allocate"),
            Subset,
        )
    },
    Row {
        method: "POST",
        op: Some("set_owner_data"),
        form: &[("somekey", "somevalue")],
        ..get(
            "set_owner_data",
            "machines/{sid}/",
            Real::Example(NODES, "set-owner-data"),
            Subset,
        )
    },
    Row {
        method: "POST",
        op: Some("deploy"),
        ..get(
            "deploy",
            "machines/{sid}/",
            Real::Example(MACHINES, "machines-deploy"),
            Subset,
        )
    },
    get(
        "node",
        "nodes/{sid}/",
        Real::Example(NODES, "read-node"),
        Subset,
    ),
    get(
        "machine (gomaasclient)",
        "machines/{sid}/",
        Real::File("gomaasclient__machine.json"),
        Subset,
    ),
    Row {
        method: "POST",
        op: Some("release"),
        ..get(
            "release",
            "machines/{sid}/",
            Real::Example(MACHINES, "machines-release"),
            Subset,
        )
    },
    Row {
        method: "POST",
        op: Some("allocate"),
        form: &[("system_id", "{sid2}")],
        ..get(
            "allocate another",
            "machines/",
            Real::Example(MACHINES, "machines-allocate"),
            Subset,
        )
    },
    Row {
        method: "POST",
        op: Some("mark_broken"),
        ..get(
            "mark_broken",
            "machines/{sid2}/",
            Real::Example(MACHINES, "machines-mark-broken"),
            Subset,
        )
    },
    Row {
        method: "POST",
        op: Some("mark_fixed"),
        ..get(
            "mark_fixed",
            "machines/{sid2}/",
            Real::Example(MACHINES, "machines-mark-fixed"),
            Subset,
        )
    },
    Row {
        method: "POST",
        op: Some("commission"),
        ..get(
            "commission",
            "machines/{sid2}/",
            Real::Example(MACHINES, "machines-commission"),
            Subset,
        )
    },
    get(
        "machines (gomaasclient)",
        "machines/",
        Real::File("gomaasclient__machines.json"),
        Subset,
    ),
    get(
        "nodes (gomaasclient)",
        "nodes/",
        Real::File("gomaasclient__nodes.json"),
        Subset,
    ),
];

struct Ids {
    sid: String,
    sid2: String,
    fabric: String,
    vid: String,
    vlan: String,
    iface: String,
    disk: String,
}

impl Ids {
    fn fill(&self, text: &str) -> String {
        text.replace("{sid2}", &self.sid2)
            .replace("{sid}", &self.sid)
            .replace("{fabric}", &self.fabric)
            .replace("{vid}", &self.vid)
            .replace("{vlan}", &self.vlan)
            .replace("{iface}", &self.iface)
            .replace("{disk}", &self.disk)
    }
}

fn real(source: Real) -> (String, Value) {
    match source {
        Real::File(file) => (file.to_string(), fixture(file)),
        Real::Example(file, key) => {
            let all = fixture(file);
            let example = all.get(key).cloned();
            (
                format!("{file}[{key}]"),
                example.unwrap_or_else(|| panic!("{file} has no example {key}")),
            )
        }
        Real::Declared(cite, fields) => (cite.to_string(), fields()),
    }
}

#[tokio::test]
async fn every_endpoint_the_client_calls_answers_as_maas_does() {
    let sim = Sim::start(fleet(2)).await;
    let sids = sim.system_ids().await;
    let roce = sim
        .get(&format!("nodes/{}/interfaces/enp28s0np0/", sids[0]), &[])
        .await
        .expect(200)
        .json();
    let disk = sim
        .get(&format!("nodes/{}/blockdevices/sda/", sids[0]), &[])
        .await
        .expect(200)
        .json();
    let ids = Ids {
        sid: sids[0].clone(),
        sid2: sids[1].clone(),
        fabric: roce["vlan"]["fabric_id"].to_string(),
        vid: roce["vlan"]["vid"].to_string(),
        vlan: roce["vlan"]["id"].to_string(),
        iface: roce["id"].to_string(),
        disk: disk["id"].to_string(),
    };

    let mut checked = 0;
    for row in ROWS {
        let path = ids.fill(row.path);
        let (path, mut query) = match path.split_once('?') {
            Some((path, q)) => (path.to_string(), vec![q.split_once('=').unwrap()]),
            None => (path, vec![]),
        };
        let form: Vec<(String, String)> = row
            .form
            .iter()
            .map(|(k, v)| (k.to_string(), ids.fill(v)))
            .collect();
        let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let answer = match (row.method, row.op) {
            ("GET", op) => {
                if let Some(op) = op {
                    query.push(("op", op));
                }
                sim.get(&path, &query).await
            }
            ("POST", Some(op)) => sim.op(&path, op, &form).await,
            ("POST", None) => sim.post(&path, &form).await,
            ("PUT", _) => sim.put(&path, &form).await,
            (method, _) => panic!("{method}"),
        };
        assert_eq!(
            answer.status, 200,
            "{}: {} {}",
            row.name, answer.status, answer.text
        );
        if row.name == "deploy" {
            sim.advance(601);
        }
        let answer = answer.json();
        let sim_part = match row.part {
            Part::Whole => answer,
            Part::First => answer[0].clone(),
            Part::Field(field) => answer[field].clone(),
        };
        let (source, real) = real(row.real);
        assert_shape(
            &format!("{} vs {source}", row.name),
            &sim_part,
            &real,
            row.mode,
        );
        checked += 1;
    }
    assert_eq!(checked, ROWS.len());
}

#[test]
fn every_capture_of_a_resource_the_client_reads_is_in_the_table() {
    // The captures of resources metalform reads; a new one must get a row.
    let used: Vec<&str> = ROWS
        .iter()
        .map(|r| match r.real {
            Real::File(f) | Real::Example(f, _) => f,
            Real::Declared(..) => "",
        })
        .collect();
    for file in [
        "gomaasapi__fabric_test__fabricResponse.json",
        "gomaasclient__vlan.json",
        "gomaasclient__vlans.json",
        "gomaasclient__zone.json",
        "gomaasclient__resource_pool.json",
        "gomaasclient__resource_pools.json",
        "gomaasclient__interface.json",
        "gomaasclient__machine.json",
        "gomaasapi__partition_test__partitionsResponse.json",
        "gomaasapi__link_test__linksResponse.json",
        FABRICS,
        NODES,
        MACHINES,
        SUBNETS,
    ] {
        assert!(used.contains(&file), "{file} has no row");
    }
}
