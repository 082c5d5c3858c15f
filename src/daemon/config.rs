//! The daemon's TOML configuration (DESIGN.md §6; docs/daemon.md, examples/daemon.toml): the
//! fleet repository and branch, poll and reconcile intervals, state and secret stores, the admin
//! API's listener (address, TLS, limits) and tokens (secret references or environment variables
//! — never inline), the agent channel's own listener (`[agent]`: address, public URL, TLS,
//! limits, the agent binary deployed hosts install), the self-heal policy, the events sink, the
//! drift policy (`[drift]`: the heartbeat threshold and the drift pass's self-heal switches,
//! `crate::drift::DriftPolicy`).
//!
//! Every problem is reported as `FILE:LINE:COL: message` with a hint; unknown keys are errors
//! (a misspelt key must not silently fall back to a default).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::api::TokenRole;
use crate::drift::DriftPolicy;

/// A bad configuration file, located.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct ConfigError {
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
    pub hint: Option<String>,
}

/// `"30s"`, `"5m"`, `"2h"` (the manifests' duration syntax).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigDuration(pub Duration);

impl<'de> Deserialize<'de> for ConfigDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        crate::model::duration::parse(&text)
            .map(ConfigDuration)
            .map_err(|e| serde::de::Error::custom(format!("`{text}`: {e}")))
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    source: RawSource,
    #[serde(default)]
    state: RawState,
    secrets: RawSecrets,
    #[serde(default)]
    reconcile: RawReconcile,
    #[serde(default)]
    self_heal: SelfHealPolicy,
    api: RawApi,
    #[serde(default)]
    events: Option<RawEvents>,
    #[serde(default)]
    drift: DriftPolicy,
    #[serde(default)]
    executor: RawExecutor,
    #[serde(default)]
    peers: RawPeers,
    #[serde(default)]
    agent: RawAgent,
    provisioner: Option<super::provisioner::RawProvisioner>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    repository: Spanned<String>,
    #[serde(default = "default_branch")]
    branch: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default = "default_poll")]
    poll_interval: ConfigDuration,
    #[serde(default = "default_fetch_timeout")]
    fetch_timeout: ConfigDuration,
    ssh_key: Option<Spanned<String>>,
    known_hosts: Option<Spanned<String>>,
    token: Option<Spanned<RawSourceToken>>,
}

/// The HTTPS token of the fleet repository: a secret reference, like the API tokens.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSourceToken {
    #[serde(default = "default_token_username")]
    username: String,
    vault: Option<String>,
    key: Option<String>,
    env: Option<String>,
    /// Refused: token values never sit in the config file.
    value: Option<Spanned<toml::Value>>,
}

fn default_token_username() -> String {
    "git".into()
}

fn default_fetch_timeout() -> ConfigDuration {
    ConfigDuration(Duration::from_secs(120))
}

fn default_branch() -> String {
    "main".into()
}

fn default_poll() -> ConfigDuration {
    ConfigDuration(Duration::from_secs(60))
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawState {
    url: Option<String>,
    data_dir: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSecrets {
    url: Spanned<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReconcile {
    #[serde(default = "default_interval")]
    interval: ConfigDuration,
    /// Prune every site (a site's own `reconcile.prune` turns it on for that site alone).
    #[serde(default)]
    prune: bool,
    #[serde(default)]
    sites: BTreeMap<String, ConfigDuration>,
}

impl Default for RawReconcile {
    fn default() -> Self {
        Self {
            interval: default_interval(),
            prune: false,
            sites: BTreeMap::new(),
        }
    }
}

fn default_interval() -> ConfigDuration {
    ConfigDuration(Duration::from_secs(300))
}

/// What the daemon may do on its own (seed 000 §4.9, §6.4): items the policy holds back stay
/// in the plan, are logged and counted, and wait for an operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SelfHealPolicy {
    /// Start onboarding nodes newly committed to the manifests.
    pub onboard: bool,
    /// Continue interrupted jobs and `failed_retryable` ones whose recovery is resume/retry.
    pub resume: bool,
    /// Re-enter failed jobs from the top (000 §4.9 rerun) without an operator.
    pub rerun: bool,
    /// Accept deployed, enrolled machines as late successes.
    pub adopt: bool,
    /// Run the reimages, decommissions and retirements the manifests declare, and continue
    /// open decommissions (those requested through the API too). The declarative ones are
    /// destructive: they also need `allow_destructive`.
    pub decommission: bool,
    /// Apply items marked destructive (release, erase, redeploy) without an operator.
    pub allow_destructive: bool,
    /// Queue the Redfish provisionings the manifests declare (seed 003).
    pub provision: bool,
}

impl Default for SelfHealPolicy {
    fn default() -> Self {
        Self {
            onboard: true,
            resume: true,
            rerun: false,
            adopt: true,
            decommission: true,
            allow_destructive: false,
            provision: true,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApi {
    listen: SocketAddr,
    /// Moved to `[agent] public_url` (refused with a hint).
    public_url: Option<Spanned<String>>,
    #[serde(default)]
    max_body_bytes: Option<usize>,
    #[serde(default)]
    tokens: Vec<Spanned<RawToken>>,
    #[serde(default)]
    plain_http: Option<Spanned<bool>>,
    tls_cert: Option<String>,
    tls_key: Option<String>,
    max_connections: Option<usize>,
    max_connections_per_peer: Option<usize>,
    header_timeout: Option<ConfigDuration>,
    body_timeout: Option<ConfigDuration>,
    idle_timeout: Option<ConfigDuration>,
}

/// `[agent]`: the agent channel's listener and what deployed hosts install.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgent {
    listen: Option<SocketAddr>,
    public_url: Option<Spanned<String>>,
    #[serde(default)]
    plain_http: Option<Spanned<bool>>,
    tls_cert: Option<String>,
    tls_key: Option<String>,
    tls_client_ca: Option<String>,
    max_connections: Option<usize>,
    max_connections_per_peer: Option<usize>,
    header_timeout: Option<ConfigDuration>,
    body_timeout: Option<ConfigDuration>,
    idle_timeout: Option<ConfigDuration>,
    contact_flush: Option<ConfigDuration>,
    task_lease: Option<ConfigDuration>,
    binary_url: Option<Spanned<String>>,
    binary_sha256: Option<Spanned<String>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToken {
    name: String,
    role: TokenRole,
    /// A KV v2 path in the secret store (`<mount>/<path>`), with `key`.
    vault: Option<String>,
    key: Option<String>,
    /// An environment variable holding the token.
    env: Option<String>,
    /// Refused: token values never sit in the config file.
    value: Option<Spanned<toml::Value>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvents {
    sink: Spanned<String>,
    path: Option<String>,
    url: Option<Spanned<String>>,
    #[serde(default = "default_retry_base")]
    retry_base: ConfigDuration,
    #[serde(default = "default_retry_cap")]
    retry_cap: ConfigDuration,
    #[serde(default = "default_event_timeout")]
    timeout: ConfigDuration,
}

fn default_retry_base() -> ConfigDuration {
    ConfigDuration(Duration::from_secs(1))
}

fn default_retry_cap() -> ConfigDuration {
    ConfigDuration(Duration::from_secs(300))
}

fn default_event_timeout() -> ConfigDuration {
    ConfigDuration(Duration::from_secs(10))
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawExecutor {
    poll_interval: ConfigDuration,
    lease_ttl: ConfigDuration,
    retry_base: ConfigDuration,
    failed_retry_base: ConfigDuration,
    failed_retry_cap: ConfigDuration,
    seed: Option<u64>,
}

impl Default for RawExecutor {
    fn default() -> Self {
        Self {
            poll_interval: ConfigDuration(Duration::from_secs(10)),
            lease_ttl: ConfigDuration(Duration::from_secs(60)),
            retry_base: ConfigDuration(Duration::from_secs(2)),
            failed_retry_base: ConfigDuration(crate::apply::DEFAULT_FAILED_RETRY.base),
            failed_retry_cap: ConfigDuration(crate::apply::DEFAULT_FAILED_RETRY.cap),
            seed: None,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPeers {
    #[serde(default)]
    sim_control: BTreeMap<String, String>,
    ssh_identity: Option<String>,
}

/// Where the fleet comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceConfig {
    /// A path to a git repository (bare or not), or a `file://`, `https://`, `ssh://` or
    /// scp-like (`git@host:org/fleet.git`) URL. Never carries credentials (refused).
    pub repository: String,
    pub transport: Transport,
    pub branch: String,
    /// The fleet directory inside the repository (`""`: its root).
    pub path: String,
    pub poll_interval: Duration,
    /// How long one fetch may take before it is abandoned (and retried at the next poll).
    pub fetch_timeout: Duration,
    /// ssh only: the private key (`-i`) and the known-hosts file (strict checking).
    pub ssh_key: Option<PathBuf>,
    pub known_hosts: Option<PathBuf>,
    /// HTTP(S) only: sent as basic authentication.
    pub token: Option<SourceToken>,
}

impl SourceConfig {
    /// The repository's path when it is on this machine (what `--watch` follows).
    pub fn local_path(&self) -> Option<&Path> {
        (self.transport == Transport::Local).then(|| {
            Path::new(
                self.repository
                    .strip_prefix("file://")
                    .unwrap_or(&self.repository),
            )
        })
    }
}

/// How the fleet repository is reached. Transports that anyone on the path could alter
/// (`git://`, `http://` off this machine) are refused: the daemon acts on what it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Local,
    Https,
    /// `http://` to a loopback address (a local mirror or proxy).
    LoopbackHttp,
    Ssh,
}

impl Transport {
    /// What a `repository` value names, or why it is refused (message, hint).
    fn of(repository: &str) -> Result<Transport, (String, &'static str)> {
        const TAMPER: &str = "use https:// or ssh://, or a local mirror";
        let Some((scheme, _)) = repository.split_once("://") else {
            // git's rule: a colon before the first slash is scp-like ssh (`host:path`); a
            // one-letter "host" would be a drive letter, so that stays a path.
            return Ok(match repository.split_once(':') {
                Some((host, _)) if !host.contains('/') && host.len() > 1 => Transport::Ssh,
                _ => Transport::Local,
            });
        };
        let scheme = scheme.to_ascii_lowercase();
        if scheme == "file" {
            return Ok(Transport::Local);
        }
        let url = url::Url::parse(repository)
            .map_err(|e| (format!("`{repository}` is not a valid URL: {e}"), TAMPER))?;
        let credentials = || {
            (
                "the repository URL carries credentials; they would show in logs and /healthz"
                    .to_owned(),
                "put the token in `[source.token]` (env or vault) and remove it from the URL",
            )
        };
        match scheme.as_str() {
            "https" if url.username().is_empty() && url.password().is_none() => {
                Ok(Transport::Https)
            }
            "https" | "http" if !url.username().is_empty() || url.password().is_some() => {
                Err(credentials())
            }
            "http" => match url.host() {
                Some(url::Host::Ipv4(ip)) if ip.is_loopback() => Ok(Transport::LoopbackHttp),
                Some(url::Host::Ipv6(ip)) if ip.is_loopback() => Ok(Transport::LoopbackHttp),
                Some(url::Host::Domain("localhost")) => Ok(Transport::LoopbackHttp),
                _ => Err((
                    format!(
                        "`{repository}`: plain http:// can be altered in transit, and the daemon acts on what it reads"
                    ),
                    TAMPER,
                )),
            },
            "ssh" | "git+ssh" | "ssh+git" if url.password().is_some() => Err(credentials()),
            "ssh" | "git+ssh" | "ssh+git" => Ok(Transport::Ssh),
            "git" => Err((
                format!("`{repository}`: git:// is unauthenticated and can be altered in transit"),
                TAMPER,
            )),
            other => Err((
                format!("`{repository}`: unknown transport `{other}://`"),
                "a path, or a file://, https:// or ssh:// URL, or git@host:path",
            )),
        }
    }
}

/// The fleet repository's HTTPS token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceToken {
    pub username: String,
    pub source: TokenSource,
}

/// Where a configured token's value is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    Vault { path: String, key: String },
    Env(String),
}

impl TokenSource {
    /// Exactly one of `env`, or `vault` with `key`.
    fn of(vault: &Option<String>, key: &Option<String>, env: &Option<String>) -> Option<Self> {
        match (vault, key, env) {
            (Some(path), Some(key), None) => Some(TokenSource::Vault {
                path: path.clone(),
                key: key.clone(),
            }),
            (None, None, Some(env)) => Some(TokenSource::Env(env.clone())),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenConfig {
    pub name: String,
    pub role: TokenRole,
    pub source: TokenSource,
}

/// Where domain events go (seed 000 §8.0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventSink {
    /// Appended as JSON lines.
    File(PathBuf),
    /// POSTed one event per request as JSON.
    Webhook(url::Url),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventsConfig {
    pub sink: EventSink,
    pub retry_base: Duration,
    pub retry_cap: Duration,
    pub timeout: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorPacing {
    pub poll_interval: Duration,
    pub lease_ttl: Duration,
    pub retry_base: Duration,
    /// The backoff of jobs that ended `failed_retryable` before a reconcile pass retries them.
    pub failed_retry: crate::backoff::Backoff,
    pub seed: Option<u64>,
}

/// How a listener speaks TLS, as configured (the development CA is `<data_dir>/dev-ca`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsChoice {
    /// The operator's certificate chain and key; `client_ca` is what deployed hosts pin.
    Files {
        cert: PathBuf,
        key: PathBuf,
        client_ca: Option<PathBuf>,
    },
    /// The development CA the daemon makes on its first start.
    DevCa,
    /// Plain HTTP: only with `plain_http = true`.
    Off,
}

/// The agent channel's listener and what deployed hosts install (`[agent]`).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentListenerConfig {
    pub listen: SocketAddr,
    /// The base URL deployed hosts reach the channel at (the enrollment URL in cloud-init).
    pub public_url: Option<url::Url>,
    pub tls: TlsChoice,
    pub limits: crate::listener::Limits,
    /// How often coalesced agent contacts are written (at most a quarter of the drift
    /// heartbeat threshold).
    pub contact_flush: Duration,
    /// A handed-out task's lease.
    pub task_lease: Duration,
    /// The agent executable cloud-init installs.
    pub binary: Option<crate::cloudinit::AgentBinary>,
}

/// A validated daemon configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonConfig {
    /// The file it came from.
    pub file: PathBuf,
    pub source: SourceConfig,
    /// `None`: `sqlite://<data_dir>/state.db`.
    pub state_url: String,
    /// The fetched mirror and other daemon files.
    pub data_dir: PathBuf,
    pub secrets_url: String,
    pub reconcile_interval: Duration,
    pub site_intervals: BTreeMap<String, Duration>,
    /// `[reconcile] prune`: decommission nodes removed from the manifests in every site, with
    /// their recorded release policy (default off; a site's `reconcile.prune` turns it on for
    /// that site).
    pub prune: bool,
    pub self_heal: SelfHealPolicy,
    /// The admin API's listener.
    pub listen: SocketAddr,
    pub api_tls: TlsChoice,
    pub api_limits: crate::listener::Limits,
    pub max_body_bytes: usize,
    pub tokens: Vec<TokenConfig>,
    /// The agent channel's own listener.
    pub agent: AgentListenerConfig,
    pub events: Option<EventsConfig>,
    /// `[drift]`: the drift pass's heartbeat threshold and auto-actions (000 §6.3, §6.4).
    pub drift: DriftPolicy,
    pub executor: ExecutorPacing,
    /// Simulator control URLs per site (BMC and host stand-ins, docs/contracts.md §3) instead
    /// of ipmitool and ssh; for tests and demos.
    pub sim_control: BTreeMap<String, url::Url>,
    pub ssh_identity: Option<PathBuf>,
    /// `[provisioner]`: the Redfish provisioner (seed 003); `None`: not run.
    pub provisioner: Option<super::provisioner::ProvisionerConfig>,
}

impl DaemonConfig {
    /// The reconcile interval of a site (its own, else the default).
    pub fn interval_of(&self, site: &str) -> Duration {
        self.site_intervals
            .get(site)
            .copied()
            .unwrap_or(self.reconcile_interval)
    }

    /// Read and validate a configuration file.
    pub fn load(path: &Path) -> Result<DaemonConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.display().to_string(),
            line: 0,
            column: 0,
            message: format!("cannot read the configuration: {e}"),
            hint: Some("pass --config FILE (see examples/daemon.toml)".into()),
        })?;
        DaemonConfig::parse(&text, path)
    }

    /// Validate configuration text; `path` names it in errors and anchors relative paths.
    pub fn parse(text: &str, path: &Path) -> Result<DaemonConfig, ConfigError> {
        let at = |span: Option<Range<usize>>, message: String, hint: Option<&str>| {
            let (line, column) = span.map(|s| line_col(text, s.start)).unwrap_or((1, 1));
            ConfigError {
                file: path.display().to_string(),
                line,
                column,
                message,
                hint: hint.map(str::to_owned),
            }
        };
        let raw: Raw = toml::from_str(text).map_err(|e| {
            at(
                e.span(),
                e.message().trim().to_owned(),
                Some("see examples/daemon.toml and docs/daemon.md for every key"),
            )
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let resolve = |p: &str| {
            let p = PathBuf::from(p);
            if p.is_absolute() { p } else { base.join(p) }
        };

        let source = source_config(&raw.source, &at, &resolve)?;

        let data_dir = raw
            .state
            .data_dir
            .as_deref()
            .map(resolve)
            .unwrap_or_else(|| base.join(".metalform-daemon"));
        let state_url = raw
            .state
            .url
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}", data_dir.join("state.db").display()));

        let secrets_url = raw.secrets.url.get_ref().clone();
        // The scheme only: the backend (and VAULT_TOKEN) is checked when the daemon starts.
        if !["vault://", "vault+https://", "vault+http://", "file://"]
            .iter()
            .any(|scheme| secrets_url.starts_with(scheme))
        {
            return Err(at(
                Some(raw.secrets.url.span()),
                format!("invalid secrets URL `{secrets_url}`"),
                Some(
                    "vault://HOST:PORT (https; token from VAULT_TOKEN, CA from VAULT_CACERT), vault+http://HOST:PORT (plain http), or file://PATH",
                ),
            ));
        }

        if let Some(moved) = &raw.api.public_url {
            return Err(at(
                Some(moved.span()),
                "`api.public_url` moved: the agent channel has its own listener".into(),
                Some("set [agent] listen and public_url (the URL deployed hosts reach, https://…)"),
            ));
        }
        let max_body_bytes = raw
            .api
            .max_body_bytes
            .unwrap_or(crate::api::DEFAULT_MAX_BODY_BYTES);
        let api_tls = tls_choice(
            "api",
            &raw.api.plain_http,
            &raw.api.tls_cert,
            &raw.api.tls_key,
            &None,
            &at,
            &resolve,
        )?;
        let api_limits = limits(
            crate::listener::Limits {
                max_body_bytes,
                ..crate::listener::Limits::admin()
            },
            raw.api.max_connections,
            raw.api.max_connections_per_peer,
            [
                raw.api.header_timeout,
                raw.api.body_timeout,
                raw.api.idle_timeout,
            ],
        );
        let agent = agent_config(&raw, &at, &resolve)?;
        let mut tokens = Vec::new();
        let mut names = std::collections::BTreeSet::new();
        for token in &raw.api.tokens {
            let span = Some(token.span());
            let t = token.get_ref();
            if let Some(value) = &t.value {
                return Err(at(
                    Some(value.span()),
                    format!(
                        "token `{}` has an inline `value`: token values never sit in the configuration",
                        t.name
                    ),
                    Some("use `env = \"VARIABLE\"` or `vault = \"<mount>/<path>\"` with `key`"),
                ));
            }
            if t.name.trim().is_empty() {
                return Err(at(
                    span,
                    "a token needs a `name` (the audit log's actor)".into(),
                    None,
                ));
            }
            if !names.insert(t.name.clone()) {
                return Err(at(
                    span,
                    format!("token name `{}` is used twice", t.name),
                    None,
                ));
            }
            let source = TokenSource::of(&t.vault, &t.key, &t.env).ok_or_else(|| {
                at(
                    span.clone(),
                    format!(
                        "token `{}` needs either `env` or `vault` with `key`",
                        t.name
                    ),
                    Some(
                        "e.g. env = \"METALFORM_TOKEN_OPS\", or vault = \"kv/metalform/api-tokens\" and key = \"ops\"",
                    ),
                )
            })?;
            tokens.push(TokenConfig {
                name: t.name.clone(),
                role: t.role,
                source,
            });
        }

        let events = match &raw.events {
            None => None,
            Some(events) => {
                let sink = match events.sink.get_ref().as_str() {
                    "file" => {
                        EventSink::File(resolve(events.path.as_deref().ok_or_else(|| {
                            at(
                                Some(events.sink.span()),
                                "`events.sink = \"file\"` needs `events.path`".into(),
                                None,
                            )
                        })?))
                    }
                    "webhook" => {
                        let url = events.url.as_ref().ok_or_else(|| {
                            at(
                                Some(events.sink.span()),
                                "`events.sink = \"webhook\"` needs `events.url`".into(),
                                None,
                            )
                        })?;
                        EventSink::Webhook(url::Url::parse(url.get_ref()).map_err(|e| {
                            at(Some(url.span()), format!("`events.url`: {e}"), None)
                        })?)
                    }
                    other => {
                        return Err(at(
                            Some(events.sink.span()),
                            format!("unknown events sink `{other}`"),
                            Some("`file` (JSON lines) or `webhook` (HTTP POST)"),
                        ));
                    }
                };
                Some(EventsConfig {
                    sink,
                    retry_base: events.retry_base.0,
                    retry_cap: events.retry_cap.0.max(events.retry_base.0),
                    timeout: events.timeout.0,
                })
            }
        };

        let mut sim_control = BTreeMap::new();
        for (site, text) in &raw.peers.sim_control {
            let url = url::Url::parse(text).map_err(|e| {
                at(
                    None,
                    format!("`peers.sim_control.{site}` `{text}`: {e}"),
                    Some("the simulator's base URL, e.g. http://127.0.0.1:5240"),
                )
            })?;
            sim_control.insert(site.clone(), url);
        }

        let provisioner =
            super::provisioner::config(raw.provisioner.as_ref(), &data_dir, base, &at)?;

        Ok(DaemonConfig {
            file: path.to_path_buf(),
            source,
            state_url,
            data_dir,
            secrets_url,
            reconcile_interval: raw.reconcile.interval.0,
            prune: raw.reconcile.prune,
            site_intervals: raw
                .reconcile
                .sites
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect(),
            self_heal: raw.self_heal,
            listen: raw.api.listen,
            api_tls,
            api_limits,
            max_body_bytes,
            tokens,
            agent,
            events,
            drift: raw.drift,
            executor: ExecutorPacing {
                poll_interval: raw.executor.poll_interval.0,
                lease_ttl: raw.executor.lease_ttl.0,
                retry_base: raw.executor.retry_base.0,
                failed_retry: crate::backoff::Backoff::new(
                    raw.executor.failed_retry_base.0,
                    raw.executor
                        .failed_retry_cap
                        .0
                        .max(raw.executor.failed_retry_base.0),
                ),
                seed: raw.executor.seed,
            },
            sim_control,
            ssh_identity: raw.peers.ssh_identity.as_deref().map(resolve),
            provisioner,
        })
    }
}

/// A listener's TLS from its keys: a certificate and key, else plain HTTP when asked for, else
/// the development CA.
fn tls_choice(
    table: &str,
    plain: &Option<Spanned<bool>>,
    cert: &Option<String>,
    key: &Option<String>,
    client_ca: &Option<String>,
    at: &impl Fn(Option<Range<usize>>, String, Option<&str>) -> ConfigError,
    resolve: &impl Fn(&str) -> PathBuf,
) -> Result<TlsChoice, ConfigError> {
    let plain_span = plain.as_ref().map(|p| p.span());
    let plain = plain.as_ref().is_some_and(|p| *p.get_ref());
    match (cert, key) {
        (Some(_), Some(_)) if plain => Err(at(
            plain_span,
            format!("`{table}.plain_http = true` and a TLS certificate contradict each other"),
            Some("remove one of them"),
        )),
        (Some(cert), Some(key)) => Ok(TlsChoice::Files {
            cert: resolve(cert),
            key: resolve(key),
            client_ca: client_ca.as_deref().map(resolve),
        }),
        (None, None) if plain => Ok(TlsChoice::Off),
        (None, None) => Ok(TlsChoice::DevCa),
        _ => Err(at(
            None,
            format!("`{table}.tls_cert` and `{table}.tls_key` go together"),
            Some("give both PEM files, or neither (a development CA is made)"),
        )),
    }
}

/// `base` with the configured overrides.
fn limits(
    base: crate::listener::Limits,
    max_connections: Option<usize>,
    per_peer: Option<usize>,
    [header, body, idle]: [Option<ConfigDuration>; 3],
) -> crate::listener::Limits {
    crate::listener::Limits {
        max_connections: max_connections.unwrap_or(base.max_connections).max(1),
        max_connections_per_peer: per_peer.unwrap_or(base.max_connections_per_peer).max(1),
        header_timeout: header.map_or(base.header_timeout, |d| d.0),
        body_timeout: body.map_or(base.body_timeout, |d| d.0),
        idle_timeout: idle.map_or(base.idle_timeout, |d| d.0),
        ..base
    }
}

/// `[agent]`: where the agent channel listens, how agents reach it, and what they install.
fn agent_config(
    raw: &Raw,
    at: &impl Fn(Option<Range<usize>>, String, Option<&str>) -> ConfigError,
    resolve: &impl Fn(&str) -> PathBuf,
) -> Result<AgentListenerConfig, ConfigError> {
    let agent = &raw.agent;
    let listen = agent
        .listen
        .unwrap_or_else(|| SocketAddr::new(raw.api.listen.ip(), 8741));
    let tls = tls_choice(
        "agent",
        &agent.plain_http,
        &agent.tls_cert,
        &agent.tls_key,
        &agent.tls_client_ca,
        at,
        resolve,
    )?;
    let public_url = match &agent.public_url {
        Some(text) => {
            let url = url::Url::parse(text.get_ref()).map_err(|e| {
                at(
                    Some(text.span()),
                    format!("`agent.public_url` `{}`: {e}", text.get_ref()),
                    Some("the URL deployed hosts reach the agent channel at, e.g. https://10.176.46.5:8741/"),
                )
            })?;
            let ok = match url.scheme() {
                "https" => true,
                "http" => tls == TlsChoice::Off,
                _ => false,
            };
            if !ok {
                return Err(at(
                    Some(text.span()),
                    format!(
                        "`agent.public_url` must be https:// (http:// only with `agent.plain_http = true`), not {}",
                        url.scheme()
                    ),
                    None,
                ));
            }
            Some(url)
        }
        None if listen.ip().is_unspecified() => {
            return Err(at(
                None,
                format!(
                    "the agent channel listens on {listen} (every interface) and no `agent.public_url` is set: deployed hosts would not know where to enroll"
                ),
                Some("set [agent] public_url to the URL the hosts' deploy network reaches"),
            ));
        }
        None => None,
    };
    let binary = match (&agent.binary_url, &agent.binary_sha256) {
        (None, None) => None,
        (Some(url), Some(sha)) => {
            let binary = crate::cloudinit::AgentBinary {
                url: url.get_ref().trim().to_owned(),
                sha256: sha.get_ref().trim().to_ascii_lowercase(),
            };
            let parsed = url::Url::parse(&binary.url)
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https"));
            if parsed.is_none() {
                return Err(at(
                    Some(url.span()),
                    format!("`agent.binary_url` `{}` is not an http(s) URL", binary.url),
                    None,
                ));
            }
            if binary.sha256.len() != 64 || !binary.sha256.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(at(
                    Some(sha.span()),
                    "`agent.binary_sha256` must be 64 hex digits".into(),
                    Some("sha256sum metalform-agent prints it"),
                ));
            }
            Some(binary)
        }
        (Some(s), None) | (None, Some(s)) => {
            return Err(at(
                Some(s.span()),
                "`agent.binary_url` and `agent.binary_sha256` go together: hosts install only a pinned agent".into(),
                None,
            ));
        }
    };
    let threshold = raw.drift.heartbeat_threshold;
    let contact_flush = agent
        .contact_flush
        .map_or(Duration::from_secs(5), |d| d.0)
        .min(threshold / 4)
        .max(Duration::from_millis(10));
    Ok(AgentListenerConfig {
        listen,
        public_url,
        tls,
        limits: {
            let limits = limits(
                crate::listener::Limits::agent(),
                agent.max_connections,
                agent.max_connections_per_peer,
                [agent.header_timeout, agent.body_timeout, agent.idle_timeout],
            );
            // A configured per-peer limit is kept as given.
            match agent.max_connections_per_peer {
                Some(_) => limits,
                None => limits.one_peer_on_loopback(listen),
            }
        },
        contact_flush,
        task_lease: agent
            .task_lease
            .map_or(Duration::from_secs(120), |d| d.0)
            .max(Duration::from_secs(1)),
        binary,
    })
}

/// `[source]`: the repository and how it is reached. `at` locates an error, `resolve` anchors a
/// relative path at the configuration file.
fn source_config(
    raw: &RawSource,
    at: &impl Fn(Option<Range<usize>>, String, Option<&str>) -> ConfigError,
    resolve: &impl Fn(&str) -> PathBuf,
) -> Result<SourceConfig, ConfigError> {
    let repository = raw.repository.get_ref().trim().to_owned();
    let repository_at = Some(raw.repository.span());
    if repository.is_empty() {
        return Err(at(
            repository_at,
            "`source.repository` is empty".into(),
            Some("a path to the fleet's git repository, or an https:// or ssh:// URL"),
        ));
    }
    let transport = Transport::of(&repository)
        .map_err(|(message, hint)| at(repository_at.clone(), message, Some(hint)))?;
    let repository = match transport {
        Transport::Local if !repository.contains("://") => {
            resolve(&repository).display().to_string()
        }
        _ => repository,
    };
    let ssh_only = |field: &Option<Spanned<String>>, name: &str| match field {
        Some(value) if transport != Transport::Ssh => Err(at(
            Some(value.span()),
            format!("`source.{name}` applies to ssh repositories only"),
            Some("remove it, or use an ssh://host/path or git@host:path repository"),
        )),
        Some(value) => Ok(Some(resolve(value.get_ref()))),
        None => Ok(None),
    };
    let ssh_key = ssh_only(&raw.ssh_key, "ssh_key")?;
    let known_hosts = ssh_only(&raw.known_hosts, "known_hosts")?;
    let token = match &raw.token {
        None => None,
        Some(spanned) => {
            let span = Some(spanned.span());
            let token = spanned.get_ref();
            if let Some(value) = &token.value {
                return Err(at(
                    Some(value.span()),
                    "`source.token` has an inline `value`: token values never sit in the configuration".into(),
                    Some("use `env = \"VARIABLE\"` or `vault = \"<mount>/<path>\"` with `key`"),
                ));
            }
            if !matches!(transport, Transport::Https | Transport::LoopbackHttp) {
                return Err(at(
                    span,
                    "`source.token` is sent over https:// only".into(),
                    Some("use an https:// repository, or ssh_key for ssh"),
                ));
            }
            let source =
                TokenSource::of(&token.vault, &token.key, &token.env).ok_or_else(|| {
                    at(
                        span.clone(),
                        "`source.token` needs either `env` or `vault` with `key`".into(),
                        Some("e.g. token = { env = \"FLEET_GIT_TOKEN\" }"),
                    )
                })?;
            Some(SourceToken {
                username: token.username.clone(),
                source,
            })
        }
    };
    Ok(SourceConfig {
        repository,
        transport,
        branch: raw.branch.clone(),
        path: raw
            .path
            .as_deref()
            .map(|p| p.trim_matches('/').trim_start_matches("./").to_owned())
            .filter(|p| p != ".")
            .unwrap_or_default(),
        poll_interval: raw.poll_interval.0,
        fetch_timeout: raw.fetch_timeout.0,
        ssh_key,
        known_hosts,
        token,
    })
}

/// 1-based line and column (in characters) of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit('\n')
        .next()
        .map(|l| l.chars().count())
        .unwrap_or(0)
        + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[source]
repository = "fleet.git"
branch = "main"
poll_interval = "30s"

[secrets]
url = "file:///etc/metalform/secrets.json"

[reconcile]
interval = "5m"
sites = { dc1 = "2m" }

[api]
listen = "127.0.0.1:8740"

[[api.tokens]]
name = "ops"
role = "admin"
env = "METALFORM_TOKEN_OPS"

[[api.tokens]]
name = "agents"
role = "agent"
vault = "kv/metalform/api-tokens"
key = "agents"

[events]
sink = "file"
path = "events.jsonl"
"#;

    fn parse(text: &str) -> Result<DaemonConfig, ConfigError> {
        DaemonConfig::parse(text, Path::new("/etc/metalform/daemon.toml"))
    }

    #[test]
    fn the_example_configuration_is_valid() {
        let text = include_str!("../../examples/daemon.toml");
        let config = parse(text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.tokens.len(), 2);
        assert_eq!(
            config.agent.public_url.as_ref().unwrap().as_str(),
            "https://10.176.46.5:8741/"
        );
        assert_eq!(config.agent.listen, "0.0.0.0:8741".parse().unwrap());
        assert_eq!(config.api_tls, TlsChoice::DevCa);
        assert!(matches!(config.agent.tls, TlsChoice::Files { .. }));
        assert!(config.agent.binary.is_some());
        assert!(matches!(config.events.unwrap().sink, EventSink::Webhook(_)));
        // The example spells out the drift policy's and the failed-job backoff's defaults.
        assert_eq!(config.drift, crate::drift::DriftPolicy::default());
        assert_eq!(
            config.executor.failed_retry,
            crate::apply::DEFAULT_FAILED_RETRY
        );
    }

    #[test]
    fn a_good_file_resolves_paths_and_defaults() {
        let config = parse(GOOD).unwrap();
        assert_eq!(config.source.repository, "/etc/metalform/fleet.git");
        assert_eq!(config.source.poll_interval, Duration::from_secs(30));
        assert_eq!(config.interval_of("dc1"), Duration::from_secs(120));
        assert_eq!(config.interval_of("dc2"), Duration::from_secs(300));
        assert_eq!(
            config.state_url,
            "sqlite:///etc/metalform/.metalform-daemon/state.db"
        );
        assert_eq!(config.tokens.len(), 2);
        assert_eq!(
            config.tokens[1].source,
            TokenSource::Vault {
                path: "kv/metalform/api-tokens".into(),
                key: "agents".into()
            }
        );
        assert_eq!(
            config.events.unwrap().sink,
            EventSink::File("/etc/metalform/events.jsonl".into())
        );
        assert_eq!(config.self_heal, SelfHealPolicy::default());
        assert_eq!(config.drift, crate::drift::DriftPolicy::default());
    }

    #[test]
    fn the_drift_table_is_the_drift_policy_with_located_errors() {
        let text = format!("{GOOD}\n[drift]\nheartbeat_threshold = \"90s\"\nquarantine = false\n");
        let config = parse(&text).unwrap();
        assert_eq!(config.drift.heartbeat_threshold, Duration::from_secs(90));
        assert!(!config.drift.quarantine);
        assert!(config.drift.release_retired);

        let lines = GOOD.lines().count();
        let err = parse(&format!("{GOOD}\n[drift]\nquarantine_all = true\n")).unwrap_err();
        assert_eq!(err.line, lines + 3, "{err}");
        assert!(
            err.message.contains("unknown field `quarantine_all`"),
            "{err}"
        );
        let err = parse(&format!("{GOOD}\n[drift]\nabsent_guard_fraction = 1.5\n")).unwrap_err();
        assert_eq!(err.line, lines + 3, "{err}");
        assert!(err.message.contains("between 0 and 1"), "{err}");
    }

    #[test]
    fn errors_carry_file_line_and_column() {
        let bad = GOOD.replace("poll_interval = \"30s\"", "poll_interval = \"30 parsecs\"");
        let err = parse(&bad).unwrap_err();
        assert_eq!((err.line, err.column), (5, 17), "{err}");
        assert!(
            err.to_string()
                .starts_with("/etc/metalform/daemon.toml:5:17: "),
            "{err}"
        );
        assert!(err.message.contains("30 parsecs"), "{err}");

        let bad = GOOD.replace("branch = \"main\"", "brnach = \"main\"");
        let err = parse(&bad).unwrap_err();
        assert_eq!(err.line, 4, "{err}");
        assert!(err.message.contains("unknown field `brnach`"), "{err}");
    }

    #[test]
    fn inline_token_values_are_refused_without_echoing_them() {
        let bad = GOOD.replace(
            "env = \"METALFORM_TOKEN_OPS\"",
            "value = \"s3cr3t-token-value\"",
        );
        let err = parse(&bad).unwrap_err();
        assert_eq!(err.line, 20, "{err}");
        assert!(err.message.contains("inline `value`"), "{err}");
        assert!(!err.to_string().contains("s3cr3t"), "{err}");
        assert!(err.hint.unwrap().contains("env"));
    }

    #[test]
    fn semantic_errors_point_at_their_value() {
        let bad = GOOD.replace("sink = \"file\"", "sink = \"kafka\"");
        let err = parse(&bad).unwrap_err();
        assert_eq!((err.line, err.column), (29, 8), "{err}");
        assert_eq!(err.message, "unknown events sink `kafka`");

        let bad = GOOD.replace("127.0.0.1:8740", "0.0.0.0:8740");
        let err = parse(&bad).unwrap_err();
        assert!(err.message.contains("no `agent.public_url`"), "{err}");
    }

    #[test]
    fn a_loopback_agent_listener_limits_connections_globally_not_per_address() {
        // Loopback: every connection comes from one address (simulated agents, a local proxy).
        let config = parse(GOOD).unwrap();
        assert_eq!(config.agent.limits.max_connections_per_peer, 20_000);
        let with_agent = |body: &str| parse(&format!("{GOOD}\n[agent]\n{body}\n")).unwrap();
        let set = with_agent("listen = \"127.0.0.1:8741\"\nmax_connections_per_peer = 4");
        assert_eq!(set.agent.limits.max_connections_per_peer, 4);
        // Every interface: real hosts, each with its address, get the per-address default.
        let open = with_agent("listen = \"0.0.0.0:8741\"\npublic_url = \"https://10.0.0.5:8741/\"");
        assert_eq!(open.agent.limits.max_connections_per_peer, 16);
    }

    #[test]
    fn listeners_speak_tls_unless_told_not_to_and_agent_keys_are_checked() {
        let config = parse(GOOD).unwrap();
        assert_eq!(config.api_tls, TlsChoice::DevCa);
        assert_eq!(config.agent.tls, TlsChoice::DevCa);
        assert_eq!(config.agent.listen, "127.0.0.1:8741".parse().unwrap());
        assert_eq!(config.agent.task_lease, Duration::from_secs(120));
        // A quarter of the drift heartbeat threshold at most.
        assert_eq!(config.agent.contact_flush, Duration::from_secs(5));
        let short = format!("{GOOD}\n[drift]\nheartbeat_threshold = \"8s\"\n");
        assert_eq!(
            parse(&short).unwrap().agent.contact_flush,
            Duration::from_secs(2)
        );
        let lines = GOOD.lines().count();
        let with_agent = |body: &str| parse(&format!("{GOOD}\n[agent]\n{body}\n"));
        let config = with_agent(
            "listen = \"0.0.0.0:9000\"\npublic_url = \"http://10.0.0.5:9000/\"\nplain_http = true",
        )
        .unwrap();
        assert_eq!(config.agent.tls, TlsChoice::Off);
        let err = with_agent("listen = \"0.0.0.0:9000\"\npublic_url = \"http://10.0.0.5:9000/\"")
            .unwrap_err();
        assert_eq!(err.line, lines + 4, "{err}");
        assert_eq!(
            err.message,
            "`agent.public_url` must be https:// (http:// only with `agent.plain_http = true`), not http"
        );
        let err = with_agent("tls_cert = \"agent.pem\"").unwrap_err();
        assert_eq!(
            err.message,
            "`agent.tls_cert` and `agent.tls_key` go together"
        );
        let config =
            with_agent("tls_cert = \"tls/agent.pem\"\ntls_key = \"tls/agent.key\"").unwrap();
        assert_eq!(
            config.agent.tls,
            TlsChoice::Files {
                cert: "/etc/metalform/tls/agent.pem".into(),
                key: "/etc/metalform/tls/agent.key".into(),
                client_ca: None
            }
        );
        let err = with_agent("binary_url = \"https://a.example/metalform-agent\"").unwrap_err();
        assert!(err.message.contains("go together"), "{err}");
        let err = with_agent(
            "binary_url = \"https://a.example/metalform-agent\"\nbinary_sha256 = \"abc\"",
        )
        .unwrap_err();
        assert_eq!(err.message, "`agent.binary_sha256` must be 64 hex digits");
        // The old place of the enrollment URL says where it went.
        let err = parse(&GOOD.replace(
            "listen = \"127.0.0.1:8740\"",
            "listen = \"127.0.0.1:8740\"\npublic_url = \"http://10.0.0.5:8740/\"",
        ))
        .unwrap_err();
        assert_eq!(
            err.message,
            "`api.public_url` moved: the agent channel has its own listener"
        );
        let plain = GOOD.replace(
            "listen = \"127.0.0.1:8740\"",
            "listen = \"127.0.0.1:8740\"\nplain_http = true",
        );
        assert_eq!(parse(&plain).unwrap().api_tls, TlsChoice::Off);
    }

    fn with_source(lines: &str) -> Result<DaemonConfig, ConfigError> {
        parse(&GOOD.replace("repository = \"fleet.git\"", lines))
    }

    #[test]
    fn repositories_are_reached_by_their_transport() {
        let cases = [
            ("/srv/git/fleet.git", Transport::Local),
            ("file:///srv/git/fleet.git", Transport::Local),
            ("https://git.example/infra/fleet.git", Transport::Https),
            ("http://127.0.0.1:8080/fleet.git", Transport::LoopbackHttp),
            ("http://localhost/fleet.git", Transport::LoopbackHttp),
            ("ssh://git@git.example:2222/infra/fleet.git", Transport::Ssh),
            ("git@git.example:infra/fleet.git", Transport::Ssh),
            ("./fleet:v2/repo", Transport::Local),
        ];
        for (repository, transport) in cases {
            let config = with_source(&format!("repository = \"{repository}\"")).unwrap();
            assert_eq!(config.source.transport, transport, "{repository}");
            assert_eq!(
                config.source.local_path().is_some(),
                transport == Transport::Local,
                "{repository}"
            );
        }
        let config = with_source("repository = \"fleet.git\"").unwrap();
        assert_eq!(
            config.source.local_path(),
            Some(Path::new("/etc/metalform/fleet.git"))
        );
        assert_eq!(config.source.fetch_timeout, Duration::from_secs(120));
    }

    #[test]
    fn tamperable_transports_and_inline_credentials_are_refused() {
        let refused = [
            (
                "http://git.example/fleet.git",
                "`http://git.example/fleet.git`: plain http:// can be altered in transit, and the daemon acts on what it reads",
            ),
            (
                "git://git.example/fleet.git",
                "`git://git.example/fleet.git`: git:// is unauthenticated and can be altered in transit",
            ),
            (
                "https://deploy:hunter2-token@git.example/fleet.git",
                "the repository URL carries credentials; they would show in logs and /healthz",
            ),
            (
                "ssh://git:hunter2-token@git.example/fleet.git",
                "the repository URL carries credentials; they would show in logs and /healthz",
            ),
            (
                "ftp://git.example/fleet.git",
                "`ftp://git.example/fleet.git`: unknown transport `ftp://`",
            ),
        ];
        for (repository, message) in refused {
            let err = with_source(&format!("repository = \"{repository}\"")).unwrap_err();
            assert_eq!((err.line, err.column), (3, 14), "{err}");
            assert_eq!(err.message, message);
            assert!(err.hint.is_some());
            if message.contains("credentials") {
                assert!(!err.to_string().contains("hunter2"), "{err}");
            }
        }
    }

    #[test]
    fn source_credentials_match_the_transport() {
        let config = with_source(
            "repository = \"https://git.example/fleet.git\"\ntoken = { env = \"FLEET_GIT_TOKEN\", username = \"x-access-token\" }",
        )
        .unwrap();
        assert_eq!(
            config.source.token,
            Some(SourceToken {
                username: "x-access-token".into(),
                source: TokenSource::Env("FLEET_GIT_TOKEN".into()),
            })
        );
        let config = with_source(
            "repository = \"git@git.example:fleet.git\"\nssh_key = \"keys/deploy\"\nknown_hosts = \"/etc/metalform/known_hosts\"\nfetch_timeout = \"30s\"",
        )
        .unwrap();
        assert_eq!(
            config.source.ssh_key.as_deref(),
            Some(Path::new("/etc/metalform/keys/deploy"))
        );
        assert_eq!(config.source.fetch_timeout, Duration::from_secs(30));

        let err = with_source(
            "repository = \"ssh://git.example/fleet.git\"\ntoken = { env = \"FLEET_GIT_TOKEN\" }",
        )
        .unwrap_err();
        assert_eq!((err.line, err.column), (4, 9), "{err}");
        assert_eq!(err.message, "`source.token` is sent over https:// only");
        let err = with_source("repository = \"fleet.git\"\nssh_key = \"id\"").unwrap_err();
        assert_eq!((err.line, err.column), (4, 11), "{err}");
        assert_eq!(
            err.message,
            "`source.ssh_key` applies to ssh repositories only"
        );
        let err = with_source(
            "repository = \"https://git.example/fleet.git\"\ntoken = { value = \"hunter2-token\" }",
        )
        .unwrap_err();
        assert!(err.message.contains("inline `value`"), "{err}");
        assert!(!err.to_string().contains("hunter2"), "{err}");
        let err = with_source(
            "repository = \"https://git.example/fleet.git\"\ntoken = { username = \"ci\" }",
        )
        .unwrap_err();
        assert_eq!(
            err.message,
            "`source.token` needs either `env` or `vault` with `key`"
        );
    }
}
