//! What MAAS does on its own and the status-changing steps behind the API operations
//! (API_REFERENCE.md §4.2, §5.10–§5.15, §6; MAAS models/node.py, metadataserver/api.py,
//! status_monitor.py): commissioning, testing, deployment, release and erase, failures with
//! MAAS's events, hardware sync of deployed hosts, PXE enlistment and out-of-band changes.
//!
//! Background work is lazy: each machine has at most one piece of pending work with a due time
//! on the world's timeline; [`World::advance`] runs whatever is due, on every request and from
//! the server's ticker. The API operations (`ops`) check their input and gate, then call the
//! `start_*` steps here; nothing here calls back into the operations.

use chrono::{DateTime, Duration, Utc};

use super::config::{AgentBehaviour, SimConfig};
use super::events::Level;
use super::faults::Scenario;
use super::host::{self, AgentBoot};
use super::layouts::{DEFAULT_LAYOUT, LayoutRequest};
use super::machine::{Erase, NodeToken, Pending, PowerState};
use super::network::{Link, LinkMode};
use super::reply::MaasError;
use super::status::{RELEASABLE, Status};
use super::world::{
    DISTROS, PXE_VLAN, TOKEN_ALPHABET, Timer, TimerKind, World, WorldError, random_string,
    resolve_distro, scaled,
};

/// The MAAS URL written into the simulated hosts' sync credentials (never dialled).
const SIM_MAAS_URL: &str = "http://maas.sim:5240/MAAS";

fn sync_token(token: &NodeToken) -> host::SyncToken<'_> {
    host::SyncToken {
        consumer_key: &token.consumer_key,
        token_key: &token.token_key,
        token_secret: &token.token_secret,
    }
}

impl World {
    /// A region with the machines of `config` MAAS already knows installed in their initial
    /// state (the others wait behind their BMCs for a PXE boot).
    pub fn new(config: SimConfig, now: DateTime<Utc>) -> Result<World, WorldError> {
        let mut world = World::empty(config)?;
        for index in 0..world.hardware.len() {
            if let Some(status) = world.hardware[index].spec.initial.status() {
                world.install_known(index, status, now);
            }
        }
        Ok(world)
    }

    /// Installs a machine MAAS already knows, in `status`.
    fn install_known(&mut self, hardware: usize, status: Status, now: DateTime<Utc>) -> u64 {
        let spec = self.hardware[hardware].spec.clone();
        let system_id = match &spec.system_id {
            Some(sid) if !self.by_system_id.contains_key(sid) => sid.clone(),
            _ => self.new_system_id(),
        };
        let hostname = spec.hostname.clone().unwrap_or_else(|| self.petname());
        let mut m = self.blank_machine(&spec, system_id, hostname);
        m.power_parameters = Self::power_parameters_for(&spec);
        m.interfaces = self.hardware_interfaces(&spec);
        m.status = status;
        let id = self.insert_machine(m);
        if status != Status::New {
            self.discover_hardware(id, false, false);
            if let Some(m) = self.machines.get_mut(&id) {
                m.commissioning_status = 2;
                m.testing_status = 2;
            }
        }
        if matches!(status, Status::Allocated | Status::Deployed) {
            let owner = self.config.username.clone();
            let token = self.new_token();
            if let Some(m) = self.machines.get_mut(&id) {
                m.owner = Some(owner);
                m.token = Some(token);
            }
        }
        if status == Status::Deployed {
            let interval = self.sync_interval_secs();
            // An exhausted PXE subnet leaves the AUTO link without an address, as MAAS would.
            let _ = self.claim_auto_ips(id);
            if let Some(m) = self.machines.get_mut(&id) {
                m.osystem = "ubuntu".to_string();
                m.distro_series = "noble".to_string();
                m.hwe_kernel = Some("ga-24.04".to_string());
                m.power_state = PowerState::On;
                m.netboot = false;
                m.enable_hw_sync = true;
                m.sync_interval = Some(interval);
                m.last_sync = Some(now);
                m.deployments = 1;
            }
            // Deployed without user-data by someone else: MAAS's vendor-data set up the sync.
            self.boot_host(id, now);
            self.schedule_hw_sync(id, now);
        }
        let kind = status.name().to_string();
        self.event(id, Level::Info, &kind, "", "unknown", now);
        id
    }

    /// What commissioning finds: the real NICs (PXE one linked AUTO) and disks.
    pub(super) fn discover_hardware(&mut self, id: u64, skip_networking: bool, skip_storage: bool) {
        let hardware = self
            .machines
            .get(&id)
            .and_then(|m| self.hardware_of(m))
            .map(|h| self.hardware[h].spec.clone());
        if !skip_networking {
            let mut interfaces = match &hardware {
                Some(spec) => self.hardware_interfaces(spec),
                None => self
                    .machines
                    .get(&id)
                    .map(|m| m.interfaces.clone())
                    .unwrap_or_default(),
            };
            // An interface MAAS already knows (same MAC) keeps its id and VLAN.
            let known: std::collections::HashMap<String, (u64, Option<u64>)> = self
                .machines
                .get(&id)
                .map(|m| {
                    m.interfaces
                        .iter()
                        .map(|i| (i.mac.clone(), (i.id, i.vlan_id)))
                        .collect()
                })
                .unwrap_or_default();
            let link_id = self.id();
            let pxe = self.pxe_subnet;
            for (index, iface) in interfaces.iter_mut().enumerate() {
                if let Some((known_id, vlan)) = known.get(&iface.mac) {
                    iface.id = *known_id;
                    iface.vlan_id = *vlan;
                }
                iface.links.clear();
                if index == 0 {
                    iface.vlan_id = Some(PXE_VLAN);
                    iface.links.push(Link {
                        id: link_id,
                        mode: LinkMode::Auto,
                        subnet_id: Some(pxe),
                        ip: None,
                    });
                } else if iface.vlan_id.is_none() {
                    // guess_vlan_for_interface: an unlinked NIC, with the default VLAN taken
                    // by the boot interfaces, gets a new fabric with its own untagged VLAN.
                    iface.vlan_id = Some(self.new_fabric());
                }
            }
            if let Some(m) = self.machines.get_mut(&id) {
                m.interfaces = interfaces;
            }
        }
        if !skip_storage {
            let no_boot_disk = self
                .machines
                .get(&id)
                .is_some_and(|m| m.has_scenario(Scenario::NoBootDisk));
            if let Some(m) = self.machines.get_mut(&id) {
                let mut disks = m.hardware_disks.clone();
                if no_boot_disk {
                    disks.retain(|d| !d.looks_like_boot_device());
                }
                for d in &mut disks {
                    d.partitions.clear();
                }
                // The boot disk an operator chose stays while the disk does.
                if m.boot_disk_id
                    .is_some_and(|b| !disks.iter().any(|d| d.id == b))
                {
                    m.boot_disk_id = None;
                }
                m.volume_groups.clear();
                m.disks = disks;
            }
            // set_default_storage_layout: errors are only logged by MAAS.
            let _ = self.apply_storage_layout(id, &LayoutRequest::named(DEFAULT_LAYOUT));
        }
    }

    /// Runs every piece of background work due at `now`.
    pub fn advance(&mut self, now: DateTime<Utc>) {
        while let Some((due, _, _)) = self.timeline.first().copied() {
            if due > now {
                break;
            }
            let Some((due, _, timer)) = self.timeline.pop_first() else {
                break;
            };
            self.fire(timer, due);
        }
    }

    fn fire(&mut self, timer: Timer, at: DateTime<Utc>) {
        match timer.kind {
            TimerKind::Enlist => self.enlist(timer.target as usize, at),
            TimerKind::Pending => {
                let Some(m) = self.machines.get(&timer.target) else {
                    return;
                };
                if m.generation != timer.stamp {
                    return;
                }
                let Some((work, _)) = m.pending else {
                    return;
                };
                self.set_pending(timer.target, None);
                self.complete(timer.target, work, at);
            }
            TimerKind::Sync => self.hw_sync_tick(timer.target, at),
            TimerKind::OutOfBand(scenario) => {
                let valid = self
                    .machines
                    .get(&timer.target)
                    .is_some_and(|m| m.boot == timer.stamp && m.status == Status::Deployed);
                if valid && scenario == Scenario::HwsyncLost {
                    if let Some(m) = self.machines.get_mut(&timer.target) {
                        m.sync_stalled = true;
                    }
                } else if valid {
                    let action = match scenario {
                        Scenario::MachineDeleted => "delete",
                        Scenario::ReleasedOob => "release",
                        Scenario::PoweredOff => "power_off",
                        _ => "redeploy",
                    };
                    let _ = self.out_of_band(timer.target, action, at);
                }
            }
        }
    }

    fn complete(&mut self, id: u64, work: Pending, now: DateTime<Utc>) {
        let Some(m) = self.machines.get(&id) else {
            return;
        };
        let (skip_networking, skip_storage) = (m.skip_networking, m.skip_storage);
        match work {
            Pending::CommissioningDone => {
                if m.has_scenario(Scenario::CommissioningFails) {
                    if let Some(m) = self.machines.get_mut(&id) {
                        m.commissioning_status = 3;
                    }
                    // A commissioning script failed: cloud-init reports it, then the status.
                    self.event(
                        id,
                        Level::Error,
                        "Node commissioning failure",
                        "'maas-run-remote-scripts' 00-maas-01-lshw failed (exit status 1)",
                        "unknown",
                        now,
                    );
                    self.fail_scripts(id, Status::FailedCommissioning, now);
                    return;
                }
                self.discover_hardware(id, skip_networking, skip_storage);
                if let Some(m) = self.machines.get_mut(&id) {
                    m.commissioning_status = 2;
                }
                let run_tests = self
                    .machines
                    .get(&id)
                    .is_some_and(|m| m.testing_status != 9);
                if run_tests {
                    let _ = self.transition(id, Status::Testing, now);
                    if let Some(m) = self.machines.get_mut(&id) {
                        m.testing_status = 1;
                    }
                    self.event(id, Level::Info, "Testing", "", "unknown", now);
                    let d = self.sim_duration(self.config.timings.testing_secs);
                    self.set_pending(
                        id,
                        Some((
                            Pending::TestingDone {
                                back_to: Status::Ready,
                            },
                            now + d,
                        )),
                    );
                } else {
                    self.become_ready(id, now);
                }
            }
            Pending::TestingDone { back_to } => {
                if m.has_scenario(Scenario::TestingFails) {
                    if let Some(m) = self.machines.get_mut(&id) {
                        m.testing_status = 3;
                    }
                    self.fail_scripts(id, Status::FailedTesting, now);
                    return;
                }
                if let Some(m) = self.machines.get_mut(&id) {
                    m.testing_status = 2;
                }
                if back_to == Status::Ready {
                    self.become_ready(id, now);
                } else {
                    let _ = self.transition(id, back_to, now);
                }
            }
            Pending::DeploymentDone => self.end_deployment(id, now),
            // status_monitor.py: the deployment timeout (2 × node_timeout since 3.5).
            Pending::DeploymentTimedOut => {
                let minutes = (2.0 * self.config.timings.node_timeout_secs / 60.0).round();
                self.mark_failed(
                    id,
                    &format!("Node operation 'Deploying' timed out after {minutes} minutes."),
                    now,
                )
            }
            Pending::ReleaseDone => self.finish_release(id, now),
            Pending::RescueDone => {
                // The status before rescue stays the way back (MAAS sets it once, on start).
                let before = m.previous_status;
                let _ = self.transition(id, Status::RescueMode, now);
                if let Some(m) = self.machines.get_mut(&id) {
                    m.previous_status = before;
                }
                self.event(id, Level::Info, "Rescue mode", "", "unknown", now);
            }
            Pending::ExitRescueDone { back_to } => {
                if back_to != Status::Deployed {
                    self.power(id, PowerState::Off, now);
                }
                let _ = self.transition(id, back_to, now);
            }
            Pending::EraseDone => {
                if m.has_scenario(Scenario::EraseFails) {
                    self.mark_failed(id, "Failed to erase disks.", now);
                    return;
                }
                self.event(
                    id,
                    Level::Info,
                    "Disk erasing",
                    "Finished erasing disks",
                    "unknown",
                    now,
                );
                self.finish_release(id, now);
            }
        }
    }

    /// `Node.mark_failed` (models/node.py) by the system: a `Marking node failed` ERROR event
    /// with the comment, then the failed counterpart of the current status, the comment as
    /// `error_description`.
    pub(super) fn mark_failed(&mut self, id: u64, comment: &str, now: DateTime<Utc>) {
        let Some(m) = self.machines.get(&id) else {
            return;
        };
        let Some(failed) = m.status.failed_counterpart() else {
            return;
        };
        self.event(
            id,
            Level::Error,
            "Marking node failed",
            comment,
            "unknown",
            now,
        );
        let _ = self.transition(id, failed, now);
        if let Some(m) = self.machines.get_mut(&id) {
            m.error_description = comment.to_string();
        }
    }

    /// Commissioning or testing ends in its failed status from the script results
    /// (metadataserver/api.py `_process_commissioning`/`_process_testing`): the status event
    /// (`Failed commissioning`, `Failed testing`), no mark_failed.
    fn fail_scripts(&mut self, id: u64, to: Status, now: DateTime<Utc>) {
        if self.transition(id, to, now).is_ok() {
            self.power(id, PowerState::Off, now);
            self.event(id, Level::Info, to.name(), "", "unknown", now);
        }
    }

    pub(super) fn become_ready(&mut self, id: u64, now: DateTime<Utc>) {
        let _ = self.transition(id, Status::Ready, now);
        self.power(id, PowerState::Off, now);
        self.event(id, Level::Info, "Ready", "", "unknown", now);
    }

    /// DEPLOYING → DEPLOYED when the installed OS fetches its user_data, or the failure of a
    /// datasource_failure / deploy_fails scenario.
    fn end_deployment(&mut self, id: u64, now: DateTime<Utc>) {
        if !self.machines.contains_key(&id) {
            return;
        }
        // What curtin and cloud-init report while the machine installs (metadataserver/api.py
        // `add_event_to_node_event_log`): status events at the starts of their stages, the
        // rest as `Node installation` DEBUG events, a failed stage as `Node installation
        // failure` (ERROR) with `'<origin>' <description>`.
        let install = |world: &mut World, description: &str| {
            world.event(
                id,
                Level::Debug,
                "Node installation",
                description,
                "unknown",
                now,
            );
        };
        let failure = |world: &mut World, description: &str| {
            world.event(
                id,
                Level::Error,
                "Node installation failure",
                description,
                "unknown",
                now,
            );
        };
        for kind in ["Performing PXE boot", "Loading ephemeral"] {
            self.event(id, Level::Info, kind, "", "unknown", now);
        }
        install(self, "'cloudinit' running modules for final");
        self.event(id, Level::Info, "Configuring storage", "", "unknown", now);
        install(self, "'curtin' configuring storage");
        self.event(id, Level::Info, "Installing OS", "", "unknown", now);
        install(self, "'curtin' curtin command install");
        if self.machines[&id].has_scenario(Scenario::DeployFails) {
            failure(self, "'curtin' curtin command install");
            self.mark_failed(
                id,
                "Installation failed (refer to the installation log for more information).",
                now,
            );
            return;
        }
        self.event(id, Level::Info, "Configuring OS", "", "unknown", now);
        self.event(id, Level::Info, "Rebooting", "", "unknown", now);
        let m = &self.machines[&id];
        if m.has_scenario(Scenario::DatasourceFailure) && m.deployments == 1 {
            // The installed OS boots; its cloud-init finds no datasource and reports the
            // failed stage, which fails the deployment before user-data is ever fetched.
            install(self, "'cloudinit' searching for network datasources");
            failure(
                self,
                "'cloudinit' searching for network data from DataSourceMAAS",
            );
            failure(self, "'cloudinit' searching for network datasources");
            self.mark_failed(
                id,
                "Installation failed (refer to the installation log for more information).",
                now,
            );
            return;
        }
        install(self, "'cloudinit' searching for network datasources");
        if self.transition(id, Status::Deployed, now).is_err() {
            return;
        }
        self.event(id, Level::Info, "Deployed", "", "unknown", now);
        let interval = self.sync_interval_secs();
        if let Some(m) = self.machines.get_mut(&id)
            && m.enable_hw_sync
        {
            // end_deployment (models/node.py) stamps last_sync; later ones come from the host.
            m.last_sync = Some(now);
            m.sync_interval = Some(interval);
        }
        self.boot_host(id, now);
        self.schedule_hw_sync(id, now);
    }

    /// The host's timer fires one interval after boot, if the host syncs at all. Under the
    /// `hwsync_stale` scenario it died with the first sync, until the units are restarted.
    fn schedule_hw_sync(&mut self, id: u64, now: DateTime<Utc>) {
        if let Some(m) = self.machines.get_mut(&id)
            && m.has_scenario(Scenario::HwsyncStale)
        {
            m.sync_stalled = true;
        }
        if !self.host_syncs(id) {
            return;
        }
        let due = now + Duration::seconds(self.sync_interval_secs() as i64);
        if let Some(m) = self.machines.get_mut(&id) {
            m.sync_due = Some(due);
        }
        self.schedule(due, TimerKind::Sync, id, 0);
    }

    /// One hardware-sync post of the deployed host (`maas-run-scripts report-results`): MAAS
    /// sets `last_sync` (metadataserver/api.py), the timer comes round again one interval
    /// later.
    fn post_hw_sync(&mut self, id: u64, now: DateTime<Utc>) {
        let interval = self.sync_interval_secs();
        let Some(m) = self.machines.get_mut(&id) else {
            return;
        };
        m.last_sync = Some(now);
        m.sync_interval = Some(interval);
        let due = now + Duration::seconds(interval as i64);
        m.sync_due = Some(due);
        self.schedule(due, TimerKind::Sync, id, 0);
    }

    /// Whether the deployed host posts hardware sync right now: MAAS expects it
    /// (`enable_hw_sync`), the OS runs, a sync timer is installed and started, and the host
    /// holds the machine's current token. Without credentials (or with those of an earlier
    /// ownership) nothing reaches MAAS.
    fn host_syncs(&self, id: u64) -> bool {
        let Some(m) = self.machines.get(&id) else {
            return false;
        };
        let creds = m
            .host_files
            .get(host::MAAS_CREDS_PATH)
            .zip(m.token.as_ref())
            .is_some_and(|(content, token)| host::creds_valid(content, sync_token(token)));
        m.status == Status::Deployed
            && m.enable_hw_sync
            && m.power_state == PowerState::On
            && m.sync_timer
            && creds
            && !m.sync_stalled
            && !m.has_scenario(Scenario::HwsyncNever)
    }

    fn hw_sync_tick(&mut self, id: u64, at: DateTime<Utc>) {
        let Some(m) = self.machines.get_mut(&id) else {
            return;
        };
        if m.sync_due != Some(at) {
            return;
        }
        m.sync_due = None;
        if self.host_syncs(id) {
            self.post_hw_sync(id, at);
        }
    }

    /// A write through the SSH stand-in. The credentials file or a sync unit restarts the
    /// host's sync (metalform's path unit posts as soon as the credentials change).
    pub fn write_host_file(
        &mut self,
        system_id: &str,
        path: &str,
        content: &str,
        now: DateTime<Utc>,
    ) -> Result<(), MaasError> {
        let id = self
            .machine_id(system_id)
            .ok_or_else(MaasError::no_machine)?;
        let m = self
            .machines
            .get_mut(&id)
            .ok_or_else(MaasError::no_machine)?;
        if m.status != Status::Deployed {
            return Err(MaasError::Conflict(format!(
                "{} is {}, not Deployed: there is no host to write to",
                m.hostname,
                m.status.name()
            )));
        }
        m.host_files.insert(path.to_string(), content.to_string());
        if path == host::MAAS_CREDS_PATH || path.ends_with(".timer") {
            self.restart_hw_sync(id, now);
        }
        if path == host::AGENT_ENV_PATH {
            // The agent's unit restarts with the new enrollment (an adopted host's follow-up).
            let m = &self.machines[&id];
            let (env, behaviour) = (Some(host::parse_env(content)), m.agent.clone());
            let (system_id, hostname, boot) = (m.system_id.clone(), m.hostname.clone(), m.boot);
            self.start_agent(env, behaviour, system_id, hostname, boot);
        }
        Ok(())
    }

    /// The host's sync units restarted (a reseed over SSH or by its agent): a timer unit on the
    /// host starts, a stalled sync resumes, and with valid credentials a post goes out now.
    /// Returns whether it did.
    pub fn restart_hw_sync(&mut self, id: u64, now: DateTime<Utc>) -> bool {
        let Some(m) = self.machines.get_mut(&id) else {
            return false;
        };
        let units: Vec<String> = m
            .host_files
            .keys()
            .filter(|p| p.ends_with(".timer") && p.contains("sync"))
            .map(|p| format!("systemctl restart {}", p.rsplit('/').next().unwrap_or(p)))
            .collect();
        m.sync_timer = host::sync_timer_started(&m.host_files, &units);
        m.sync_stalled = false;
        if self.host_syncs(id) {
            self.post_hw_sync(id, now);
            true
        } else {
            false
        }
    }

    /// The agent task `node.hw_sync_reseed` (docs/agent-protocol.md): restart the sync units
    /// with the credentials the host has. `Err` says why it could not.
    pub fn reseed_hw_sync(&mut self, system_id: &str, now: DateTime<Utc>) -> Result<(), String> {
        let id = self
            .machine_id(system_id)
            .ok_or_else(|| "the machine is gone".to_string())?;
        if self.restart_hw_sync(id, now) {
            return Ok(());
        }
        let m = &self.machines[&id];
        let creds = m
            .host_files
            .get(host::MAAS_CREDS_PATH)
            .zip(m.token.as_ref())
            .is_some_and(|(content, token)| host::creds_valid(content, sync_token(token)));
        Err(if !m.enable_hw_sync {
            "MAAS does not expect hardware sync from this machine (enable_hw_sync is off)".into()
        } else if !creds {
            format!(
                "{} is missing or holds another token; the MAAS credentials must be pushed again",
                host::MAAS_CREDS_PATH
            )
        } else if !m.sync_timer {
            "no hardware-sync timer unit is installed on the host".into()
        } else {
            "the hardware sync did not start".into()
        })
    }

    /// The deployed OS boots: user_data's files land on the host and the agent starts.
    pub(super) fn boot_host(&mut self, id: u64, now: DateTime<Utc>) {
        let Some(m) = self.machines.get_mut(&id) else {
            return;
        };
        m.boot += 1;
        // cloud-init applies MAAS's vendor-data under the user-data: user-data keys win.
        let vendor = match (&m.token, m.enable_hw_sync) {
            (Some(token), true) => {
                host::hw_sync_vendor_data(SIM_MAAS_URL, &m.system_id, sync_token(token))
            }
            _ => host::CloudConfig::default(),
        };
        let user = m
            .user_data
            .as_deref()
            .map(host::cloud_config)
            .unwrap_or_default();
        let applied = host::merge(vendor, user);
        m.host_files = applied.files.unwrap_or_default();
        m.sync_timer = host::sync_timer_started(&m.host_files, &applied.runcmd.unwrap_or_default());
        m.sync_stalled = false;
        let boot = m.boot;
        let env = m
            .host_files
            .get(host::AGENT_ENV_PATH)
            .map(|e| host::parse_env(e));
        let behaviour = m.agent.clone();
        let (system_id, hostname) = (m.system_id.clone(), m.hostname.clone());
        let oob: Vec<_> = m
            .scenarios
            .iter()
            .filter(|r| r.scenario.is_out_of_band())
            .map(|r| (r.scenario, r.after))
            .collect();
        for (scenario, after) in oob {
            let due = now + scaled(after.as_secs_f64(), self.time_scale);
            self.schedule(due, TimerKind::OutOfBand(scenario), id, boot);
        }
        self.start_agent(env, behaviour, system_id, hostname, boot);
    }

    /// The node agent of this boot starts with the enrollment its env file names.
    fn start_agent(
        &mut self,
        env: Option<std::collections::BTreeMap<String, String>>,
        behaviour: AgentBehaviour,
        system_id: String,
        hostname: String,
        boot: u64,
    ) {
        let agent_delay_secs = self.config.timings.agent_boot_secs;
        let Some(env) = env else {
            return;
        };
        let (Some(url), Some(token)) = (
            env.get("METALFORM_ENROLL_URL"),
            env.get("METALFORM_ENROLL_TOKEN"),
        ) else {
            return;
        };
        let extra = match behaviour {
            AgentBehaviour::Never => return,
            AgentBehaviour::Late { delay_secs } => delay_secs,
            _ => 0.0,
        };
        let delay = self.sim_duration(agent_delay_secs) + scaled(extra, self.time_scale);
        let token = if behaviour == AgentBehaviour::WrongToken {
            format!("wrong-{}", random_string(&mut self.rng, TOKEN_ALPHABET, 24))
        } else {
            token.clone()
        };
        self.outbox.push(AgentBoot {
            system_id,
            hostname: env.get("METALFORM_NODE").cloned().unwrap_or(hostname),
            boot,
            url: url.clone(),
            token,
            delay: delay.to_std().unwrap_or_default(),
            retry_base: scaled(2.0, self.time_scale).to_std().unwrap_or_default(),
        });
    }

    /// IPMI stand-in (`POST /sim/v1/bmc/{ip}/power`): power a BMC's machine; a PXE boot of a
    /// machine MAAS does not know enlists it after a while.
    pub fn bmc_power(
        &mut self,
        ip: &str,
        action: &str,
        pxe: bool,
        now: DateTime<Utc>,
    ) -> Result<serde_json::Value, MaasError> {
        let Some(index) = self
            .hardware
            .iter()
            .position(|h| h.spec.bmc_ip.as_deref() == Some(ip))
        else {
            return Err(MaasError::NotFound(format!("No BMC at {ip}.")));
        };
        let state = match action {
            "on" | "cycle" => PowerState::On,
            "off" => PowerState::Off,
            other => {
                return Err(MaasError::BadRequest(format!(
                    "Unknown power action '{other}': expected on, off or cycle."
                )));
            }
        };
        let pxe_macs: Vec<String> = self.hardware[index]
            .spec
            .interfaces
            .iter()
            .map(|n| n.mac.to_ascii_lowercase())
            .collect();
        let known = self
            .machines
            .values()
            .find(|m| m.interfaces.iter().any(|i| pxe_macs.contains(&i.mac)))
            .map(|m| m.id);
        match known {
            Some(id) => {
                self.power(id, state, now);
                let sid = self.machines[&id].system_id.clone();
                Ok(
                    serde_json::json!({"bmc": ip, "power": state.as_str(), "system_id": sid, "enlisting": false}),
                )
            }
            None => {
                let enlisting = state == PowerState::On && pxe;
                if enlisting {
                    let d = self.sim_duration(self.config.timings.enlist_secs);
                    self.schedule(now + d, TimerKind::Enlist, index as u64, 0);
                }
                Ok(
                    serde_json::json!({"bmc": ip, "power": state.as_str(), "system_id": null, "enlisting": enlisting}),
                )
            }
        }
    }

    fn enlist(&mut self, index: usize, now: DateTime<Utc>) {
        let Some(hw) = self.hardware.get(index) else {
            return;
        };
        let spec = hw.spec.clone();
        let macs: Vec<String> = spec
            .interfaces
            .iter()
            .map(|n| n.mac.to_ascii_lowercase())
            .collect();
        if self
            .machines
            .values()
            .any(|m| m.interfaces.iter().any(|i| macs.contains(&i.mac)))
        {
            return;
        }
        let system_id = self.new_system_id();
        let hostname = self.petname();
        let mut m = self.blank_machine(&spec, system_id, hostname);
        m.power_parameters = Self::power_parameters_for(&spec);
        m.interfaces = self.hardware_interfaces(&spec);
        m.power_state = PowerState::Off;
        let id = self.insert_machine(m);
        self.event(id, Level::Info, "Performing PXE boot", "", "unknown", now);
        self.event(id, Level::Info, "Loading ephemeral", "", "unknown", now);
        self.event(
            id,
            Level::Info,
            "New",
            "Enlisted through PXE boot",
            "unknown",
            now,
        );
    }

    /// How long `wipe-disks` takes on this machine (builtin_scripts/release_scripts/
    /// maas_wipe.py): one disk after the other; a quick wipe zeroes 2 MiB at each end of a
    /// disk, a secure erase is the drive's own (about the same time whatever its size), a full
    /// wipe writes every byte — NVMe's write-zeroes much faster than a SATA disk.
    pub(super) fn erase_duration(&mut self, id: u64, erase: Erase) -> Duration {
        let t = &self.config.timings;
        let disks = self
            .machines
            .get(&id)
            .map(|m| m.disks.clone())
            .unwrap_or_default();
        let secs: f64 = disks
            .iter()
            .map(|disk| match erase {
                Erase::Quick => t.quick_erase_secs,
                Erase::Secure => t.secure_erase_secs,
                Erase::Full => {
                    let mb_per_sec = if disk.name.starts_with("nvme") {
                        t.nvme_zero_mb_per_sec
                    } else {
                        t.zero_mb_per_sec
                    };
                    disk.size as f64 / 1e6 / mb_per_sec.max(1.0)
                }
            })
            .sum();
        self.sim_duration(secs.max(1.0))
    }

    pub(super) fn finish_release(&mut self, id: u64, now: DateTime<Utc>) {
        let commissioned = self
            .machines
            .get(&id)
            .is_some_and(|m| m.commissioning_status >= 0);
        let target = if commissioned {
            Status::Ready
        } else {
            Status::New
        };
        if self.transition(id, target, now).is_err() {
            return;
        }
        self.release_auto_ips(id);
        self.power(id, PowerState::Off, now);
        if let Some(m) = self.machines.get_mut(&id) {
            m.erase = None;
            m.workload_annotations.clear();
            m.netboot = true;
        }
        self.event(id, Level::Info, "Released", "", "unknown", now);
    }

    pub(super) fn start_commissioning(
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

    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_deployment(
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
                DISTROS
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
                now + scaled(timeout, self.time_scale),
            )
        };
        self.set_pending(id, Some(work));
        Ok(())
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
        m.sync_timer = false;
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
                let d = self.erase_duration(id, mode);
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

    pub(super) fn make_broken(&mut self, id: u64, comment: &str, user: &str, now: DateTime<Utc>) {
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
                self.fail_scripts(id, Status::FailedTesting, now);
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
}
