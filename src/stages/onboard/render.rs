//! `render_cloud_init` (seed 000 §4.3 CreateGPUaaSNodeAndRenderCloudInit, §4.6 "Duplicate:
//! recover existing node_id", §4.10 "recover existing node row if already created", §9).
//!
//! The node record is created `enrolling` (or the existing one recovered), a fresh enrollment
//! token is issued with the profile's TTL, and the first-boot payload is rendered. The payload
//! carries the token, so it lives only in the executor's memory: the journal keeps its digest.
//! A restarted executor that has not deployed yet renders again with a new token (tokens of
//! payloads that were never delivered are expired first).

use crate::lifecycle::MaasStatus;
use serde_json::json;

use super::commission::adopt_advanced;
use super::{CloudInitFacts, StageCtx};
use crate::cloudinit::{self, CloudInitInput, NodeRuntime};
use crate::lifecycle::{FailureClass, NodeState, Provider};
use crate::model::DeployPassword;
use crate::secrets::{Secret, SecretError, SecretRef};
use crate::stages::{StageFailure, StageOutcome};
use crate::store::{NewNode, StoreError};

pub(super) async fn ensure_node_and_payload(
    ctx: &mut StageCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    // Only where the machine stands matters here: its summary, which polls share.
    let machine = ctx.machine_summary().await?;
    if let Some(adopted) = adopt_advanced(ctx, &machine) {
        return adopted;
    }
    if !matches!(
        machine.status.known(),
        Some(MaasStatus::Ready | MaasStatus::Allocated)
    ) {
        return Err(super::commission::unexpected(
            &machine,
            "render a deployment for",
        ));
    }
    let node = ensure_node_record(ctx).await?;
    // Payloads rendered before were never delivered (no deploy reached MAAS in this round):
    // their tokens must not work any more.
    let (token, expires_at, _) = ctx
        .env
        .store
        .replace_enrollment_token(
            node,
            Some(&ctx.job.id.to_string()),
            ctx.token_ttl(),
            ctx.fence,
        )
        .await
        .map_err(|e| StageFailure::store(&e))?;
    let password = deploy_password(ctx).await?;
    let input = CloudInitInput::for_node(
        &ctx.target.site,
        &ctx.target.profile,
        &ctx.target.node,
        NodeRuntime {
            system_id: machine.system_id.clone(),
            enroll_url: ctx.env.enroll_url.clone(),
            enroll_token: token,
            deploy_password: password,
            boot_disk_hint: ctx.facts.boss_disk_path.clone(),
            agent_install: ctx.env.agent_install.clone(),
        },
    );
    let rendered = cloudinit::render(&input).map_err(|e| {
        StageFailure::new(
            FailureClass::InputConfigError,
            "cloud_init_invalid",
            e.to_string(),
        )
    })?;
    if !rendered.placeholders.is_empty() {
        // A preview carries placeholders; deploying it would strand the host.
        return Err(StageFailure::new(
            FailureClass::InputConfigError,
            "cloud_init_placeholder",
            format!(
                "the payload still has placeholders in {}",
                rendered.placeholders.join(", ")
            ),
        ));
    }
    let digest = rendered.digest.clone();
    let layers: Vec<String> = rendered
        .layers
        .iter()
        .filter(|l| l.included)
        .map(|l| format!("{}:{}", l.name, l.version))
        .collect();
    ctx.memory.user_data = Some(rendered.user_data);
    ctx.facts.cloud_init = Some(CloudInitFacts {
        digest: digest.clone(),
        rendered_at: ctx.now,
        token_expires_at: expires_at,
        payload: Some(input.record(&digest)),
    });
    Ok(StageOutcome::done(
        format!(
            "node {node} enrolling; payload {} rendered ({} layers), token valid until {}",
            digest
                .trim_start_matches("sha256:")
                .get(..12)
                .unwrap_or(&digest),
            layers.len(),
            expires_at.format("%Y-%m-%d %H:%M:%SZ")
        ),
        json!({"node_id": node, "digest": digest, "layers": layers, "token_expires_at": expires_at}),
    ))
}

/// The deploy user's password, as the profile says: none (keys only), the node's own (read,
/// or made and written on first render, so a re-render and the operator find the same one),
/// or the site's shared one.
async fn deploy_password(ctx: &StageCtx<'_>) -> Result<Option<Secret>, StageFailure> {
    let deploy = &ctx.target.site.deploy;
    let secrets = ctx.env.secrets.as_ref();
    let missing = |what: &str| {
        StageFailure::new(
            FailureClass::InputConfigError,
            "deploy_password_unconfigured",
            format!("the profile gives the deploy user a password, but the site names no {what}"),
        )
    };
    match ctx.target.profile.deploy_user.password {
        DeployPassword::None => Ok(None),
        DeployPassword::Site => {
            let reference = deploy
                .password
                .as_ref()
                .ok_or_else(|| missing("deploy.password"))?;
            let reference = SecretRef::new(reference.path.clone(), reference.key.as_deref());
            secrets
                .get(&reference)
                .await
                .map(Some)
                .map_err(|e| StageFailure::secret(&e))
        }
        DeployPassword::PerNode => {
            let base = deploy
                .node_passwords
                .as_ref()
                .ok_or_else(|| missing("deploy.nodePasswords"))?;
            let path = format!(
                "{}/{}",
                base.path.trim_end_matches('/'),
                ctx.target.hostname()
            );
            let key = base.key.clone().unwrap_or_else(|| "password".into());
            match secrets.read(&path).await {
                Ok(data) => data
                    .field(&key)
                    .cloned()
                    .map(Some)
                    .map_err(|e| StageFailure::secret(&e)),
                Err(SecretError::NotFound { .. }) => {
                    let password = crate::store::random_password();
                    let fields = std::collections::BTreeMap::from([(key, password.clone())]);
                    secrets
                        .write(&path, &fields)
                        .await
                        .map_err(|e| StageFailure::secret(&e))?;
                    Ok(Some(password))
                }
                Err(e) => Err(StageFailure::secret(&e)),
            }
        }
    }
}

/// The node record of this onboarding: the one the journal or the plan knows, an existing
/// `enrolling` record of the same site/hostname, or a new one.
pub(super) async fn ensure_node_record(ctx: &mut StageCtx<'_>) -> Result<uuid::Uuid, StageFailure> {
    let store = &ctx.env.store;
    let known = ctx.job.node_id.or(ctx.facts.node_id).or(ctx.target.node_id);
    let existing = match known {
        Some(id) => Some(store.node(id).await.map_err(|e| StageFailure::store(&e))?),
        None => store
            .find_node(ctx.target.site_name(), ctx.target.hostname())
            .await
            .map_err(|e| StageFailure::store(&e))?,
    };
    let node = match existing {
        Some(node) if node.status == NodeState::Enrolling => node,
        // A reimage (seed 000 §5.3) redeploys the node it holds out of scheduling: same id.
        Some(node)
            if ctx.job.kind == crate::lifecycle::JobKind::Decommission
                && node.status == NodeState::Quarantined =>
        {
            node
        }
        Some(node) => {
            return Err(StageFailure::ambiguity(
                "node_record_conflict",
                format!(
                    "node record {} of {} is {}, not enrolling: another lifecycle owns it",
                    node.id,
                    ctx.target.label(),
                    node.status
                ),
            ));
        }
        None => {
            let new = NewNode {
                site: ctx.target.site_name().to_owned(),
                hostname: ctx.target.hostname().to_owned(),
                provider: Provider::Maas,
                status: NodeState::Enrolling,
                sku: Some(ctx.target.node.sku.to_string()),
                gpus: Some(i64::from(ctx.target.node.gpus)),
                ipmi_ip: Some(ctx.target.node.bmc.ipmi_ip.to_string()),
            };
            match store.create_node(&new, &ctx.env.actor).await {
                Ok(node) => node,
                // Created concurrently (or by a run that died before binding it): recover it.
                Err(StoreError::DuplicateNode { .. }) => store
                    .find_node(ctx.target.site_name(), ctx.target.hostname())
                    .await
                    .map_err(|e| StageFailure::store(&e))?
                    .ok_or_else(|| {
                        StageFailure::ambiguity("node_record_conflict", "node record vanished")
                    })?,
                Err(err) => return Err(StageFailure::store(&err)),
            }
        }
    };
    // How the node may leave the fleet, should it leave the manifests (pruning), and for an
    // onboarding the generation this deploy satisfies (a reimage records its own when it
    // completes): one write.
    let policy = crate::model::NodePolicy::of(&ctx.target.node, &ctx.target.profile);
    let recorded = if ctx.job.kind == crate::lifecycle::JobKind::Onboarding {
        let generation = ctx.target.node.reimage.generation;
        store
            .record_deploy_targets(node.id, generation, &policy, &ctx.env.actor)
            .await
    } else {
        store
            .record_release_policy(node.id, &policy, &ctx.env.actor)
            .await
    };
    recorded.map_err(|e| StageFailure::store(&e))?;
    ctx.facts.node_id = Some(node.id);
    Ok(node.id)
}
