//! The Redfish client (seed 003 "Redfish operations", 028; "Idempotency and Recovery"): small
//! and purpose-built on reqwest. It discovers the system, its manager and their virtual media
//! by following links, then runs each operation as read-then-write: it reads the resource,
//! writes only what differs, and reads again to check the write took. An operation that fails
//! transiently (5xx, 429, timeouts, connection errors) is retried whole — re-reading first, so
//! a write whose answer was lost is not repeated — with capped exponential backoff and jitter
//! (`REDFISH_RETRIES`); a 4xx is terminal at once. PATCHes carry `If-Match` when the vendor
//! profile says so or the BMC asks for it (428, 412). After a host reset the BMC is left alone
//! for the profile's settle time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value as Json, json};
use url::Url;

use super::error::{RedfishError, TransientCause, error_message};
use super::profile::{IfMatch, MediaLocation, Vendor, VendorProfile};
use super::settings::RedfishSettings;
use crate::provider::maas::{Jitter, RetryPolicy, SeededJitter};
use crate::secrets::{PowerCredentials, SecretRef, SecretStore};

/// A BMC: its Redfish base URL and login.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `https://10.0.0.5/` (or `http://127.0.0.1:8000/` for emulators).
    pub base: Url,
    pub credentials: PowerCredentials,
}

impl Endpoint {
    /// `address` is a host (`10.0.0.5`, HTTPS implied), `host:port`, or a full URL.
    pub fn new(address: &str, credentials: PowerCredentials) -> Result<Self, RedfishError> {
        let text = if address.contains("://") {
            address.to_owned()
        } else {
            format!("https://{address}")
        };
        let mut base = Url::parse(&text).map_err(|e| RedfishError::Protocol {
            op: "connect",
            bmc: address.to_owned(),
            message: format!("`{address}` is not a BMC address: {e}"),
        })?;
        base.set_path("/");
        base.set_query(None);
        Ok(Self { base, credentials })
    }

    /// Reads the login `{user, pass}` from the secret store at use time, as for IPMI, so a
    /// rotated password needs no restart.
    pub async fn from_secrets(
        address: &str,
        secrets: &dyn SecretStore,
        reference: &SecretRef,
    ) -> Result<Self, RedfishError> {
        let credentials =
            secrets
                .power_credentials(reference)
                .await
                .map_err(|e| RedfishError::Credentials {
                    bmc: address.to_owned(),
                    transient: e.is_transient(),
                    message: e.to_string(),
                })?;
        Self::new(address, credentials)
    }

    /// `host:port` for messages (never the login).
    pub fn display(&self) -> String {
        match (self.base.host_str(), self.base.port()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (Some(host), None) => host.to_owned(),
            _ => self.base.to_string(),
        }
    }
}

/// Which system of the BMC to drive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SystemSelector {
    /// The BMC's only system (an error when it has several).
    Only,
    /// The system whose `SerialNumber` matches (the server serial of the job).
    Serial(String),
    /// The system with this `Id` (or its full `@odata.id`).
    Id(String),
}

/// The two drives of a provisioning job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drive {
    /// CD1: the maintenance OS (MAINTENANCE_ISO_URL).
    Maintenance,
    /// CD2: the job's task ISO.
    Task,
}

impl Drive {
    pub fn as_str(self) -> &'static str {
        match self {
            Drive::Maintenance => "CD1 (maintenance)",
            Drive::Task => "CD2 (task)",
        }
    }
}

/// One virtual media slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaSlot {
    pub id: String,
    /// Its `@odata.id`.
    pub path: String,
    pub media_types: Vec<String>,
    pub insert_target: String,
    pub eject_target: String,
}

impl MediaSlot {
    fn takes_cd(&self) -> bool {
        self.media_types.iter().any(|t| t == "CD" || t == "DVD")
    }

    fn takes_removable(&self) -> bool {
        self.media_types
            .iter()
            .any(|t| t == "USBStick" || t == "RemovableDisk")
    }
}

/// What [`RedfishClient::discover`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery {
    pub vendor: Vendor,
    /// The system's `@odata.id` and `Id`.
    pub system: String,
    pub system_id: String,
    pub serial: Option<String>,
    /// The manager's `@odata.id`, when the system links one.
    pub manager: Option<String>,
    /// Where the virtual media collection was found.
    pub media_location: MediaLocation,
    /// Every slot, in the BMC's order.
    pub slots: Vec<MediaSlot>,
    /// Indexes into `slots` of CD1 and CD2.
    maintenance_slot: usize,
    task_slot: usize,
    pub reset_target: String,
    /// `ResetType@Redfish.AllowableValues` (empty when the BMC does not say).
    pub reset_types: Vec<String>,
}

impl Discovery {
    pub fn profile(&self) -> &'static VendorProfile {
        self.vendor.profile()
    }

    pub fn slot(&self, drive: Drive) -> &MediaSlot {
        match drive {
            Drive::Maintenance => &self.slots[self.maintenance_slot],
            Drive::Task => &self.slots[self.task_slot],
        }
    }

    fn allows(&self, reset_type: &str) -> bool {
        self.reset_types.is_empty() || self.reset_types.iter().any(|t| t == reset_type)
    }
}

/// A slot's state as the BMC reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaState {
    pub slot: String,
    pub inserted: bool,
    /// The image URL, when one is set.
    pub image: Option<String>,
}

impl MediaState {
    fn from_json(slot: &str, body: &Json) -> Self {
        let image = body["Image"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        let inserted = body["Inserted"].as_bool().unwrap_or(image.is_some());
        Self {
            slot: slot.to_owned(),
            inserted,
            image,
        }
    }

    /// Whether `url` is the image in the drive. Signed media URLs differ in their query
    /// (expiry, signature) each time they are issued: the image is the same when scheme,
    /// host and path are.
    pub fn holds(&self, url: &str) -> bool {
        self.inserted
            && self
                .image
                .as_deref()
                .is_some_and(|image| same_image(image, url))
    }
}

/// Two image URLs name the same image when they differ at most in their query.
pub fn same_image(a: &str, b: &str) -> bool {
    let strip = |u: &str| u.split(['?', '#']).next().unwrap_or(u).to_owned();
    strip(a) == strip(b)
}

/// Host power as Redfish reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PowerState {
    On,
    Off,
    PoweringOn,
    PoweringOff,
    Other(String),
}

impl PowerState {
    fn parse(text: Option<&str>) -> Self {
        match text {
            Some("On") => PowerState::On,
            Some("Off") => PowerState::Off,
            Some("PoweringOn") => PowerState::PoweringOn,
            Some("PoweringOff") => PowerState::PoweringOff,
            Some(other) => PowerState::Other(other.to_owned()),
            None => PowerState::Other("unknown".into()),
        }
    }
}

/// The one-time boot override as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootState {
    pub target: Option<String>,
    pub enabled: Option<String>,
    pub mode: Option<String>,
}

/// Whether an ensure operation had to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The BMC was already as asked: nothing written.
    Unchanged,
    Changed,
}

/// How a reset went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetOutcome {
    /// The host was off and was powered on.
    PoweredOn,
    /// The OS shut down within the grace period and the host was powered on again.
    Graceful,
    /// The grace period passed: the power was forced off, then on.
    Forced,
}

/// One HTTP request, for metrics (`redfish_request_duration_seconds{op}`) and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    pub op: &'static str,
    pub method: String,
    pub path: String,
    /// `None` when no answer came.
    pub status: Option<u16>,
    pub duration: Duration,
}

type Observer = Arc<dyn Fn(&RequestRecord) + Send + Sync>;

/// A failed attempt: retried or not.
enum Fail {
    Transient {
        cause: TransientCause,
        message: String,
        retry_after: Option<Duration>,
    },
    Refused {
        status: u16,
        message: String,
    },
    Final(RedfishError),
}

struct Reply {
    etag: Option<String>,
    body: Json,
}

/// A Redfish client for one BMC.
#[derive(Clone)]
pub struct RedfishClient {
    endpoint: Endpoint,
    http: reqwest::Client,
    settings: RedfishSettings,
    vendor: Option<Vendor>,
    jitter: Arc<dyn Jitter>,
    observer: Option<Observer>,
    /// No request before this instant (after a host reset).
    settle_until: Arc<Mutex<Option<tokio::time::Instant>>>,
}

impl std::fmt::Debug for RedfishClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedfishClient")
            .field("bmc", &self.endpoint.display())
            .field("vendor", &self.vendor)
            .finish()
    }
}

impl RedfishClient {
    pub fn new(endpoint: Endpoint, settings: RedfishSettings) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout)
            .danger_accept_invalid_certs(settings.insecure_tls)
            .build()
            .unwrap_or_default();
        Self {
            endpoint,
            http,
            settings,
            vendor: None,
            jitter: Arc::new(SeededJitter::from_os()),
            observer: None,
            settle_until: Arc::new(Mutex::new(None)),
        }
    }

    /// Use this vendor's profile instead of detecting it (the server record's `vendor`).
    pub fn with_vendor(mut self, vendor: Option<Vendor>) -> Self {
        self.vendor = vendor;
        self
    }

    /// Reproducible jitter (tests, simulations).
    pub fn with_jitter(mut self, jitter: Arc<dyn Jitter>) -> Self {
        self.jitter = jitter;
        self
    }

    /// Called after every HTTP request.
    pub fn with_observer(
        mut self,
        observer: impl Fn(&RequestRecord) + Send + Sync + 'static,
    ) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    fn bmc(&self) -> String {
        self.endpoint.display()
    }

    fn policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.settings.retries.saturating_add(1),
            base_delay: self.settings.base_backoff,
            max_delay: self.settings.max_backoff,
            max_retry_after: self.settings.max_backoff.max(Duration::from_secs(120)),
            // Each Redfish request carries REDFISH_TIMEOUT itself.
            read_timeout: self.settings.timeout,
            write_timeout: self.settings.timeout,
        }
    }

    fn url(&self, path: &str) -> Result<Url, Fail> {
        self.endpoint.base.join(path).map_err(|e| {
            Fail::Final(RedfishError::Protocol {
                op: "request",
                bmc: self.bmc(),
                message: format!("`{path}` is not a path on the BMC: {e}"),
            })
        })
    }

    async fn settle(&self) {
        let until = *self.settle_until.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(until) = until {
            tokio::time::sleep_until(until).await;
        }
    }

    /// One HTTP request, classified.
    async fn send(
        &self,
        op: &'static str,
        method: Method,
        path: &str,
        body: Option<&Json>,
        if_match: Option<&str>,
    ) -> Result<Reply, Fail> {
        self.settle().await;
        let url = self.url(path)?;
        let mut request = self
            .http
            .request(method.clone(), url)
            .basic_auth(
                &self.endpoint.credentials.user,
                Some(self.endpoint.credentials.pass.expose()),
            )
            .header("Accept", "application/json")
            .header("OData-Version", "4.0");
        if let Some(body) = body {
            request = request.json(body);
        }
        if let Some(tag) = if_match {
            request = request.header("If-Match", tag);
        }
        let started = tokio::time::Instant::now();
        let result = request.send().await;
        let record = |status: Option<u16>| RequestRecord {
            op,
            method: method.to_string(),
            path: path.to_owned(),
            status,
            duration: started.elapsed(),
        };
        let response = match result {
            Ok(response) => response,
            Err(err) => {
                if let Some(observer) = &self.observer {
                    observer(&record(None));
                }
                let cause = if err.is_timeout() {
                    TransientCause::Timeout
                } else {
                    TransientCause::Connect
                };
                return Err(Fail::Transient {
                    cause,
                    message: error_chain(&err),
                    retry_after: None,
                });
            }
        };
        let status = response.status().as_u16();
        let etag = response
            .headers()
            .get("ETag")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let retry_after = response
            .headers()
            .get("Retry-After")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let text = response.text().await;
        if let Some(observer) = &self.observer {
            observer(&record(Some(status)));
        }
        let text = text.map_err(|err| Fail::Transient {
            cause: if err.is_timeout() {
                TransientCause::Timeout
            } else {
                TransientCause::Connect
            },
            message: error_chain(&err),
            retry_after: None,
        })?;
        if status >= 500 || status == 429 {
            return Err(Fail::Transient {
                cause: TransientCause::Status(status),
                message: error_message(&text),
                retry_after,
            });
        }
        if status >= 400 {
            return Err(Fail::Refused {
                status,
                message: error_message(&text),
            });
        }
        let body = if text.trim().is_empty() {
            Json::Null
        } else {
            serde_json::from_str(&text).map_err(|e| {
                Fail::Final(RedfishError::Protocol {
                    op,
                    bmc: self.bmc(),
                    message: format!("the answer to {method} {path} is not JSON: {e}"),
                })
            })?
        };
        // Redfish also puts the ETag in the body.
        let etag = etag.or_else(|| body["@odata.etag"].as_str().map(str::to_owned));
        Ok(Reply { etag, body })
    }

    fn refused(&self, op: &'static str, status: u16, message: String) -> RedfishError {
        RedfishError::Refused {
            op,
            bmc: self.bmc(),
            status,
            message,
        }
    }

    fn protocol(&self, op: &'static str, message: impl Into<String>) -> RedfishError {
        RedfishError::Protocol {
            op,
            bmc: self.bmc(),
            message: message.into(),
        }
    }

    /// Runs `attempt` until it succeeds, fails terminally, or the retries are spent.
    async fn retrying<T>(
        &self,
        op: &'static str,
        mut attempt: impl AsyncFnMut() -> Result<T, Fail>,
    ) -> Result<T, RedfishError> {
        let policy = self.policy();
        let mut tries = 0u32;
        loop {
            tries += 1;
            match attempt().await {
                Ok(value) => return Ok(value),
                Err(Fail::Final(err)) => return Err(err),
                Err(Fail::Refused { status, message }) => {
                    return Err(self.refused(op, status, message));
                }
                Err(Fail::Transient {
                    cause,
                    message,
                    retry_after,
                }) => {
                    let too_long = retry_after.is_some_and(|d| d > policy.max_retry_after);
                    if tries >= policy.max_attempts || too_long {
                        return Err(RedfishError::Transient {
                            op,
                            bmc: self.bmc(),
                            cause,
                            attempts: tries,
                            message,
                            retry_after,
                        });
                    }
                    let delay = policy.delay(tries - 1, retry_after, self.jitter.sample());
                    tracing::debug!(op, bmc = %self.bmc(), attempt = tries, ?delay, "transient Redfish failure: {message}");
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    async fn get(&self, op: &'static str, path: &str) -> Result<Reply, Fail> {
        self.send(op, Method::GET, path, None, None).await
    }

    /// A GET with retries.
    async fn read(&self, op: &'static str, path: &str) -> Result<Json, RedfishError> {
        self.retrying(op, async || self.get(op, path).await.map(|r| r.body))
            .await
    }

    /// Finds the system, its manager, virtual media and reset action, following links.
    pub async fn discover(&self, selector: &SystemSelector) -> Result<Discovery, RedfishError> {
        const OP: &str = "discover";
        let root = self.read(OP, "/redfish/v1/").await?;
        let systems_path = link(&root["Systems"])
            .ok_or_else(|| self.protocol(OP, "the service root links no Systems collection"))?;
        let systems = self.read(OP, &systems_path).await?;
        let system_paths = members(&systems);
        let mut candidates = Vec::new();
        for path in &system_paths {
            let matches = match selector {
                SystemSelector::Only => true,
                SystemSelector::Id(id) => {
                    path == id || path.rsplit('/').next() == Some(id.as_str())
                }
                SystemSelector::Serial(_) => true,
            };
            if matches {
                candidates.push(path.clone());
            }
        }
        let mut chosen = None;
        for path in candidates {
            let system = self.read(OP, &path).await?;
            let fits = match selector {
                SystemSelector::Serial(serial) => {
                    system["SerialNumber"].as_str() == Some(serial.as_str())
                }
                SystemSelector::Id(id) => {
                    system["Id"].as_str() == Some(id.as_str())
                        || path == *id
                        || path.ends_with(&format!("/{id}"))
                }
                SystemSelector::Only => true,
            };
            if fits {
                if chosen.is_some() && *selector == SystemSelector::Only {
                    return Err(self.protocol(
                        OP,
                        format!(
                            "the BMC has {} systems: name one by serial or id",
                            system_paths.len()
                        ),
                    ));
                }
                chosen = Some((path, system));
            }
        }
        let (system_path, system) = chosen.ok_or_else(|| {
            self.protocol(
                OP,
                match selector {
                    SystemSelector::Only => "the BMC lists no system".to_owned(),
                    SystemSelector::Serial(s) => {
                        format!("no system with serial number `{s}` on this BMC")
                    }
                    SystemSelector::Id(id) => format!("no system `{id}` on this BMC"),
                },
            )
        })?;
        let vendor = self
            .vendor
            .unwrap_or_else(|| Vendor::detect(&root, &system));
        let profile = vendor.profile();
        let manager = system["Links"]["ManagedBy"]
            .as_array()
            .and_then(|m| m.first())
            .and_then(link);
        let manager_media = match &manager {
            Some(path) => link(&self.read(OP, path).await?["VirtualMedia"]),
            None => None,
        };
        let system_media = link(&system["VirtualMedia"]);
        let ordered = match profile.media_location {
            MediaLocation::Systems => [
                (MediaLocation::Systems, system_media),
                (MediaLocation::Managers, manager_media),
            ],
            MediaLocation::Managers => [
                (MediaLocation::Managers, manager_media),
                (MediaLocation::Systems, system_media),
            ],
        };
        let (media_location, media_path) = ordered
            .into_iter()
            .find_map(|(location, path)| path.map(|p| (location, p)))
            .ok_or_else(|| RedfishError::Unsupported {
                bmc: self.bmc(),
                what: "mount virtual media: neither the system nor its manager links a VirtualMedia collection".into(),
            })?;
        let collection = self.read(OP, &media_path).await?;
        let mut slots = Vec::new();
        for path in members(&collection) {
            let slot = self.read(OP, &path).await?;
            let id = slot["Id"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| path.rsplit('/').next().unwrap_or_default().to_owned());
            let action = |name: &str, default: &str| {
                slot["Actions"][name]["target"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("{path}/Actions/{default}"))
            };
            slots.push(MediaSlot {
                id,
                media_types: strings(&slot["MediaTypes"]),
                insert_target: action("#VirtualMedia.InsertMedia", "VirtualMedia.InsertMedia"),
                eject_target: action("#VirtualMedia.EjectMedia", "VirtualMedia.EjectMedia"),
                path,
            });
        }
        let maintenance_slot = slots.iter().position(MediaSlot::takes_cd).ok_or_else(|| {
            RedfishError::Unsupported {
                bmc: self.bmc(),
                what: "boot a virtual CD: no virtual media slot takes CD or DVD images".into(),
            }
        })?;
        // CD2 is a second CD drive, else a removable-disk slot (iLO, XCC): the maintenance OS
        // finds the task medium by its volume label, not by the drive.
        let other = |takes: fn(&MediaSlot) -> bool| {
            (0..slots.len()).find(|&i| i != maintenance_slot && takes(&slots[i]))
        };
        let task_slot = other(MediaSlot::takes_cd)
            .or_else(|| other(MediaSlot::takes_removable))
            .ok_or_else(|| RedfishError::Unsupported {
                bmc: self.bmc(),
                what: "mount two images at once: only one virtual media slot takes images".into(),
            })?;
        let reset = &system["Actions"]["#ComputerSystem.Reset"];
        Ok(Discovery {
            vendor,
            system_id: system["Id"].as_str().unwrap_or_default().to_owned(),
            serial: system["SerialNumber"].as_str().map(str::to_owned),
            system: system_path.clone(),
            manager,
            media_location,
            slots,
            maintenance_slot,
            task_slot,
            reset_target: reset["target"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| format!("{system_path}/Actions/ComputerSystem.Reset")),
            reset_types: strings(&reset["ResetType@Redfish.AllowableValues"]),
        })
    }

    /// One attempt at reading a slot.
    async fn read_slot(&self, op: &'static str, slot: &MediaSlot) -> Result<MediaState, Fail> {
        let reply = self.get(op, &slot.path).await?;
        Ok(MediaState::from_json(&slot.id, &reply.body))
    }

    /// Every slot's state.
    pub async fn media_states(
        &self,
        discovery: &Discovery,
    ) -> Result<Vec<MediaState>, RedfishError> {
        let mut states = Vec::new();
        for slot in &discovery.slots {
            let body = self.read("media_state", &slot.path).await?;
            states.push(MediaState::from_json(&slot.id, &body));
        }
        Ok(states)
    }

    /// One drive's state.
    pub async fn media_state(
        &self,
        discovery: &Discovery,
        drive: Drive,
    ) -> Result<MediaState, RedfishError> {
        let slot = discovery.slot(drive);
        let body = self.read("media_state", &slot.path).await?;
        Ok(MediaState::from_json(&slot.id, &body))
    }

    /// Ensures `url` is the image in `drive`: skipped when it already is, another image is
    /// ejected first, and the result is read back.
    pub async fn insert_media(
        &self,
        discovery: &Discovery,
        drive: Drive,
        url: &str,
    ) -> Result<Change, RedfishError> {
        const OP: &str = "insert_media";
        let slot = discovery.slot(drive);
        let mut change = Change::Unchanged;
        self.retrying(OP, async || {
            let state = self.read_slot(OP, slot).await?;
            if state.holds(url) {
                return Ok(());
            }
            if state.inserted {
                self.send(OP, Method::POST, &slot.eject_target, Some(&json!({})), None)
                    .await?;
            }
            let body = json!({"Image": url, "Inserted": true, "WriteProtected": true});
            self.send(OP, Method::POST, &slot.insert_target, Some(&body), None)
                .await?;
            change = Change::Changed;
            let after = self.read_slot(OP, slot).await?;
            if !after.holds(url) {
                return Err(Fail::Final(self.protocol(
                    OP,
                    format!(
                        "{} accepted the image but reports {}",
                        drive.as_str(),
                        describe_media(&after)
                    ),
                )));
            }
            Ok(())
        })
        .await?;
        Ok(change)
    }

    /// Ensures `drive` is empty.
    pub async fn eject_media(
        &self,
        discovery: &Discovery,
        drive: Drive,
    ) -> Result<Change, RedfishError> {
        const OP: &str = "eject_media";
        let slot = discovery.slot(drive);
        let mut change = Change::Unchanged;
        self.retrying(OP, async || {
            let state = self.read_slot(OP, slot).await?;
            if !state.inserted {
                return Ok(());
            }
            self.send(OP, Method::POST, &slot.eject_target, Some(&json!({})), None)
                .await?;
            change = Change::Changed;
            let after = self.read_slot(OP, slot).await?;
            if after.inserted {
                return Err(Fail::Final(self.protocol(
                    OP,
                    format!(
                        "{} still reports {} after the eject",
                        drive.as_str(),
                        describe_media(&after)
                    ),
                )));
            }
            Ok(())
        })
        .await?;
        Ok(change)
    }

    /// The system's boot override.
    pub async fn boot_state(&self, discovery: &Discovery) -> Result<BootState, RedfishError> {
        let system = self.read("boot_state", &discovery.system).await?;
        Ok(boot_state(&system))
    }

    /// Ensures the next boot (only) is from the virtual CD.
    pub async fn boot_once_from_cd(&self, discovery: &Discovery) -> Result<Change, RedfishError> {
        const OP: &str = "boot_once_cd";
        let profile = discovery.profile();
        let mut change = Change::Unchanged;
        self.retrying(OP, async || {
            let read = self.get(OP, &discovery.system).await?;
            let state = boot_state(&read.body);
            if state.target.as_deref() == Some(profile.boot.cd_target)
                && state.enabled.as_deref() == Some(profile.boot.once)
            {
                return Ok(());
            }
            let mut boot = json!({
                "BootSourceOverrideTarget": profile.boot.cd_target,
                "BootSourceOverrideEnabled": profile.boot.once,
            });
            if let Some(mode) = profile.boot.mode {
                boot["BootSourceOverrideMode"] = json!(mode);
            }
            let patch = json!({"Boot": boot});
            let first_tag = match profile.if_match {
                IfMatch::Always => read.etag.clone(),
                IfMatch::WhenAsked => None,
            };
            match self
                .send(
                    OP,
                    Method::PATCH,
                    &discovery.system,
                    Some(&patch),
                    first_tag.as_deref(),
                )
                .await
            {
                Ok(_) => {}
                // 428: the BMC wants If-Match; 412: our tag is stale. Read again, once.
                Err(Fail::Refused {
                    status: 428 | 412, ..
                }) => {
                    let fresh = self.get(OP, &discovery.system).await?;
                    let tag = fresh.etag.ok_or_else(|| {
                        Fail::Final(
                            self.protocol(OP, "the BMC asks for If-Match but sends no ETag"),
                        )
                    })?;
                    self.send(
                        OP,
                        Method::PATCH,
                        &discovery.system,
                        Some(&patch),
                        Some(&tag),
                    )
                    .await?;
                }
                Err(other) => return Err(other),
            }
            change = Change::Changed;
            let after = boot_state(&self.get(OP, &discovery.system).await?.body);
            if after.target.as_deref() != Some(profile.boot.cd_target) {
                return Err(Fail::Final(self.protocol(
                    OP,
                    format!(
                        "the boot override reads back as {} after setting {}",
                        after.target.as_deref().unwrap_or("nothing"),
                        profile.boot.cd_target
                    ),
                )));
            }
            Ok(())
        })
        .await?;
        Ok(change)
    }

    pub async fn power_state(&self, discovery: &Discovery) -> Result<PowerState, RedfishError> {
        let system = self.read("power_state", &discovery.system).await?;
        Ok(PowerState::parse(system["PowerState"].as_str()))
    }

    /// Restarts the host: a graceful shutdown, the power forced off when the OS has not
    /// stopped within `REDFISH_RESET_GRACE`, then power on. A host that is off is powered on.
    /// Afterwards the BMC is left alone for the profile's settle time.
    pub async fn reset(&self, discovery: &Discovery) -> Result<ResetOutcome, RedfishError> {
        let grace = self.settings.reset_grace;
        let outcome = if self.power_state(discovery).await? == PowerState::Off {
            ResetOutcome::PoweredOn
        } else {
            let graceful = discovery.allows("GracefulShutdown")
                && self
                    .ensure_power(discovery, false, "GracefulShutdown")
                    .await?
                && self.wait_power(discovery, PowerState::Off, grace).await?;
            if graceful {
                ResetOutcome::Graceful
            } else {
                self.ensure_power(discovery, false, "ForceOff").await?;
                if !self.wait_power(discovery, PowerState::Off, grace).await? {
                    return Err(self.protocol(
                        "reset",
                        format!("the host is still on {grace:?} after ForceOff"),
                    ));
                }
                ResetOutcome::Forced
            }
        };
        self.ensure_power(discovery, true, "On").await?;
        if !self.wait_power(discovery, PowerState::On, grace).await? {
            return Err(self.protocol(
                "reset",
                format!("the host is not on {grace:?} after power-on"),
            ));
        }
        let settle = self
            .settings
            .settle_after_reset
            .unwrap_or(discovery.profile().settle_after_reset);
        if !settle.is_zero() {
            *self.settle_until.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(tokio::time::Instant::now() + settle);
        }
        Ok(outcome)
    }

    /// Sends `reset_type` unless the host is already (going) `on`/off. `Ok(true)` when the
    /// request was sent or not needed.
    async fn ensure_power(
        &self,
        discovery: &Discovery,
        on: bool,
        reset_type: &'static str,
    ) -> Result<bool, RedfishError> {
        const OP: &str = "reset";
        self.retrying(OP, async || {
            let system = self.get(OP, &discovery.system).await?.body;
            let state = PowerState::parse(system["PowerState"].as_str());
            let there = if on {
                matches!(state, PowerState::On | PowerState::PoweringOn)
            } else {
                matches!(state, PowerState::Off | PowerState::PoweringOff)
            };
            if !there {
                self.send(
                    OP,
                    Method::POST,
                    &discovery.reset_target,
                    Some(&json!({"ResetType": reset_type})),
                    None,
                )
                .await?;
            }
            Ok(true)
        })
        .await
    }

    /// Polls until the power state is `want`; `Ok(false)` after `limit`.
    async fn wait_power(
        &self,
        discovery: &Discovery,
        want: PowerState,
        limit: Duration,
    ) -> Result<bool, RedfishError> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match self.get("reset", &discovery.system).await {
                Ok(reply) if PowerState::parse(reply.body["PowerState"].as_str()) == want => {
                    return Ok(true);
                }
                Ok(_) | Err(Fail::Transient { .. }) => {}
                Err(Fail::Refused { status, message }) => {
                    return Err(self.refused("reset", status, message));
                }
                Err(Fail::Final(err)) => return Err(err),
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(false);
            }
            tokio::time::sleep(self.settings.poll_interval).await;
        }
    }
}

fn boot_state(system: &Json) -> BootState {
    let boot = &system["Boot"];
    let text = |key: &str| boot[key].as_str().map(str::to_owned);
    BootState {
        target: text("BootSourceOverrideTarget"),
        enabled: text("BootSourceOverrideEnabled"),
        mode: text("BootSourceOverrideMode"),
    }
}

fn describe_media(state: &MediaState) -> String {
    match (&state.image, state.inserted) {
        (Some(image), true) => format!("image {}", image.split('?').next().unwrap_or(image)),
        (Some(_), false) => "an image that is not inserted".to_owned(),
        (None, true) => "inserted media without an image".to_owned(),
        (None, false) => "no media".to_owned(),
    }
}

/// A JSON array of strings (other items skipped); empty when absent.
fn strings(value: &Json) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(Json::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn link(value: &Json) -> Option<String> {
    value["@odata.id"].as_str().map(str::to_owned)
}

fn members(collection: &Json) -> Vec<String> {
    collection["Members"]
        .as_array()
        .map(|m| m.iter().filter_map(link).collect())
        .unwrap_or_default()
}

/// reqwest's error with its sources ("error sending request: connection refused").
fn error_chain(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_urls_of_one_image_are_the_same_image() {
        let a = "http://c:8080/media/tasks/j/task.iso?expires=1&signature=aa";
        let b = "http://c:8080/media/tasks/j/task.iso?expires=2&signature=bb";
        assert!(same_image(a, b));
        assert!(!same_image(
            a,
            "http://c:8080/media/tasks/k/task.iso?expires=1"
        ));
        let state = MediaState {
            slot: "Cd".into(),
            inserted: true,
            image: Some(a.into()),
        };
        assert!(state.holds(b));
        assert!(
            !MediaState {
                inserted: false,
                ..state.clone()
            }
            .holds(b)
        );
    }

    #[test]
    fn addresses_become_base_urls() {
        let creds = PowerCredentials {
            user: "root".into(),
            pass: "calvin".into(),
        };
        let e = Endpoint::new("10.0.0.5", creds.clone()).unwrap();
        assert_eq!(e.base.as_str(), "https://10.0.0.5/");
        assert_eq!(e.display(), "10.0.0.5");
        let e = Endpoint::new("http://127.0.0.1:8000/redfish/v1", creds.clone()).unwrap();
        assert_eq!(e.base.as_str(), "http://127.0.0.1:8000/");
        assert_eq!(e.display(), "127.0.0.1:8000");
        assert!(Endpoint::new("http://[bad", creds).is_err());
    }
}
