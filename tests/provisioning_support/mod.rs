//! A Redfish provisioning bed: a SQLite (or given) store, file secrets holding the BMC login,
//! a maintenance image on loopback, a standalone controller (jobs API, webhook, task ISOs,
//! workers) and simulated BMCs whose maintenance OS reports to it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metalform::api::{ApiToken, TokenRole, Tokens};
use metalform::apply::NoProgress;
use metalform::clock::SystemClock;
use metalform::daemon::provisioner::{Controller, ControllerListen, ControllerOptions};
use metalform::lifecycle::{JobKind, ProvisioningStatus};
use metalform::provider::redfish::iso::IsoTool;
use metalform::provider::redfish::profile::Vendor;
use metalform::provider::redfish::settings::{ProvisionerSettings, RedfishSettings};
use metalform::secrets::{Secret, SecretRef, SecretStore};
use metalform::sim::redfish::{self as rsim, RedfishSimConfig, RedfishSimHandle, WebhookTarget};
use metalform::stages::provision::ProvisioningObserver;
use metalform::store::{Job, Server, Store};
use serde_json::{Value, json};

pub const TOKEN: &str = "test-admin-token-0123456789";
pub const AGENT_TOKEN: &str = "test-agent-token-0123456789";
pub const WEBHOOK_SECRET: &str = "test-webhook-secret-0123";
pub const MEDIA_KEY: &str = "test-media-url-key-0123456789abcdef";
pub const CREDENTIALS: &str = "kv/bmc/sim";

/// What the observer saw (the seed's metrics, counted).
#[derive(Debug, Default)]
pub struct Recorder {
    pub statuses: Mutex<Vec<ProvisioningStatus>>,
    pub finished: Mutex<Vec<(ProvisioningStatus, f64)>>,
    pub requests: Mutex<Vec<(&'static str, f64)>>,
    pub isos: Mutex<Vec<(f64, u64)>>,
    pub latencies: Mutex<Vec<f64>>,
}

impl ProvisioningObserver for Recorder {
    fn status(&self, status: ProvisioningStatus) {
        self.statuses.lock().unwrap().push(status);
    }
    fn finished(&self, outcome: ProvisioningStatus, seconds: f64) {
        self.finished.lock().unwrap().push((outcome, seconds));
    }
    fn redfish_request(&self, op: &'static str, seconds: f64) {
        self.requests.lock().unwrap().push((op, seconds));
    }
    fn iso_built(&self, seconds: f64, bytes: u64) {
        self.isos.lock().unwrap().push((seconds, bytes));
    }
    fn webhook_latency(&self, seconds: f64) {
        self.latencies.lock().unwrap().push(seconds);
    }
}

/// How to build a bed.
#[derive(Clone)]
pub struct Options {
    pub bmcs: usize,
    pub vendor: Option<Vendor>,
    pub lease_ttl: Duration,
    pub stuck_timeout: Duration,
    pub cleanup_timeout: Duration,
    pub iso_tool: IsoTool,
    pub xorriso: Option<std::path::PathBuf>,
    pub run_workers: bool,
    pub state_url: Option<String>,
    pub concurrency: usize,
    /// Simulated seconds per real second.
    pub time_scale: f64,
    /// More entries of the file secret store (path → {user, pass}).
    pub secrets: Vec<(String, Value)>,
    /// Client settings for the BMCs.
    pub redfish: RedfishSettings,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            bmcs: 1,
            vendor: Some(Vendor::Dell),
            lease_ttl: Duration::from_secs(3),
            stuck_timeout: Duration::from_secs(60),
            cleanup_timeout: Duration::from_secs(20),
            iso_tool: IsoTool::Builtin,
            xorriso: None,
            run_workers: true,
            state_url: None,
            concurrency: 8,
            time_scale: 100.0,
            secrets: Vec::new(),
            redfish: fast_redfish(),
        }
    }
}

pub struct Bed {
    pub dir: tempfile::TempDir,
    pub store: Store,
    pub state_url: String,
    pub secrets: Arc<dyn SecretStore>,
    pub controller: Option<Controller>,
    pub sims: RedfishSimHandle,
    pub maintenance_url: String,
    pub recorder: Arc<Recorder>,
    pub options: Options,
    pub http: reqwest::Client,
}

/// Client settings for simulated BMCs running 100× faster than real ones.
pub fn fast_redfish() -> RedfishSettings {
    RedfishSettings {
        timeout: Duration::from_secs(5),
        retries: 8,
        base_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(200),
        reset_grace: Duration::from_secs(5),
        poll_interval: Duration::from_millis(20),
        settle_after_reset: Some(Duration::ZERO),
        insecure_tls: false,
    }
}

/// A tiny maintenance image served on loopback (BMCs download CD1 when it is inserted).
pub async fn serve_maintenance_image() -> String {
    let image = metalform::provider::redfish::iso9660::write_image(
        [("README.TXT", &b"metalform test maintenance OS\n"[..])],
        "MFMAINT",
        "metalform",
    );
    let app = axum::Router::new().route(
        "/images/maintenance.iso",
        axum::routing::get(move || {
            let image = image.clone();
            async move { image }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}/images/maintenance.iso")
}

pub fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

impl Bed {
    pub async fn start(options: Options) -> Bed {
        let dir = tempfile::tempdir().unwrap();
        let state_url = options
            .state_url
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}", dir.path().join("state.db").display()));
        let store = Store::open(&state_url, Arc::new(SystemClock))
            .await
            .unwrap();
        let secrets_path = dir.path().join("secrets.json");
        let mut entries =
            json!({CREDENTIALS: {"user": rsim::DEFAULT_USER, "pass": rsim::DEFAULT_PASSWORD}});
        for (path, value) in &options.secrets {
            entries[path] = value.clone();
        }
        std::fs::write(&secrets_path, entries.to_string()).unwrap();
        let secrets =
            metalform::secrets::open(&format!("file://{}", secrets_path.display())).unwrap();
        let maintenance_url = serve_maintenance_image().await;
        let recorder = Arc::new(Recorder::default());
        let mut bed = Bed {
            dir,
            store,
            state_url,
            secrets,
            controller: None,
            // Replaced below, once the controller's URL is known.
            sims: rsim::start(RedfishSimConfig::default()).await.unwrap(),
            maintenance_url,
            recorder,
            options: options.clone(),
            http: http(),
        };
        let controller = bed
            .controller("worker-a", "127.0.0.1:0".parse().unwrap())
            .await;
        let mut config = RedfishSimConfig::generated(options.bmcs, options.vendor);
        config.time_scale = options.time_scale;
        config.webhook = Some(WebhookTarget {
            base: controller.url.clone(),
            secret: Secret::new(WEBHOOK_SECRET),
        });
        bed.sims = rsim::start(config).await.unwrap();
        bed.controller = Some(controller);
        let servers: Vec<Server> = bed
            .sims
            .bmcs
            .iter()
            .map(|b| Server {
                serial: b.serial.clone(),
                bmc_address: b.url.clone(),
                credentials: SecretRef::new(CREDENTIALS, None),
                vendor: Some(b.vendor.as_str().into()),
                last_seen: None,
                site: "dc1".into(),
                hostname: format!("rf{}", b.serial.to_lowercase()),
            })
            .collect();
        bed.store.upsert_servers(&servers).await.unwrap();
        bed
    }

    /// A controller over the bed's store (another worker, or a restarted one).
    pub async fn controller(&self, holder: &str, listen: SocketAddr) -> Controller {
        self.try_controller(holder, listen).await.unwrap()
    }

    /// [`Bed::controller`], or why its address cannot be bound (yet).
    pub async fn try_controller(
        &self,
        holder: &str,
        listen: SocketAddr,
    ) -> std::io::Result<Controller> {
        let mut settings = ProvisionerSettings::new(&self.maintenance_url, self.dir.path());
        settings.iso_tool = self.options.iso_tool;
        if let Some(xorriso) = &self.options.xorriso {
            settings.xorriso = xorriso.clone();
        }
        settings.poll_interval = Duration::from_millis(50);
        settings.lease_ttl = self.options.lease_ttl;
        settings.stuck_timeout = self.options.stuck_timeout;
        settings.cleanup_timeout = self.options.cleanup_timeout;
        settings.worker_concurrency = self.options.concurrency;
        Controller::start(ControllerOptions {
            store: self.store.clone(),
            secrets: self.secrets.clone(),
            settings,
            redfish: self.options.redfish.clone(),
            tokens: Tokens::new(&[
                ApiToken {
                    name: "ops".into(),
                    role: TokenRole::Admin,
                    value: Secret::new(TOKEN),
                },
                ApiToken {
                    name: "agents".into(),
                    role: TokenRole::Agent,
                    value: Secret::new(AGENT_TOKEN),
                },
            ]),
            webhook_secret: Secret::new(WEBHOOK_SECRET),
            media_key: Secret::new(MEDIA_KEY),
            listen: ControllerListen::Address(listen),
            extra: None,
            holder: holder.into(),
            observer: self.recorder.clone(),
            progress: Arc::new(NoProgress),
            run_workers: self.options.run_workers,
        })
        .await
    }

    /// kill -9 of the controller (no stage boundary, no lease released) and a new one, as
    /// `holder`, on the same address (where BMCs fetch task ISOs and the maintenance OS
    /// reports).
    pub async fn restart_controller(&mut self, holder: &str) {
        let first = self.controller.take().expect("a running controller");
        let addr: SocketAddr = format!(
            "{}:{}",
            first.url.host_str().unwrap(),
            first.url.port().unwrap()
        )
        .parse()
        .unwrap();
        first.abort();
        // The aborted server task lets go of its socket when the runtime drops it.
        for _ in 0..100 {
            match self.try_controller(holder, addr).await {
                Ok(controller) => {
                    self.controller = Some(controller);
                    return;
                }
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                Err(e) => panic!("{e}"),
            }
        }
        panic!("{addr} was never free again");
    }

    pub fn controller_url(&self) -> url::Url {
        self.controller.as_ref().unwrap().url.clone()
    }

    pub fn serial(&self, i: usize) -> String {
        self.sims.bmcs[i].serial.clone()
    }

    /// `POST /api/v1/jobs` with the admin token.
    pub async fn post_job(&self, serial: &str, recipe: Value) -> (u16, Value) {
        self.call(
            reqwest::Method::POST,
            "api/v1/jobs",
            Some(json!({"server_serial": serial, "recipe": recipe})),
        )
        .await
    }

    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let url = self.controller_url().join(path).unwrap();
        let mut request = self.http.request(method, url).bearer_auth(TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// `POST /api/v1/status-webhook/{serial}` as the maintenance OS: (status, body).
    pub async fn report(&self, serial: &str, body: Value) -> (u16, Value) {
        let response = self
            .http
            .post(
                self.controller_url()
                    .join(&format!("api/v1/status-webhook/{serial}"))
                    .unwrap(),
            )
            .header("X-Webhook-Secret", WEBHOOK_SECRET)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn job(&self, id: &str) -> Job {
        self.store
            .job(JobKind::Provisioning, id.parse().unwrap())
            .await
            .unwrap()
    }

    /// Wait until the job is complete (its cleanup done), or panic after `limit`.
    pub async fn complete(&self, id: &str, limit: Duration) -> Job {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let job = self.job(id).await;
            if job.provisioning_status() == Some(ProvisioningStatus::Complete) {
                return job;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "job {id} is still {:?} at {} after {limit:?}: {:#?}",
                job.provisioning_status(),
                job.stage,
                self.events(id).await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Wait until the job's journal reaches `stage`.
    pub async fn at_stage(&self, id: &str, stage: &str, limit: Duration) -> Job {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let job = self.job(id).await;
            if job.stage == stage {
                return job;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "job {id} never reached {stage} (at {})",
                job.stage
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The job's events as `level message`.
    pub async fn events(&self, id: &str) -> Vec<String> {
        self.store
            .provisioning_events(id.parse().unwrap(), 1000)
            .await
            .unwrap()
            .into_iter()
            .map(|e| format!("{} {}", e.level, e.message))
            .collect()
    }

    /// The BMC's requests of one kind: (method, path suffix).
    pub fn count(&self, serial: &str, method: &str, path_ends: &str) -> usize {
        self.sims
            .requests(serial)
            .iter()
            .filter(|r| r.method == method && r.path.ends_with(path_ends) && r.status < 300)
            .count()
    }

    /// Successful virtual media inserts and ejects, and resets, on a BMC.
    pub fn media_calls(&self, serial: &str) -> (usize, usize, usize) {
        (
            self.count(serial, "POST", "VirtualMedia.InsertMedia"),
            self.count(serial, "POST", "VirtualMedia.EjectMedia"),
            self.count(serial, "POST", "ComputerSystem.Reset"),
        )
    }
}

/// A valid recipe.
pub fn recipe() -> Value {
    json!({
        "task_target": "install-linux.target",
        "target_disk": "/dev/sda",
        "oci_url": "controller.internal:8080/os-images/ubuntu-rootfs:22.04",
        "user_data": "I2Nsb3VkLWNvbmZpZwo=",
        "partition_layout": [
            {"size": "512M", "type_guid": "ef00", "format": "vfat"},
            {"size": "100%", "type_guid": "8300", "format": "ext4"}
        ]
    })
}
