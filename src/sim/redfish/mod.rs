//! Simulated Redfish BMCs (seed 003 "Testing Strategy"; issue 14 item 8): each BMC is a real
//! HTTP server on its own loopback port speaking DMTF Redfish — service root, systems,
//! managers, virtual media with InsertMedia/EjectMedia, the one-time boot override, reset —
//! laid out as its vendor does (Dell iDRAC, HPE iLO, Lenovo XCC, Supermicro, or the generic
//! sushy-tools layout). Hosts "boot": a host powered on with its boot override on the virtual
//! CD and an image in CD1 runs the simulated maintenance OS, which reads the task ISO and
//! posts the status webhook to the configured controller. Faults are injectable per BMC
//! (status codes, latency, hangs; an OS that ignores graceful shutdown; a maintenance OS that
//! fails or never reports).
//!
//! It is held to sushy-tools (tests/redfish_sushy_services.rs runs the same client operations
//! against both), not only to metalform's client. docs/redfish.md is the user guide.

mod bmc;
pub mod faults;
pub mod maintenance;
mod server;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value as Json;

pub use bmc::{Bmc, HostOs, Power, Slot, image_name};
pub use faults::{Effect, FaultError, FaultRule, MaintenanceBehaviour, Op};
pub use maintenance::{IsoImage, WebhookTarget};

use crate::clock::{Clock, SystemClock};
use crate::provider::redfish::profile::Vendor;
use crate::secrets::Secret;

/// One BMC to simulate.
#[derive(Debug, Clone)]
pub struct BmcSpec {
    /// The server serial (the system's `SerialNumber`; the webhook's path).
    pub serial: String,
    pub vendor: Vendor,
    pub power: Power,
    pub faults: Vec<FaultRule>,
    pub maintenance: MaintenanceBehaviour,
    /// The host OS ignores a graceful shutdown request (the client must force it off).
    pub ignores_graceful_shutdown: bool,
}

impl BmcSpec {
    pub fn new(serial: impl Into<String>, vendor: Vendor) -> Self {
        Self {
            serial: serial.into(),
            vendor,
            power: Power::On,
            faults: Vec::new(),
            maintenance: MaintenanceBehaviour::default(),
            ignores_graceful_shutdown: false,
        }
    }
}

/// The simulated BMCs and how fast their hosts move.
#[derive(Debug, Clone)]
pub struct RedfishSimConfig {
    pub bmcs: Vec<BmcSpec>,
    /// The login every BMC accepts (Basic auth).
    pub user: String,
    pub password: Secret,
    /// Where the maintenance OS reports; without it, it boots and stays silent.
    pub webhook: Option<WebhookTarget>,
    /// Simulated seconds per real second: every duration below is divided by it.
    pub time_scale: f64,
    /// How long a power change takes.
    pub power_delay: Duration,
    /// How long the maintenance OS runs before it reports.
    pub maintenance_run: Duration,
    /// Whether the BMCs answer 503 for their vendor's settle time after a host power-on.
    pub settle: bool,
    /// Address the BMCs listen on (each on its own free port).
    pub listen: IpAddr,
}

/// The simulators' fixed development login.
pub const DEFAULT_USER: &str = "admin";
pub const DEFAULT_PASSWORD: &str = "metalform-sim";

impl Default for RedfishSimConfig {
    fn default() -> Self {
        Self {
            bmcs: Vec::new(),
            user: DEFAULT_USER.into(),
            password: Secret::new(DEFAULT_PASSWORD),
            webhook: None,
            time_scale: 1.0,
            power_delay: Duration::from_secs(2),
            maintenance_run: Duration::from_secs(30),
            settle: true,
            listen: IpAddr::V4(Ipv4Addr::LOCALHOST),
        }
    }
}

impl RedfishSimConfig {
    /// `count` BMCs with serials `RF-0001`…; `vendor` for all of them, or every vendor in turn.
    pub fn generated(count: usize, vendor: Option<Vendor>) -> Self {
        let bmcs = (0..count)
            .map(|i| {
                let vendor = vendor.unwrap_or(Vendor::ALL[i % Vendor::ALL.len()]);
                BmcSpec::new(format!("RF-{:04}", i + 1), vendor)
            })
            .collect();
        Self {
            bmcs,
            ..Self::default()
        }
    }

    fn scaled(&self, duration: Duration) -> Duration {
        if self.time_scale > 0.0 && self.time_scale.is_finite() {
            duration.div_f64(self.time_scale)
        } else {
            duration
        }
    }
}

/// One request a BMC answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestLog {
    pub method: String,
    pub path: String,
    pub status: u16,
}

/// One delivery of the status webhook.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookRecord {
    pub serial: String,
    pub body: Json,
    /// The controller's HTTP status, or why no answer came.
    pub result: Result<u16, String>,
}

#[derive(Debug)]
pub(crate) struct Entry {
    pub bmc: Bmc,
    pub faults: Vec<FaultRule>,
    pub maintenance: MaintenanceBehaviour,
    pub ignores_graceful_shutdown: bool,
    pub log: Vec<RequestLog>,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub bmcs: BTreeMap<String, Entry>,
    pub webhooks: Vec<WebhookRecord>,
    /// Reports due to be posted: (serial, body).
    pub outbox: Vec<(String, Json)>,
}

#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
    pub config: RedfishSimConfig,
    pub clock: Arc<dyn Clock>,
    pub http: reqwest::Client,
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs due power changes and boots, then `f`.
    pub fn with_state<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let now = self.clock.now();
        let mut state = self.lock();
        server::advance(&self.config, &mut state, now);
        f(&mut state)
    }

    pub fn after(&self, now: DateTime<Utc>, duration: Duration) -> DateTime<Utc> {
        now + chrono::Duration::from_std(self.config.scaled(duration)).unwrap_or_default()
    }
}

/// Why the simulated BMCs could not start.
#[derive(Debug, thiserror::Error)]
pub enum RedfishSimError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("two simulated BMCs have the serial `{0}`")]
    DuplicateSerial(String),
}

/// A simulated BMC as a client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BmcAddress {
    pub serial: String,
    pub vendor: Vendor,
    /// `http://127.0.0.1:PORT` (its Redfish service root is `/redfish/v1/`).
    pub url: String,
}

/// Running simulated BMCs.
#[derive(Debug)]
pub struct RedfishSimHandle {
    pub bmcs: Vec<BmcAddress>,
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl RedfishSimHandle {
    /// The base URL of the BMC of `serial`.
    pub fn url(&self, serial: &str) -> Option<&str> {
        self.bmcs
            .iter()
            .find(|b| b.serial == serial)
            .map(|b| b.url.as_str())
    }

    /// Runs `f` on the BMC of `serial` (after due power changes and boots).
    pub fn with_bmc<T>(&self, serial: &str, f: impl FnOnce(&mut Bmc) -> T) -> Option<T> {
        self.shared
            .with_state(|s| s.bmcs.get_mut(serial).map(|e| f(&mut e.bmc)))
    }

    /// Adds fault rules to a BMC.
    pub fn inject(&self, serial: &str, rules: Vec<FaultRule>) {
        self.shared.with_state(|s| {
            if let Some(entry) = s.bmcs.get_mut(serial) {
                entry.faults.extend(rules);
            }
        });
    }

    pub fn set_maintenance(&self, serial: &str, behaviour: MaintenanceBehaviour) {
        self.shared.with_state(|s| {
            if let Some(entry) = s.bmcs.get_mut(serial) {
                entry.maintenance = behaviour;
            }
        });
    }

    pub fn set_ignores_graceful_shutdown(&self, serial: &str, ignores: bool) {
        self.shared.with_state(|s| {
            if let Some(entry) = s.bmcs.get_mut(serial) {
                entry.ignores_graceful_shutdown = ignores;
            }
        });
    }

    /// The requests a BMC answered, oldest first.
    pub fn requests(&self, serial: &str) -> Vec<RequestLog> {
        self.shared.with_state(|s| {
            s.bmcs
                .get(serial)
                .map(|e| e.log.clone())
                .unwrap_or_default()
        })
    }

    /// Every webhook delivery so far.
    pub fn webhooks(&self) -> Vec<WebhookRecord> {
        self.shared.with_state(|s| s.webhooks.clone())
    }

    /// Stops every BMC server.
    pub fn shutdown(self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Drop for RedfishSimHandle {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Starts the BMCs of `config`, each on a free port of `config.listen`, with the system clock.
pub async fn start(config: RedfishSimConfig) -> Result<RedfishSimHandle, RedfishSimError> {
    start_with_clock(config, Arc::new(SystemClock)).await
}

/// Starts the BMCs with an injected clock.
pub async fn start_with_clock(
    config: RedfishSimConfig,
    clock: Arc<dyn Clock>,
) -> Result<RedfishSimHandle, RedfishSimError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut state = State::default();
    for (i, spec) in config.bmcs.iter().enumerate() {
        // A stable UUID per serial (generic systems are named by it, as in sushy-tools).
        let uuid = uuid::Uuid::from_u128(0x6d66_0000_0000_4000_8000_0000_0000_0000 | i as u128)
            .to_string();
        let mut bmc = Bmc::new(&spec.serial, &uuid, spec.vendor, spec.power);
        bmc.boot_mode = "UEFI".into();
        let entry = Entry {
            bmc,
            faults: spec.faults.clone(),
            maintenance: spec.maintenance.clone(),
            ignores_graceful_shutdown: spec.ignores_graceful_shutdown,
            log: Vec::new(),
        };
        if state.bmcs.insert(spec.serial.clone(), entry).is_some() {
            return Err(RedfishSimError::DuplicateSerial(spec.serial.clone()));
        }
    }
    let shared = Arc::new(Shared {
        state: Mutex::new(state),
        clock,
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap_or_default(),
        config: config.clone(),
    });
    let mut tasks = Vec::new();
    let mut bmcs = Vec::new();
    for spec in &config.bmcs {
        let addr = SocketAddr::new(config.listen, 0);
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| RedfishSimError::Listen { addr, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| RedfishSimError::Listen { addr, source })?;
        let app = server::router(shared.clone(), spec.serial.clone());
        tasks.push(tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        }));
        bmcs.push(BmcAddress {
            serial: spec.serial.clone(),
            vendor: spec.vendor,
            url: format!("http://{local}"),
        });
    }
    tasks.push(tokio::spawn(server::ticker(shared.clone())));
    Ok(RedfishSimHandle {
        bmcs,
        shared,
        tasks,
    })
}
