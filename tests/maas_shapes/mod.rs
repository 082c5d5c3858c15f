//! One table of MAAS's error answers, each as MAAS's own handler gives it (status, content type,
//! body, `Retry-After`), with the handler cited. Two suites read it: tests/maas_error_shapes.rs
//! feeds every answer to metalform's MAAS client and checks how it is classified;
//! tests/sim_error_shapes.rs provokes every one in the simulator and checks it answers exactly
//! that. Neither side is the reference for the other: MAAS is.
//!
//! Placeholders in paths and bodies: `{sid}` the machine, `{iface}` its second interface (a
//! RoCE port), `{subnet}` a subnet of another VLAN.
#![allow(dead_code)]

/// How the answer's body reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// `text/plain; charset=utf-8`, exactly this text.
    Text(&'static str),
    /// `application/json`, exactly this document.
    Json(&'static str),
    /// `text/html`, a page with this title.
    Html(&'static str),
}

/// What the simulator needs before the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setup {
    /// A Ready machine.
    Ready,
    /// The machine Deployed.
    Deployed,
    /// The machine Commissioning.
    Commissioning,
    /// The machine's RoCE port holds 172.30.9.61 on a /31 of its VLAN already; another
    /// machine's port asks for it.
    AddressTaken,
    /// A subnet on the default fabric, not the RoCE port's VLAN.
    OtherVlanSubnet,
    /// An injected fault (the simulator's fault grammar) for the request.
    Fault(&'static str),
}

/// How metalform's client must classify the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// 400 text: `BadRequest` without form errors.
    BadRequest,
    /// 400 JSON: `BadRequest` with an error on this field.
    Form(&'static str),
    Unauthorized,
    Forbidden,
    NotFound,
    /// `StaticIPAddressUnavailable` on link_subnet: not a missing machine.
    AddressUnavailable,
    /// 409 without Retry-After: a state violation, never retried.
    Conflict,
    /// Retryable (409/503 with Retry-After, 5xx); `unknown`: a POST's outcome is unknown.
    Transient {
        unknown: bool,
    },
}

/// The client operation the answer comes back to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Deploy,
    Release,
    Abort,
    Commission,
    MarkFixed,
    PowerOn,
    ReadMachine,
    LinkStatic,
    SetStorageLayout(&'static str),
    SetBootDisk,
    QueryEvents,
    CreateSubnet,
    Whoami,
    CreateTag,
    SetWorkloadAnnotations,
}

/// One answer of MAAS.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub name: &'static str,
    /// Where MAAS gives it (maas/maas, src/maasserver/…).
    pub maas: &'static str,
    pub setup: Setup,
    /// The request: method, path below /MAAS/api/2.0/, op, form.
    pub method: &'static str,
    pub path: &'static str,
    pub op: Option<&'static str>,
    pub form: &'static [(&'static str, &'static str)],
    /// Send it as a non-admin user.
    pub as_user: bool,
    pub status: u16,
    pub body: Body,
    pub retry_after: Option<u64>,
    pub call: Call,
    pub class: Class,
}

const fn shape(name: &'static str, maas: &'static str) -> Shape {
    Shape {
        name,
        maas,
        setup: Setup::Ready,
        method: "POST",
        path: "machines/{sid}/",
        op: None,
        form: &[],
        as_user: false,
        status: 400,
        body: Body::Text(""),
        retry_after: None,
        call: Call::ReadMachine,
        class: Class::BadRequest,
    }
}

pub const SHAPES: &[Shape] = &[
    Shape {
        setup: Setup::Deployed,
        op: Some("deploy"),
        status: 409,
        body: Body::Text("Can't deploy a machine that is in the 'Deployed' state"),
        call: Call::Deploy,
        class: Class::Conflict,
        ..shape(
            "deploy_wrong_state",
            "api/machines.py MachineHandler.deploy: NodeStateViolation",
        )
    },
    Shape {
        setup: Setup::Commissioning,
        op: Some("release"),
        status: 409,
        body: Body::Text("Machine cannot be released in its current state ('Commissioning')."),
        call: Call::Release,
        class: Class::Conflict,
        ..shape(
            "release_wrong_state",
            "api/machines.py MachineHandler.release: NodeStateViolation",
        )
    },
    Shape {
        op: Some("abort"),
        status: 409,
        body: Body::Text("Cannot abort in current state: node {sid} is in state Ready."),
        call: Call::Abort,
        class: Class::Conflict,
        ..shape(
            "abort_wrong_state",
            "models/node.py Node.abort_operation: NodeStateViolation",
        )
    },
    Shape {
        setup: Setup::Deployed,
        op: Some("commission"),
        status: 400,
        body: Body::Json(
            r#"{"__all__": ["Commission is not available because of the current state of the node."]}"#,
        ),
        call: Call::Commission,
        class: Class::Form("__all__"),
        ..shape(
            "commission_wrong_state",
            "forms/ephemeral.py TestForm.clean via CommissionForm",
        )
    },
    Shape {
        op: Some("mark_fixed"),
        status: 409,
        body: Body::Text("Can't mark a non-broken node as 'Ready'."),
        call: Call::MarkFixed,
        class: Class::Conflict,
        ..shape(
            "mark_fixed_not_broken",
            "api/machines.py MachineHandler.mark_fixed",
        )
    },
    Shape {
        op: Some("power_on"),
        status: 409,
        body: Body::Text("Can't start node: it hasn't been allocated."),
        call: Call::PowerOn,
        class: Class::Conflict,
        ..shape("power_on_unowned", "api/nodes.py PowerMixin.power_on")
    },
    Shape {
        method: "GET",
        path: "machines/nosuch/",
        status: 404,
        body: Body::Text("No Machine matches the given query."),
        call: Call::ReadMachine,
        class: Class::NotFound,
        ..shape(
            "unknown_machine",
            "models/node.py NodeManager.get_node_or_404 (Http404)",
        )
    },
    Shape {
        setup: Setup::AddressTaken,
        path: "nodes/{sid}/interfaces/{iface}/",
        op: Some("link_subnet"),
        form: &[
            ("mode", "STATIC"),
            ("subnet", "cidr:172.30.9.60/31"),
            ("ip_address", "172.30.9.61"),
        ],
        status: 404,
        body: Body::Text("IP address is already in use."),
        call: Call::LinkStatic,
        class: Class::AddressUnavailable,
        ..shape(
            "link_address_in_use",
            "models/interface.py Interface._link_subnet_static: StaticIPAddressUnavailable",
        )
    },
    Shape {
        setup: Setup::OtherVlanSubnet,
        path: "nodes/{sid}/interfaces/{iface}/",
        op: Some("link_subnet"),
        form: &[("mode", "STATIC"), ("subnet", "{subnet}")],
        status: 400,
        body: Body::Json(r#"{"subnet": ["None found with id={subnet}."]}"#),
        call: Call::LinkStatic,
        class: Class::Form("subnet"),
        ..shape(
            "link_subnet_of_another_vlan",
            "fields.py SpecifierOrModelChoiceField over the interface VLAN's subnets (forms/interface_link.py)",
        )
    },
    Shape {
        setup: Setup::Deployed,
        path: "nodes/{sid}/interfaces/{iface}/",
        op: Some("link_subnet"),
        form: &[("mode", "DHCP")],
        status: 409,
        body: Body::Text(
            "Cannot link subnet interface because the machine is not New, Ready, Allocated, or Broken.",
        ),
        call: Call::LinkStatic,
        class: Class::Conflict,
        ..shape(
            "link_machine_deployed",
            "api/interfaces.py raise_error_for_invalid_state_on_allocated_operations",
        )
    },
    Shape {
        setup: Setup::Deployed,
        op: Some("set_storage_layout"),
        form: &[("storage_layout", "flat")],
        status: 409,
        body: Body::Text("Cannot change the storage layout on a machine that is not Ready."),
        call: Call::SetStorageLayout("flat"),
        class: Class::Conflict,
        ..shape(
            "layout_not_ready",
            "api/machines.py MachineHandler.set_storage_layout",
        )
    },
    Shape {
        op: Some("set_storage_layout"),
        form: &[("storage_layout", "zfs")],
        status: 400,
        body: Body::Json(
            r#"{"storage_layout": ["'zfs' is not a valid storage_layout.  It should be one of: 'bcache', 'blank', 'custom', 'flat', 'lvm', 'vmfs6', 'vmfs7'."]}"#,
        ),
        call: Call::SetStorageLayout("zfs"),
        class: Class::Form("storage_layout"),
        ..shape(
            "layout_unknown",
            "storage_layouts.py StorageLayoutForm (compose_invalid_choice_text)",
        )
    },
    Shape {
        setup: Setup::Deployed,
        path: "nodes/{sid}/blockdevices/{disk}/",
        op: Some("set_boot_disk"),
        status: 409,
        body: Body::Text("Cannot set as boot disk because the machine is not Ready."),
        call: Call::SetBootDisk,
        class: Class::Conflict,
        ..shape(
            "boot_disk_not_ready",
            "api/blockdevices.py BlockDeviceHandler.set_boot_disk",
        )
    },
    Shape {
        method: "GET",
        path: "events/",
        op: Some("query"),
        form: &[("level", "info")],
        status: 400,
        body: Body::Text("Unrecognised log level: info"),
        call: Call::QueryEvents,
        class: Class::BadRequest,
        ..shape(
            "events_level_lower_case",
            "api/events.py EventsHandler.query",
        )
    },
    Shape {
        path: "subnets/",
        form: &[("cidr", "172.30.9.62/31")],
        as_user: true,
        status: 403,
        body: Body::Text("This method is reserved for admin users."),
        call: Call::CreateSubnet,
        class: Class::Forbidden,
        ..shape("create_subnet_not_admin", "api/support.py admin_method")
    },
    Shape {
        method: "GET",
        path: "users/",
        op: Some("whoami"),
        setup: Setup::Fault("bad-key"),
        status: 401,
        body: Body::Text("Authorization Error: Invalid API key."),
        call: Call::Whoami,
        class: Class::Unauthorized,
        ..shape(
            "unknown_api_key",
            "api/auth.py MAASAPIAuthentication.is_authenticated",
        )
    },
    Shape {
        path: "tags/",
        setup: Setup::Fault("tag-exists"),
        form: &[("name", "gpu")],
        status: 400,
        body: Body::Json(r#"{"name": ["Tag with this Name already exists."]}"#),
        call: Call::CreateTag,
        class: Class::Form("name"),
        ..shape("tag_exists", "forms TagForm (unique name)")
    },
    Shape {
        op: Some("set_workload_annotations"),
        form: &[("rack", "c07")],
        status: 409,
        body: Body::Text("Cannot set workload annotation: it hasn't been acquired."),
        call: Call::SetWorkloadAnnotations,
        class: Class::Conflict,
        ..shape(
            "annotations_not_owner",
            "api/nodes.py NodeHandler.set_workload_annotations",
        )
    },
    Shape {
        op: Some("release"),
        setup: Setup::Fault("machine.release:status=409,retry_after=5"),
        status: 409,
        body: Body::Html("Error: Conflict Error"),
        retry_after: Some(5),
        call: Call::Release,
        class: Class::Transient { unknown: false },
        ..shape(
            "serialization_conflict",
            "utils/views.py HttpResponseConflict (RETRY_AFTER_CONFLICT, 409.html)",
        )
    },
    Shape {
        method: "GET",
        path: "machines/{sid}/",
        setup: Setup::Fault("machine.read:status=503,retry_after=10"),
        status: 503,
        body: Body::Text(
            "Unable to connect to rack controller 'sim7rk' (sim7rk); no connections available.",
        ),
        retry_after: Some(10),
        call: Call::ReadMachine,
        class: Class::Transient { unknown: false },
        ..shape(
            "no_rack_controller",
            "middleware.py APIRPCErrorsMiddleware (NoConnectionsAvailable, Retry-After 10)",
        )
    },
    Shape {
        op: Some("deploy"),
        setup: Setup::Fault("machine.deploy:status=409"),
        status: 409,
        body: Body::Text("Can't deploy a machine that is in the 'Ready' state"),
        call: Call::Deploy,
        class: Class::Conflict,
        ..shape(
            "injected_state_violation",
            "api/machines.py MachineHandler.deploy (a 409 without Retry-After)",
        )
    },
];

/// `text` with the placeholders filled in.
pub fn fill(text: &str, sid: &str, iface: &str, subnet: &str, disk: &str) -> String {
    text.replace("{sid}", sid)
        .replace("{iface}", iface)
        .replace("{subnet}", subnet)
        .replace("{disk}", disk)
}
