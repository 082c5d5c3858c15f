//! `load_site_config` and `resolve_power_credentials` (seed 000 §4.3, §4.14 capability
//! preflight, §3.2.1 credential selection, §3.5 "in-flight workflows continue" when a site is
//! disabled). Both are pure reads, safe to re-run from the top (§4.10).

use serde_json::json;

use super::{StageCtx, power_credentials};
use crate::lifecycle::FailureClass;
use crate::model::SiteStatus;
use crate::stages::{StageFailure, StageOutcome};

/// The site is active (or the job is already in flight), MAAS answers, the API key works and
/// belongs to an admin, and the site can do what the profile requires.
pub(super) async fn ensure_site_config_loaded(
    ctx: &mut StageCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    let site = &ctx.target.site;
    // A disabled site takes no new onboarding; one that already reached MAAS continues
    // (000 §3.5).
    let in_flight = ctx.facts.system_id.is_some() || ctx.job.adopted;
    if site.status == SiteStatus::Disabled && !in_flight {
        return Err(StageFailure::new(
            FailureClass::InputConfigError,
            "site_disabled",
            format!("site {} is disabled: it accepts no new onboarding", site.name),
        )
        .details(json!({"site": site.name.as_str(), "hint": "set the site's spec.status to active, then resume"})));
    }
    let preflight = ctx.env.maas.preflight(site).await?;
    if !preflight.is_admin {
        return Err(StageFailure::new(
            FailureClass::SiteCapabilityMissing,
            "maas_user_not_admin",
            format!(
                "the MAAS API key of site {} belongs to `{}`, who is not a MAAS admin \
                 (commissioning, storage and network changes need one)",
                site.name, preflight.user
            ),
        ));
    }
    let version = crate::provider::maas::Version {
        version: preflight.maas_version.clone(),
        subversion: String::new(),
        capabilities: Vec::new(),
    };
    if ctx.target.profile.hardware_sync.required && version.supports_hardware_sync() == Some(false)
    {
        return Err(StageFailure::new(
            FailureClass::SiteCapabilityMissing,
            "hardware_sync_unsupported",
            format!(
                "profile {} requires hardware sync, which MAAS {} does not have (3.2 or later)",
                ctx.target.profile.name, preflight.maas_version
            ),
        ));
    }
    Ok(StageOutcome::done(
        format!(
            "MAAS {} at {} reachable as {}",
            preflight.maas_version, site.maas.url, preflight.user
        ),
        json!({"maas_version": preflight.maas_version, "maas_user": preflight.user}),
    ))
}

/// Read the BMC login chosen by the override order (resolved at plan time), now.
pub(super) async fn ensure_power_credentials_resolved(
    ctx: &mut StageCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    let reference = ctx.target.power_credentials.to_string();
    let power = power_credentials(ctx).await?;
    let is_default = ctx.target.power_credentials == ctx.target.site.power.default_credentials;
    ctx.facts.power_credentials = Some(reference.clone());
    // The login name stays out of the journal and the logs: the reference says where it is.
    let _ = &power;
    Ok(StageOutcome::done(
        format!(
            "BMC login read from {} ({})",
            reference,
            if is_default {
                "site default"
            } else {
                "override"
            }
        ),
        json!({"reference": reference, "source": if is_default { "site_default" } else { "override" }}),
    ))
}
