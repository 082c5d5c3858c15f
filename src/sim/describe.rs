//! The handler catalogue: routes, (method, op) actions, and the `describe/` document that
//! python-libmaas builds its client from (API_REFERENCE.md §5.2, DESIGN.md §9).
//!
//! One table drives routing, the describe document, the `X-MAAS-API-Hash` header and the
//! action names of the fault grammar (`machine.deploy`, `machines.read`, …).

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// One action: a CRUD verb (`op` None) or an operation.
#[derive(Debug, Clone, Copy)]
pub struct ActionDef {
    pub name: &'static str,
    pub method: &'static str,
    pub op: Option<&'static str>,
}

/// A handler (one URL pattern). `anon` is the anonymous handler's action set, if any.
#[derive(Debug, Clone, Copy)]
pub struct HandlerDef {
    /// MAAS's class name (`MachineHandler`).
    pub name: &'static str,
    /// Path below `/MAAS/api/2.0/`, with `{param}` segments.
    pub path: &'static str,
    pub params: &'static [&'static str],
    pub actions: &'static [ActionDef],
    pub anon: Option<(&'static str, &'static [ActionDef])>,
    pub doc: &'static str,
}

const fn crud(name: &'static str, method: &'static str) -> ActionDef {
    ActionDef {
        name,
        method,
        op: None,
    }
}

const fn op(name: &'static str, method: &'static str) -> ActionDef {
    ActionDef {
        name,
        method,
        op: Some(name),
    }
}

/// Every handler the simulator serves.
pub const HANDLERS: &[HandlerDef] = &[
    HandlerDef {
        name: "VersionHandler",
        path: "version/",
        params: &[],
        actions: &[],
        anon: Some(("VersionHandler", &[crud("read", "GET")])),
        doc: "Information about this MAAS instance.",
    },
    HandlerDef {
        name: "UsersHandler",
        path: "users/",
        params: &[],
        actions: &[crud("read", "GET"), op("whoami", "GET")],
        anon: None,
        doc: "Manage the user accounts of this MAAS.",
    },
    HandlerDef {
        name: "MachinesHandler",
        path: "machines/",
        params: &[],
        actions: &[
            crud("read", "GET"),
            crud("create", "POST"),
            op("accept", "POST"),
            op("accept_all", "POST"),
            op("allocate", "POST"),
            op("power_parameters", "GET"),
            op("is_registered", "GET"),
        ],
        anon: Some((
            "AnonMachinesHandler",
            &[
                crud("create", "POST"),
                op("is_registered", "GET"),
                op("is_action_in_progress", "GET"),
            ],
        )),
        doc: "Manage the collection of all the machines in the MAAS.",
    },
    HandlerDef {
        name: "MachineHandler",
        path: "machines/{system_id}/",
        params: &["system_id"],
        actions: &[
            crud("read", "GET"),
            crud("update", "PUT"),
            crud("delete", "DELETE"),
            op("deploy", "POST"),
            op("release", "POST"),
            op("commission", "POST"),
            op("abort", "POST"),
            op("mark_broken", "POST"),
            op("mark_fixed", "POST"),
            op("rescue_mode", "POST"),
            op("exit_rescue_mode", "POST"),
            op("power_on", "POST"),
            op("power_off", "POST"),
            op("query_power_state", "GET"),
            op("power_parameters", "GET"),
            op("get_token", "GET"),
            op("set_storage_layout", "POST"),
            op("lock", "POST"),
            op("unlock", "POST"),
            op("set_workload_annotations", "POST"),
            op("set_owner_data", "POST"),
        ],
        anon: None,
        doc: "Manage an individual machine.",
    },
    HandlerDef {
        name: "NodesHandler",
        path: "nodes/",
        params: &[],
        actions: &[crud("read", "GET"), op("is_registered", "GET")],
        anon: Some(("AnonNodesHandler", &[op("is_registered", "GET")])),
        doc: "Manage the collection of all the nodes in the MAAS.",
    },
    HandlerDef {
        name: "NodeHandler",
        path: "nodes/{system_id}/",
        params: &["system_id"],
        actions: &[
            crud("read", "GET"),
            crud("delete", "DELETE"),
            op("query_power_state", "GET"),
        ],
        anon: None,
        doc: "Manage an individual node.",
    },
    HandlerDef {
        name: "InterfacesHandler",
        path: "nodes/{system_id}/interfaces/",
        params: &["system_id"],
        actions: &[crud("read", "GET")],
        anon: None,
        doc: "Manage interfaces on a node.",
    },
    HandlerDef {
        name: "InterfaceHandler",
        path: "nodes/{system_id}/interfaces/{id}/",
        params: &["system_id", "id"],
        actions: &[
            crud("read", "GET"),
            crud("update", "PUT"),
            op("link_subnet", "POST"),
            op("unlink_subnet", "POST"),
        ],
        anon: None,
        doc: "Manage a node's or device's interface.",
    },
    HandlerDef {
        name: "BlockDevicesHandler",
        path: "nodes/{system_id}/blockdevices/",
        params: &["system_id"],
        actions: &[crud("read", "GET")],
        anon: None,
        doc: "Manage block devices on a machine.",
    },
    HandlerDef {
        name: "BlockDeviceHandler",
        path: "nodes/{system_id}/blockdevices/{id}/",
        params: &["system_id", "id"],
        actions: &[crud("read", "GET"), op("set_boot_disk", "POST")],
        anon: None,
        doc: "Manage a block device on a machine.",
    },
    HandlerDef {
        name: "SubnetsHandler",
        path: "subnets/",
        params: &[],
        actions: &[crud("read", "GET"), crud("create", "POST")],
        anon: None,
        doc: "Manage subnets.",
    },
    HandlerDef {
        name: "SubnetHandler",
        path: "subnets/{id}/",
        params: &["id"],
        actions: &[crud("read", "GET"), crud("delete", "DELETE")],
        anon: None,
        doc: "Manage a subnet.",
    },
    HandlerDef {
        name: "EventsHandler",
        path: "events/",
        params: &[],
        actions: &[op("query", "GET")],
        anon: None,
        doc: "Retrieve filtered node events.",
    },
    HandlerDef {
        name: "FabricsHandler",
        path: "fabrics/",
        params: &[],
        actions: &[crud("read", "GET"), crud("create", "POST")],
        anon: None,
        doc: "Manage fabrics.",
    },
    HandlerDef {
        name: "FabricHandler",
        path: "fabrics/{id}/",
        params: &["id"],
        actions: &[
            crud("read", "GET"),
            crud("update", "PUT"),
            crud("delete", "DELETE"),
        ],
        anon: None,
        doc: "Manage fabric.",
    },
    HandlerDef {
        name: "VlansHandler",
        path: "fabrics/{fabric_id}/vlans/",
        params: &["fabric_id"],
        actions: &[crud("read", "GET"), crud("create", "POST")],
        anon: None,
        doc: "Manage VLANs on a fabric.",
    },
    HandlerDef {
        name: "VlanHandler",
        path: "fabrics/{fabric_id}/vlans/{vid}/",
        params: &["fabric_id", "vid"],
        actions: &[
            crud("read", "GET"),
            crud("update", "PUT"),
            crud("delete", "DELETE"),
        ],
        anon: None,
        doc: "Manage a VLAN on a fabric.",
    },
    HandlerDef {
        name: "TagsHandler",
        path: "tags/",
        params: &[],
        actions: &[crud("read", "GET"), crud("create", "POST")],
        anon: None,
        doc: "Manage all tags known to MAAS.",
    },
    HandlerDef {
        name: "TagHandler",
        path: "tags/{name}/",
        params: &["name"],
        actions: &[
            crud("read", "GET"),
            crud("update", "PUT"),
            crud("delete", "DELETE"),
            op("update_nodes", "POST"),
            op("machines", "GET"),
            op("nodes", "GET"),
        ],
        anon: None,
        doc: "Tags are properties that can be associated with a Node and serve as criteria for selecting and allocating nodes.",
    },
    HandlerDef {
        name: "ZonesHandler",
        path: "zones/",
        params: &[],
        actions: &[crud("read", "GET"), crud("create", "POST")],
        anon: None,
        doc: "Manage physical zones.",
    },
    HandlerDef {
        name: "ZoneHandler",
        path: "zones/{name}/",
        params: &["name"],
        actions: &[
            crud("read", "GET"),
            crud("update", "PUT"),
            crud("delete", "DELETE"),
        ],
        anon: None,
        doc: "Manage a physical zone.",
    },
    HandlerDef {
        name: "ResourcePoolsHandler",
        path: "resourcepools/",
        params: &[],
        actions: &[crud("read", "GET"), crud("create", "POST")],
        anon: None,
        doc: "Manage resource pools.",
    },
    HandlerDef {
        name: "ResourcePoolHandler",
        path: "resourcepool/{id}/",
        params: &["id"],
        actions: &[
            crud("read", "GET"),
            crud("update", "PUT"),
            crud("delete", "DELETE"),
        ],
        anon: None,
        doc: "Manage a resource pool.",
    },
    HandlerDef {
        name: "DomainsHandler",
        path: "domains/",
        params: &[],
        actions: &[crud("read", "GET")],
        anon: None,
        doc: "Manage domains.",
    },
];

/// Routes MAAS serves with a handler that `describe/` lists under another path
/// (`urls_api.py` `vlanid_handler`: a VLAN by its database id, the `resource_uri` of VLANs).
pub const ALIASES: &[HandlerDef] = &[HandlerDef {
    name: "VlanHandler",
    path: "vlans/{vlan_id}/",
    params: &["vlan_id"],
    actions: &[
        crud("read", "GET"),
        crud("update", "PUT"),
        crud("delete", "DELETE"),
    ],
    anon: None,
    doc: "Manage a VLAN on a fabric.",
}];

/// `MachineHandler` → `machine` (python-libmaas' `derive_resource_name`, lower-cased).
pub fn short_name(handler: &str) -> String {
    let name = handler.strip_prefix("Anon").unwrap_or(handler);
    let name = name.strip_suffix("Handler").unwrap_or(name);
    name.to_ascii_lowercase()
}

/// The fault-grammar name of an action: `machine.deploy`.
pub fn action_key(handler: &HandlerDef, action: &ActionDef) -> String {
    format!("{}.{}", short_name(handler.name), action.name)
}

/// Whether a fault pattern names something the simulator serves (`*`, `deploy`,
/// `machine.deploy`).
pub fn is_known_action(pattern: &str) -> bool {
    pattern == "*"
        || HANDLERS.iter().any(|h| {
            h.actions
                .iter()
                .chain(h.anon.map(|(_, a)| a).unwrap_or(&[]).iter())
                .any(|a| a.name == pattern || action_key(h, a) == pattern)
        })
}

fn describe_handler(name: &str, handler: &HandlerDef, actions: &[ActionDef], base: &str) -> Value {
    json!({
        "name": name,
        "doc": handler.doc,
        "params": handler.params,
        "path": format!("/MAAS/api/2.0/{}", handler.path),
        "uri": format!("{base}/MAAS/api/2.0/{}", handler.path),
        "actions": actions.iter().map(|a| json!({
            "name": a.name,
            "method": a.method,
            "op": a.op,
            "restful": a.op.is_none(),
            "doc": format!("{} ({} {}).", a.name, a.method, a.op.map_or("CRUD".to_string(), |o| format!("op={o}"))),
        })).collect::<Vec<_>>(),
    })
}

/// The hash of the API description (`X-MAAS-API-Hash`, `describe`'s `hash`).
pub fn api_hash() -> String {
    let doc = describe_document("");
    let mut hasher = Sha256::new();
    hasher.update(doc["resources"].to_string().as_bytes());
    hex::encode(hasher.finalize())[..40].to_string()
}

/// `GET describe/`: absolute `uri`s are built from `base` (`http://<Host header>`) because
/// python-libmaas sends its requests to the host:port found there.
pub fn describe_document(base: &str) -> Value {
    let resources: Vec<Value> = HANDLERS
        .iter()
        .map(|h| {
            let auth =
                (!h.actions.is_empty()).then(|| describe_handler(h.name, h, h.actions, base));
            let anon = h
                .anon
                .map(|(name, actions)| describe_handler(name, h, actions, base));
            json!({"name": h.name, "anon": anon, "auth": auth})
        })
        .collect();
    let handlers: Vec<Value> = resources
        .iter()
        .filter_map(|r| {
            r.get("auth")
                .filter(|a| !a.is_null())
                .or(r.get("anon"))
                .cloned()
        })
        .collect();
    json!({"doc": "MAAS API", "hash": "", "resources": resources, "handlers": handlers})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_document_shape() {
        assert_eq!(short_name("AnonMachinesHandler"), "machines");
        assert!(is_known_action("machine.deploy"));
        assert!(is_known_action("deploy"));
        assert!(is_known_action("machines.read"));
        assert!(!is_known_action("machine.explode"));
        let doc = describe_document("http://127.0.0.1:5240");
        let machine = doc["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "MachineHandler")
            .unwrap();
        assert_eq!(
            machine["auth"]["uri"],
            "http://127.0.0.1:5240/MAAS/api/2.0/machines/{system_id}/"
        );
        assert!(machine["anon"].is_null());
        assert_eq!(api_hash().len(), 40);
    }
}
