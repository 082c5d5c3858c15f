//! `metalform render cloud-init NODE [--fleet DIR] [--rev REV] [--site S] [--show-secrets]
//! [--secrets URL] [--system-id ID] [--agent-url URL] [--boot-disk PATH] [--format text|json]`
//! (issue 5; seed 000 §9): print the first-boot payload a node would be deployed with.
//!
//! Secrets are redacted unless `--show-secrets`, which needs secret access (`--secrets URL` /
//! `METALFORM_SECRETS`) to hash the site's deploy password. The enrollment token does not exist
//! until the onboarding issues it at deploy time (it is single use), so it is always a
//! placeholder here, as are the system id and enrollment URL when they are not known.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::json;
use url::Url;

use super::output::ReportFormat;
use super::{CliError, Exit, GlobalArgs};
use crate::clock::SystemClock;
use crate::cloudinit::{self, CloudInitInput, NodeRuntime, TOKEN_PLACEHOLDER};
use crate::model::{Fleet, Node};
use crate::secrets::{self, Secret, SecretError, SecretStore};
use crate::store::Store;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub what: What,
}

#[derive(Debug, clap::Subcommand)]
pub enum What {
    /// Print the cloud-init user_data a node is deployed with (docs/cloud-init.md).
    CloudInit(CloudInitArgs),
}

#[derive(Debug, clap::Args)]
pub struct CloudInitArgs {
    /// The node: its hostname (with --site when two sites share it) or SITE/HOSTNAME.
    pub node: String,
    /// Fleet directory (holding sites/, profiles/, nodes/).
    #[arg(long, default_value = ".", value_name = "DIR")]
    pub fleet: PathBuf,
    /// Read the fleet as of this git revision.
    #[arg(long, value_name = "REV")]
    pub rev: Option<String>,
    /// The node's site, when the hostname is not unique.
    #[arg(long, value_name = "SITE")]
    pub site: Option<String>,
    /// Print the deploy password hash instead of `<redacted>` (needs --secrets). The
    /// enrollment token stays a placeholder: it is issued, once, at deploy time.
    #[arg(long)]
    pub show_secrets: bool,
    /// Secret store: vault://HOST:PORT (token from VAULT_TOKEN) or file://PATH.
    #[arg(long, env = "METALFORM_SECRETS", value_name = "URL")]
    pub secrets: Option<String>,
    /// The machine's MAAS system id (default: the one recorded in the state store, if any).
    #[arg(long, value_name = "ID")]
    pub system_id: Option<String>,
    #[command(flatten)]
    pub agent: AgentPayloadArgs,
    /// The boot disk's /dev/disk/by-id path, which data-disk initialisation leaves alone.
    #[arg(long, value_name = "PATH")]
    pub boot_disk: Option<String>,
    /// `text`: the document; `json`: {node, digest, secrets, layers, user_data}.
    #[arg(long, value_enum, default_value_t)]
    pub format: ReportFormat,
}

/// The parts of a payload that come from the server deploying it (`render cloud-init`, `plan`).
#[derive(Debug, clap::Args)]
pub struct AgentPayloadArgs {
    /// The base URL deployed hosts reach metalform's agent endpoint at (apply's --agent-url).
    #[arg(long, value_name = "URL")]
    pub agent_url: Option<Url>,
    #[command(flatten)]
    pub agent_binary: super::apply::AgentBinaryArgs,
    /// The CA bundle deployed hosts pin for the agent channel (the daemon's or apply's
    /// development CA `ca.pem`, or the operator's).
    #[arg(long, value_name = "FILE")]
    pub agent_ca: Option<PathBuf>,
}

impl AgentPayloadArgs {
    /// Whether any was given.
    pub fn given(&self) -> bool {
        self.agent_url.is_some()
            || self.agent_binary.agent_binary_url.is_some()
            || self.agent_ca.is_some()
    }

    /// The enrollment URL of --agent-url.
    pub fn enroll_url(&self) -> Option<String> {
        self.agent_url.as_ref().map(crate::agent::enroll_url)
    }

    /// The agent install of --agent-binary-url/--agent-binary-sha256 and --agent-ca.
    pub fn install(&self) -> Result<crate::cloudinit::AgentInstall, CliError> {
        Ok(crate::cloudinit::AgentInstall {
            binary: self.agent_binary.binary()?,
            ca_bundle: match &self.agent_ca {
                Some(path) => Some(std::fs::read_to_string(path).map_err(|e| {
                    CliError::user(format!("cannot read --agent-ca {}: {e}", path.display()))
                })?),
                None => None,
            },
        })
    }
}

/// Placeholders for values that do not exist outside an onboarding.
const SYSTEM_ID_PLACEHOLDER: &str = "<system-id>";
const ENROLL_URL_PLACEHOLDER: &str = "<enroll-url>";

pub async fn run(global: &GlobalArgs, args: Args) -> Result<Exit, CliError> {
    match args.what {
        What::CloudInit(args) => cloud_init(global, args).await,
    }
}

async fn cloud_init(global: &GlobalArgs, args: CloudInitArgs) -> Result<Exit, CliError> {
    if args.show_secrets && args.secrets.is_none() {
        return Err(CliError::argument(
            "--show-secrets needs access to the secret store to hash the deploy password",
        )
        .hint("pass --secrets vault://HOST:PORT (with VAULT_TOKEN) or --secrets file://PATH, or drop --show-secrets"));
    }
    let fleet = load(&args)?;
    let node = find_node(&fleet, &args.node, args.site.as_deref())?;
    let site = fleet
        .site_of(node)
        .ok_or_else(|| CliError::unexpected(format!("node {} has no site", node.id)))?;
    let profile = fleet
        .profile_of(node)
        .ok_or_else(|| CliError::unexpected(format!("node {} has no profile", node.id)))?;

    let system_id = match &args.system_id {
        Some(id) => id.clone(),
        None => recorded_system_id(global, &args, node)
            .await?
            .unwrap_or_else(|| SYSTEM_ID_PLACEHOLDER.to_string()),
    };
    // Which password the profile gives the deploy user, if any (a node's own is read, never
    // made, by a preview).
    let password_ref = match profile.deploy_user.password {
        crate::model::DeployPassword::None => None,
        crate::model::DeployPassword::Site => site.deploy.password.clone(),
        crate::model::DeployPassword::PerNode => site.deploy.node_passwords.as_ref().map(|base| {
            crate::model::SecretRef::new(
                format!("{}/{}", base.path, node.id.hostname),
                Some(base.key.as_deref().unwrap_or("password")),
            )
        }),
    };
    let deploy_password = match (&password_ref, args.show_secrets) {
        (None, _) => None,
        (Some(reference), true) => {
            let url = args.secrets.as_deref().expect("checked above");
            Some(read_deploy_password(url, reference).await?)
        }
        // Hashed and then redacted: never read, never shown.
        (Some(_), false) => Some(Secret::new("not-read")),
    };
    let runtime = NodeRuntime {
        system_id,
        enroll_url: args
            .agent
            .enroll_url()
            .unwrap_or_else(|| ENROLL_URL_PLACEHOLDER.to_string()),
        enroll_token: Secret::new(TOKEN_PLACEHOLDER),
        deploy_password,
        boot_disk_hint: args.boot_disk.clone(),
        agent_install: args.agent.install()?,
    };
    let input = CloudInitInput::for_node(site, profile, node, runtime);
    let rendered = cloudinit::render(&input).map_err(|e| {
        CliError::user(e.to_string())
            .hint("fix the value in the manifests or the flag that carries it")
    })?;
    let document = if args.show_secrets {
        rendered.user_data.expose().to_string()
    } else {
        cloudinit::render_redacted(&input).map_err(|e| CliError::unexpected(e.to_string()))?
    };
    match args.format {
        ReportFormat::Text => print!("{document}"),
        ReportFormat::Json => {
            let value = json!({
                "node": {"site": node.id.site.as_str(), "hostname": node.id.hostname.as_str()},
                "digest": rendered.digest,
                "secrets": if args.show_secrets { "shown" } else { "redacted" },
                "layers": rendered.layers,
                "user_data": document,
            });
            println!(
                "{}",
                serde_json::to_string_pretty(&value)
                    .map_err(|e| CliError::unexpected(e.to_string()))?
            );
        }
    }
    let placeholders: Vec<&str> = rendered
        .placeholders
        .iter()
        .filter_map(|field| match *field {
            "system_id" => Some("the system id (--system-id)"),
            "agent.enroll_url" => Some("the enrollment URL (--agent-url)"),
            // Redacted anyway unless the secrets are shown.
            "agent.enroll_token" if args.show_secrets => {
                Some("the enrollment token (issued once, at deploy)")
            }
            _ => None,
        })
        .collect();
    if !placeholders.is_empty() {
        eprintln!("note: placeholders stand for {}", placeholders.join(", "));
    }
    if node.lifecycle != crate::model::Lifecycle::Active {
        eprintln!(
            "note: {} has lifecycle {}: it is not onboarded with this payload",
            node.id,
            node.lifecycle.as_str()
        );
    }
    Ok(Exit::Success)
}

fn load(args: &CloudInitArgs) -> Result<Fleet, CliError> {
    let validation = super::fleet_dir::validate(&args.fleet, args.rev.as_deref())?;
    match validation.fleet {
        Some(fleet) => Ok(fleet),
        None => Err(CliError::user(format!(
            "the fleet has {} error(s); first: {}",
            validation.errors.len(),
            validation
                .errors
                .first()
                .map(crate::manifest::Diagnostic::headline)
                .unwrap_or_default()
        ))
        .hint(format!(
            "run `metalform validate --fleet {}` to see every problem",
            args.fleet.display()
        ))),
    }
}

/// `HOSTNAME` (unique across sites, or with `--site`) or `SITE/HOSTNAME`.
fn find_node<'a>(fleet: &'a Fleet, wanted: &str, site: Option<&str>) -> Result<&'a Node, CliError> {
    let (site, hostname) = match wanted.split_once('/') {
        Some((s, h)) => (Some(s), h),
        None => (site, wanted),
    };
    let matches: Vec<&Node> = fleet
        .nodes
        .values()
        .filter(|n| n.id.hostname.as_str() == hostname)
        .filter(|n| site.is_none_or(|s| n.id.site.as_str() == s))
        .collect();
    match matches.as_slice() {
        [node] => Ok(node),
        [] => Err(CliError::user(match site {
            Some(site) => format!("no node `{hostname}` in site `{site}` of the fleet"),
            None => format!("no node `{hostname}` in the fleet"),
        })
        .hint("NODE is a hostname from the fleet's nodes/ (e.g. c07u27), or SITE/HOSTNAME")),
        several => Err(CliError::user(format!(
            "node `{hostname}` exists in {} sites: {}",
            several.len(),
            several
                .iter()
                .map(|n| n.id.site.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .hint("name one with --site SITE or SITE/HOSTNAME")),
    }
}

/// The system id the store recorded for the node, when a store exists (never created here).
async fn recorded_system_id(
    global: &GlobalArgs,
    args: &CloudInitArgs,
    node: &Node,
) -> Result<Option<String>, CliError> {
    let (url, file) = super::state::resolve(global, &args.fleet)?;
    if file.is_some_and(|f| !f.is_file()) {
        return Ok(None);
    }
    let store = Store::open(&url, Arc::new(SystemClock))
        .await
        .map_err(super::world::store_error)?;
    let result = async {
        let Some(row) = store
            .find_node(node.id.site.as_str(), node.id.hostname.as_str())
            .await?
        else {
            return Ok(None);
        };
        Ok(store.maas_state(row.id).await?.map(|m| m.maas_system_id))
    }
    .await
    .map_err(super::world::store_error);
    store.close().await;
    result
}

async fn read_deploy_password(
    url: &str,
    reference: &crate::model::SecretRef,
) -> Result<Secret, CliError> {
    let secret_error = |e: SecretError| {
        let hint = e.hint();
        let error = CliError::user(format!("cannot read the deploy password: {e}"));
        match hint {
            Some(hint) => error.hint(hint),
            None => error,
        }
    };
    let store: Arc<dyn SecretStore> = super::world::open_secrets(&super::world::SecretArgs {
        secrets: Some(url.to_owned()),
    })?;
    let reference = secrets::SecretRef::new(reference.path.clone(), reference.key.as_deref());
    store.get(&reference).await.map_err(secret_error)
}
