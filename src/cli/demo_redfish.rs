//! The Redfish side of `metalform demo` (issue 14 §8): a few servers installed by the Redfish
//! provisioner (seed 003) next to the MAAS nodes — simulated BMCs of mixed vendors whose
//! maintenance OS reports to an in-process provisioning controller, and a node manifest per
//! server that chooses the Redfish provisioner with a recipe. `plan` shows their provision
//! actions, `apply` queues the jobs, the controller's workers run them to `complete`.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::CliError;
use crate::api::Tokens;
use crate::apply::NoProgress;
use crate::daemon::provisioner::{Controller, ControllerListen, ControllerOptions};
use crate::lifecycle::{JobKind, ProvisioningStatus};
use crate::provider::redfish::iso::IsoTool;
use crate::provider::redfish::settings::{ProvisionerSettings, RedfishSettings};
use crate::secrets::Secret;
use crate::sim::redfish::{self as rsim, RedfishSimConfig, RedfishSimHandle, WebhookTarget};
use crate::stages::provision::NoObserver;
use crate::store::{JobFilter, JobSpec, Store};

/// Where the demo's Redfish logins live in its dev secrets.
const CREDENTIALS: &str = "kv/demo/redfish-bmc";
const MAINTENANCE_PATH: &str = "/images/maintenance.iso";

/// The simulated BMCs, and the address the controller will listen on (the maintenance OS
/// reports there, and BMCs fetch task ISOs and the maintenance image from it).
pub(super) struct RedfishDemo {
    sims: RedfishSimHandle,
    listen: SocketAddr,
    /// The controller's listener, bound from the start so no other process takes its port.
    bound: std::sync::Mutex<Option<std::net::TcpListener>>,
    webhook_secret: Secret,
}

impl RedfishDemo {
    /// Start `count` simulated BMCs (vendors in turn) and write a Redfish node manifest for
    /// each into `fleet_dir/nodes/SITE/`.
    pub(super) async fn start(
        fleet_dir: &Path,
        site: &str,
        count: usize,
        time_scale: f64,
    ) -> Result<RedfishDemo, CliError> {
        // The controller needs the store the demo opens later; its listener is bound now so
        // the BMCs' maintenance OS knows where to report.
        let (bound, listen) = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|bound| {
                let listen = bound.local_addr()?;
                Ok((bound, listen))
            })
            .map_err(|e| CliError::unexpected(format!("no free local port: {e}")))?;
        let base = url::Url::parse(&format!("http://{listen}/")).expect("an address is a URL");
        let webhook_secret = Secret::new(random_token());
        let mut config = RedfishSimConfig::generated(count, None);
        config.time_scale = time_scale;
        config.webhook = Some(WebhookTarget {
            base: base.clone(),
            secret: webhook_secret.clone(),
        });
        let sims = rsim::start(config).await.map_err(|e| {
            CliError::unexpected(format!("the simulated Redfish BMCs did not start: {e}"))
        })?;
        for (index, bmc) in sims.bmcs.iter().enumerate() {
            let hostname = format!("rf{:02}", index + 1);
            let manifest = format!(
                "# A server installed over its BMC's virtual media by metalform's Redfish provisioner.\n\
                 apiVersion: metalform/v1\nkind: Node\nmetadata:\n  name: {hostname}\nspec:\n  site: {site}\n  \
                 sku: h100.80g.8gpu\n  gpus: 8\n  bmc: {{ipmiIp: 10.176.99.{ip}}}\n  provisioner:\n    \
                 type: redfish\n    serial: {serial}\n    redfishUrl: {url}\n    vendor: {vendor}\n    \
                 credentials: {{vault: {CREDENTIALS}}}\n    maintenanceIsoUrl: {base}{maintenance}\n    \
                 recipe:\n      task_target: install-linux.target\n      target_disk: /dev/sda\n      \
                 oci_url: registry.demo.internal/os-images/ubuntu-rootfs:22.04\n      \
                 partition_layout:\n        - {{size: 512M, type_guid: ef00, format: vfat}}\n        \
                 - {{size: 100%, type_guid: \"8300\", format: ext4}}\n",
                ip = 10 + index,
                serial = bmc.serial,
                url = bmc.url,
                vendor = bmc.vendor.as_str(),
                maintenance = MAINTENANCE_PATH.trim_start_matches('/'),
            );
            let path = fleet_dir
                .join("nodes")
                .join(site)
                .join(format!("{hostname}.yaml"));
            std::fs::create_dir_all(path.parent().expect("a parent"))?;
            std::fs::write(&path, manifest)
                .map_err(|e| CliError::user(format!("{}: {e}", path.display())))?;
        }
        Ok(RedfishDemo {
            sims,
            listen,
            bound: std::sync::Mutex::new(Some(bound)),
            webhook_secret,
        })
    }

    pub(super) fn describe(&self) -> String {
        let vendors: Vec<&str> = self.sims.bmcs.iter().map(|b| b.vendor.as_str()).collect();
        format!(
            "{} simulated Redfish BMCs ({}); their maintenance OS reports to http://{}/",
            self.sims.bmcs.len(),
            vendors.join(", "),
            self.listen
        )
    }

    /// The dev secret the Redfish nodes' `credentials` name.
    pub(super) fn secrets(&self) -> (String, serde_json::Value) {
        (
            CREDENTIALS.to_owned(),
            serde_json::json!({"user": rsim::DEFAULT_USER, "pass": rsim::DEFAULT_PASSWORD}),
        )
    }

    /// The provisioning controller over the demo's store: workers, webhook, task ISOs (the
    /// built-in writer: no package needed) and the maintenance image.
    pub(super) async fn controller(
        &self,
        store: Store,
        secrets_url: &str,
        data_dir: &Path,
    ) -> Result<Controller, CliError> {
        let secrets = crate::secrets::open(secrets_url)
            .map_err(|e| CliError::unexpected(format!("the demo secrets: {e}")))?;
        let maintenance = format!("http://{}{MAINTENANCE_PATH}", self.listen);
        let mut settings = ProvisionerSettings::new(maintenance, data_dir);
        settings.iso_tool = IsoTool::Builtin;
        settings.poll_interval = Duration::from_millis(100);
        settings.lease_ttl = Duration::from_secs(15);
        settings.cleanup_timeout = Duration::from_secs(60);
        let image = crate::provider::redfish::iso9660::write_image(
            [("README.TXT", &b"metalform demo maintenance OS\n"[..])],
            "MFMAINT",
            "metalform",
        );
        let extra = axum::Router::new().route(
            MAINTENANCE_PATH,
            axum::routing::get(move || {
                let image = image.clone();
                async move { image }
            }),
        );
        let listen = match self.bound.lock().expect("lock").take() {
            Some(bound) => ControllerListen::Bound(bound),
            None => ControllerListen::Address(self.listen),
        };
        Controller::start(ControllerOptions {
            store,
            secrets,
            settings,
            redfish: RedfishSettings {
                base_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(2),
                reset_grace: Duration::from_secs(30),
                poll_interval: Duration::from_millis(100),
                ..RedfishSettings::default()
            },
            tokens: Tokens::new(&[]),
            webhook_secret: self.webhook_secret.clone(),
            media_key: Secret::new(random_token()),
            listen,
            extra: Some(extra),
            holder: "demo".into(),
            observer: Arc::new(NoObserver),
            progress: Arc::new(NoProgress),
            run_workers: true,
        })
        .await
        .map_err(|e| {
            CliError::unexpected(format!(
                "the provisioning controller did not start on {}: {e}",
                self.listen
            ))
        })
    }
}

/// Wait until every provisioning job has finished its cleanup, or `limit`; then one row per
/// job: serial, hostname, status, failed step, last event.
pub(super) async fn finished_rows(
    store: &Store,
    limit: Duration,
) -> Result<Vec<Vec<String>>, CliError> {
    let started = Instant::now();
    loop {
        let jobs = store
            .list_jobs(JobKind::Provisioning, &JobFilter::default())
            .await
            .map_err(super::world::store_error)?;
        let done = jobs
            .iter()
            .all(|j| j.provisioning_status() == Some(ProvisioningStatus::Complete));
        if done || started.elapsed() >= limit {
            let mut rows: Vec<Vec<String>> = jobs
                .iter()
                .map(|j| {
                    let (serial, failed) = match &j.spec {
                        JobSpec::Provisioning {
                            server_serial,
                            failed_step,
                            ..
                        } => (server_serial.clone(), failed_step.clone()),
                        _ => (String::new(), None),
                    };
                    vec![
                        j.site.clone(),
                        j.hostname.clone(),
                        serial,
                        j.provisioning_status()
                            .map(|s| s.to_string())
                            .unwrap_or_else(|| "-".into()),
                        failed.unwrap_or_else(|| "-".into()),
                    ]
                })
                .collect();
            rows.sort();
            return Ok(rows);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn random_token() -> String {
    hex::encode(rand::random::<[u8; 24]>())
}
