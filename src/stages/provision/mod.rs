//! Redfish provisioning stages (seed 003 "Worker Orchestration Flow" 2–5, "Idempotency and
//! Recovery", "Error Handling and Retries"; 028 Redfish operations): one idempotent
//! `ensure_*` per stage of [`ProvisioningStage`].
//!
//! Every Redfish step reads before it writes (the client's `Change::Unchanged` becomes a
//! skipped stage: "already mounted"), so a worker that takes a job over after a restart
//! verifies what is there instead of doing it again. The two steps that must not be repeated
//! blindly — the host reset that starts the maintenance OS and the cleanup reboot — write
//! their intent to the journal first; a worker that finds the intent does not reset again (if
//! the reset never happened, the maintenance OS never reports and the stuck timeout fails the
//! job, which is then cleaned up). Cleanup is best effort: what does not work is a warning in
//! the job's events, and the job still completes.

mod env;

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

pub use env::{NoObserver, Provisioner, ProvisioningObserver};

use super::{
    Checkpoint, JournalFacts, Next, StageClock, StageDone, StageEnv, StageFailure, StageOutcome,
    checkpoint,
};
use crate::lifecycle::{FailureClass, ProvisioningStage, ProvisioningStatus};
use crate::provider::redfish::client::{
    Change, Discovery, Drive, MediaState, RedfishClient, ResetOutcome, same_image,
};
use crate::provider::redfish::error::RedfishError;
use crate::provider::redfish::iso::{IsoError, TaskIsoContents};
use crate::provider::redfish::recipe;
use crate::store::{Fence, Job, note};

/// The task ISO a job built.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IsoFacts {
    pub size: u64,
    pub sha256: String,
}

/// What the provisioning journal keeps between stages and across restarts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProvisionFacts {
    #[serde(default)]
    pub clock: Option<StageClock>,
    #[serde(default)]
    pub retries: u32,
    #[serde(default)]
    pub iso: Option<IsoFacts>,
    /// When CD2's signed URL expires.
    #[serde(default)]
    pub media_expires: Option<DateTime<Utc>>,
    /// A host reset was requested (written before the request).
    #[serde(default)]
    pub reset_requested_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub reset_outcome: Option<String>,
    /// The cleanup reboot was requested (written before the request).
    #[serde(default)]
    pub reboot_requested_at: Option<DateTime<Utc>>,
    /// The outcome cleanup started from (succeeded or failed).
    #[serde(default)]
    pub outcome: Option<ProvisioningStatus>,
    /// What cleanup could not do.
    #[serde(default)]
    pub warnings: Vec<String>,
}

impl JournalFacts for ProvisionFacts {
    fn from_details(details: &serde_json::Value) -> Self {
        serde_json::from_value(details.clone()).unwrap_or_default()
    }

    fn to_details(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }

    fn clock(&mut self) -> &mut Option<StageClock> {
        &mut self.clock
    }

    fn retries(&mut self) -> &mut u32 {
        &mut self.retries
    }

    fn operator_moved(&mut self, _from_top: bool) {
        self.retries = 0;
    }

    fn node_id(&self) -> Option<Uuid> {
        None
    }

    fn system_id(&self) -> Option<String> {
        None
    }
}

/// The BMC as one run of a job found it: its client and what discovery found.
pub struct BmcSession {
    pub client: RedfishClient,
    pub discovery: Discovery,
    /// This run checked the mounted media (once per run, on the first wait for the report).
    pub verified: bool,
}

/// The run's open BMC session, locked.
struct Bmc<'a>(tokio::sync::MutexGuard<'a, Option<BmcSession>>);

impl std::ops::Deref for Bmc<'_> {
    type Target = BmcSession;
    fn deref(&self) -> &BmcSession {
        self.0.as_ref().expect("a session is open while locked")
    }
}

impl std::ops::DerefMut for Bmc<'_> {
    fn deref_mut(&mut self) -> &mut BmcSession {
        self.0.as_mut().expect("a session is open while locked")
    }
}

/// One pass of a provisioning stage.
pub struct ProvisionCtx<'a> {
    pub env: &'a StageEnv,
    pub provisioner: &'a Provisioner,
    pub job: &'a Job,
    pub facts: &'a mut ProvisionFacts,
    pub journal: &'a dyn Checkpoint<ProvisionFacts>,
    pub fence: Fence,
    pub now: DateTime<Utc>,
    /// This run's BMC session, opened by the first stage that needs it.
    pub session: &'a tokio::sync::Mutex<Option<BmcSession>>,
}

impl ProvisionCtx<'_> {
    fn status(&self) -> ProvisioningStatus {
        self.job
            .provisioning_status()
            .unwrap_or(ProvisioningStatus::Provisioning)
    }

    fn serial(&self) -> &str {
        self.job.server_serial().unwrap_or_default()
    }

    /// The BMC session, opened now if this run has none (the login read at use time).
    async fn bmc(&self) -> Result<Bmc<'_>, StageFailure> {
        let mut guard = self.session.lock().await;
        if guard.is_none() {
            let server = self
                .env
                .store
                .server(self.serial())
                .await
                .map_err(|e| StageFailure::store(&e))?;
            let (client, selector) = self
                .provisioner
                .client(&server, self.env.secrets.as_ref())
                .await
                .map_err(|e| redfish_failure(&e))?;
            let discovery = client
                .discover(&selector)
                .await
                .map_err(|e| redfish_failure(&e))?;
            // Best effort: a missing `last_seen` is no reason to stop.
            let _ = self.env.store.mark_server_seen(&server.serial).await;
            *guard = Some(BmcSession {
                client,
                discovery,
                verified: false,
            });
        }
        Ok(Bmc(guard))
    }

    /// Add a note to the job's events (a warning of cleanup, a re-mount).
    async fn note(&self, level: &str, message: String) {
        let event = note(None, message, json!({"level": level}));
        let _ = self
            .env
            .store
            .provisioning_note(self.job.id, &event, Some(&self.fence))
            .await;
    }
}

/// A Redfish error, classified once: transient ones are retried (the client already retried
/// each request), refusals and protocol trouble end the stage.
pub fn redfish_failure(err: &RedfishError) -> StageFailure {
    let (class, code) = match err {
        RedfishError::Transient { .. } => (FailureClass::UpstreamTransient, "redfish_unavailable"),
        RedfishError::Credentials {
            transient: true, ..
        } => (FailureClass::UpstreamTransient, "secrets_unavailable"),
        RedfishError::Credentials { .. } => (FailureClass::InputConfigError, "bmc_login_unusable"),
        RedfishError::Refused {
            status: 401 | 403, ..
        } => (FailureClass::InputConfigError, "bmc_login_refused"),
        RedfishError::Refused { .. } => (FailureClass::BmcPowerFailure, "redfish_refused"),
        RedfishError::Protocol { .. } => (FailureClass::SiteCapabilityMissing, "redfish_protocol"),
        RedfishError::Unsupported { .. } => {
            (FailureClass::SiteCapabilityMissing, "bmc_unsupported")
        }
    };
    let failure = StageFailure::new(class, code, err.to_string())
        .details(json!({"hint": err.hint(), "http_status": err.status()}));
    if err.is_transient() {
        failure
    } else {
        failure.never_retry()
    }
}

fn iso_failure(err: &IsoError) -> StageFailure {
    let class = match err {
        IsoError::ToolMissing { .. } => FailureClass::SiteCapabilityMissing,
        IsoError::Contents(_) | IsoError::ToolFailed { .. } => FailureClass::InputConfigError,
        IsoError::Timeout(_) | IsoError::Io { .. } => FailureClass::UpstreamTransient,
    };
    let failure = StageFailure::new(class, "iso_build_failed", err.to_string())
        .details(json!({"hint": err.hint()}));
    if err.is_terminal() {
        failure.never_retry()
    } else {
        failure
    }
}

fn done(message: impl Into<String>, details: serde_json::Value) -> StageOutcome {
    StageOutcome::done(message, details)
}

fn skipped(message: impl Into<String>) -> StageOutcome {
    StageOutcome::skipped(message)
}

/// One pass of `stage`.
pub async fn run_stage(stage: ProvisioningStage, ctx: &mut ProvisionCtx<'_>) -> StageOutcome {
    use ProvisioningStage as S;
    // An outcome that came while a provisioning step was still due (the report was early, a
    // worker restarted after the controller failed the job) leads straight to cleanup.
    if !stage.is_cleanup() && ctx.status().has_outcome() {
        return StageOutcome::Done(StageDone {
            message: format!("the job is {} already: cleanup", ctx.status()),
            details: json!({}),
            next: Next::Jump(S::cleanup().as_str()),
            skipped: true,
        });
    }
    let result = match stage {
        S::BuildTaskIso => ensure_task_iso(ctx).await,
        S::PrepareMedia => ensure_media_free(ctx).await,
        S::MountMaintenance => ensure_mounted(ctx, Drive::Maintenance).await,
        S::MountTask => ensure_mounted(ctx, Drive::Task).await,
        S::BootFromCd => ensure_boot_from_cd(ctx).await,
        S::ResetHost => ensure_reset(ctx).await,
        S::AwaitWebhook => ensure_reported(ctx).await,
        S::EjectMedia => Ok(ensure_ejected(ctx).await),
        S::RebootHost => Ok(ensure_rebooted(ctx).await),
    };
    result.unwrap_or_else(StageOutcome::from)
}

/// Build the task ISO (once: a job's image is reused when it is there with its recorded size).
async fn ensure_task_iso(ctx: &mut ProvisionCtx<'_>) -> Result<StageOutcome, StageFailure> {
    let provisioner = ctx.provisioner;
    let path = provisioner.media.iso_path(ctx.job.id);
    if let Some(iso) = ctx.facts.iso.clone() {
        let size = tokio::fs::metadata(&path).await.map(|m| m.len()).ok();
        if size == Some(iso.size) {
            return Ok(skipped(format!(
                "task ISO already built ({} bytes, sha256 {})",
                iso.size, iso.sha256
            )));
        }
    }
    let recipe = ctx
        .env
        .store
        .provisioning_recipe(ctx.job.id)
        .await
        .map_err(|e| StageFailure::store(&e))?;
    // Validated when the job was accepted; checked again in case the schema changed since.
    let version = recipe::validate(&recipe).map_err(|errors| {
        let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
        StageFailure::new(
            FailureClass::InputConfigError,
            "recipe_invalid",
            format!("the recipe is not valid: {}", list.join("; ")),
        )
        .never_retry()
    })?;
    let contents = TaskIsoContents::from_recipe(&recipe, version).map_err(|e| iso_failure(&e))?;
    let built = provisioner
        .build_iso(&contents, &path)
        .await
        .map_err(|e| iso_failure(&e))?;
    provisioner
        .observer
        .iso_built(built.duration.as_secs_f64(), built.size);
    ctx.facts.iso = Some(IsoFacts {
        size: built.size,
        sha256: built.sha256.clone(),
    });
    ctx.env
        .store
        .set_task_iso_path(ctx.job.id, &path.display().to_string(), &ctx.fence)
        .await
        .map_err(|e| StageFailure::store(&e))?;
    Ok(done(
        format!(
            "task ISO built: {} bytes, sha256 {}, in {} ms",
            built.size,
            built.sha256,
            built.duration.as_millis()
        ),
        json!({"size": built.size, "sha256": built.sha256, "build_ms": built.duration.as_millis() as u64}),
    ))
}

/// Whether `state` holds this job's image for `drive`.
fn ours(ctx: &ProvisionCtx<'_>, drive: Drive, state: &MediaState) -> bool {
    match (drive, &state.image) {
        (Drive::Maintenance, Some(image)) => {
            same_image(image, &ctx.provisioner.settings.maintenance_iso_url)
        }
        (Drive::Task, Some(image)) => image
            .split('?')
            .next()
            .is_some_and(|path| path.ends_with(&format!("/media/tasks/{}/task.iso", ctx.job.id))),
        (_, None) => false,
    }
}

/// Seed 003 "Ensure existing virtual media is unmounted or in a known state": images that are
/// not this job's are ejected from both drives.
async fn ensure_media_free(ctx: &mut ProvisionCtx<'_>) -> Result<StageOutcome, StageFailure> {
    let bmc = ctx.bmc().await?;
    let mut ejected = Vec::new();
    for drive in [Drive::Maintenance, Drive::Task] {
        let state = bmc
            .client
            .media_state(&bmc.discovery, drive)
            .await
            .map_err(|e| redfish_failure(&e))?;
        if state.inserted && !ours(ctx, drive, &state) {
            bmc.client
                .eject_media(&bmc.discovery, drive)
                .await
                .map_err(|e| redfish_failure(&e))?;
            ejected.push(drive.as_str());
        }
    }
    let vendor = bmc.discovery.vendor.as_str();
    Ok(if ejected.is_empty() {
        skipped(format!(
            "{} BMC ({vendor}): no foreign media in CD1 or CD2",
            bmc.client.endpoint().display()
        ))
    } else {
        done(
            format!("ejected stale media from {}", ejected.join(" and ")),
            json!({"ejected": ejected, "vendor": vendor}),
        )
    })
}

/// CD1 (the maintenance image) or CD2 (the task ISO, by a signed URL valid for the whole job).
async fn ensure_mounted(
    ctx: &mut ProvisionCtx<'_>,
    drive: Drive,
) -> Result<StageOutcome, StageFailure> {
    let url = match drive {
        Drive::Maintenance => ctx.provisioner.settings.maintenance_iso_url.clone(),
        Drive::Task => {
            let expires = match ctx.facts.media_expires {
                Some(expires) => expires,
                None => {
                    let started = ctx.job.started_at.unwrap_or(ctx.now);
                    let expires = ctx.provisioner.media_expiry(started);
                    ctx.facts.media_expires = Some(expires);
                    checkpoint(ctx.journal, ctx.facts).await?;
                    expires
                }
            };
            ctx.provisioner
                .task_iso_url(ctx.job.id, expires)
                .to_string()
        }
    };
    let bmc = ctx.bmc().await?;
    let change = bmc
        .client
        .insert_media(&bmc.discovery, drive, &url)
        .await
        .map_err(|e| redfish_failure(&e))?;
    // The signed URL is a credential: only its path is written down.
    let shown = url.split('?').next().unwrap_or_default().to_owned();
    Ok(match change {
        Change::Unchanged => skipped(format!("{} already holds {shown}", drive.as_str())),
        Change::Changed => done(
            format!("{} mounted: {shown}", drive.as_str()),
            json!({"drive": drive.as_str(), "image": shown, "expires": ctx.facts.media_expires}),
        ),
    })
}

async fn ensure_boot_from_cd(ctx: &mut ProvisionCtx<'_>) -> Result<StageOutcome, StageFailure> {
    let bmc = ctx.bmc().await?;
    let change = bmc
        .client
        .boot_once_from_cd(&bmc.discovery)
        .await
        .map_err(|e| redfish_failure(&e))?;
    let target = bmc.discovery.profile().boot.cd_target;
    Ok(match change {
        Change::Unchanged => skipped(format!("the next boot is already from {target}")),
        Change::Changed => done(
            format!("one-time boot from {target} set"),
            json!({"target": target}),
        ),
    })
}

/// Restart the host into the maintenance OS — once: the intent is journaled first.
async fn ensure_reset(ctx: &mut ProvisionCtx<'_>) -> Result<StageOutcome, StageFailure> {
    if let Some(at) = ctx.facts.reset_requested_at {
        return Ok(skipped(format!(
            "the reset was requested at {} by an earlier worker: not repeated",
            at.to_rfc3339()
        )));
    }
    ctx.facts.reset_requested_at = Some(ctx.now);
    checkpoint(ctx.journal, ctx.facts).await?;
    let bmc = ctx.bmc().await?;
    let outcome = bmc
        .client
        .reset(&bmc.discovery)
        .await
        .map_err(|e| redfish_failure(&e))?;
    let text = format!("{outcome:?}").to_lowercase();
    drop(bmc);
    ctx.facts.reset_outcome = Some(text.clone());
    Ok(done(
        format!("host reset ({text}): booting the maintenance OS"),
        json!({"reset": text}),
    ))
}

/// Until the maintenance OS reports (the webhook moves the job), or the stuck timeout.
async fn ensure_reported(ctx: &mut ProvisionCtx<'_>) -> Result<StageOutcome, StageFailure> {
    let status = ctx.status();
    if status.has_outcome() {
        return Ok(done(
            format!("the maintenance OS reported: {status}"),
            json!({"status": status}),
        ));
    }
    verify_media(ctx).await;
    let started = ctx.job.started_at.unwrap_or(ctx.now);
    let limit = ctx.provisioner.settings.stuck_timeout;
    let waited = (ctx.now - started).to_std().unwrap_or_default();
    if waited >= limit {
        let message = format!(
            "webhook timeout: no report from the maintenance OS within {}",
            crate::model::duration::format(limit)
        );
        let moved = ctx
            .env
            .store
            .fail_provisioning(
                ctx.job.id,
                ProvisioningStage::AwaitWebhook.as_str(),
                &message,
                &ctx.fence,
            )
            .await
            .map_err(|e| StageFailure::store(&e))?;
        if moved {
            ctx.provisioner.observer.status(ProvisioningStatus::Failed);
        }
        return Ok(done(
            message,
            json!({"level": "error", "timeout_secs": limit.as_secs()}),
        ));
    }
    Ok(StageOutcome::Wait(crate::stages::StageWait {
        reason: format!(
            "waiting for the maintenance OS to report (for {} of {})",
            crate::model::duration::format(Duration::from_secs(waited.as_secs())),
            crate::model::duration::format(limit)
        ),
        poll: Some(ctx.provisioner.settings.poll_interval),
        wake: None,
    }))
}

/// Once per run of a waiting job (a worker took it over after a restart): both drives still
/// hold this job's images; one that does not is mounted again, with a warning.
async fn verify_media(ctx: &mut ProvisionCtx<'_>) {
    let Ok(mut bmc) = ctx.bmc().await else {
        return;
    };
    if bmc.verified {
        return;
    }
    let mut remounted = Vec::new();
    for drive in [Drive::Maintenance, Drive::Task] {
        let Ok(state) = bmc.client.media_state(&bmc.discovery, drive).await else {
            return;
        };
        if !ours(ctx, drive, &state) {
            remounted.push(drive);
        }
    }
    bmc.verified = true;
    drop(bmc);
    for drive in remounted {
        ctx.note(
            "warn",
            format!(
                "{} no longer held this job's image: mounting it again",
                drive.as_str()
            ),
        )
        .await;
        if let Err(failure) = ensure_mounted(ctx, drive).await {
            ctx.note("warn", failure.message).await;
        }
    }
}

/// Cleanup: empty CD2 and CD1 (best effort, bounded by `JOB_CLEANUP_TIMEOUT`).
async fn ensure_ejected(ctx: &mut ProvisionCtx<'_>) -> StageOutcome {
    if ctx.facts.outcome.is_none() {
        ctx.facts.outcome = Some(ctx.status());
    }
    let limit = ctx.provisioner.settings.cleanup_timeout;
    let ejected = tokio::time::timeout(limit, eject_both(ctx))
        .await
        .unwrap_or_else(|_| {
            Err(vec![format!(
                "the BMC did not finish within {}",
                crate::model::duration::format(limit)
            )])
        });
    match ejected {
        Ok(changed) if changed.is_empty() => skipped("cleanup: CD1 and CD2 already empty"),
        Ok(changed) => done(
            format!("cleanup: ejected {}", changed.join(" and ")),
            json!({"ejected": changed}),
        ),
        Err(problems) => warn(ctx, "could not eject the virtual media", problems),
    }
}

/// Eject CD2 and CD1: the drives that changed, or what went wrong.
async fn eject_both(ctx: &ProvisionCtx<'_>) -> Result<Vec<&'static str>, Vec<String>> {
    let bmc = ctx.bmc().await.map_err(|f| vec![f.message])?;
    let mut changed = Vec::new();
    let mut problems = Vec::new();
    for drive in [Drive::Task, Drive::Maintenance] {
        match bmc.client.eject_media(&bmc.discovery, drive).await {
            Ok(Change::Changed) => changed.push(drive.as_str()),
            Ok(Change::Unchanged) => {}
            Err(err) => problems.push(format!("{}: {err}", drive.as_str())),
        }
    }
    if problems.is_empty() {
        Ok(changed)
    } else {
        Err(problems)
    }
}

/// Restart the host (the cleanup reboot).
async fn reboot(ctx: &ProvisionCtx<'_>) -> Result<ResetOutcome, String> {
    let bmc = ctx.bmc().await.map_err(|f| f.message)?;
    bmc.client
        .reset(&bmc.discovery)
        .await
        .map_err(|e| e.to_string())
}

/// Cleanup: restart the host into its installed OS — once, the intent journaled first.
async fn ensure_rebooted(ctx: &mut ProvisionCtx<'_>) -> StageOutcome {
    if let Some(at) = ctx.facts.reboot_requested_at {
        return skipped(format!(
            "cleanup: the reboot was requested at {} by an earlier worker: not repeated",
            at.to_rfc3339()
        ));
    }
    ctx.facts.reboot_requested_at = Some(ctx.now);
    if let Err(failure) = checkpoint(ctx.journal, ctx.facts).await {
        return warn(ctx, "could not record the reboot", vec![failure.message]);
    }
    let limit = ctx.provisioner.settings.cleanup_timeout;
    let rebooted = tokio::time::timeout(limit, reboot(ctx))
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "the BMC did not finish within {}",
                crate::model::duration::format(limit)
            ))
        });
    match rebooted {
        Ok(outcome) => {
            let text = format!("{outcome:?}").to_lowercase();
            StageOutcome::Done(StageDone {
                message: format!("cleanup: host rebooted into its installed OS ({text})"),
                details: json!({"reset": text}),
                next: Next::Complete,
                skipped: false,
            })
        }
        Err(problem) => warn(ctx, "could not reboot the host", vec![problem]),
    }
}

/// A cleanup step that did not work: a warning, and the job goes on (seed 003 "if unmount
/// fails, log and still mark complete with warnings").
fn warn(ctx: &mut ProvisionCtx<'_>, what: &str, problems: Vec<String>) -> StageOutcome {
    let message = format!("cleanup: {what}: {}", problems.join("; "));
    ctx.facts.warnings.push(message.clone());
    done(message, json!({"level": "warn"}))
}
