//! The Redfish provisioner in the daemon (seed 003 "Configuration", "Workers and
//! Concurrency", "Idempotency and Recovery", "Task ISO Lifecycle"): the `[provisioner]` table of
//! the configuration, the workers beside the reconcile loop, the manifests' servers, and
//! [`Controller`] — the same jobs API, webhook, task ISOs and workers on a listener of their
//! own, for `metalform demo` and tests.
//!
//! `[provisioner]` takes the seed's variables by their lower-case names
//! (`maintenance_iso_url`, `worker_concurrency`, `job_lease_ttl`, `job_stuck_timeout`, …,
//! `redfish_timeout`, `redfish_retries`) and two secrets by reference, never inline:
//! `webhook_secret` and `media_url_key`, each `{env = "VAR"}` or `{vault = "…", key = "…"}`.
//!
//! On start, the workers' first poll takes every job a stopped worker left (its lease
//! released, or expired): each continues at its journaled stage, which verifies what is on the
//! BMC before it writes — mounted media checked, foreign media ejected, cleanup issued again
//! (seed 003 "provisioning jobs are reconciled on startup").

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use axum::Router;
use axum::http::Method;
use toml::Spanned;

use super::config::{ConfigError, TokenSource};
use crate::api::provisioning::{ProvisioningApi, ProvisioningApiConfig, TokenCheck};
use crate::api::{Access, ApiError, RouteTable, Tokens};
use crate::apply::provisioning::Workers;
use crate::apply::{ExecutorOptions, Progress, SiteMaas, StageEnv, StopSignal};
use crate::observe::MaasClients;
use crate::provider::bmc::IpmiTool;
use crate::provider::host::SshHost;
use crate::provider::maas::MaasClientOptions;
use crate::provider::redfish::media::MediaService;
use crate::provider::redfish::settings::{ProvisionerSettings, RedfishSettings};
use crate::secrets::{Secret, SecretStore};
use crate::stages::onboard::Peers;
use crate::stages::provision::{Provisioner, ProvisioningObserver};
use crate::store::{Actor, Store};

/// `[provisioner]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProvisionerConfig {
    pub settings: ProvisionerSettings,
    pub redfish: RedfishSettings,
    /// The maintenance OS's `X-Webhook-Secret`.
    pub webhook_secret: TokenSource,
    /// The HMAC key of the signed task ISO URLs.
    pub media_url_key: TokenSource,
}

/// The raw table, each value with its place in the file.
pub(super) type RawProvisioner = BTreeMap<String, Spanned<toml::Value>>;

/// Where a configuration error points: a span, a message, a hint.
pub(super) type Locate<'a> = &'a dyn Fn(Option<Range<usize>>, String, Option<&str>) -> ConfigError;

const SECRETS: [&str; 2] = ["webhook_secret", "media_url_key"];

/// `[provisioner]`, checked: every key known, secrets by reference, values as the seed's
/// variables take them. Relative paths are anchored at the configuration file.
pub(super) fn config(
    raw: Option<&RawProvisioner>,
    data_dir: &Path,
    base: &Path,
    at: Locate<'_>,
) -> Result<Option<ProvisionerConfig>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let known: Vec<String> = ProvisionerSettings::VARIABLES
        .iter()
        .map(|v| v.to_lowercase())
        .collect();
    let mut values = BTreeMap::new();
    let mut secrets = BTreeMap::new();
    for (key, value) in raw {
        let span = Some(value.span());
        if SECRETS.contains(&key.as_str()) {
            secrets.insert(key.as_str(), secret_source(key, value, at)?);
            continue;
        }
        if !known.contains(key) {
            return Err(at(
                span,
                format!("unknown key `provisioner.{key}`"),
                Some(&format!(
                    "known keys: {}, {}",
                    known.join(", "),
                    SECRETS.join(", ")
                )),
            ));
        }
        let text = match value.get_ref() {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(n) => n.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            _ => {
                return Err(at(
                    span,
                    format!("`provisioner.{key}` must be a string, a number or a boolean"),
                    None,
                ));
            }
        };
        values.insert(key.to_uppercase(), (text, value.span()));
    }
    let locate = |variable: &str| values.get(variable).map(|(_, span)| span.clone());
    let lookup = |name: &str| values.get(name).map(|(text, _)| text.clone());
    let mut settings = ProvisionerSettings::from_lookup(data_dir, lookup).map_err(|e| {
        at(
            locate(e.variable).or(raw.values().next().map(|v| v.span())),
            format!("provisioner.{}: {}", e.variable.to_lowercase(), e.message),
            Some("see docs/redfish.md \"Running the provisioner\""),
        )
    })?;
    if settings.task_iso_dir.is_relative() {
        settings.task_iso_dir = base.join(&settings.task_iso_dir);
    }
    let redfish = RedfishSettings::from_lookup(lookup).map_err(|e| {
        at(
            locate(e.variable),
            format!("provisioner.{}: {}", e.variable.to_lowercase(), e.message),
            None,
        )
    })?;
    let secret = |name: &str| {
        secrets.get(name).cloned().ok_or_else(|| {
            at(
                raw.values().next().map(|v| v.span()),
                format!("`provisioner.{name}` is required"),
                Some(&format!(
                    "{name} = {{ env = \"METALFORM_{}\" }}, or {{ vault = \"kv/metalform/provisioner\", key = \"{name}\" }}",
                    name.to_uppercase()
                )),
            )
        })
    };
    Ok(Some(ProvisionerConfig {
        settings,
        redfish,
        webhook_secret: secret("webhook_secret")?,
        media_url_key: secret("media_url_key")?,
    }))
}

fn secret_source(
    key: &str,
    value: &Spanned<toml::Value>,
    at: Locate<'_>,
) -> Result<TokenSource, ConfigError> {
    let span = Some(value.span());
    let table = match value.get_ref() {
        toml::Value::Table(table) => table,
        _ => {
            return Err(at(
                span,
                format!("`provisioner.{key}` is inline: secrets never sit in the configuration"),
                Some(
                    "use { env = \"VARIABLE\" } or { vault = \"<mount>/<path>\", key = \"<field>\" }",
                ),
            ));
        }
    };
    let text = |name: &str| table.get(name).and_then(|v| v.as_str()).map(str::to_owned);
    let unknown = table
        .keys()
        .find(|k| !["env", "vault", "key"].contains(&k.as_str()));
    match (text("env"), text("vault"), text("key"), unknown) {
        (Some(env), None, None, None) => Ok(TokenSource::Env(env)),
        (None, Some(path), Some(key), None) => Ok(TokenSource::Vault { path, key }),
        _ => Err(at(
            span,
            format!("`provisioner.{key}` needs either `env`, or `vault` with `key`"),
            None,
        )),
    }
}

/// Read a secret the configuration references, with a minimum length.
async fn read_secret(
    what: &str,
    source: &TokenSource,
    secrets: &dyn SecretStore,
    min: usize,
) -> Result<Secret, super::DaemonError> {
    let value = super::read_token(source, secrets)
        .await
        .map_err(|message| super::DaemonError::Token {
            name: format!("provisioner.{what}"),
            message,
        })?;
    if value.len() < min {
        return Err(super::DaemonError::Token {
            name: format!("provisioner.{what}"),
            message: format!("it is shorter than {min} characters"),
        });
    }
    Ok(Secret::new(value))
}

/// The stage environment of provisioning workers (they use its store, secrets and clock).
pub fn worker_env(
    store: &Store,
    secrets: Arc<dyn SecretStore>,
    settings: &ProvisionerSettings,
) -> StageEnv {
    StageEnv {
        store: store.clone(),
        maas: Arc::new(SiteMaas::new(
            secrets.clone(),
            MaasClients::new(MaasClientOptions::default()),
        )),
        secrets,
        peers: Peers::uniform(Arc::new(IpmiTool::default()), Arc::new(SshHost::default())),
        clock: store.clock().clone(),
        // Redfish-provisioned servers get no node agent from this controller.
        enroll_url: String::new(),
        agent_install: crate::cloudinit::AgentInstall::default(),
        actor: Actor::system("metalform-provisioner"),
        poll_interval: settings.poll_interval,
        agent_signals: None,
    }
}

/// The provisioner's parts the daemon runs.
pub(super) struct Running {
    pub api: ProvisioningApi,
    pub workers: Workers,
}

/// Read the secrets and build the provisioner, its API and its workers.
#[allow(clippy::too_many_arguments)]
pub(super) async fn start(
    config: &ProvisionerConfig,
    public_url: &url::Url,
    store: &Store,
    secrets: Arc<dyn SecretStore>,
    tokens: Arc<dyn TokenCheck>,
    observer: Arc<dyn ProvisioningObserver>,
    progress: Arc<dyn Progress>,
    stop: StopSignal,
) -> Result<Running, super::DaemonError> {
    let webhook_secret = read_secret(
        "webhook_secret",
        &config.webhook_secret,
        secrets.as_ref(),
        16,
    )
    .await?;
    let media_key =
        read_secret("media_url_key", &config.media_url_key, secrets.as_ref(), 32).await?;
    let provisioner = Arc::new(Provisioner::new(
        config.settings.clone(),
        config.redfish.clone(),
        public_url.clone(),
        media_key,
        observer.clone(),
    ));
    let workers = Workers::new(
        worker_env(store, secrets, &config.settings),
        ExecutorOptions {
            holder: crate::apply::default_holder().replacen("apply@", "provisioner@", 1),
            stop,
            ..ExecutorOptions::default()
        },
        progress,
        provisioner.clone(),
    );
    let api = ProvisioningApi::new(ProvisioningApiConfig {
        store: store.clone(),
        tokens,
        webhook_secret,
        maintenance_iso_url: config.settings.maintenance_iso_url.clone(),
        observer,
        media: Arc::new(MediaService {
            store: provisioner.media.clone(),
            signer: provisioner.signer().clone(),
            clock: store.clock().clone(),
        }),
    });
    Ok(Running { api, workers })
}

/// The provisioning routes of a daemon without `[provisioner]`: every one answers 503 with
/// what to configure, so the documented routes are always there.
pub(super) fn disabled_router() -> Router {
    let mut table: RouteTable<()> = RouteTable::default();
    for (method, path, access) in crate::api::provisioning::served() {
        if method == Method::HEAD {
            continue; // axum answers HEAD with the GET route
        }
        table.add(method, &path, access, disabled);
    }
    table.into_parts().0.with_state(())
}

async fn disabled() -> ApiError {
    ApiError::unavailable("the Redfish provisioner is not configured on this daemon")
        .hint("add a [provisioner] table to the daemon's configuration (docs/redfish.md)")
}

/// The served list's entries for [`super::server::served_routes`].
pub(super) fn served() -> Vec<(Method, String, Access)> {
    crate::api::provisioning::served()
}

/// A standalone controller: the jobs API, the webhook and the task ISOs on their own
/// listener, and workers — what the daemon runs, for `metalform demo` and tests.
pub struct Controller {
    /// `http://ADDR/`: where BMCs fetch task ISOs and the maintenance OS reports.
    pub url: url::Url,
    pub workers: Workers,
    pub provisioner: Arc<Provisioner>,
    stop: StopSignal,
    server: tokio::task::JoinHandle<()>,
    running: tokio::task::JoinHandle<()>,
}

/// Where a [`Controller`] serves its API.
pub enum ControllerListen {
    /// Bind this address when starting; port 0 picks one.
    Address(SocketAddr),
    /// A listener bound already: an address handed out before the controller starts stays
    /// taken until then.
    Bound(std::net::TcpListener),
}

/// What a [`Controller`] is made of.
pub struct ControllerOptions {
    pub store: Store,
    pub secrets: Arc<dyn SecretStore>,
    pub settings: ProvisionerSettings,
    pub redfish: RedfishSettings,
    pub tokens: Tokens,
    pub webhook_secret: Secret,
    pub media_key: Secret,
    pub listen: ControllerListen,
    /// More routes on the same listener (a maintenance image for simulated BMCs).
    pub extra: Option<Router>,
    /// This controller's worker name (`worker_id`).
    pub holder: String,
    pub observer: Arc<dyn ProvisioningObserver>,
    pub progress: Arc<dyn Progress>,
    /// Run the workers' poll loop (a test may poll by hand).
    pub run_workers: bool,
}

impl Controller {
    pub async fn start(options: ControllerOptions) -> std::io::Result<Controller> {
        let listener = match options.listen {
            ControllerListen::Bound(bound) => {
                bound.set_nonblocking(true)?;
                tokio::net::TcpListener::from_std(bound)?
            }
            ControllerListen::Address(address) => tokio::net::TcpListener::bind(address).await?,
        };
        let url = url::Url::parse(&format!("http://{}/", listener.local_addr()?))
            .expect("a socket address is a URL");
        let provisioner = Arc::new(Provisioner::new(
            options.settings.clone(),
            options.redfish,
            url.clone(),
            options.media_key,
            options.observer.clone(),
        ));
        let stop = StopSignal::default();
        let workers = Workers::new(
            worker_env(&options.store, options.secrets, &options.settings),
            ExecutorOptions {
                holder: options.holder,
                stop: stop.clone(),
                ..ExecutorOptions::default()
            },
            options.progress,
            provisioner.clone(),
        );
        let api = ProvisioningApi::new(ProvisioningApiConfig {
            store: options.store.clone(),
            tokens: Arc::new(options.tokens),
            webhook_secret: options.webhook_secret,
            maintenance_iso_url: options.settings.maintenance_iso_url.clone(),
            observer: options.observer,
            media: Arc::new(MediaService {
                store: provisioner.media.clone(),
                signer: provisioner.signer().clone(),
                clock: options.store.clock().clone(),
            }),
        });
        let mut app = crate::api::provisioning::router(api);
        if let Some(extra) = options.extra {
            app = app.merge(extra);
        }
        let app = app
            .fallback(crate::api::not_found)
            .method_not_allowed_fallback(crate::api::method_not_allowed);
        let stopping = stop.clone();
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stopping.stopped().await })
                .await;
        });
        let running = if options.run_workers {
            let workers = workers.clone();
            tokio::spawn(async move { workers.run().await })
        } else {
            tokio::spawn(async {})
        };
        Ok(Controller {
            url,
            workers,
            provisioner,
            stop,
            server,
            running,
        })
    }

    /// Stop: the workers rest their jobs at the next stage boundary and release their leases;
    /// the listener closes.
    pub async fn shutdown(self) {
        self.stop.stop();
        let _ = self.running.await;
        self.workers.wait().await;
        let _ = self.server.await;
    }

    /// Stop abruptly, as a killed process would: no lease is released, nothing is awaited.
    pub fn abort(self) {
        self.running.abort();
        self.server.abort();
        self.workers.abort();
    }
}
