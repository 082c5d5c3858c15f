//! Machine operations and their gating per status, answered as MAAS answers them
//! (API_REFERENCE.md §4.3, §5.6–§5.22). Each function takes the caller and the request's
//! parameters, changes the world or returns MAAS's error, and counts what took effect.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use chrono::{DateTime, Utc};

use super::config::MachineSpec;
use super::events::Level;
use super::faults::Scenario;
use super::machine::{Erase, Pending, PowerState};
use super::network::{Cidr, Interface, Link, LinkMode, Subnet};
use super::reply::{MaasError, django_bool, string_bool};
use super::status::{RELEASABLE, Status};
use super::transport::Params;
use super::world::{Caller, Counter, World, set_owner};

/// Permission levels of `get_node_or_404` (auth/local.py).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Perm {
    View,
    Edit,
    Admin,
    AdminRead,
}

/// The one zone, resource pool and DNS domain of the simulated region (what `zones/`,
/// `resourcepools/` and `domains/` list); machine forms name them (the domain also by id).
const ZONES: [&str; 1] = ["default"];
const POOLS: [&str; 1] = ["default"];
const DOMAINS: [&str; 2] = ["maas", "0"];

/// `zone`, `pool` and `domain` of a machine form (§5.6–§5.7): model choices by name, refused
/// with Django's choice error when no such object exists. Returns the zone and pool to apply.
fn placement(p: &Params) -> Result<(Option<String>, Option<String>), MaasError> {
    let choice = |field: &str, known: &[&str]| -> Result<Option<String>, MaasError> {
        match p.get(field).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(v) if known.contains(&v) => Ok(Some(v.to_string())),
            Some(_) => Err(MaasError::field(
                field,
                "Select a valid choice. That choice is not one of the available choices.",
            )),
        }
    };
    let zone = choice("zone", &ZONES)?;
    let pool = choice("pool", &POOLS)?;
    choice("domain", &DOMAINS)?;
    Ok((zone, pool))
}

/// `boot_size` / `root_size` of a storage layout (§5.17).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FlatSizes {
    /// A separate `/boot` partition on the boot disk (none when absent or zero).
    pub boot: Option<LayoutSize>,
    /// The root partition (default: the rest of its disk).
    pub root: Option<LayoutSize>,
}

/// A layout size: bytes, or a percentage of the disk the partition goes on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LayoutSize {
    Bytes(u64),
    Percent(f64),
}

impl LayoutSize {
    pub fn of(self, disk_size: u64) -> u64 {
        match self {
            LayoutSize::Bytes(bytes) => bytes,
            LayoutSize::Percent(percent) => (disk_size as f64 * percent / 100.0) as u64,
        }
    }
}

/// MAAS's size syntax: bytes, a K/M/G/T/P suffix (decimal multiples, optional `B`), or `NN%`.
fn layout_size(p: &Params, field: &str) -> Result<Option<LayoutSize>, MaasError> {
    let Some(text) = p.get(field).map(str::trim).filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let invalid = || {
        MaasError::field(
            field,
            format!("'{text}' is not a size: bytes, a K/M/G/T/P suffix, or a percentage."),
        )
    };
    if let Some(percent) = text.strip_suffix('%') {
        let value: f64 = percent.trim().parse().map_err(|_| invalid())?;
        if !(value > 0.0 && value <= 100.0) {
            return Err(invalid());
        }
        return Ok(Some(LayoutSize::Percent(value)));
    }
    let digits = text.trim_end_matches(['B', 'b']);
    let (number, multiplier) = match digits.chars().last() {
        Some(c) if c.is_ascii_digit() => (digits, 1u64),
        Some(c) => {
            let power = match c.to_ascii_uppercase() {
                'K' => 1,
                'M' => 2,
                'G' => 3,
                'T' => 4,
                'P' => 5,
                _ => return Err(invalid()),
            };
            (&digits[..digits.len() - 1], 1000u64.pow(power))
        }
        None => return Err(invalid()),
    };
    let value: u64 = number.trim().parse().map_err(|_| invalid())?;
    value
        .checked_mul(multiplier)
        .map(|bytes| Some(LayoutSize::Bytes(bytes)))
        .ok_or_else(invalid)
}

/// Hosts and OS the simulated region can deploy.
fn resolve_distro(value: &str) -> Option<(&'static str, &'static str)> {
    let wanted = value.strip_prefix("ubuntu/").unwrap_or(value);
    super::world::DISTROS
        .iter()
        .find(|(name, version)| *name == wanted || *version == wanted)
        .map(|(name, _)| ("ubuntu", *name))
}

impl World {
    /// `get_node_or_404`: 404 when the system id is unknown, 403 (empty) when the caller may
    /// not act on it.
    pub fn node_for(&self, caller: &Caller, system_id: &str, perm: Perm) -> Result<u64, MaasError> {
        let id = self
            .machine_id(system_id)
            .ok_or_else(MaasError::no_machine)?;
        let m = &self.machines[&id];
        let visible =
            caller.is_admin() || m.owner.is_none() || m.owner.as_deref() == Some(caller.name());
        let allowed = match perm {
            Perm::View => visible,
            Perm::Edit => visible && !m.locked,
            Perm::Admin => caller.is_admin() && !m.locked,
            Perm::AdminRead => caller.is_admin(),
        };
        if allowed {
            Ok(id)
        } else {
            Err(MaasError::Forbidden(String::new()))
        }
    }

    pub fn can_view(&self, caller: &Caller, id: u64) -> bool {
        self.machines.get(&id).is_some_and(|m| {
            caller.is_admin() || m.owner.is_none() || m.owner.as_deref() == Some(caller.name())
        })
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

    fn start_commissioning(
        &mut self,
        id: u64,
        user: &str,
        skip_networking: bool,
        skip_storage: bool,
        no_tests: bool,
        now: DateTime<Utc>,
    ) -> Result<(), MaasError> {
        self.transition(id, Status::Commissioning, now)?;
        self.set_owner_token(id, Some(user.to_string()));
        if let Some(m) = self.machines.get_mut(&id) {
            m.skip_networking = skip_networking;
            m.skip_storage = skip_storage;
            m.commissioning_status = 1;
            m.testing_status = if no_tests { 9 } else { 0 };
            m.error_description.clear();
        }
        self.event(
            id,
            Level::Debug,
            "User starting commissioning",
            "",
            user,
            now,
        );
        self.event(id, Level::Info, "Commissioning", "", user, now);
        self.power(id, PowerState::On, now);
        let d = self.sim_duration(self.config.timings.commissioning_secs);
        self.set_pending(id, Some((Pending::CommissioningDone, now + d)));
        Ok(())
    }

    pub(super) fn set_owner_token(&mut self, id: u64, owner: Option<String>) {
        let token = self.new_token();
        if let Some(m) = self.machines.get_mut(&id) {
            set_owner(m, owner);
            if m.owner.is_some() && m.token.is_none() {
                m.token = Some(token);
            }
        }
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

    #[allow(clippy::too_many_arguments)]
    fn start_deployment(
        &mut self,
        id: u64,
        user: &str,
        user_data: Option<String>,
        distro: (&str, &str),
        enable_hw_sync: bool,
        ephemeral: bool,
        now: DateTime<Utc>,
    ) -> Result<(), MaasError> {
        self.transition(id, Status::Deploying, now)?;
        let token = self.new_token();
        if let Some(m) = self.machines.get_mut(&id) {
            m.osystem = distro.0.to_string();
            m.distro_series = distro.1.to_string();
            m.hwe_kernel = Some(format!(
                "ga-{}",
                super::world::DISTROS
                    .iter()
                    .find(|(n, _)| *n == distro.1)
                    .map_or("24.04", |(_, v)| v)
            ));
            m.user_data = user_data;
            m.enable_hw_sync = enable_hw_sync;
            m.ephemeral_deploy = ephemeral;
            m.sync_interval = None;
            m.last_sync = None;
            m.sync_due = None;
            m.deployments += 1;
            m.netboot = false;
            if m.token.is_none() {
                m.token = Some(token);
            }
        }
        self.event(id, Level::Debug, "User starting deployment", "", user, now);
        self.event(id, Level::Info, "Deploying", "", user, now);
        self.power(id, PowerState::On, now);
        // AUTO addresses are claimed post-commit (§5.12): the deploy answer does not show them
        // yet, and when the subnet is exhausted the caller gets a 503 *after* the status moved
        // to Deploying. Such a deployment cannot finish; it fails when MAAS's deployment
        // timeout (2 × node_timeout since 3.5) expires.
        let work = if self.check_auto_ips(id).is_ok() {
            let d = self.sim_duration(self.config.timings.deploying_secs);
            (Pending::DeploymentDone, now + d)
        } else {
            let timeout = 2.0 * self.config.timings.node_timeout_secs;
            (
                Pending::DeploymentTimedOut,
                now + super::world::scaled(timeout, self.time_scale),
            )
        };
        self.set_pending(id, Some(work));
        Ok(())
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

    pub(super) fn start_release(
        &mut self,
        id: u64,
        erase: Option<Erase>,
        user: &str,
        now: DateTime<Utc>,
    ) -> Result<(), MaasError> {
        self.set_pending(id, None);
        let m = self
            .machines
            .get_mut(&id)
            .ok_or_else(MaasError::no_machine)?;
        m.osystem.clear();
        m.distro_series.clear();
        m.hwe_kernel = None;
        m.enable_hw_sync = false;
        m.sync_interval = None;
        m.last_sync = None;
        m.sync_due = None;
        m.user_data = None;
        m.host_files.clear();
        m.ephemeral_deploy = false;
        // The deployed OS is gone: its agent and timers stop.
        m.boot += 1;
        m.erase = erase;
        self.event(id, Level::Debug, "User releasing node", "", user, now);
        match erase {
            Some(mode) => {
                self.transition(id, Status::DiskErasing, now)?;
                self.event(id, Level::Info, "Disk erasing", "", user, now);
                self.power(id, PowerState::On, now);
                let d = self.erase_duration(mode);
                self.set_pending(id, Some((Pending::EraseDone, now + d)));
            }
            None => {
                self.transition(id, Status::Releasing, now)?;
                self.event(id, Level::Info, "Releasing", "", user, now);
                if self.machines[&id].power_state == PowerState::Off {
                    self.finish_release(id, now);
                } else {
                    self.power(id, PowerState::Off, now);
                    let d = self.sim_duration(self.config.timings.releasing_secs);
                    self.set_pending(id, Some((Pending::ReleaseDone, now + d)));
                }
            }
        }
        Ok(())
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

    fn make_broken(&mut self, id: u64, comment: &str, user: &str, now: DateTime<Utc>) {
        self.set_pending(id, None);
        let status = self.machines[&id].status;
        let previous = status;
        let _ = self.transition(id, Status::Broken, now);
        if let Some(m) = self.machines.get_mut(&id) {
            // mark_fixed goes back to Deployed when the machine was deployed.
            m.previous_status = previous;
            m.error_description = comment.to_string();
        }
        self.event(id, Level::Error, "Marking node broken", comment, user, now);
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

    /// `POST machines/{id}/?op=set_storage_layout`.
    pub fn set_storage_layout(
        &mut self,
        caller: &Caller,
        system_id: &str,
        p: &Params,
    ) -> Result<(), MaasError> {
        let id = self.node_for(caller, system_id, Perm::Admin)?;
        if self.machines[&id].status != Status::Ready {
            return Err(MaasError::Conflict(
                "Cannot change the storage layout on a machine that is not Ready.".to_string(),
            ));
        }
        let layout = match p.get("storage_layout") {
            None | Some("") => {
                return Err(MaasError::field(
                    "storage_layout",
                    "This field is required.",
                ));
            }
            Some(l) => l,
        };
        if !matches!(
            layout,
            "flat" | "lvm" | "bcache" | "vmfs6" | "vmfs7" | "custom" | "blank"
        ) {
            return Err(MaasError::field(
                "storage_layout",
                format!("Select a valid choice. {layout} is not one of the available choices."),
            ));
        }
        let m = &self.machines[&id];
        if m.disks.is_empty() {
            return Err(MaasError::BadRequest(
                "Machine is missing a boot disk; no storage layout can be applied.".to_string(),
            ));
        }
        let root = match p.get("root_device") {
            None | Some("") => None,
            Some(value) => Some(
                value
                    .parse::<u64>()
                    .ok()
                    .filter(|v| m.disks.iter().any(|d| d.id == *v))
                    .ok_or_else(|| {
                        MaasError::field(
                            "root_device",
                            format!("Select a valid choice. {value} is not one of the available choices."),
                        )
                    })?,
            ),
        };
        let sizes = FlatSizes {
            boot: layout_size(p, "boot_size")?,
            root: layout_size(p, "root_size")?,
        };
        match layout {
            "flat" => self.apply_flat_layout(id, root, sizes),
            "blank" => {
                if let Some(m) = self.machines.get_mut(&id) {
                    for d in &mut m.disks {
                        d.partitions.clear();
                    }
                }
                Ok(())
            }
            other => Err(MaasError::BadRequest(format!(
                "Failed to configure storage layout '{other}': the simulator implements only the flat and blank layouts."
            ))),
        }
    }

    /// `POST nodes/{id}/blockdevices/{bd}/?op=set_boot_disk`.
    pub fn set_boot_disk(
        &mut self,
        caller: &Caller,
        system_id: &str,
        device: &str,
    ) -> Result<(), MaasError> {
        let id = self.node_for(caller, system_id, Perm::Admin)?;
        let disk = self.find_disk(id, device)?;
        if self.machines[&id].status != Status::Ready {
            return Err(MaasError::Conflict(
                "Cannot set as boot disk because the machine is not Ready.".to_string(),
            ));
        }
        if let Some(m) = self.machines.get_mut(&id) {
            m.boot_disk_id = Some(disk);
        }
        Ok(())
    }

    /// A block device by id or name.
    pub fn find_disk(&self, id: u64, device: &str) -> Result<u64, MaasError> {
        self.machines[&id]
            .disks
            .iter()
            .find(|d| d.id.to_string() == device || d.name == device)
            .map(|d| d.id)
            .ok_or_else(|| {
                MaasError::NotFound("No BlockDevice matches the given query.".to_string())
            })
    }

    // ----- interfaces and subnets ----------------------------------------------------------------

    /// An interface by id or name.
    pub fn find_interface(&self, id: u64, iface: &str) -> Result<usize, MaasError> {
        self.machines[&id]
            .interfaces
            .iter()
            .position(|i| {
                i.id.to_string() == iface || i.name == iface || format!("name:{}", i.name) == iface
            })
            .ok_or_else(|| MaasError::NotFound("No Interface matches the given query.".to_string()))
    }

    /// A subnet by id or specifier (`cidr:…`, `name:…`, a bare CIDR or name).
    pub fn find_subnet(&self, spec: &str) -> Option<u64> {
        let spec = spec.trim();
        if let Ok(id) = spec.parse::<u64>() {
            return self.subnets.contains_key(&id).then_some(id);
        }
        let (key, value) = spec.split_once(':').unwrap_or(("", spec));
        self.subnets
            .values()
            .find(|s| match key {
                "cidr" => s.cidr.to_string() == value,
                "name" => s.name == value,
                "id" => s.id.to_string() == value,
                _ => s.cidr.to_string() == value || s.name == value,
            })
            .map(|s| s.id)
    }

    fn link_gate(&self, caller: &Caller, system_id: &str, verb: &str) -> Result<u64, MaasError> {
        let id = self.node_for(caller, system_id, Perm::Admin)?;
        if !matches!(
            self.machines[&id].status,
            Status::New
                | Status::Ready
                | Status::FailedTesting
                | Status::Allocated
                | Status::Broken
        ) {
            return Err(MaasError::Conflict(format!(
                "Cannot {verb} interface because the machine is not New, Ready, Allocated, or Broken."
            )));
        }
        Ok(id)
    }

    /// `POST nodes/{id}/interfaces/{iface}/?op=link_subnet`.
    pub fn link_subnet(
        &mut self,
        caller: &Caller,
        system_id: &str,
        iface: &str,
        p: &Params,
    ) -> Result<(u64, usize), MaasError> {
        let id = self.link_gate(caller, system_id, "link subnet")?;
        let index = self.find_interface(id, iface)?;
        let mode = match p.get("mode") {
            None | Some("") => return Err(MaasError::field("mode", "This field is required.")),
            Some(m) => LinkMode::parse(m).ok_or_else(|| {
                MaasError::field(
                    "mode",
                    format!("Select a valid choice. {m} is not one of the available choices."),
                )
            })?,
        };
        let force = string_bool("force", p.get("force"), false)?;
        let subnet = match p.get("subnet").filter(|s| !s.is_empty()) {
            Some(s) => Some(self.find_subnet(s).ok_or_else(|| {
                MaasError::field(
                    "subnet",
                    "Select a valid choice. That choice is not one of the available choices.",
                )
            })?),
            None => None,
        };
        let interface = &self.machines[&id].interfaces[index];
        if matches!(mode, LinkMode::Auto | LinkMode::Static) && subnet.is_none() {
            return Err(MaasError::field("subnet", "This field is required."));
        }
        if let (Some(subnet_id), Some(vlan)) = (subnet, interface.vlan_id)
            && self.subnets[&subnet_id].vlan_id != vlan
            && !force
        {
            return Err(MaasError::field(
                "subnet",
                "Select a valid choice. That choice is not one of the available choices.",
            ));
        }
        let real_links = interface
            .links
            .iter()
            .filter(|l| l.mode != LinkMode::LinkUp)
            .count();
        if mode == LinkMode::LinkUp && real_links > 0 && !force {
            return Err(MaasError::field(
                "mode",
                "Cannot configure interface to link up (with no IP address) while other links are already configured. Specify force=True to override this behavior and delete all links.",
            ));
        }
        // default_gateway (Django BooleanField): AUTO/STATIC only, on a subnet with a gateway.
        let default_gateway = django_bool(p.get("default_gateway"));
        if default_gateway {
            if !matches!(mode, LinkMode::Auto | LinkMode::Static) {
                return Err(MaasError::field(
                    "default_gateway",
                    format!("Cannot use in mode '{}'.", mode.label()),
                ));
            }
            if let Some(s) = subnet.map(|id| &self.subnets[&id])
                && s.gateway_ip.is_none()
            {
                return Err(MaasError::field(
                    "default_gateway",
                    format!(
                        "Cannot set as default gateway because subnet {} doesn't provide a gateway IP address.",
                        s.name
                    ),
                ));
            }
        }
        if mode == LinkMode::Dhcp && interface.links.iter().any(|l| l.mode == LinkMode::Dhcp) {
            return Err(MaasError::field(
                "mode",
                "Interface is already set to DHCP.",
            ));
        }
        let ip = if mode == LinkMode::Static {
            let subnet = self.subnets[&subnet.unwrap_or_default()].clone();
            Some(self.static_ip(&subnet, p.get("ip_address"))?)
        } else {
            if p.get("ip_address").is_some_and(|v| !v.is_empty()) {
                return Err(MaasError::field(
                    "ip_address",
                    "IP address can only be set for STATIC links.",
                ));
            }
            None
        };
        let link_id = self.id();
        let vlan = subnet.map(|s| self.subnets[&s].vlan_id);
        let m = self
            .machines
            .get_mut(&id)
            .ok_or_else(MaasError::no_machine)?;
        let interface: &mut Interface = &mut m.interfaces[index];
        if mode == LinkMode::LinkUp && force {
            interface.links.clear();
        }
        interface.links.retain(|l| l.mode != LinkMode::LinkUp);
        interface.links.push(Link {
            id: link_id,
            mode,
            subnet_id: subnet,
            ip,
        });
        if let Some(vlan) = vlan {
            interface.vlan_id = Some(vlan);
        }
        if default_gateway {
            m.gateway_link = Some(link_id);
        }
        Ok((id, index))
    }

    fn static_ip(&self, subnet: &Subnet, wanted: Option<&str>) -> Result<Ipv4Addr, MaasError> {
        match wanted.filter(|w| !w.is_empty()) {
            Some(text) => {
                let ip: Ipv4Addr = text.parse().map_err(|_| {
                    MaasError::field("ip_address", "Enter a valid IPv4 or IPv6 address.")
                })?;
                if !subnet.cidr.contains(ip) {
                    return Err(MaasError::field(
                        "ip_address",
                        format!("IP address is not in the given subnet '{}'.", subnet.name),
                    ));
                }
                if self.ip_in_use(ip) {
                    return Err(MaasError::field(
                        "ip_address",
                        format!("IP address {ip} is already in use."),
                    ));
                }
                Ok(ip)
            }
            None => self.free_ip(subnet).ok_or_else(|| {
                MaasError::Unavailable(format!("No more IPs available in subnet: {}.", subnet.cidr))
            }),
        }
    }

    /// `POST nodes/{id}/interfaces/{iface}/?op=unlink_subnet`.
    pub fn unlink_subnet(
        &mut self,
        caller: &Caller,
        system_id: &str,
        iface: &str,
        p: &Params,
    ) -> Result<(u64, usize), MaasError> {
        let id = self.link_gate(caller, system_id, "unlink subnet")?;
        let index = self.find_interface(id, iface)?;
        let link = match p.get("id") {
            None | Some("") => return Err(MaasError::field("id", "This field is required.")),
            Some(v) => v,
        };
        let link_up = self.id();
        let m = self
            .machines
            .get_mut(&id)
            .ok_or_else(MaasError::no_machine)?;
        let interface = &mut m.interfaces[index];
        let position = interface
            .links
            .iter()
            .position(|l| l.id.to_string() == link)
            .ok_or_else(|| {
                MaasError::field(
                    "id",
                    "Select a valid choice. That choice is not one of the available choices.",
                )
            })?;
        interface.links.remove(position);
        if interface.links.is_empty() && interface.vlan_id.is_some() {
            // MAAS keeps a connected interface "link up" when its last link goes.
            interface.links.push(Link {
                id: link_up,
                mode: LinkMode::LinkUp,
                subnet_id: None,
                ip: None,
            });
        }
        Ok((id, index))
    }

    /// `POST subnets/`.
    pub fn create_subnet(&mut self, caller: &Caller, p: &Params) -> Result<u64, MaasError> {
        if !caller.is_admin() {
            return Err(MaasError::Forbidden(
                "This method is reserved for admin users.".to_string(),
            ));
        }
        let text = match p.get("cidr") {
            None | Some("") => return Err(MaasError::field("cidr", "This field is required.")),
            Some(c) => c,
        };
        let cidr = Cidr::parse(text)
            .ok_or_else(|| MaasError::field("cidr", "Required format: <network>/<prefixlen>."))?;
        if self.subnets.values().any(|s| s.cidr == cidr) {
            return Err(MaasError::field(
                "cidr",
                "Subnet with this Cidr already exists.",
            ));
        }
        let vlan_id = match p.get("vlan").filter(|v| !v.is_empty()) {
            Some(v) => v
                .parse::<u64>()
                .ok()
                .filter(|v| self.vlans.contains_key(v))
                .ok_or_else(|| {
                    MaasError::field(
                        "vlan",
                        "Select a valid choice. That choice is not one of the available choices.",
                    )
                })?,
            None => self.vlan_of_fabric(p)?,
        };
        // RDNS_MODE_CHOICES: 0 disabled, 1 enabled, 2 RFC 2317 (the default).
        let rdns_mode = match p.get("rdns_mode").filter(|v| !v.is_empty()) {
            None => 2,
            Some(v) => v.parse::<u8>().ok().filter(|m| *m <= 2).ok_or_else(|| {
                MaasError::field(
                    "rdns_mode",
                    format!("Select a valid choice. {v} is not one of the available choices."),
                )
            })?,
        };
        let gateway_ip = match p.get("gateway_ip").filter(|g| !g.is_empty()) {
            Some(g) => {
                let ip: Ipv4Addr = g.parse().map_err(|_| {
                    MaasError::field("gateway_ip", "Enter a valid IPv4 or IPv6 address.")
                })?;
                if !cidr.contains(ip) {
                    return Err(MaasError::field(
                        "gateway_ip",
                        "Gateway IP must be within CIDR range.",
                    ));
                }
                Some(ip)
            }
            None => None,
        };
        let name = p
            .get("name")
            .filter(|n| !n.is_empty())
            .map_or_else(|| cidr.to_string(), String::from);
        if self.subnets.values().any(|s| s.name == name) {
            return Err(MaasError::field(
                "name",
                "Subnet with this Name already exists.",
            ));
        }
        let id = self.subnets.keys().last().copied().unwrap_or(0) + 1;
        self.subnets.insert(
            id,
            Subnet {
                id,
                name,
                description: p.get("description").unwrap_or("").to_string(),
                cidr,
                gateway_ip,
                dns_servers: p
                    .get("dns_servers")
                    .map(|d| {
                        d.split([',', ' '])
                            .filter(|s| !s.is_empty())
                            .map(String::from)
                            .collect()
                    })
                    .unwrap_or_default(),
                vlan_id,
                managed: string_bool("managed", p.get("managed"), true)?,
                allow_dns: string_bool("allow_dns", p.get("allow_dns"), true)?,
                allow_proxy: string_bool("allow_proxy", p.get("allow_proxy"), true)?,
                active_discovery: string_bool(
                    "active_discovery",
                    p.get("active_discovery"),
                    false,
                )?,
                rdns_mode,
            },
        );
        Ok(id)
    }

    /// A subnet's VLAN from `fabric` (id, default fabric 0) and `vid` (default the untagged
    /// VLAN 0), used when `vlan` is not given (§5.20).
    fn vlan_of_fabric(&self, p: &Params) -> Result<u64, MaasError> {
        let fabric = match p.get("fabric").filter(|f| !f.is_empty()) {
            None => None,
            Some(f) => Some(
                f.parse::<u64>()
                    .ok()
                    .filter(|f| self.vlans.values().any(|v| v.fabric_id == *f))
                    .ok_or_else(|| {
                        MaasError::field(
                            "fabric",
                            "Select a valid choice. That choice is not one of the available choices.",
                        )
                    })?,
            ),
        };
        let vid = match p.get("vid").filter(|v| !v.is_empty()) {
            None => 0,
            Some(v) => v
                .parse::<u16>()
                .ok()
                .filter(|v| *v <= 4094)
                .ok_or_else(|| {
                    MaasError::field("vid", format!("VID {v} is not in the range 0-4094."))
                })?,
        };
        self.vlans
            .values()
            .find(|v| v.fabric_id == fabric.unwrap_or(0) && v.vid == vid)
            .map(|v| v.id)
            .ok_or_else(|| {
                MaasError::field(
                    "vid",
                    match fabric {
                        Some(f) => format!("No VLAN with vid {vid} in fabric fabric-{f}."),
                        None => format!("No VLAN with vid {vid} in default fabric."),
                    },
                )
            })
    }

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
        let (zone, pool) = placement(p)?;
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
                vlan_id: (index == 0).then_some(5001),
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
        let (zone, pool) = placement(p)?;
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

    /// An operator's direct change (docs/contracts.md §3 `oob`): not counted as API requests.
    pub fn out_of_band(
        &mut self,
        id: u64,
        action: &str,
        now: DateTime<Utc>,
    ) -> Result<(), MaasError> {
        let m = self.machines.get(&id).ok_or_else(MaasError::no_machine)?;
        let status = m.status;
        let user = "operator";
        let deployed_only = |what: &str| {
            MaasError::Conflict(format!(
                "Cannot {what} out of band: machine is {}, not Deployed.",
                status.name()
            ))
        };
        match action {
            "release" => {
                if !RELEASABLE.contains(&status) {
                    return Err(MaasError::Conflict(format!(
                        "Machine cannot be released in its current state ('{}').",
                        status.name()
                    )));
                }
                self.start_release(id, None, user, now)
            }
            "delete" => {
                self.remove_machine(id);
                Ok(())
            }
            "power_off" => {
                self.power(id, PowerState::Off, now);
                Ok(())
            }
            "redeploy" => {
                if status != Status::Deployed {
                    return Err(deployed_only("redeploy"));
                }
                let m = &self.machines[&id];
                let (user_data, owner, hw) =
                    (m.user_data.clone(), m.owner.clone(), m.enable_hw_sync);
                let distro = resolve_distro(&m.distro_series).unwrap_or(("ubuntu", "noble"));
                self.start_release(id, None, user, now)?;
                self.finish_release(id, now);
                self.transition(id, Status::Allocated, now)?;
                self.set_owner_token(id, owner.or(Some(user.to_string())));
                self.start_deployment(id, user, user_data, distro, hw, false, now)?;
                self.claim_auto_ips(id)
            }
            "recommission" => {
                if status == Status::Deployed {
                    self.start_release(id, None, user, now)?;
                    self.finish_release(id, now);
                }
                let m = &self.machines[&id];
                if !matches!(
                    m.status,
                    Status::New | Status::FailedCommissioning | Status::Ready | Status::Broken
                ) {
                    return Err(MaasError::Conflict(format!(
                        "Cannot recommission a machine in state {}.",
                        m.status.name()
                    )));
                }
                self.start_commissioning(id, user, false, false, false, now)
            }
            "mark_broken" => {
                self.make_broken(id, "marked broken out of band", user, now);
                Ok(())
            }
            "fail_testing" => {
                if !status.can_transition(Status::Testing) && status != Status::Testing {
                    return Err(MaasError::Conflict(format!(
                        "Cannot fail testing of a machine in state {}.",
                        status.name()
                    )));
                }
                self.set_pending(id, None);
                self.transition(id, Status::Testing, now)?;
                if let Some(m) = self.machines.get_mut(&id) {
                    m.testing_status = 3;
                    m.boot += 1;
                }
                self.fail(
                    id,
                    "Failed testing",
                    "Hardware test failed (out of band).",
                    now,
                );
                Ok(())
            }
            "stop_agent" => {
                if status != Status::Deployed {
                    return Err(deployed_only("stop the agent"));
                }
                let boot = self.machines[&id].boot;
                let system_id = self.machines[&id].system_id.clone();
                self.stop_agent(system_id, boot);
                Ok(())
            }
            "change_ip" => {
                if status != Status::Deployed {
                    return Err(deployed_only("change the IP"));
                }
                let pxe = self.subnets[&self.pxe_subnet].clone();
                let new_ip = self.free_ip(&pxe).ok_or_else(|| {
                    MaasError::Unavailable(format!(
                        "No more IPs available in subnet: {}.",
                        pxe.cidr
                    ))
                })?;
                let m = self
                    .machines
                    .get_mut(&id)
                    .ok_or_else(MaasError::no_machine)?;
                let link = m
                    .interfaces
                    .iter_mut()
                    .flat_map(|i| i.links.iter_mut())
                    .find(|l| l.mode == LinkMode::Auto && l.ip.is_some())
                    .ok_or_else(|| {
                        MaasError::Conflict(
                            "The machine has no AUTO address to change.".to_string(),
                        )
                    })?;
                link.ip = Some(new_ip);
                Ok(())
            }
            other => Err(MaasError::BadRequest(format!(
                "Unknown out-of-band action '{other}': expected release, delete, power_off, redeploy, recommission, mark_broken, fail_testing, change_ip or stop_agent."
            ))),
        }
    }

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
