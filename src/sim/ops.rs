//! Machine operations and their gating per status, answered as MAAS answers them
//! (API_REFERENCE.md §4.3, §5.6–§5.22). Each function takes the caller and the request's
//! parameters, changes the world or returns MAAS's error, and counts what took effect.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::config::MachineSpec;
use super::events::Level;
use super::faults::Scenario;
use super::machine::{Erase, Pending, PowerState};
use super::model::{Caller, Counter};
use super::network::Interface;
use super::reply::{MaasError, django_bool, string_bool};
use super::status::{RELEASABLE, Status};
use super::transport::Params;
use super::world::{Perm, World, resolve_distro, set_owner};

/// Builtin commissioning scripts and their tags (metadataserver/builtin_scripts): the choices
/// of CommissionForm's `commissioning_scripts`.
const COMMISSIONING_SCRIPTS: &[&str] = &[
    "20-maas-01-install-lldpd",
    "20-maas-02-dhcp-unconfigured-ifaces",
    "30-maas-01-bmc-config",
    "40-maas-01-machine-config-hints",
    "50-maas-01-commissioning",
    "maas-capture-lldpd",
    "maas-get-fruid-api-data",
    "maas-kernel-cmdline",
    "maas-list-modaliases",
    "maas-lshw",
    "maas-serial-ports",
    "maas-support-info",
    "bmc-config",
    "configure-hba",
    "deploy-info",
    "node",
    "update_firmware",
];

/// Builtin testing scripts and their tags, plus `none`.
const TESTING_SCRIPTS: &[&str] = &[
    "none",
    "badblocks",
    "badblocks-destructive",
    "fio",
    "internet-connectivity",
    "memtester",
    "ntp",
    "smartctl-conveyance",
    "smartctl-long",
    "smartctl-short",
    "smartctl-validate",
    "stress-ng-cpu-long",
    "stress-ng-cpu-short",
    "stress-ng-memory-long",
    "stress-ng-memory-short",
    "commissioning",
    "cpu",
    "destructive",
    "memory",
    "network",
    "network-validation",
    "storage",
];

/// A comma-separated script list (split server-side, forms/ephemeral.py) of known names:
/// MultipleChoiceField's error otherwise.
fn check_scripts(p: &Params, field: &str, known: &[&str]) -> Result<(), MaasError> {
    let Some(value) = p.get(field) else {
        return Ok(());
    };
    for name in value.split(',').filter(|n| !n.is_empty()) {
        if !known.contains(&name) {
            return Err(MaasError::field(
                field,
                format!("Select a valid choice. {name} is not one of the available choices."),
            ));
        }
    }
    Ok(())
}

/// The simulated region's DNS domain, by name and by id (`domain` of machine forms).
const DOMAINS: [&str; 2] = ["maas", "0"];

impl World {
    /// `zone`, `pool` and `domain` of a machine form (§5.6–§5.7): model choices by name,
    /// refused with Django's choice error when no such object exists. Returns the zone and pool
    /// to apply.
    fn placement(&self, p: &Params) -> Result<(Option<String>, Option<String>), MaasError> {
        let choice =
            |field: &str, known: &dyn Fn(&str) -> bool| -> Result<Option<String>, MaasError> {
                match p.get(field).filter(|v| !v.is_empty()) {
                    None => Ok(None),
                    Some(v) if known(v) => Ok(Some(v.to_string())),
                    Some(_) => Err(MaasError::field(
                        field,
                        "Select a valid choice. That choice is not one of the available choices.",
                    )),
                }
            };
        let zone = choice("zone", &|v| self.zones.values().any(|z| z.name == v))?;
        let pool = choice("pool", &|v| self.pools.values().any(|z| z.name == v))?;
        choice("domain", &|v| DOMAINS.contains(&v))?;
        Ok((zone, pool))
    }

    fn sid(&self, id: u64) -> String {
        self.machines
            .get(&id)
            .map(|m| m.system_id.clone())
            .unwrap_or_default()
    }

    // ----- commission / accept -----------------------------------------------------------------

    /// `POST machines/{id}/?op=commission`.
    pub fn commission(
        &mut self,
        caller: &Caller,
        system_id: &str,
        p: &Params,
        now: DateTime<Utc>,
    ) -> Result<(), MaasError> {
        let id = self.node_for(caller, system_id, Perm::Admin)?;
        let m = &self.machines[&id];
        let actionable = matches!(
            m.status,
            Status::New | Status::FailedCommissioning | Status::Ready | Status::Broken
        ) && !m.locked
            && !m.interfaces.is_empty();
        if !actionable {
            return Err(MaasError::all(
                "Commission is not available because of the current state of the node.",
            ));
        }
        if m.power_type.is_empty() {
            return Err(MaasError::Internal(
                "Unconfigured power type. Please configure the power type and try again."
                    .to_string(),
            ));
        }
        check_scripts(p, "commissioning_scripts", COMMISSIONING_SCRIPTS)?;
        check_scripts(p, "testing_scripts", TESTING_SCRIPTS)?;
        let skip_networking = django_bool(p.get("skip_networking"));
        let skip_storage = django_bool(p.get("skip_storage"));
        let no_tests = p
            .get("testing_scripts")
            .is_some_and(|t| t.split(',').any(|s| s.trim() == "none"));
        self.start_commissioning(
            id,
            caller.name(),
            skip_networking,
            skip_storage,
            no_tests,
            now,
        )?;
        self.counter(system_id, Counter::Commission);
        Ok(())
    }

    /// `POST machines/?op=accept` (and `accept_all` with every New machine).
    pub fn accept(
        &mut self,
        caller: &Caller,
        system_ids: &[String],
        now: DateTime<Utc>,
    ) -> Result<Vec<u64>, MaasError> {
        let unknown: Vec<&str> = system_ids
            .iter()
            .filter(|s| self.machine_id(s).is_none())
            .map(String::as_str)
            .collect();
        if !unknown.is_empty() {
            return Err(MaasError::BadRequest(format!(
                "Unknown machine(s): {}.",
                unknown.join(", ")
            )));
        }
        if !caller.is_admin() {
            return Err(MaasError::Forbidden(format!(
                "You don't have the required permission to accept the following machine(s): {}.",
                system_ids.join(", ")
            )));
        }
        let mut accepted = Vec::new();
        for sid in system_ids {
            let id = self.machine_id(sid).ok_or_else(MaasError::no_machine)?;
            match self.machines[&id].status {
                Status::New => {
                    self.start_commissioning(id, caller.name(), false, false, false, now)?;
                    self.counter(sid, Counter::Commission);
                    accepted.push(id);
                }
                Status::Ready | Status::Commissioning => {}
                other => {
                    return Err(MaasError::Conflict(format!(
                        "Cannot accept node enlistment: node {sid} is in state {}.",
                        other.name()
                    )));
                }
            }
        }
        Ok(accepted)
    }

    // ----- deploy ------------------------------------------------------------------------------

    /// `POST machines/{id}/?op=deploy` (and `power_on` of an Allocated machine).
    pub fn deploy(
        &mut self,
        caller: &Caller,
        system_id: &str,
        p: &Params,
        now: DateTime<Utc>,
    ) -> Result<(), MaasError> {
        let id = self.node_for(caller, system_id, Perm::Edit)?;
        let m = &self.machines[&id];
        // Validate the form before anything changes (MAAS rolls the transaction back).
        let distro = match p.get("distro_series").filter(|d| !d.is_empty()) {
            None => ("ubuntu", "noble"),
            Some(d) => resolve_distro(d).ok_or_else(|| {
                MaasError::field(
                    "distro_series",
                    format!("'{d}' is not a valid distro_series.  It should be one of: 'ubuntu/focal', 'ubuntu/jammy', 'ubuntu/noble'."),
                )
            })?,
        };
        let enable_hw_sync = string_bool("enable_hw_sync", p.get("enable_hw_sync"), false)?;
        let ephemeral = string_bool("ephemeral_deploy", p.get("ephemeral_deploy"), false)?;
        if string_bool("install_rackd", p.get("install_rackd"), false)? {
            return Err(MaasError::BadRequest(
                "Deploying a machine as a rackd has been disabled and it's not supported anymore."
                    .to_string(),
            ));
        }
        if let Some(kind) = p.get("bridge_type")
            && !matches!(kind, "standard" | "ovs")
        {
            return Err(MaasError::field(
                "bridge_type",
                format!("Select a valid choice. {kind} is not one of the available choices."),
            ));
        }
        if m.status == Status::Ready {
            if m.owner.as_deref().is_some_and(|o| o != caller.name()) {
                return Err(MaasError::Conflict(
                    "Can't allocate a machine belonging to another user.".to_string(),
                ));
            }
        } else if m.status != Status::Allocated {
            return Err(MaasError::Conflict(format!(
                "Can't deploy a machine that is in the '{}' state",
                m.status.name()
            )));
        }
        if m.status == Status::Ready {
            self.transition(id, Status::Allocated, now)?;
            self.set_owner_token(id, Some(caller.name().to_string()));
        }
        self.start_deployment(
            id,
            caller.name(),
            p.get("user_data").map(String::from),
            distro,
            enable_hw_sync,
            ephemeral,
            now,
        )?;
        if let Some(m) = self.machines.get_mut(&id)
            && let Some(kernel) = p.get("hwe_kernel")
        {
            m.hwe_kernel = Some(kernel.to_string());
        }
        self.counter(system_id, Counter::Deploy);
        // Post-commit: an exhausted subnet is MAAS's 503, after the deployment took effect.
        self.check_auto_ips(id)
    }

    // ----- release -----------------------------------------------------------------------------

    /// `POST machines/{id}/?op=release`. Returns whether it took effect (READY/RELEASING are
    /// 200 no-ops).
    pub fn release(
        &mut self,
        caller: &Caller,
        system_id: &str,
        p: &Params,
        now: DateTime<Utc>,
    ) -> Result<bool, MaasError> {
        let id = self.node_for(caller, system_id, Perm::Edit)?;
        let status = self.machines[&id].status;
        if matches!(status, Status::Ready | Status::Releasing) {
            return Ok(false);
        }
        if !RELEASABLE.contains(&status) {
            return Err(MaasError::Conflict(format!(
                "Machine cannot be released in its current state ('{}').",
                status.name()
            )));
        }
        let erase = if django_bool(p.get("secure_erase")) {
            Some(Erase::Secure)
        } else if django_bool(p.get("quick_erase")) {
            Some(Erase::Quick)
        } else if django_bool(p.get("erase")) {
            Some(Erase::Full)
        } else {
            None
        };
        self.start_release(id, erase, caller.name(), now)?;
        self.counter(system_id, Counter::Release);
        if erase.is_some() {
            self.counter(system_id, Counter::Erase);
        }
        Ok(true)
    }

    // ----- abort, broken, fixed ----------------------------------------------------------------

    /// `POST machines/{id}/?op=abort`.
    pub fn abort(
        &mut self,
        caller: &Caller,
        system_id: &str,
        now: DateTime<Utc>,
    ) -> Result<(), MaasError> {
        let id = self.node_for(caller, system_id, Perm::Edit)?;
        let m = &self.machines[&id];
        let (target, kind) = match m.status {
            Status::Commissioning => (Status::New, "Aborted commissioning"),
            Status::Testing => (
                if m.previous_status == Status::Commissioning {
                    Status::Ready
                } else {
                    m.previous_status
                },
                "Aborted testing",
            ),
            Status::Deploying => (Status::Allocated, "Aborted deployment"),
            Status::DiskErasing => (Status::FailedDiskErasing, "Aborted disk erasing"),
            other => {
                return Err(MaasError::Conflict(format!(
                    "Cannot abort in current state: node {system_id} is in state {}.",
                    other.name()
                )));
            }
        };
        self.set_pending(id, None);
        self.transition(id, target, now)?;
        if target == Status::New
            && let Some(m) = self.machines.get_mut(&id)
        {
            set_owner(m, None);
        }
        self.power(id, PowerState::Off, now);
        self.event(id, Level::Info, kind, "", caller.name(), now);
        self.counter(system_id, Counter::Abort);
        Ok(())
    }

    /// `POST machines/{id}/?op=mark_broken`: only the owner may.
    pub fn mark_broken(
        &mut self,
        caller: &Caller,
        system_id: &str,
        p: &Params,
        now: DateTime<Utc>,
    ) -> Result<(), MaasError> {
        let id = self.node_for(caller, system_id, Perm::Edit)?;
        if self.machines[&id].owner.as_deref() != Some(caller.name()) {
            return Err(MaasError::Forbidden(String::new()));
        }
        let comment = p
            .get("comment")
            .or(p.get("error_description"))
            .unwrap_or("")
            .to_string();
        let status = self.machines[&id].status;
        if RELEASABLE.contains(&status) && status != Status::Deployed {
            // Released first (machines.py mark_broken): the allocation and any deployment in
            // progress end; a Deployed machine keeps its OS so mark_fixed can return it.
            self.set_pending(id, None);
            if let Some(m) = self.machines.get_mut(&id) {
                m.osystem.clear();
                m.distro_series.clear();
                m.user_data = None;
                m.boot += 1;
                set_owner(m, None);
            }
            self.release_auto_ips(id);
        }
        self.make_broken(id, &comment, caller.name(), now);
        Ok(())
    }

    /// `POST machines/{id}/?op=rescue_mode` (admin): `Node.start_rescue_mode` records the
    /// current status for the way back and moves to Entering rescue mode under MAAS's
    /// transition guard (API_REFERENCE §4.2: an illegal start is MAAS's own 409
    /// `Invalid transition: <old> -> Entering rescue mode.`). A deployed machine is power
    /// cycled, any other powered on; the booted rescue environment makes it Rescue mode.
    pub fn rescue_mode(
        &mut self,
        caller: &Caller,
        system_id: &str,
        now: DateTime<Utc>,
    ) -> Result<(), MaasError> {
        let id = self.node_for(caller, system_id, Perm::Admin)?;
        // `transition` keeps the status it leaves as `previous_status`: exit returns there.
        self.transition(id, Status::EnteringRescueMode, now)?;
        self.event(
            id,
            Level::Info,
            "Entering rescue mode",
            "",
            caller.name(),
            now,
        );
        self.power(id, PowerState::On, now);
        let d = self.sim_duration(self.config.timings.commissioning_secs / 2.0);
        self.set_pending(id, Some((Pending::RescueDone, now + d)));
        Ok(())
    }

    /// `POST machines/{id}/?op=exit_rescue_mode` (admin): `Node.stop_rescue_mode` moves to
    /// Exiting rescue mode under the guard (from Entering, Rescue mode or either failed rescue
    /// state; otherwise MAAS's 409 `Invalid transition`). A machine that was Deployed is power
    /// cycled back into its OS and becomes Deployed again; any other is powered off and returns
    /// to the status it had before rescue.
    pub fn exit_rescue_mode(
        &mut self,
        caller: &Caller,
        system_id: &str,
        now: DateTime<Utc>,
    ) -> Result<(), MaasError> {
        let id = self.node_for(caller, system_id, Perm::Admin)?;
        let back_to = self.machines[&id].previous_status;
        self.transition(id, Status::ExitingRescueMode, now)?;
        self.event(
            id,
            Level::Info,
            "Exiting rescue mode",
            "",
            caller.name(),
            now,
        );
        let d = self.sim_duration(self.config.timings.releasing_secs);
        self.set_pending(id, Some((Pending::ExitRescueDone { back_to }, now + d)));
        Ok(())
    }

    /// `POST machines/{id}/?op=mark_fixed`.
    pub fn mark_fixed(
        &mut self,
        caller: &Caller,
        system_id: &str,
        now: DateTime<Utc>,
    ) -> Result<(), MaasError> {
        let id = self.node_for(caller, system_id, Perm::Admin)?;
        let m = &self.machines[&id];
        if m.status != Status::Broken {
            return Err(MaasError::Conflict(
                "Can't mark a non-broken node as 'Ready'.".to_string(),
            ));
        }
        let target = if m.previous_status == Status::Deployed {
            Status::Deployed
        } else {
            Status::Ready
        };
        self.transition(id, target, now)?;
        if let Some(m) = self.machines.get_mut(&id) {
            m.error_description.clear();
            m.osystem.clear();
            m.distro_series.clear();
            m.hwe_kernel = None;
        }
        self.event(
            id,
            Level::Info,
            "Marking node fixed",
            "",
            caller.name(),
            now,
        );
        Ok(())
    }

    // ----- power -------------------------------------------------------------------------------

    /// `POST machines/{id}/?op=power_on`: for an Allocated machine this is a deployment.
    pub fn power_on(
        &mut self,
        caller: &Caller,
        system_id: &str,
        p: &Params,
        now: DateTime<Utc>,
    ) -> Result<(), MaasError> {
        let id = self.node_for(caller, system_id, Perm::Edit)?;
        let m = &self.machines[&id];
        if m.owner.is_none() {
            return Err(MaasError::Conflict(
                "Can't start node: it hasn't been allocated.".to_string(),
            ));
        }
        if m.status == Status::Allocated {
            self.start_deployment(
                id,
                caller.name(),
                p.get("user_data").map(String::from),
                ("ubuntu", "noble"),
                false,
                false,
                now,
            )?;
            self.counter(system_id, Counter::Deploy);
            self.counter(system_id, Counter::PowerOn);
            // Post-commit, as for deploy: exhaustion is a 503 after the status changed.
            return self.check_auto_ips(id);
        }
        self.power(id, PowerState::On, now);
        self.counter(system_id, Counter::PowerOn);
        Ok(())
    }

    /// `POST machines/{id}/?op=power_off`.
    pub fn power_off(
        &mut self,
        caller: &Caller,
        system_id: &str,
        now: DateTime<Utc>,
    ) -> Result<(), MaasError> {
        let id = self.node_for(caller, system_id, Perm::Edit)?;
        self.power(id, PowerState::Off, now);
        self.counter(system_id, Counter::PowerOff);
        Ok(())
    }

    // ----- storage -----------------------------------------------------------------------------

    // ----- interfaces and subnets ----------------------------------------------------------------

    // ----- create / update / delete ------------------------------------------------------------

    /// `POST machines/` (admin), or anonymous enlistment.
    pub fn create_machine(
        &mut self,
        caller: &Caller,
        p: &Params,
        now: DateTime<Utc>,
    ) -> Result<u64, MaasError> {
        let power_type = p.get("power_type").unwrap_or("").to_string();
        if !matches!(
            power_type.as_str(),
            "" | "ipmi" | "redfish" | "manual" | "virsh" | "webhook"
        ) {
            return Err(MaasError::field(
                "power_type",
                format!("Select a valid choice. {power_type} is not one of the available choices."),
            ));
        }
        let deployed = string_bool("deployed", p.get("deployed"), false)? && caller.is_admin();
        let architecture = match p.get("architecture").filter(|a| !a.is_empty()) {
            Some(a) => {
                let full = if a.contains('/') {
                    a.to_string()
                } else {
                    format!("{a}/generic")
                };
                if !matches!(full.as_str(), "amd64/generic" | "arm64/generic") {
                    return Err(MaasError::field(
                        "architecture",
                        format!(
                            "'{a}' is not a valid architecture.  It should be one of: 'amd64/generic', 'arm64/generic'."
                        ),
                    ));
                }
                Some(full)
            }
            None => None,
        };
        let needs_arch_and_macs = !(power_type == "ipmi" || (deployed && power_type.is_empty()));
        let mut macs = Vec::new();
        for mac in p.all("mac_addresses") {
            let normalised = normalise_mac(mac).ok_or_else(|| {
                MaasError::field(
                    "mac_addresses",
                    format!("'{mac}' is not a valid MAC address."),
                )
            })?;
            if let Some(owner) = self
                .machines
                .values()
                .find(|m| m.interfaces.iter().any(|i| i.mac == normalised))
            {
                return Err(MaasError::field(
                    "mac_addresses",
                    format!(
                        "MAC address {normalised} already in use on {}.",
                        owner.hostname
                    ),
                ));
            }
            macs.push(normalised);
        }
        if needs_arch_and_macs {
            if architecture.is_none() {
                return Err(MaasError::field("architecture", "This field is required."));
            }
            if macs.is_empty() {
                return Err(MaasError::field("mac_addresses", "This field is required."));
            }
        }
        // MAAS gotcha: with power_type=ipmi and no architecture, the MACs are discarded.
        if power_type == "ipmi" && architecture.is_none() {
            macs.clear();
        }
        let mut power = BTreeMap::new();
        for (key, value) in p.pairs() {
            if let Some(name) = key.strip_prefix("power_parameters_")
                && name != "skip_check"
            {
                power.insert(name.to_string(), value.to_string());
            }
        }
        if let Some(json) = p.get("power_parameters")
            && let Ok(serde_json::Value::Object(map)) =
                serde_json::from_str::<serde_json::Value>(json)
        {
            for (k, v) in map {
                power.insert(k, v.as_str().map_or_else(|| v.to_string(), String::from));
            }
        }
        let skip_check = p.get("power_parameters_skip_check") == Some("true");
        if power_type == "ipmi"
            && !skip_check
            && power.get("power_address").is_none_or(|a| a.is_empty())
        {
            return Err(MaasError::field(
                "power_parameters",
                "IP address: This field is required.",
            ));
        }
        let (zone, pool) = self.placement(p)?;
        let hostname = match p.get("hostname").filter(|h| !h.is_empty()) {
            Some(h) => {
                if self.machines.values().any(|m| m.hostname == h) {
                    return Err(MaasError::field(
                        "hostname",
                        format!("Node with hostname \"{h}\" already exists."),
                    ));
                }
                h.to_string()
            }
            None => self.petname(),
        };
        let system_id = self.new_system_id();
        let spec = MachineSpec::default();
        let mut m = self.blank_machine(&spec, system_id.clone(), hostname);
        m.architecture = architecture.unwrap_or_else(|| "amd64/generic".to_string());
        m.power_type = power_type;
        m.power_parameters = power;
        m.description = p.get("description").unwrap_or("").to_string();
        if let Some(zone) = zone {
            m.zone = zone;
        }
        if let Some(pool) = pool {
            m.pool = pool;
        }
        m.hardware_disks.clear();
        for (index, mac) in macs.iter().enumerate() {
            m.interfaces.push(Interface {
                id: 0,
                name: format!("eth{index}"),
                mac: mac.clone(),
                vlan_id: (index == 0).then_some(super::world::PXE_VLAN),
                links: Vec::new(),
                speed_mbps: 1000,
                vendor: String::new(),
                product: String::new(),
            });
        }
        if let Some(m2) = self.find_hardware_agent(&m) {
            m.agent = m2;
        }
        let id = self.insert_machine(m);
        let iface_ids: Vec<u64> = (0..macs.len()).map(|_| self.id()).collect();
        if let Some(m) = self.machines.get_mut(&id) {
            for (iface, new_id) in m.interfaces.iter_mut().zip(iface_ids) {
                iface.id = new_id;
            }
        }
        self.bind_hardware(id);
        self.counter(&system_id, Counter::Create);
        self.event(id, Level::Info, "New", "", caller.name(), now);
        if deployed {
            self.transition(id, Status::Deployed, now)?;
            self.set_owner_token(id, Some(caller.name().to_string()));
            return Ok(id);
        }
        let commission = string_bool("commission", p.get("commission"), true)?;
        let commissionable = caller.is_admin()
            && commission
            && !self.machines[&id].interfaces.is_empty()
            && !self.machines[&id].power_type.is_empty();
        if commissionable {
            // Errors of this implicit commissioning are ignored, as MAAS does (LP:1600328).
            let _ = self.start_commissioning(
                id,
                caller.name(),
                django_bool(p.get("skip_networking")),
                django_bool(p.get("skip_storage")),
                false,
                now,
            );
            self.counter(&system_id, Counter::Commission);
        }
        Ok(id)
    }

    fn find_hardware_agent(
        &self,
        m: &super::machine::Machine,
    ) -> Option<super::config::AgentBehaviour> {
        let index = self.hardware_of(m)?;
        Some(self.hardware_spec(index).agent.clone())
    }

    /// `PUT machines/{id}/` (admin; omitted fields unchanged).
    pub fn update_machine(
        &mut self,
        caller: &Caller,
        system_id: &str,
        p: &Params,
    ) -> Result<(), MaasError> {
        let id = self.node_for(caller, system_id, Perm::Admin)?;
        if let Some(h) = p.get("hostname").filter(|h| !h.is_empty())
            && self
                .machines
                .values()
                .any(|m| m.hostname == h && m.id != id)
        {
            return Err(MaasError::field(
                "hostname",
                format!("Node with hostname \"{h}\" already exists."),
            ));
        }
        if let Some(pt) = p.get("power_type")
            && !matches!(pt, "" | "ipmi" | "redfish" | "manual" | "virsh" | "webhook")
        {
            return Err(MaasError::field(
                "power_type",
                format!("Select a valid choice. {pt} is not one of the available choices."),
            ));
        }
        let (zone, pool) = self.placement(p)?;
        let m = self
            .machines
            .get_mut(&id)
            .ok_or_else(MaasError::no_machine)?;
        if let Some(h) = p.get("hostname").filter(|h| !h.is_empty()) {
            m.hostname = h.to_string();
        }
        if let Some(d) = p.get("description") {
            m.description = d.to_string();
        }
        if let Some(pt) = p.get("power_type") {
            if pt != m.power_type {
                m.power_parameters.clear();
            }
            m.power_type = pt.to_string();
        }
        for (key, value) in p.pairs() {
            if let Some(name) = key.strip_prefix("power_parameters_")
                && name != "skip_check"
            {
                m.power_parameters
                    .insert(name.to_string(), value.to_string());
            }
        }
        if let Some(zone) = zone {
            m.zone = zone;
        }
        if let Some(pool) = pool {
            m.pool = pool;
        }
        if let Some(arch) = p.get("architecture").filter(|a| !a.is_empty()) {
            m.architecture = arch.to_string();
        }
        Ok(())
    }

    /// `DELETE machines/{id}/`.
    pub fn delete_machine(&mut self, caller: &Caller, system_id: &str) -> Result<(), MaasError> {
        let id = self.node_for(caller, system_id, Perm::Admin)?;
        self.remove_machine(id);
        self.counter(system_id, Counter::Delete);
        Ok(())
    }

    // ----- out of band -------------------------------------------------------------------------

    /// Whether this scenario applies to the machine (for tests and the control API).
    pub fn machine_has_scenario(&self, system_id: &str, scenario: Scenario) -> bool {
        self.machine(system_id)
            .is_some_and(|m| m.has_scenario(scenario))
    }

    pub fn system_id_of(&self, id: u64) -> String {
        self.sid(id)
    }
}

/// `aa:bb:cc:dd:ee:ff` (lower case) from the forms MAAS accepts (`:`/`-` separated or bare).
pub fn normalise_mac(text: &str) -> Option<String> {
    let hex: String = text
        .chars()
        .filter(|c| !matches!(c, ':' | '-' | '.'))
        .collect();
    if hex.len() != 12 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let lower = hex.to_ascii_lowercase();
    Some(
        (0..6)
            .map(|i| &lower[i * 2..i * 2 + 2])
            .collect::<Vec<_>>()
            .join(":"),
    )
}
