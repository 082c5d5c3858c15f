//! MAAS API 2.0 dispatch (API_REFERENCE.md §1, §5): routing with trailing slashes and the
//! `op-<name>` suffix, (method, op) signatures, anonymous handlers, and one function per
//! action that turns the world into MAAS's JSON.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::describe::{ALIASES, ActionDef, HANDLERS, HandlerDef};
use super::events::Level;
use super::model::Caller;
use super::ops::normalise_mac;
use super::ops_catalog::Placements;
use super::reply::{MaasError, Reply};
use super::status::Status;
use super::transport::Params;
use super::world::{Perm, World};

/// A matched route: the handler, its path arguments, and an op given as a path suffix.
#[derive(Debug, Clone)]
pub struct Route {
    pub handler: &'static HandlerDef,
    pub args: Vec<String>,
    pub suffix_op: Option<String>,
}

impl Route {
    pub fn arg(&self, name: &str) -> &str {
        self.handler
            .params
            .iter()
            .position(|p| *p == name)
            .and_then(|i| self.args.get(i))
            .map_or("", String::as_str)
    }

    pub fn system_id(&self) -> Option<&str> {
        self.handler
            .params
            .contains(&"system_id")
            .then(|| self.arg("system_id"))
    }
}

fn match_template(template: &str, path: &str) -> Option<Vec<String>> {
    let t: Vec<&str> = template.split('/').collect();
    let p: Vec<&str> = path.split('/').collect();
    // Subnet specifiers may hold a CIDR: `subnets/cidr:10.0.0.0/24/`.
    if template == "subnets/{id}/" && p.len() >= 3 && p[0] == "subnets" && p.last() == Some(&"") {
        let id = p[1..p.len() - 1].join("/");
        // MAAS's route: `subnets/(?P<id>[.: \w-]+(?:/\d\d\d?)?)/` (a prefix length of two or
        // three digits; `…/8/` routes nowhere).
        let cidr_like = p.len() == 3
            || (p.len() == 4
                && (2..=3).contains(&p[2].len())
                && p[2].chars().all(|c| c.is_ascii_digit()));
        return (!id.is_empty() && cidr_like).then(|| vec![id]);
    }
    if t.len() != p.len() {
        return None;
    }
    let mut args = Vec::new();
    for (a, b) in t.iter().zip(&p) {
        if a.starts_with('{') {
            if b.is_empty() {
                return None;
            }
            args.push(b.to_string());
        } else if a != b {
            return None;
        }
    }
    Some(args)
}

/// Routes a path below `/MAAS/api/2.0/`.
pub fn route(rest: &str) -> Option<Route> {
    let find = |path: &str| {
        HANDLERS
            .iter()
            .chain(ALIASES)
            .find_map(|h| match_template(h.path, path).map(|args| (h, args)))
    };
    if let Some((handler, args)) = find(rest) {
        return Some(Route {
            handler,
            args,
            suffix_op: None,
        });
    }
    // `<route>op-<name>` (urls_api.py registers it for every op).
    let trimmed = rest.strip_suffix('/').unwrap_or(rest);
    let (base, last) = trimmed
        .rsplit_once('/')
        .map_or(("", trimmed), |(b, l)| (b, l));
    let op = last.strip_prefix("op-")?;
    let base = if base.is_empty() {
        String::new()
    } else {
        format!("{base}/")
    };
    let (handler, args) = find(&base)?;
    Some(Route {
        handler,
        args,
        suffix_op: Some(op.to_string()),
    })
}

/// Chooses the action for (method, op) among what the caller may use.
pub fn select_action(
    route: &Route,
    caller: &Caller,
    method: &str,
    op: Option<&str>,
) -> Result<(&'static str, &'static ActionDef), MaasError> {
    let (name, actions): (&'static str, &'static [ActionDef]) = match caller {
        Caller::Anonymous => match route.handler.anon {
            Some(anon) => anon,
            None => {
                return Err(MaasError::Status {
                    status: 401,
                    message: "Forbidden".to_string(),
                    retry_after: None,
                });
            }
        },
        Caller::Node { .. } => return Err(MaasError::Forbidden(String::new())),
        Caller::User { .. } => {
            if route.handler.actions.is_empty() {
                route.handler.anon.unwrap_or((route.handler.name, &[]))
            } else {
                (route.handler.name, route.handler.actions)
            }
        }
    };
    let mut allowed: Vec<&'static str> = actions.iter().map(|a| a.method).collect();
    allowed.sort_unstable();
    allowed.dedup();
    if !allowed.contains(&method) {
        return Err(MaasError::MethodNotAllowed(allowed));
    }
    actions
        .iter()
        .find(|a| a.method == method && a.op == op)
        .map(|a| (name, a))
        .ok_or_else(|| {
            MaasError::BadRequest(format!(
                "Unrecognised signature: method={method} op={}",
                op.unwrap_or("None")
            ))
        })
}

/// Everything an action needs.
pub struct Call<'a> {
    pub caller: &'a Caller,
    pub route: &'a Route,
    pub action: &'a ActionDef,
    pub query: &'a Params,
    pub form: &'a Params,
    pub now: DateTime<Utc>,
}

impl Call<'_> {
    /// GET/DELETE read the query string; POST/PUT read the body (op excluded either way).
    fn params(&self) -> &Params {
        if matches!(self.action.method, "GET" | "DELETE") {
            self.query
        } else {
            self.form
        }
    }

    fn sid(&self) -> &str {
        self.route.arg("system_id")
    }
}

fn machine_json(world: &World, id: u64) -> Value {
    let gateway = world.pxe_gateway();
    serde_json::to_value(world.machines[&id].view(world, gateway)).unwrap_or(Value::Null)
}

/// The machine object, from its kept rendering (a wave reads each machine dozens of times).
fn machine_reply(world: &mut World, id: u64) -> Result<Reply, MaasError> {
    world
        .machine_document(id)
        .map(Reply::Rendered)
        .ok_or_else(MaasError::no_machine)
}

/// `GET version/`: `json.dumps`, compact with Python's separators (not piston-indented).
pub fn version_body(version: &str) -> Vec<u8> {
    const CAPABILITIES: [&str; 9] = [
        "networks-management",
        "static-ipaddresses",
        "ipv6-deployment-ubuntu",
        "devices-management",
        "storage-deployment-ubuntu",
        "network-deployment-ubuntu",
        "bridging-interface-ubuntu",
        "bridging-automatic-ubuntu",
        "authenticate-api",
    ];
    let caps: Vec<String> = CAPABILITIES.iter().map(|c| format!("\"{c}\"")).collect();
    format!(
        "{{\"capabilities\": [{}], \"version\": {}, \"subversion\": \"\"}}",
        caps.join(", "),
        serde_json::to_string(version).unwrap_or_else(|_| "\"None\"".to_string())
    )
    .into_bytes()
}

/// Runs the action.
pub fn execute(world: &mut World, call: &Call) -> Result<Reply, MaasError> {
    let key = (
        super::describe::short_name(call.route.handler.name),
        call.action.name,
    );
    let p = call.params();
    let now = call.now;
    let caller = call.caller;
    match (key.0.as_str(), key.1) {
        ("version", "read") => Ok(Reply::Json(version_body(&world.config.maas_version))),
        ("users", "read") => {
            let users: Vec<Value> = world
                .users
                .iter()
                .filter(|(name, _, _)| caller.is_admin() || name == caller.name())
                .map(|(name, _, admin)| user_json(name, *admin))
                .collect();
            Ok(Reply::json(&users))
        }
        ("users", "whoami") => Ok(Reply::json(&user_json(caller.name(), caller.is_admin()))),
        ("machines" | "nodes", "read") => list_machines(world, caller, p),
        ("machines", "create") => {
            let id = world.create_machine(caller, p, now)?;
            machine_reply(world, id)
        }
        ("machines", "accept") => {
            let ids: Vec<String> = p.all("machines").into_iter().map(String::from).collect();
            let accepted = world.accept(caller, &ids, now)?;
            let list: Vec<Value> = accepted.iter().map(|id| machine_json(world, *id)).collect();
            Ok(Reply::json(&list))
        }
        ("machines", "accept_all") => {
            let ids: Vec<String> = world
                .machines
                .values()
                .filter(|m| m.status == Status::New)
                .map(|m| m.system_id.clone())
                .collect();
            let accepted = world.accept(caller, &ids, now)?;
            let list: Vec<Value> = accepted.iter().map(|id| machine_json(world, *id)).collect();
            Ok(Reply::json(&list))
        }
        ("machines", "allocate") => allocate(world, caller, p, now),
        ("machines", "power_parameters") => {
            if !caller.is_admin() {
                return Err(MaasError::Forbidden(String::new()));
            }
            let wanted = p.all("id");
            let entries: Vec<_> = world
                .machines
                .values()
                .filter(|m| wanted.is_empty() || wanted.contains(&m.system_id.as_str()))
                .map(|m| (&m.system_id, &m.power_parameters))
                .collect();
            Ok(Reply::json(&Entries(entries)))
        }
        ("machines" | "nodes", "is_registered") => {
            let mac = p.get("mac_address").unwrap_or("");
            let mac = normalise_mac(mac)
                .ok_or_else(|| MaasError::BadRequest(format!("Invalid MAC address: {mac}")))?;
            let known = world
                .machines
                .values()
                .any(|m| m.interfaces.iter().any(|i| i.mac == mac));
            Ok(Reply::json(&known))
        }
        ("machines", "is_action_in_progress") => Ok(Reply::json(&false)),
        ("machine" | "node", "read") => {
            let id = world.node_for(caller, call.sid(), Perm::View)?;
            machine_reply(world, id)
        }
        ("machine", "update") => {
            world.update_machine(caller, call.sid(), p)?;
            let id = world.node_for(caller, call.sid(), Perm::View)?;
            machine_reply(world, id)
        }
        ("machine" | "node", "delete") => {
            world.delete_machine(caller, call.sid())?;
            Ok(Reply::Deleted)
        }
        ("machine", "deploy") => {
            world.deploy(caller, call.sid(), p, now)?;
            let reply = after(world, call);
            world.post_commit(call.sid());
            reply
        }
        ("machine", "release") => {
            world.release(caller, call.sid(), p, now)?;
            after(world, call)
        }
        ("machine", "commission") => {
            world.commission(caller, call.sid(), p, now)?;
            after(world, call)
        }
        ("machine", "abort") => {
            world.abort(caller, call.sid(), now)?;
            after(world, call)
        }
        ("machine", "mark_broken") => {
            world.mark_broken(caller, call.sid(), p, now)?;
            after(world, call)
        }
        ("machine", "mark_fixed") => {
            world.mark_fixed(caller, call.sid(), now)?;
            after(world, call)
        }
        ("machine", "rescue_mode") => {
            world.rescue_mode(caller, call.sid(), now)?;
            after(world, call)
        }
        ("machine", "exit_rescue_mode") => {
            world.exit_rescue_mode(caller, call.sid(), now)?;
            after(world, call)
        }
        ("machine", "power_on") => {
            world.power_on(caller, call.sid(), p, now)?;
            let reply = after(world, call);
            world.post_commit(call.sid());
            reply
        }
        ("machine", "power_off") => {
            world.power_off(caller, call.sid(), now)?;
            let id = world.node_for(caller, call.sid(), Perm::View)?;
            if world.machines[&id].power_type == "manual" {
                return Ok(Reply::json(&Value::Null));
            }
            machine_reply(world, id)
        }
        ("machine" | "node", "query_power_state") => {
            let id = world.node_for(caller, call.sid(), Perm::View)?;
            let state = world.machines[&id].power_state;
            Ok(Reply::json(&json!({"state": state.as_str()})))
        }
        ("machine", "power_parameters") => {
            let id = world.node_for(caller, call.sid(), Perm::AdminRead)?;
            Ok(Reply::json(&world.machines[&id].power_parameters))
        }
        ("machine", "get_token") => {
            let id = world.node_for(caller, call.sid(), Perm::AdminRead)?;
            Ok(Reply::json(&world.machines[&id].token))
        }
        ("machine", "set_storage_layout") => {
            world.set_storage_layout(caller, call.sid(), p)?;
            after(world, call)
        }
        ("machine", "lock" | "unlock") => {
            let id = world.node_for(caller, call.sid(), Perm::View)?;
            if !caller.is_admin() && world.machines[&id].owner.as_deref() != Some(caller.name()) {
                return Err(MaasError::Forbidden(String::new()));
            }
            let lock = call.action.name == "lock";
            let m = world
                .machines
                .get_mut(&id)
                .ok_or_else(MaasError::no_machine)?;
            if lock && m.status != Status::Deployed {
                return Err(MaasError::field(
                    "system_id",
                    "Only deployed machines can be locked.",
                ));
            }
            m.locked = lock;
            machine_reply(world, id)
        }
        ("machine", "set_workload_annotations" | "set_owner_data") => {
            let id = world.node_for(caller, call.sid(), Perm::Edit)?;
            let m = world
                .machines
                .get_mut(&id)
                .ok_or_else(MaasError::no_machine)?;
            if m.owner.as_deref() != Some(caller.name()) {
                return Err(MaasError::Conflict(
                    "Cannot set workload annotation: it hasn't been acquired.".to_string(),
                ));
            }
            for (k, v) in p.pairs() {
                if v.is_empty() {
                    m.workload_annotations.remove(k);
                } else {
                    m.workload_annotations.insert(k.to_string(), v.to_string());
                }
            }
            machine_reply(world, id)
        }
        ("interfaces", "read") => {
            let id = world.node_for(caller, call.sid(), Perm::View)?;
            let m = &world.machines[&id];
            let list: Vec<_> = m
                .interfaces
                .iter()
                .map(|i| i.view(&m.system_id, world))
                .collect();
            Ok(Reply::json(&list))
        }
        ("interface", "read") => {
            let id = world.node_for(caller, call.sid(), Perm::View)?;
            let index = world.find_interface(id, call.route.arg("id"))?;
            let m = &world.machines[&id];
            Ok(Reply::json(&m.interfaces[index].view(&m.system_id, world)))
        }
        ("interface", "update") => {
            let (id, index) =
                world.update_interface(caller, call.sid(), call.route.arg("id"), p)?;
            let m = &world.machines[&id];
            Ok(Reply::json(&m.interfaces[index].view(&m.system_id, world)))
        }
        ("interface", op @ ("link_subnet" | "unlink_subnet")) => {
            let (id, index) = if op == "link_subnet" {
                world.link_subnet(caller, call.sid(), call.route.arg("id"), p)?
            } else {
                world.unlink_subnet(caller, call.sid(), call.route.arg("id"), p)?
            };
            let m = &world.machines[&id];
            Ok(Reply::json(&m.interfaces[index].view(&m.system_id, world)))
        }
        ("blockdevices", "read") => {
            let id = world.node_for(caller, call.sid(), Perm::View)?;
            let m = &world.machines[&id];
            let list: Vec<_> = m.disks.iter().map(|d| d.view(&m.system_id)).collect();
            Ok(Reply::json(&list))
        }
        ("blockdevice", "read") => {
            let id = world.node_for(caller, call.sid(), Perm::View)?;
            let disk = world.find_disk(id, call.route.arg("id"))?;
            let m = &world.machines[&id];
            let d = m
                .disks
                .iter()
                .find(|d| d.id == disk)
                .ok_or_else(MaasError::no_machine)?;
            Ok(Reply::json(&d.view(&m.system_id)))
        }
        ("blockdevice", "set_boot_disk") => {
            world.set_boot_disk(caller, call.sid(), call.route.arg("id"))?;
            Ok(Reply::AllOk)
        }
        ("subnets", "read") => Ok(Reply::JsonParts(
            world
                .rendered_subnets
                .list_body(&world.subnets, &world.vlans),
        )),
        ("subnets", "create") => {
            let id = world.create_subnet(caller, p)?;
            let s = &world.subnets[&id];
            Ok(Reply::json(&s.view(&world.vlans[&s.vlan_id])))
        }
        ("subnet", "read") => {
            let id = world.find_subnet(call.route.arg("id")).ok_or_else(|| {
                MaasError::NotFound("No Subnet matches the given query.".to_string())
            })?;
            let s = &world.subnets[&id];
            Ok(Reply::json(&s.view(&world.vlans[&s.vlan_id])))
        }
        ("subnet", "delete") => {
            if !caller.is_admin() {
                return Err(MaasError::Forbidden(String::new()));
            }
            let id = world.find_subnet(call.route.arg("id")).ok_or_else(|| {
                MaasError::NotFound("No Subnet matches the given query.".to_string())
            })?;
            world.subnets.remove(&id);
            Ok(Reply::Deleted)
        }
        ("events", "query") => query_events(world, caller, p),
        ("fabrics", "read") => {
            let list: Vec<_> = world
                .fabrics
                .values()
                .map(|f| f.view(world.vlans.values()))
                .collect();
            Ok(Reply::json(&list))
        }
        ("fabrics", "create") => {
            let id = world.create_fabric(caller, p)?;
            Ok(Reply::json(&world.fabrics[&id].view(world.vlans.values())))
        }
        ("fabric", "read") => {
            let id = world.find_fabric(call.route.arg("id"))?;
            Ok(Reply::json(&world.fabrics[&id].view(world.vlans.values())))
        }
        ("fabric", "update") => {
            let id = world.update_fabric(caller, call.route.arg("id"), p)?;
            Ok(Reply::json(&world.fabrics[&id].view(world.vlans.values())))
        }
        ("fabric", "delete") => {
            world.delete_fabric(caller, call.route.arg("id"))?;
            Ok(Reply::Deleted)
        }
        ("vlans", "read") => {
            let fabric = world.find_fabric(call.route.arg("fabric_id"))?;
            let list: Vec<_> = world
                .vlans
                .values()
                .filter(|v| v.fabric_id == fabric)
                .map(|v| v.view())
                .collect();
            Ok(Reply::json(&list))
        }
        ("vlans", "create") => {
            let id = world.create_vlan(caller, call.route.arg("fabric_id"), p)?;
            Ok(Reply::json(&world.vlans[&id].view()))
        }
        ("vlan", action) => {
            let id = match call.route.handler.params {
                ["vlan_id"] => world.find_vlan(None, call.route.arg("vlan_id"))?,
                _ => world.find_vlan(Some(call.route.arg("fabric_id")), call.route.arg("vid"))?,
            };
            match action {
                "update" => world.update_vlan(caller, id, p)?,
                "delete" => {
                    world.delete_vlan(caller, id)?;
                    return Ok(Reply::Deleted);
                }
                _ => {}
            }
            Ok(Reply::json(&world.vlans[&id].view()))
        }
        ("tags", "read") => {
            let list: Vec<_> = world.tags.values().map(|t| t.view()).collect();
            Ok(Reply::json(&list))
        }
        ("tags", "create") => {
            let name = world.create_tag(caller, p)?;
            Ok(Reply::json(&world.tags[&name].view()))
        }
        ("tag", "read") => Ok(Reply::json(&world.find_tag(call.route.arg("name"))?.view())),
        ("tag", "update") => {
            let name = world.update_tag(caller, call.route.arg("name"), p)?;
            Ok(Reply::json(&world.tags[&name].view()))
        }
        ("tag", "delete") => {
            world.delete_tag(caller, call.route.arg("name"))?;
            Ok(Reply::Deleted)
        }
        ("tag", "update_nodes") => {
            let (added, removed) = world.update_tag_nodes(caller, call.route.arg("name"), p)?;
            Ok(Reply::json(&json!({"added": added, "removed": removed})))
        }
        ("tag", "machines" | "nodes") => {
            let name = world.find_tag(call.route.arg("name"))?.name.clone();
            let list: Vec<Value> = world
                .machines
                .values()
                .filter(|m| world.can_view(caller, m.id) && m.tag_names.contains(&name))
                .map(|m| machine_json(world, m.id))
                .collect();
            Ok(Reply::json(&list))
        }
        ("zones" | "resourcepools", action) => {
            let which = placements(&key.0);
            if action == "create" {
                let id = world.create_placement(caller, which, p)?;
                return Ok(placement_reply(world, which, id));
            }
            let list: Vec<_> = match which {
                Placements::Zones => world.zones.values().map(|z| z.zone_view()).collect(),
                Placements::Pools => world.pools.values().map(|z| z.pool_view()).collect(),
            };
            Ok(Reply::json(&list))
        }
        ("zone" | "resourcepool", action) => {
            let which = placements(&key.0);
            let arg = call.route.args.first().map_or("", String::as_str);
            let id = match action {
                "update" => world.update_placement(caller, which, arg, p)?,
                "delete" => {
                    world.delete_placement(caller, which, arg)?;
                    return Ok(Reply::Deleted);
                }
                _ => world.find_placement(which, arg)?,
            };
            Ok(placement_reply(world, which, id))
        }
        ("domains", "read") => Ok(Reply::json(&json!([{
            "authoritative": true, "ttl": null, "resource_record_count": 0, "name": "maas", "id": 0,
            "is_default": true, "resource_uri": "/MAAS/api/2.0/domains/0/"
        }]))),
        (handler, action) => Err(MaasError::Internal(format!(
            "simulator has no implementation for {handler}.{action}"
        ))),
    }
}

fn placements(handler: &str) -> Placements {
    if handler.starts_with("zone") {
        Placements::Zones
    } else {
        Placements::Pools
    }
}

fn placement_reply(world: &World, which: Placements, id: u64) -> Reply {
    match which {
        Placements::Zones => Reply::json(&world.zones[&id].zone_view()),
        Placements::Pools => Reply::json(&world.pools[&id].pool_view()),
    }
}

/// The machine after an operation (visible to the caller by construction).
fn after(world: &mut World, call: &Call) -> Result<Reply, MaasError> {
    let id = world
        .machine_id(call.sid())
        .ok_or_else(MaasError::no_machine)?;
    machine_reply(world, id)
}

fn user_json(name: &str, admin: bool) -> Value {
    json!({
        "is_superuser": admin,
        "username": name,
        "email": format!("{name}@example.invalid"),
        "is_local": true,
        "resource_uri": format!("/MAAS/api/2.0/users/{name}/"),
    })
}

/// `ReadNodesForm` filters (exact "any of" matches; unknown system ids simply match nothing).
fn list_machines(world: &mut World, caller: &Caller, p: &Params) -> Result<Reply, MaasError> {
    let mut macs = Vec::new();
    for mac in p.all("mac_address") {
        macs.push(normalise_mac(mac).ok_or_else(|| {
            MaasError::field(
                "mac_address",
                "Invalid parameter: invalid MAC address format",
            )
        })?);
    }
    let statuses = |name: &str| -> Result<Vec<Status>, MaasError> {
        p.all(name)
            .into_iter()
            .map(|v| {
                Status::parse(v)
                    .filter(|s| s.filter_value() == v)
                    .ok_or_else(|| {
                        MaasError::field(
                            name,
                            format!(
                                "Select a valid choice. {v} is not one of the available choices."
                            ),
                        )
                    })
            })
            .collect()
    };
    let status = statuses("status")?;
    let not_status = statuses("not_status")?;
    const SIMPLE: [&str; 12] = [
        "allocated",
        "broken",
        "commissioning",
        "deployed",
        "deploying",
        "failed",
        "new",
        "other",
        "ready",
        "releasing",
        "rescue_mode",
        "testing",
    ];
    for name in ["simple_status", "not_simple_status"] {
        if let Some(bad) = p.all(name).into_iter().find(|v| !SIMPLE.contains(v)) {
            return Err(MaasError::field(
                name,
                format!("Select a valid choice. {bad} is not one of the available choices."),
            ));
        }
    }
    // Each filter's values once, not once per machine.
    let [
        ids,
        system_ids,
        not_ids,
        hostnames,
        not_hostnames,
        simple_status,
        not_simple_status,
        zones,
        not_in_zones,
        pools,
        not_in_pools,
        arches,
        power_states,
        not_power_states,
        owners,
        not_owners,
        domains,
    ] = [
        "id",
        "system_id",
        "not_id",
        "hostname",
        "not_hostname",
        "simple_status",
        "not_simple_status",
        "zone",
        "not_in_zone",
        "pool",
        "not_in_pool",
        "arch",
        "power_state",
        "not_power_state",
        "owner",
        "not_owner",
        "domain",
    ]
    .map(|name| p.all(name));
    let any = |wanted: &[&str], value: &str| wanted.is_empty() || wanted.contains(&value);
    let none = |unwanted: &[&str], value: &str| !unwanted.contains(&value);
    // `hostname` matches the name or the FQDN (every machine is in domain `maas`).
    let named = |m: &super::machine::Machine| {
        any(&hostnames, &m.hostname)
            || hostnames
                .iter()
                .any(|h| h.strip_suffix(".maas") == Some(m.hostname.as_str()))
    };
    let in_domain = any(&domains, "maas");
    let listed: Vec<u64> = world
        .machines
        .values()
        .filter(|m| in_domain && super::world::visible_to(m, caller))
        .filter(|m| any(&ids, &m.system_id) && any(&system_ids, &m.system_id))
        .filter(|m| none(&not_ids, &m.system_id))
        .filter(|m| named(m) && none(&not_hostnames, &m.hostname))
        .filter(|m| macs.is_empty() || m.interfaces.iter().any(|i| macs.contains(&i.mac)))
        .filter(|m| status.is_empty() || status.contains(&m.status))
        .filter(|m| !not_status.contains(&m.status))
        .filter(|m| any(&simple_status, m.status.simple()))
        .filter(|m| none(&not_simple_status, m.status.simple()))
        .filter(|m| any(&zones, &m.zone) && none(&not_in_zones, &m.zone))
        .filter(|m| any(&pools, &m.pool) && none(&not_in_pools, &m.pool))
        .filter(|m| {
            any(&arches, &m.architecture)
                || any(&arches, m.architecture.split('/').next().unwrap_or(""))
        })
        .filter(|m| {
            any(&power_states, m.power_state.as_str())
                && none(&not_power_states, m.power_state.as_str())
        })
        .filter(|m| {
            let owner = m.owner.as_deref().unwrap_or("");
            any(&owners, owner) && none(&not_owners, owner)
        })
        .map(|m| m.id)
        .collect();
    Ok(Reply::JsonParts(world.machines_list_body(&listed)))
}

/// `POST machines/?op=allocate` (system_id or name, else any Ready machine).
fn allocate(
    world: &mut World,
    caller: &Caller,
    p: &Params,
    now: DateTime<Utc>,
) -> Result<Reply, MaasError> {
    let wanted_sid = p.get("system_id");
    let wanted_name = p.get("name");
    let candidate = world
        .machines
        .values()
        .filter(|m| m.status == Status::Ready && m.owner.is_none())
        .find(|m| {
            wanted_sid.is_none_or(|s| s == m.system_id)
                && wanted_name
                    .is_none_or(|n| n == m.hostname || n == format!("{}.maas", m.hostname))
        })
        .map(|m| m.id);
    let Some(id) = candidate else {
        return Err(MaasError::Conflict(match wanted_sid {
            Some(sid) => format!("No machine with system ID {sid} available."),
            None => "No machine available.".to_string(),
        }));
    };
    world.transition(id, Status::Allocated, now)?;
    world.set_owner_token(id, Some(caller.name().to_string()));
    world.event(
        id,
        Level::Debug,
        "User acquiring node",
        "",
        caller.name(),
        now,
    );
    let mut value = machine_json(world, id);
    if let Value::Object(map) = &mut value {
        map.insert("constraints_by_type".to_string(), json!({}));
    }
    Ok(Reply::json(&value))
}

/// A JSON object of these entries, in this order (without building a `Value` of a big
/// region's answer first: discovery asks for every machine's power parameters once per node).
struct Entries<K, V>(Vec<(K, V)>);

impl<K: serde::Serialize, V: serde::Serialize> serde::Serialize for Entries<K, V> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

/// formencode `Int`'s message, as `get_optional_param` reports it (api/utils.py).
const NOT_AN_INTEGER: &str = "Please enter an integer value";

/// `GET events/?op=query` (API_REFERENCE.md §5.21).
fn query_events(world: &World, caller: &Caller, p: &Params) -> Result<Reply, MaasError> {
    let level = match p.get("level") {
        None => Level::Info,
        Some(l) => Level::parse(l)
            .ok_or_else(|| MaasError::BadRequest(format!("Unrecognised log level: {l}")))?,
    };
    let limit = match p.get("limit") {
        None => 100,
        Some(l) => {
            let n: i64 = l
                .parse()
                .map_err(|_| MaasError::BadRequest(format!("Invalid limit: {NOT_AN_INTEGER}")))?;
            if n > 1000 {
                return Err(MaasError::BadRequest(format!(
                    "Requested number of events {n} is greater than limit: 1000"
                )));
            }
            n.max(1) as usize
        }
    };
    let parse_id = |name: &str| -> Result<Option<u64>, MaasError> {
        p.get(name)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| MaasError::BadRequest(format!("Invalid {name}: {NOT_AN_INTEGER}")))
            })
            .transpose()
    };
    let (after, before) = (parse_id("after")?, parse_id("before")?);
    if after.is_some() && before.is_some() {
        return Err(MaasError::BadRequest(
            "There is undetermined behaviour when both `after` and `before` are specified."
                .to_string(),
        ));
    }
    let hostnames = p.all("hostname");
    let ids = p.all("id");
    let zones = p.all("zone");
    let owners = p.all("owner");
    let mut macs = Vec::new();
    for mac in p.all("mac_address") {
        macs.push(normalise_mac(mac).ok_or_else(|| {
            MaasError::field(
                "mac_address",
                "Invalid parameter: invalid MAC address format",
            )
        })?);
    }
    let selected = |e: &super::events::Event| {
        let Some(m) = world.machine(&e.system_id) else {
            return false; // events of deleted nodes are not returned
        };
        world.can_view(caller, m.id)
            && e.level.selected_by(level)
            && (hostnames.is_empty() || hostnames.contains(&m.hostname.as_str()))
            && (ids.is_empty() || ids.contains(&m.system_id.as_str()))
            && (zones.is_empty() || zones.contains(&m.zone.as_str()))
            && (owners.is_empty() || owners.contains(&e.username.as_str()))
            && (macs.is_empty() || m.interfaces.iter().any(|i| macs.contains(&i.mac)))
    };
    // With system ids given, only their events can match: walk those, not every event.
    let indexed = (!ids.is_empty()).then(|| world.events_of(&ids));
    let candidates = || -> Box<dyn DoubleEndedIterator<Item = &super::events::Event> + '_> {
        match &indexed {
            Some(events) => Box::new(events.iter().copied()),
            None => Box::new(world.events.iter()),
        }
    };
    let mut events: Vec<&super::events::Event> = match after {
        Some(after) => {
            let mut oldest: Vec<_> = candidates()
                .filter(|e| e.id > after && selected(e))
                .take(limit)
                .collect();
            oldest.reverse();
            oldest
        }
        None => candidates()
            .rev()
            .filter(|e| before.is_none_or(|b| e.id < b) && selected(e))
            .take(limit)
            .collect(),
    };
    events.sort_by_key(|e| std::cmp::Reverse(e.id));
    let mut carried: Vec<String> = p
        .pairs()
        .filter(|(k, _)| !matches!(*k, "op" | "limit" | "after" | "before"))
        .map(|(k, v)| {
            format!(
                "{k}={}",
                url::form_urlencoded::byte_serialize(v.as_bytes()).collect::<String>()
            )
        })
        .collect();
    carried.insert(0, "op=query".to_string());
    carried.push(format!("limit={limit}"));
    let base = format!("/MAAS/api/2.0/events/?{}", carried.join("&"));
    let newest = events.first().map(|e| e.id).or(after).unwrap_or(0);
    let oldest = events.last().map(|e| e.id);
    let older_exists = oldest.is_some_and(|o| candidates().any(|e| e.id < o && selected(e)));
    let views: Vec<_> = events.iter().map(|e| e.view()).collect();
    Ok(Reply::json(&json!({
        "count": views.len(),
        "events": views,
        "next_uri": format!("{base}&after={newest}"),
        "prev_uri": if older_exists { Value::String(format!("{base}&before={}", oldest.unwrap_or(0))) } else { Value::Null },
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_with_trailing_slashes_and_op_suffix() {
        let r = route("machines/abc123/").unwrap();
        assert_eq!(r.handler.name, "MachineHandler");
        assert_eq!(r.system_id(), Some("abc123"));
        assert!(route("machines/abc123").is_none());
        let r = route("machines/abc123/op-deploy").unwrap();
        assert_eq!(r.suffix_op.as_deref(), Some("deploy"));
        let r = route("machines/op-accept").unwrap();
        assert_eq!(r.handler.name, "MachinesHandler");
        let r = route("subnets/cidr:10.0.0.0/24/").unwrap();
        assert_eq!(r.args, vec!["cidr:10.0.0.0/24"]);
        let r = route("subnets/cidr:172.30.9.60/31/").unwrap();
        assert_eq!(r.args, vec!["cidr:172.30.9.60/31"]);
        assert!(route("subnets/cidr:10.0.0.0/8/").is_none());
        assert!(route("subnets/cidr:10.0.0.0/1234/").is_none());
        let r = route("nodes/x/interfaces/7/").unwrap();
        assert_eq!(r.handler.name, "InterfaceHandler");
        assert_eq!(r.arg("id"), "7");
        assert!(
            route("machines/x/interfaces/").is_none(),
            "only nodes/…/interfaces/ is routed"
        );
    }

    #[test]
    fn power_parameters_are_the_object_of_every_machine_in_machine_order() {
        let first = std::collections::BTreeMap::from([
            ("power_user".to_string(), "root".to_string()),
            ("power_address".to_string(), "10.0.0.1".to_string()),
        ]);
        let second = std::collections::BTreeMap::new();
        let entries = vec![("zz9", &first), ("aa1", &second)];
        let as_value: serde_json::Map<String, Value> = entries
            .iter()
            .map(|(id, p)| (id.to_string(), json!(p)))
            .collect();
        assert_eq!(
            String::from_utf8(super::super::reply::to_piston_json(&Entries(entries))).unwrap(),
            String::from_utf8(super::super::reply::to_piston_json(&as_value)).unwrap()
        );
        assert_eq!(
            super::super::reply::to_piston_json(&Entries(Vec::<(&str, u8)>::new())),
            b"{}"
        );
    }
}
