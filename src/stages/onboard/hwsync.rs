//! Hardware sync as a required invariant (seed 000 §9.1; §4.3 EnsureHardwareSyncConfigured,
//! WaitForHardwareSyncHealthy; §4.6: retry until the timeout with periodic re-seed, never
//! release from MAAS, never mark the node active while unhealthy).
//!
//! Configuring pushes `/etc/maas/maas-machine-creds.yml` (the machine's MAAS token) to the
//! deployed host — the one SSH step before the node agent exists — and restarts the sync units.
//! Healthy means MAAS reports `enable_hw_sync`, `last_sync` and `next_sync`, the sync is within
//! 1.5 intervals (MAAS's own rule), and `last_sync` moved past its value at the push: a fresh
//! cycle with the pushed credentials, judged on MAAS's clock alone.

use crate::lifecycle::MaasStatus;
use std::time::Duration;

use serde_json::json;

use super::deploy::deploy_address;
use super::{HwSyncFacts, StageCtx};
use crate::cloudinit::{HwSyncLayer, MAAS_CREDS_PATH, hw_sync_credentials};
use crate::lifecycle::{FailureClass, OnboardingStage, PolicyTimeout};
use crate::provider::host::HostTarget;
use crate::provider::maas::{Machine, MachineStanding};
use crate::stages::{StageFailure, StageOutcome};

/// The units the push restarts (000 §9.1 step 5): the hardware-sync timer and service the
/// first-boot payload's layer c installs (`crate::cloudinit`).
pub const SYNC_UNITS: &[&str] = crate::cloudinit::HW_SYNC_UNITS;

/// The machine, which must still be Deployed (released or deleted out of band is ambiguity).
async fn deployed_machine(ctx: &mut StageCtx<'_>) -> Result<Machine, StageFailure> {
    still_deployed(ctx.machine().await?)
}

/// `machine` as read (in full or its summary), when it is still Deployed.
fn still_deployed<M: MachineStanding>(machine: M) -> Result<M, StageFailure> {
    if machine.status() != MaasStatus::Deployed {
        return Err(StageFailure::ambiguity(
            "machine_left_deployed",
            format!(
                "{} is {} while its hardware sync was being set up (changed out of band)",
                machine.system_id(),
                machine.status_label()
            ),
        ));
    }
    Ok(machine)
}

/// An adopted machine metalform did not deploy: it runs as it is, whatever hardware sync
/// MAAS's vendor-data set up for it.
pub(super) fn adopted_as_is(ctx: &StageCtx<'_>) -> bool {
    ctx.job.adopted && ctx.facts.deploy.is_none()
}

/// The warning of an adopted machine deployed without hardware sync (nothing short of a
/// redeploy turns it on).
pub(super) fn adopted_without_sync(system_id: &str) -> String {
    format!(
        "{system_id} was deployed (before metalform adopted it) without hardware sync; set \
         reimage.generation to redeploy it with hardware sync"
    )
}

/// Push the machine's token to the host and restart the sync units. `Err` is why it could not
/// be done yet (retried until the seed timeout).
pub(super) async fn push_credentials(
    ctx: &mut StageCtx<'_>,
    machine: &Machine,
) -> Result<HwSyncFacts, String> {
    let maas = ctx.maas().await.map_err(|f| f.message)?;
    let token = maas
        .get_token(&machine.system_id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("MAAS has no machine token for {} yet", machine.system_id))?;
    let address = deploy_address(ctx, machine).ok_or_else(|| {
        format!(
            "{} reports no deployed address (interface {} or any other)",
            machine.system_id, ctx.target.site.deploy.ssh_iface
        )
    })?;
    let host = HostTarget {
        system_id: machine.system_id.clone(),
        hostname: ctx.target.hostname().to_owned(),
        address: address.clone(),
        user: ctx.target.site.deploy.user.clone(),
    };
    let layer = HwSyncLayer {
        maas_url: ctx
            .target
            .site
            .maas
            .url
            .as_str()
            .trim_end_matches('/')
            .to_owned(),
        system_id: machine.system_id.clone(),
        interval: ctx.target.profile.hardware_sync.interval,
    };
    let creds = hw_sync_credentials(&layer, &token);
    ctx.peers()
        .host
        .write_file(&host, MAAS_CREDS_PATH, &creds, 0o600)
        .await
        .map_err(|e| e.to_string())?;
    ctx.peers()
        .host
        .restart_units(&host, SYNC_UNITS)
        .await
        .map_err(|e| e.to_string())?;
    Ok(HwSyncFacts {
        ssh_address: address,
        pushed_at: ctx.now,
        last_sync_at_push: machine.last_sync,
        reseeds: ctx.facts.hw_sync.as_ref().map(|h| h.reseeds).unwrap_or(0),
    })
}

pub(super) async fn ensure_hardware_sync_configured(
    ctx: &mut StageCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    if !ctx.target.profile.hardware_sync.required {
        return Ok(StageOutcome::skipped(
            "hardware sync not required by the profile",
        ));
    }
    if let Some(limit) = ctx.timed_out(PolicyTimeout::HwSyncSeed) {
        let last = ctx.memory.last_wait.clone().unwrap_or_default();
        return Err(StageFailure::timeout(
            PolicyTimeout::HwSyncSeed,
            limit,
            &format!("hardware-sync credentials were not seeded ({last})"),
        )
        .details(json!({"last_problem": last, "hint": "MAAS was left alone: the machine stays deployed for investigation"})));
    }
    let machine = match ctx.machine().await? {
        m if m.status == MaasStatus::Deploying => {
            return Ok(StageOutcome::jump(
                OnboardingStage::WaitForDeployed,
                format!("{} is still Deploying", m.system_id),
                json!({}),
            ));
        }
        m => still_deployed(m)?,
    };
    let sync = machine.hardware_sync();
    if adopted_as_is(ctx) {
        // Adopted as it runs: MAAS's vendor-data set the sync up (or the machine was deployed
        // without it); nothing is pushed to a host metalform did not configure.
        if !sync.enabled {
            ctx.facts.mismatch(adopted_without_sync(&machine.system_id));
            return Ok(StageOutcome::skipped(adopted_without_sync(
                &machine.system_id,
            )));
        }
        if sync.health(ctx.now).is_healthy() {
            return Ok(StageOutcome::skipped(format!(
                "{} already syncs its hardware to MAAS (adopted as it runs)",
                machine.system_id
            )));
        }
    }
    if !sync.enabled {
        return Err(StageFailure::new(
            FailureClass::HardwareSyncFailure,
            "hw_sync_disabled",
            format!(
                "{} was deployed without hardware sync (enable_hw_sync=false); it must be redeployed with it",
                machine.system_id
            ),
        )
        .never_retry());
    }
    match push_credentials(ctx, &machine).await {
        Ok(facts) => {
            let address = facts.ssh_address.clone();
            ctx.facts.hw_sync = Some(facts);
            Ok(StageOutcome::done(
                format!("hardware-sync credentials pushed to {address}; sync units restarted"),
                json!({"ssh_address": address, "sync_interval": machine.sync_interval}),
            ))
        }
        Err(why) => Ok(StageOutcome::wait(why)),
    }
}

pub(super) async fn ensure_hardware_sync_healthy(
    ctx: &mut StageCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    if !ctx.target.profile.hardware_sync.required {
        return Ok(StageOutcome::skipped(
            "hardware sync not required by the profile",
        ));
    }
    // The poll reads the machine's summary; the full machine (its addresses) only for a
    // re-seed.
    let polled = still_deployed(ctx.machine_summary().await?)?;
    let sync = polled.hardware_sync();
    if adopted_as_is(ctx) && !sync.enabled {
        return Ok(StageOutcome::skipped(adopted_without_sync(
            &polled.system_id,
        )));
    }
    let health = sync.health(ctx.now);
    let pushed = ctx.facts.hw_sync.clone();
    let fresh = match (
        pushed.as_ref().and_then(|p| p.last_sync_at_push),
        sync.last_sync,
    ) {
        (Some(before), Some(now)) => now > before,
        (None, Some(_)) => true,
        (_, None) => false,
    };
    let details = json!({
        "enable_hw_sync": sync.enabled,
        "last_sync": sync.last_sync,
        "next_sync": sync.next_sync,
        "sync_interval": sync.sync_interval,
    });
    if sync.enabled && health.is_healthy() && sync.next_sync.is_some() && fresh {
        return Ok(StageOutcome::done(
            format!(
                "hardware sync healthy (last sync {})",
                sync.last_sync
                    .map(|t| t.format("%H:%M:%S").to_string())
                    .unwrap_or_default()
            ),
            details,
        ));
    }
    let problem = if !sync.enabled {
        "MAAS reports enable_hw_sync=false".to_owned()
    } else if !fresh {
        format!(
            "no sync since the credentials were pushed (last sync {})",
            sync.last_sync
                .map(|t| t.to_rfc3339())
                .unwrap_or_else(|| "never".into())
        )
    } else if sync.next_sync.is_none() {
        "MAAS reports no next_sync".to_owned()
    } else {
        format!("the sync is unhealthy ({health:?})")
    };
    if let Some(limit) = ctx.timed_out(PolicyTimeout::HwSyncHealth) {
        return Err(StageFailure::timeout(
            PolicyTimeout::HwSyncHealth,
            limit,
            &format!(
                "MAAS never saw a healthy hardware sync from {}: {problem},",
                polled.system_id
            ),
        )
        .details(json!({
            "sync": details,
            "reseeds": pushed.as_ref().map(|p| p.reseeds),
            "hint": "MAAS was left alone and the node is not active; check maas-agent and the sync timer on the host",
        })));
    }
    // Re-seed now and then while waiting (000 §4.6): the timer may have lost its credentials.
    let interval = Duration::from_secs(sync.sync_interval.unwrap_or(900).max(1))
        .max(ctx.env.poll_interval * 5);
    let due = pushed
        .as_ref()
        .is_none_or(|p| (ctx.now - p.pushed_at).to_std().unwrap_or_default() > interval);
    if due {
        let machine = deployed_machine(ctx).await?;
        match push_credentials(ctx, &machine).await {
            Ok(mut facts) => {
                facts.reseeds += 1;
                // Keep the baseline of the first push: any later sync proves the credentials.
                facts.last_sync_at_push = pushed
                    .as_ref()
                    .and_then(|p| p.last_sync_at_push)
                    .or(facts.last_sync_at_push);
                ctx.facts.hw_sync = Some(facts);
                ctx.checkpoint().await?;
            }
            Err(why) => return Ok(StageOutcome::wait(format!("re-seed failed: {why}"))),
        }
    }
    Ok(StageOutcome::wait(format!(
        "waiting for a fresh, healthy hardware sync: {problem}"
    )))
}
