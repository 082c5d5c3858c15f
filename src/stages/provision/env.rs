//! What the provisioning stages use besides the shared [`crate::stages::StageEnv`]: the
//! provisioner's settings, the task ISO builder and its backpressure, the media store and the
//! URL signer, the Redfish client settings, and the observer the seed's metrics are counted
//! through (seed 003 "Observability").

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::lifecycle::ProvisioningStatus;
use crate::provider::redfish::client::{Endpoint, RedfishClient, SystemSelector};
use crate::provider::redfish::error::RedfishError;
use crate::provider::redfish::iso::{BuiltIso, IsoBuilder, IsoError, IsoTool, TaskIsoContents};
use crate::provider::redfish::media::{MediaStore, UrlSigner};
use crate::provider::redfish::profile::Vendor;
use crate::provider::redfish::settings::{ProvisionerSettings, RedfishSettings};
use crate::secrets::{Secret, SecretStore};
use crate::store::Server;

/// Where the seed's metrics are counted (the daemon's registry; nothing in tests).
pub trait ProvisioningObserver: Send + Sync {
    /// A job entered `status` (`job_total{status}`).
    fn status(&self, _status: ProvisioningStatus) {}
    /// A job completed after `seconds`, its outcome succeeded or failed
    /// (`job_duration_seconds{outcome}`).
    fn finished(&self, _outcome: ProvisioningStatus, _seconds: f64) {}
    /// One Redfish request (`redfish_request_duration_seconds{op}`).
    fn redfish_request(&self, _op: &'static str, _seconds: f64) {}
    /// One task ISO built (`iso_build_duration_seconds`, `iso_size_bytes`).
    fn iso_built(&self, _seconds: f64, _bytes: u64) {}
    /// From provisioning to the maintenance OS's report (`webhook_latency_seconds`).
    fn webhook_latency(&self, _seconds: f64) {}
}

/// Counts nothing.
#[derive(Debug, Default)]
pub struct NoObserver;

impl ProvisioningObserver for NoObserver {}

/// One build in the queue, counted until dropped (also when the build's future is dropped).
struct Queued<'a>(&'a AtomicUsize);

impl<'a> Queued<'a> {
    fn enter(queue: &'a AtomicUsize) -> Self {
        queue.fetch_add(1, Ordering::SeqCst);
        Self(queue)
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The provisioner's services, shared by every job's run.
pub struct Provisioner {
    pub settings: ProvisionerSettings,
    pub redfish: RedfishSettings,
    pub media: MediaStore,
    signer: UrlSigner,
    media_base: url::Url,
    builder: IsoBuilder,
    builds: tokio::sync::Semaphore,
    /// Builds running or waiting for a slot.
    build_queue: AtomicUsize,
    pub observer: Arc<dyn ProvisioningObserver>,
}

impl std::fmt::Debug for Provisioner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provisioner")
            .field("media_base", &self.media_base.as_str())
            .field("task_iso_dir", &self.settings.task_iso_dir)
            .finish_non_exhaustive()
    }
}

impl Provisioner {
    /// `media_base`: the controller's URL as BMCs reach it (`settings.media_base_url` when
    /// set); `media_key`: the HMAC key of the signed task ISO URLs.
    pub fn new(
        settings: ProvisionerSettings,
        redfish: RedfishSettings,
        media_base: url::Url,
        media_key: Secret,
        observer: Arc<dyn ProvisioningObserver>,
    ) -> Self {
        let builder = match settings.iso_tool {
            IsoTool::Xorriso => IsoBuilder::new(&settings.xorriso),
            IsoTool::Builtin => IsoBuilder::builtin(),
        };
        Self {
            media: MediaStore::new(&settings.task_iso_dir),
            signer: UrlSigner::new(media_key),
            media_base: settings.media_base_url.clone().unwrap_or(media_base),
            builds: tokio::sync::Semaphore::new(settings.iso_builds.max(1)),
            build_queue: AtomicUsize::new(0),
            builder,
            redfish,
            settings,
            observer,
        }
    }

    pub fn signer(&self) -> &UrlSigner {
        &self.signer
    }

    /// The URL a BMC mounts the job's task ISO from, valid until `expires`.
    pub fn task_iso_url(&self, job: Uuid, expires: DateTime<Utc>) -> url::Url {
        self.signer.signed_url(&self.media_base, job, expires)
    }

    /// Builds the task ISO, at most `ISO_BUILD_CONCURRENCY` at once.
    pub async fn build_iso(
        &self,
        contents: &TaskIsoContents,
        output: &std::path::Path,
    ) -> Result<BuiltIso, IsoError> {
        let _queued = Queued::enter(&self.build_queue);
        let _slot = self.builds.acquire().await.ok();
        self.builder.build(contents, output).await
    }

    /// Builds waiting or running.
    pub fn build_queue(&self) -> usize {
        self.build_queue.load(Ordering::SeqCst)
    }

    /// Backpressure (seed 003 "throttle picking when … the ISO builder queue is high"): how
    /// many queued jobs may be picked now.
    pub fn pick_allowance(&self) -> usize {
        self.settings
            .iso_queue_limit
            .saturating_sub(self.build_queue())
    }

    /// The signed URL of a task ISO must outlive the job: the stuck timeout, the cleanup and a
    /// margin, from when the job started.
    pub fn media_expiry(&self, started: DateTime<Utc>) -> DateTime<Utc> {
        let span = self.settings.stuck_timeout
            + self.settings.cleanup_timeout * 2
            + Duration::from_secs(3600);
        started + chrono::Duration::from_std(span).unwrap_or(chrono::Duration::days(1))
    }

    /// A client for the server's BMC (the login read from the secret store now) and which of
    /// its systems is the server: the one whose `SerialNumber` is the serial, or the one an
    /// address ending in `/redfish/v1/Systems/ID` names.
    pub async fn client(
        &self,
        server: &Server,
        secrets: &dyn SecretStore,
    ) -> Result<(RedfishClient, SystemSelector), RedfishError> {
        let (address, selector) = match server.bmc_address.split_once("/redfish/v1/Systems/") {
            Some((base, id)) if !id.trim_matches('/').is_empty() => (
                base.to_owned(),
                SystemSelector::Id(id.trim_matches('/').to_owned()),
            ),
            _ => (
                server.bmc_address.clone(),
                SystemSelector::Serial(server.serial.clone()),
            ),
        };
        let endpoint = Endpoint::from_secrets(&address, secrets, &server.credentials).await?;
        let observer = self.observer.clone();
        let client = RedfishClient::new(endpoint, self.redfish.clone())
            .with_vendor(server.vendor.as_deref().and_then(Vendor::parse))
            .with_observer(move |record| {
                observer.redfish_request(record.op, record.duration.as_secs_f64())
            });
        Ok((client, selector))
    }
}
