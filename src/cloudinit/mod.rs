//! First-boot payload composition (seed 000 §9, §9.1; §4.3 CreateGPUaaSNodeAndRenderCloudInit,
//! EnsureHardwareSyncConfigured; docs/contracts.md §4): one `#cloud-config` document made of
//! ordered, named and versioned layers —
//!
//! | | layer | what it puts on the host |
//! |---|---|---|
//! | a | `site-bundle` | the infra-owned site bootstrap bundle, by reference and version |
//! | b | `agent-bootstrap` | `/etc/metalform/agent.env` (enrollment URL + single-use token), the CA the agent pins, the agent binary (URL pinned by sha256) and its systemd unit |
//! | c | `hw-sync` | MAAS hardware-sync unit, timer and path unit reading `/etc/maas/maas-machine-creds.yml` |
//! | d | `data-disks` | DESTRUCTIVE /shareN initialisation, only with `storage.dataDisks: initialize` |
//! | e | `roce-routing` | RoCE policy-routing script + unit matching the MAAS STATIC links |
//! | f | `deploy-user` | the site's deploy user: SSH keys, a password hash only when the profile gives it one, sudo as the profile says |
//!
//! Pure and deterministic: no I/O, clock or randomness; the same input gives the same bytes
//! (the password salt is derived from the node). Every value is checked before it is written
//! (`check`). The MAAS machine token does not exist before deployment (MAAS API reference
//! §5.22), so layer c only wires the unit to the credentials file; [`hw_sync_credentials`]
//! renders that file for the post-deploy push. docs/cloud-init.md is the operator's guide.

mod check;
mod layers;
mod password;
mod yaml;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use check::is_placeholder;
pub use layers::{
    AGENT_BIN_PATH, AGENT_BOOTSTRAP_VERSION, AGENT_CA_PATH, AGENT_ENV_PATH, AGENT_UNIT,
    AGENT_UNIT_PATH, ETC_DIR, HW_SYNC_UNITS, LIB_DIR, MAAS_CREDS_PATH, METALFORM_LAYER_VERSION,
    RUN_LAYER, SCRIPTS, restricted_sudo_rule,
};
pub use password::{CRYPT_ROUNDS, sha512_crypt};

use crate::model::{
    DataDisks, DeployPassword, DeployUserPolicy, Node, Profile, RoceAssignment, Site, SiteBundle,
};
use crate::provider::maas::MachineToken;
use crate::secrets::Secret;
use layers::LayerParts;
use yaml::Yaml;

/// What stands in for a secret in the redacted payload.
pub const REDACTED: &str = "<redacted>";

/// Everything one node's payload is made of, resolved (secrets as [`Secret`]s).
#[derive(Debug, Clone, PartialEq)]
pub struct CloudInitInput {
    pub hostname: String,
    /// The MAAS system id of the machine (`<system-id>` in previews before it is known).
    pub system_id: String,
    /// Layer a; `None`: the profile names no site bundle.
    pub site_bundle: Option<SiteBundle>,
    /// Layer b.
    pub agent: AgentBootstrap,
    /// Layer c.
    pub hw_sync: HwSyncLayer,
    /// Layer d: written only for [`DataDisks::Initialize`].
    pub data_disks: DataDisks,
    /// The boot disk MAAS was told to use (its `id_path`, e.g.
    /// `/dev/disk/by-id/ata-Dell_BOSS-N1_…`), which layer d leaves alone even if nothing is
    /// mounted on it.
    pub boot_disk_hint: Option<String>,
    /// Layer e: the node's RoCE assignments (empty when the profile disables RoCE).
    pub roce: Vec<RoceAssignment>,
    /// Layer f.
    pub deploy_user: DeployUser,
}

/// Layer b: how the node agent reaches metalform (docs/contracts.md §4–§5, docs/agent.md).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentBootstrap {
    /// What the agent POSTs its enrollment to (`AgentServer::enroll_url`).
    pub enroll_url: String,
    /// The single-use enrollment token (`Store::issue_enrollment_token`).
    pub enroll_token: Secret,
    pub install: AgentInstall,
}

/// How the node agent gets onto a host and whom it trusts: the same for every node a server
/// deploys (the daemon's `[agent]` table, `apply --agent-binary-url …`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentInstall {
    /// The agent executable to download and run as `metalform-agent.service`; without it an
    /// agent unit already in the image is started, else the bootstrap enrolls with curl (the
    /// node then runs no tasks).
    pub binary: Option<AgentBinary>,
    /// PEM certificates the agent pins for the agent channel (the daemon's CA); without them
    /// it uses the host's system roots.
    pub ca_bundle: Option<String>,
}

/// The agent executable: where to fetch it and the SHA-256 it must have. The pin, not the
/// transport, is what the host trusts, so any mirror will do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentBinary {
    pub url: String,
    /// 64 lower-case hex digits.
    pub sha256: String,
}

/// Layer c: MAAS hardware sync (seed 000 §9.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HwSyncLayer {
    /// The site's MAAS URL (`…/MAAS`); `maas-run-scripts` is fetched from it when the image
    /// lacks it.
    pub maas_url: String,
    pub system_id: String,
    /// The profile's `hardwareSync.interval` (whole seconds, at least 60 s).
    pub interval: Duration,
}

/// Layer f: the site's deploy user.
#[derive(Debug, Clone, PartialEq)]
pub struct DeployUser {
    pub name: String,
    /// Only when the profile gives the user a password; written only as a SHA-512 crypt hash
    /// (`CRYPT_ROUNDS` rounds). Without one the account is locked to SSH keys.
    pub password: Option<Secret>,
    /// Public keys that may log in.
    pub ssh_keys: Vec<String>,
    /// Sudo, password and SSH password login, as the profile says.
    pub policy: DeployUserPolicy,
}

/// The values of one render that do not come from the manifests.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRuntime {
    pub system_id: String,
    pub enroll_url: String,
    pub enroll_token: Secret,
    /// The deploy user's password (the node's own, or the site's), read from the secret store
    /// at render time; `None` when the profile gives the user none.
    pub deploy_password: Option<Secret>,
    pub boot_disk_hint: Option<String>,
    pub agent_install: AgentInstall,
}

/// What a deployed payload was rendered from, secrets left out: kept in the job's journal when
/// the payload is rendered, so `plan` can render it again and show what a new render would
/// change (the enrollment token and the deploy password are never kept; rendered again they
/// read `<redacted>`, as they did in the payload's digest).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PayloadRecord {
    /// [`Rendered::digest`] of the payload as rendered then.
    pub digest: String,
    pub hostname: String,
    pub system_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site_bundle: Option<SiteBundle>,
    pub enroll_url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_binary: Option<AgentBinary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_ca: Option<String>,
    pub maas_url: String,
    pub hw_sync_interval_seconds: u64,
    pub data_disks: DataDisks,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_disk_hint: Option<String>,
    #[serde(default)]
    pub roce: Vec<RoceAssignment>,
    pub deploy_user: String,
    /// The deploy user had a password (its hash is redacted).
    pub deploy_password: bool,
    #[serde(default)]
    pub ssh_keys: Vec<String>,
    pub deploy_policy: DeployUserPolicy,
}

/// Stands for the enrollment token in payloads rendered for review: issued once, at deploy.
pub const TOKEN_PLACEHOLDER: &str = "<enrollment-token>";
/// Stands for a secret that a redacted render never reads.
const NOT_READ: &str = "not-read";

impl PayloadRecord {
    /// The input it was made from, with placeholders for the secrets it does not keep.
    pub fn input(&self) -> CloudInitInput {
        CloudInitInput {
            hostname: self.hostname.clone(),
            system_id: self.system_id.clone(),
            site_bundle: self.site_bundle.clone(),
            agent: AgentBootstrap {
                enroll_url: self.enroll_url.clone(),
                enroll_token: Secret::new(TOKEN_PLACEHOLDER),
                install: self.agent_install(),
            },
            hw_sync: HwSyncLayer {
                maas_url: self.maas_url.clone(),
                system_id: self.system_id.clone(),
                interval: Duration::from_secs(self.hw_sync_interval_seconds),
            },
            data_disks: self.data_disks,
            boot_disk_hint: self.boot_disk_hint.clone(),
            roce: self.roce.clone(),
            deploy_user: DeployUser {
                name: self.deploy_user.clone(),
                password: self.deploy_password.then(|| Secret::new(NOT_READ)),
                ssh_keys: self.ssh_keys.clone(),
                policy: self.deploy_policy,
            },
        }
    }

    /// The agent install it was rendered with.
    pub fn agent_install(&self) -> AgentInstall {
        AgentInstall {
            binary: self.agent_binary.clone(),
            ca_bundle: self.agent_ca.clone(),
        }
    }
}

impl NodeRuntime {
    /// The runtime of a render for review (`plan`): the token a placeholder and the deploy
    /// password, when the profile gives one, never read (a redacted render does not use it).
    pub fn for_review(
        profile: &Profile,
        system_id: String,
        enroll_url: String,
        boot_disk_hint: Option<String>,
        agent_install: AgentInstall,
    ) -> NodeRuntime {
        NodeRuntime {
            system_id,
            enroll_url,
            enroll_token: Secret::new(TOKEN_PLACEHOLDER),
            deploy_password: (profile.deploy_user.password != DeployPassword::None)
                .then(|| Secret::new(NOT_READ)),
            boot_disk_hint,
            agent_install,
        }
    }
}

impl CloudInitInput {
    /// The input for `node` from the resolved model: the profile's site bundle, data-disk
    /// policy, RoCE switch and hardware-sync interval, the site's MAAS URL and deploy user.
    pub fn for_node(site: &Site, profile: &Profile, node: &Node, runtime: NodeRuntime) -> Self {
        CloudInitInput {
            hostname: node.id.hostname.to_string(),
            system_id: runtime.system_id.clone(),
            site_bundle: profile.cloud_init.site_bundle.clone(),
            agent: AgentBootstrap {
                enroll_url: runtime.enroll_url,
                enroll_token: runtime.enroll_token,
                install: runtime.agent_install,
            },
            hw_sync: HwSyncLayer {
                maas_url: site.maas.url.as_str().trim_end_matches('/').to_string(),
                system_id: runtime.system_id,
                interval: profile.hardware_sync.interval,
            },
            data_disks: profile.storage.data_disks,
            boot_disk_hint: runtime.boot_disk_hint,
            roce: if profile.roce.enabled {
                node.roce.clone()
            } else {
                Vec::new()
            },
            deploy_user: DeployUser {
                name: site.deploy.user.clone(),
                password: runtime.deploy_password,
                ssh_keys: site.deploy.ssh_keys.clone(),
                policy: profile.deploy_user,
            },
        }
    }

    /// What to keep of it in a journal (no secret), with the digest it rendered to.
    pub fn record(&self, digest: &str) -> PayloadRecord {
        PayloadRecord {
            digest: digest.to_string(),
            hostname: self.hostname.clone(),
            system_id: self.system_id.clone(),
            site_bundle: self.site_bundle.clone(),
            enroll_url: self.agent.enroll_url.clone(),
            agent_binary: self.agent.install.binary.clone(),
            agent_ca: self.agent.install.ca_bundle.clone(),
            maas_url: self.hw_sync.maas_url.clone(),
            hw_sync_interval_seconds: self.hw_sync.interval.as_secs(),
            data_disks: self.data_disks,
            boot_disk_hint: self.boot_disk_hint.clone(),
            roce: self.roce.clone(),
            deploy_user: self.deploy_user.name.clone(),
            deploy_password: self.deploy_user.password.is_some(),
            ssh_keys: self.deploy_user.ssh_keys.clone(),
            deploy_policy: self.deploy_user.policy,
        }
    }

    /// Every value checked, each failure naming its field.
    pub fn check(&self) -> Result<(), CloudInitError> {
        check::hostname("hostname", &self.hostname)?;
        check::system_id("system_id", &self.system_id)?;
        if let Some(bundle) = &self.site_bundle {
            check::bundle_reference("site_bundle.ref", &bundle.reference)?;
            check::version("site_bundle.version", &bundle.version)?;
        }
        check::url("agent.enroll_url", &self.agent.enroll_url, true)?;
        check::token("agent.enroll_token", self.agent.enroll_token.expose())?;
        if let Some(binary) = &self.agent.install.binary {
            check::url("agent.binary.url", &binary.url, false)?;
            check::sha256("agent.binary.sha256", &binary.sha256)?;
        }
        if let Some(ca) = &self.agent.install.ca_bundle {
            check::ca_bundle("agent.ca_bundle", ca)?;
        }
        check::url("hw_sync.maas_url", &self.hw_sync.maas_url, false)?;
        if self.hw_sync.system_id != self.system_id {
            return Err(CloudInitError::Invalid {
                field: "hw_sync.system_id",
                reason: format!(
                    "{:?} differs from the node's system id {:?}",
                    self.hw_sync.system_id, self.system_id
                ),
            });
        }
        if !layers::interval_ok(self.hw_sync.interval) {
            return Err(CloudInitError::Invalid {
                field: "hw_sync.interval",
                reason: format!(
                    "{:?} must be whole seconds and at least 60 s",
                    self.hw_sync.interval
                ),
            });
        }
        if let Some(disk) = &self.boot_disk_hint {
            check::device_path("boot_disk_hint", disk)?;
        }
        let mut seen_interfaces = std::collections::BTreeSet::new();
        let mut seen_addresses = std::collections::BTreeSet::new();
        for assignment in &self.roce {
            check::interface("roce.interface", &assignment.interface)?;
            if !seen_interfaces.insert(assignment.interface.as_str()) {
                return Err(CloudInitError::Invalid {
                    field: "roce.interface",
                    reason: format!("{:?} is assigned twice", assignment.interface),
                });
            }
            if !seen_addresses.insert(assignment.address.address) {
                return Err(CloudInitError::Invalid {
                    field: "roce.address",
                    reason: format!("{} is assigned twice", assignment.address.address),
                });
            }
        }
        check::user_name("deploy_user.name", &self.deploy_user.name)?;
        let user = &self.deploy_user;
        match (&user.password, user.policy.password) {
            (Some(password), _) if password.is_empty() => {
                return Err(CloudInitError::Invalid {
                    field: "deploy_user.password",
                    reason: "is empty: the deploy password secret has no value".into(),
                });
            }
            (None, DeployPassword::PerNode | DeployPassword::Site) => {
                return Err(CloudInitError::Invalid {
                    field: "deploy_user.password",
                    reason: "the profile gives the deploy user a password, but none was read"
                        .into(),
                });
            }
            _ => {}
        }
        for key in &user.ssh_keys {
            check::ssh_key("deploy_user.ssh_keys", key)?;
        }
        Ok(())
    }
}

/// A rendered payload.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// The `#cloud-config` document, secrets included (MAAS deploy `user_data`; the MAAS
    /// client base64-encodes it). Keep it in memory only: it holds the enrollment token.
    pub user_data: Secret,
    /// `sha256:<hex>` of the redacted document: the same for two renders that differ only in
    /// secrets (a fresh token), different whenever anything else differs. Safe to store.
    pub digest: String,
    /// The layers in order, included or not, with their versions.
    pub layers: Vec<LayerSummary>,
    /// The fields holding a `<placeholder>` instead of a value (`system_id`,
    /// `agent.enroll_url`, `agent.enroll_token`): a preview, never fit to deploy. The executor
    /// refuses to deploy a payload where this is not empty.
    pub placeholders: Vec<&'static str>,
}

/// One layer of a rendered payload, for journals, diagnostics and `render cloud-init`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LayerSummary {
    /// `a` … `f`: the order of seed 000 §4.3 step 3.
    pub order: char,
    pub name: &'static str,
    /// The site bundle's own version for layer a; metalform's layer version otherwise.
    pub version: String,
    pub included: bool,
    /// The layer erases data (data-disks).
    pub destructive: bool,
    /// One line: what it does for this node, or why it is left out.
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloudInitError {
    #[error("cloud-init input `{field}` is invalid: {reason}")]
    Invalid { field: &'static str, reason: String },
}

/// Whether secrets are written or replaced by [`REDACTED`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reveal {
    Secrets,
    Redacted,
}

/// Render the payload (seed 000 §4.3 step 3 and 5).
pub fn render(input: &CloudInitInput) -> Result<Rendered, CloudInitError> {
    input.check()?;
    let (redacted, layers) = compose(input, Reveal::Redacted);
    let (user_data, _) = compose(input, Reveal::Secrets);
    let placeholders = [
        ("system_id", input.system_id.as_str()),
        ("agent.enroll_url", input.agent.enroll_url.as_str()),
        ("agent.enroll_token", input.agent.enroll_token.expose()),
    ]
    .into_iter()
    .filter(|(_, value)| is_placeholder(value))
    .map(|(field, _)| field)
    .collect();
    Ok(Rendered {
        user_data: Secret::new(user_data),
        digest: digest(&redacted),
        layers,
        placeholders,
    })
}

/// The payload with the enrollment token and password hash replaced by `<redacted>`: what
/// `metalform render cloud-init` prints without `--show-secrets`, and safe to log.
pub fn render_redacted(input: &CloudInitInput) -> Result<String, CloudInitError> {
    input.check()?;
    Ok(compose(input, Reveal::Redacted).0)
}

/// A payload rendered for review (`plan`): the redacted document only, so no secret is read
/// or hashed.
#[derive(Debug, Clone, PartialEq)]
pub struct Review {
    /// The document with the enrollment token and password hash as `<redacted>`.
    pub document: String,
    /// As [`Rendered::digest`]: the digest of this document.
    pub digest: String,
    pub layers: Vec<LayerSummary>,
}

/// Render `input` for review: checked as [`render`] does, composed redacted only.
pub fn render_review(input: &CloudInitInput) -> Result<Review, CloudInitError> {
    input.check()?;
    let (document, layers) = compose(input, Reveal::Redacted);
    Ok(Review {
        digest: digest(&document),
        document,
        layers,
    })
}

/// A unified diff of two redacted documents, two lines of context around each change, as
/// lines (`@@ -a,b +c,d @@`, then ` `/`-`/`+` lines).
pub fn review_diff(before: &str, after: &str) -> Vec<String> {
    similar::TextDiff::from_lines(before, after)
        .unified_diff()
        .context_radius(2)
        .to_string()
        .lines()
        .map(str::to_string)
        .collect()
}

/// `sha256:<hex>` of a document.
fn digest(document: &str) -> String {
    format!(
        "sha256:{}",
        hex::encode(Sha256::digest(document.as_bytes()))
    )
}

fn compose(input: &CloudInitInput, reveal: Reveal) -> (String, Vec<LayerSummary>) {
    let parts: Vec<LayerParts> = vec![
        layers::site_bundle(input),
        layers::agent_bootstrap(input, reveal),
        layers::hw_sync(input),
        layers::data_disks(input),
        layers::roce_routing(input),
        layers::deploy_user(input, reveal),
    ];
    let mut out = String::from("#cloud-config\n");
    out.push_str(&format!(
        "# metalform first-boot payload for {}, MAAS system {}.\n\
         # Layers in order; each records its outcome in /var/lib/metalform/layers/<name>:\n",
        input.hostname, input.system_id
    ));
    for p in &parts {
        let s = &p.summary;
        if s.included {
            out.push_str(&format!(
                "#   {} {:<15} v{:<4} {}\n",
                s.order, s.name, s.version, s.detail
            ));
        } else {
            out.push_str(&format!(
                "#   {} {:<15} -     skipped: {}\n",
                s.order, s.name, s.detail
            ));
        }
    }
    let mut files = vec![layers::runner().to_yaml()];
    let mut runcmd = Vec::new();
    let mut root = Vec::new();
    for p in &parts {
        files.extend(p.files.iter().map(layers::WriteFile::to_yaml));
        runcmd.extend(p.runcmd.iter().cloned().map(Yaml::Flow));
    }
    root.push(("write_files".to_string(), Yaml::Seq(files)));
    root.push(("runcmd".to_string(), Yaml::Seq(runcmd)));
    for p in &parts {
        root.extend(p.top_level.iter().cloned());
    }
    yaml::write_document(&Yaml::Map(root), &mut out);
    (out, parts.into_iter().map(|p| p.summary).collect())
}

/// `/etc/maas/maas-machine-creds.yml` for `maas-run-scripts report-results` (seed 000 §9.1
/// steps 3–4): the machine token MAAS issues once the machine is deployed, and the machine's
/// metadata status endpoint. A `Secret`: it holds the token secret.
pub fn hw_sync_credentials(layer: &HwSyncLayer, token: &MachineToken) -> Secret {
    let endpoint = format!(
        "{}/metadata/status/{}",
        layer.maas_url.trim_end_matches('/'),
        layer.system_id
    );
    let doc = Yaml::map([(
        "reporting",
        Yaml::map([(
            "maas",
            Yaml::map([
                ("consumer_key", Yaml::Str(token.consumer_key.clone())),
                ("endpoint", Yaml::Str(endpoint)),
                ("token_key", Yaml::Str(token.token_key.clone())),
                (
                    "token_secret",
                    Yaml::Str(token.token_secret.expose().to_string()),
                ),
            ]),
        )]),
    )]);
    let mut out = String::new();
    yaml::write_document(&doc, &mut out);
    Secret::new(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::InterfaceAddr;

    /// A full input: every layer included.
    pub(crate) fn input() -> CloudInitInput {
        CloudInitInput {
            hostname: "c07u43".into(),
            system_id: "x7k3pa".into(),
            site_bundle: Some(SiteBundle {
                reference: "bundles/dc1-base".into(),
                version: "3".into(),
            }),
            agent: AgentBootstrap {
                enroll_url: "http://10.176.46.5:8740/agent/v1/enroll".into(),
                enroll_token: Secret::new("tok_Abcdefghijklmnopqrstuvwxyz0123456789"),
                install: AgentInstall::default(),
            },
            hw_sync: HwSyncLayer {
                maas_url: "http://10.176.46.1:5240/MAAS".into(),
                system_id: "x7k3pa".into(),
                interval: Duration::from_secs(900),
            },
            data_disks: DataDisks::Initialize,
            boot_disk_hint: Some("/dev/disk/by-id/ata-Dell_BOSS-N1_S1A2B3".into()),
            roce: vec![
                RoceAssignment {
                    interface: "enp28s0np0".into(),
                    address: "172.30.9.1/31".parse::<InterfaceAddr>().unwrap(),
                },
                RoceAssignment {
                    interface: "enp29s0np0".into(),
                    address: "172.29.1.1/31".parse::<InterfaceAddr>().unwrap(),
                },
            ],
            deploy_user: DeployUser {
                name: "hpcadmin".into(),
                password: Some(Secret::new("correct horse battery staple")),
                ssh_keys: vec![
                    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHNvbWUta2V5LWJ5dGVzLWZvci10ZXN0cw ops@example".into(),
                ],
                policy: DeployUserPolicy {
                    sudo: crate::model::SudoPolicy::Password,
                    password: DeployPassword::PerNode,
                    ssh_password_login: false,
                },
            },
        }
    }

    #[test]
    fn same_input_same_bytes_and_secrets_only_where_revealed() {
        let a = render(&input()).unwrap();
        let b = render(&input()).unwrap();
        assert_eq!(a.user_data.expose(), b.user_data.expose());
        assert_eq!(a.digest, b.digest);
        let text = a.user_data.expose();
        assert!(text.starts_with("#cloud-config\n"));
        assert!(
            text.contains("METALFORM_ENROLL_TOKEN=\"tok_Abcdefghijklmnopqrstuvwxyz0123456789\"")
        );
        assert!(
            !text.contains("correct horse"),
            "the password itself never appears"
        );
        assert!(text.contains(&format!("hashed_passwd: \"$6$rounds={CRYPT_ROUNDS}$")));
        let redacted = render_redacted(&input()).unwrap();
        assert!(!redacted.contains("tok_Abcdef"));
        assert!(!redacted.contains("$6$"));
        assert!(redacted.contains("METALFORM_ENROLL_TOKEN=\"<redacted>\""));
        assert_eq!(a.digest, digest(&redacted));
    }

    #[test]
    fn a_record_keeps_no_secret_and_renders_back_to_the_same_redacted_payload() {
        let input = input();
        let rendered = render(&input).unwrap();
        let record = input.record(&rendered.digest);
        let json = serde_json::to_string(&record).unwrap();
        assert!(!json.contains("tok_Abcdef"), "{json}");
        assert!(!json.contains("correct horse"), "{json}");
        assert!(!json.contains("$6$"), "{json}");
        let back: PayloadRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(back, record);
        let review = render_review(&back.input()).unwrap();
        assert_eq!(review.digest, rendered.digest);
        assert_eq!(review.document, render_redacted(&input).unwrap());
        assert_eq!(review.layers, rendered.layers);
    }

    #[test]
    fn a_review_diff_shows_only_the_changed_lines_with_context() {
        let before = "a\nb\nc\nd\ne\nf\ng\n";
        let after = "a\nb\nc\nD\ne\nf\ng\n";
        assert_eq!(
            review_diff(before, after),
            ["@@ -2,5 +2,5 @@", " b", " c", "-d", "+D", " e", " f"]
        );
        assert!(review_diff(before, before).is_empty());
    }

    #[test]
    fn placeholders_are_listed_so_a_preview_is_never_deployed() {
        assert!(render(&input()).unwrap().placeholders.is_empty());
        let mut preview = input();
        preview.system_id = "<system-id>".into();
        preview.hw_sync.system_id = "<system-id>".into();
        preview.agent.enroll_token = Secret::new("<enrollment-token>");
        let rendered = render(&preview).unwrap();
        assert_eq!(rendered.placeholders, ["system_id", "agent.enroll_token"]);
    }

    #[test]
    fn a_fresh_token_keeps_the_digest_other_changes_move_it() {
        let base = render(&input()).unwrap();
        let mut fresh = input();
        fresh.agent.enroll_token = Secret::new("another_token_0123456789abcdef");
        let fresh = render(&fresh).unwrap();
        assert_ne!(base.user_data, fresh.user_data);
        assert_eq!(base.digest, fresh.digest);
        let mut moved = input();
        moved.roce.pop();
        assert_ne!(render(&moved).unwrap().digest, base.digest);
    }

    #[test]
    fn layers_are_ordered_named_and_versioned() {
        let rendered = render(&input()).unwrap();
        let names: Vec<_> = rendered
            .layers
            .iter()
            .map(|l| (l.order, l.name, l.version.as_str(), l.included))
            .collect();
        assert_eq!(
            names,
            [
                ('a', "site-bundle", "3", true),
                ('b', "agent-bootstrap", "2", true),
                ('c', "hw-sync", "1", true),
                ('d', "data-disks", "1", true),
                ('e', "roce-routing", "1", true),
                ('f', "deploy-user", "2", true),
            ]
        );
        assert!(rendered.layers[3].destructive);
        assert_eq!(rendered.layers.iter().filter(|l| l.destructive).count(), 1);
        // runcmd runs the layers in order, each through the runner.
        let text = rendered.user_data.expose().to_string();
        let order: Vec<usize> = [
            "site-bundle",
            "agent-bootstrap",
            "hw-sync",
            "data-disks",
            "roce-routing",
        ]
        .iter()
        .map(|name| {
            text.find(&format!("  - [{RUN_LAYER}, {name},"))
                .unwrap_or_else(|| panic!("{name} step\n{text}"))
        })
        .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    }

    #[test]
    fn optional_layers_leave_no_trace_when_off() {
        let mut off = input();
        off.site_bundle = None;
        off.data_disks = DataDisks::Skip;
        off.roce.clear();
        let rendered = render(&off).unwrap();
        let text = rendered.user_data.expose();
        for absent in ["site-bundle.env", "data-disks", "roce.conf", "roce-routing"] {
            assert!(
                !text
                    .lines()
                    .filter(|l| !l.starts_with('#'))
                    .any(|l| l.contains(absent)),
                "{absent} must not be written\n{text}"
            );
        }
        let skipped: Vec<_> = rendered
            .layers
            .iter()
            .filter(|l| !l.included)
            .map(|l| l.name)
            .collect();
        assert_eq!(skipped, ["site-bundle", "data-disks", "roce-routing"]);
        assert!(
            text.contains("#   d data-disks      -     skipped: profile storage.dataDisks is skip")
        );
    }

    #[test]
    fn bad_values_are_refused_by_field_without_echoing_secrets() {
        let mut bad = input();
        bad.agent.enroll_token = Secret::new("has spaces and \"quotes\" in it");
        let err = render(&bad).unwrap_err().to_string();
        assert_eq!(
            err,
            "cloud-init input `agent.enroll_token` is invalid: must be 16 to 512 characters of URL-safe base64 (A-Z a-z 0-9 - _)"
        );
        let mut bad = input();
        bad.hw_sync.system_id = "other".into();
        assert_eq!(
            render(&bad).unwrap_err().to_string(),
            "cloud-init input `hw_sync.system_id` is invalid: \"other\" differs from the node's system id \"x7k3pa\""
        );
        let mut bad = input();
        bad.roce[1].interface = "enp28s0np0".into();
        assert_eq!(
            render(&bad).unwrap_err().to_string(),
            "cloud-init input `roce.interface` is invalid: \"enp28s0np0\" is assigned twice"
        );
        let mut bad = input();
        bad.hw_sync.interval = Duration::from_secs(30);
        assert!(render(&bad).is_err());
        let mut bad = input();
        bad.deploy_user.password = Some(Secret::new(""));
        assert!(render_redacted(&bad).is_err());
        let mut bad = input();
        bad.deploy_user.password = None;
        assert_eq!(
            render(&bad).unwrap_err().to_string(),
            "cloud-init input `deploy_user.password` is invalid: the profile gives the deploy user a password, but none was read"
        );
        let mut bad = input();
        bad.deploy_user.ssh_keys = vec!["ssh-ed25519 AAAA\nruncmd: [reboot]".into()];
        assert!(render(&bad).is_err());
        let mut bad = input();
        bad.boot_disk_hint = Some("/dev/sda; rm -rf /".into());
        assert!(render(&bad).is_err());
    }

    #[test]
    fn roce_conf_has_one_table_per_link_and_the_peer_of_a_31() {
        let text = render(&input()).unwrap().user_data.expose().to_string();
        assert!(text.contains("      enp28s0np0 172.30.9.1 31 172.30.9.0 101 1001 172.30.9.0\n"));
        assert!(text.contains("      enp29s0np0 172.29.1.1 31 172.29.1.0 102 1002 172.29.1.0\n"));
        let mut wide = input();
        wide.roce.truncate(1);
        wide.roce[0].address = "10.9.0.5/24".parse().unwrap();
        let text = render(&wide).unwrap().user_data.expose().to_string();
        assert!(
            text.contains("      enp28s0np0 10.9.0.5 24 10.9.0.0 101 1001 -\n"),
            "{text}"
        );
    }

    #[test]
    fn hw_sync_credentials_name_the_machine_status_endpoint() {
        let token = MachineToken {
            consumer_key: "ck".into(),
            token_key: "tk".into(),
            token_secret: Secret::new("ts"),
        };
        let creds = hw_sync_credentials(&input().hw_sync, &token);
        assert_eq!(
            creds.expose(),
            "reporting:\n  maas:\n    consumer_key: ck\n    endpoint: \"http://10.176.46.1:5240/MAAS/metadata/status/x7k3pa\"\n    token_key: tk\n    token_secret: ts\n"
        );
    }

    #[test]
    fn paths_agree_with_the_simulator() {
        assert_eq!(AGENT_ENV_PATH, crate::sim::host::AGENT_ENV_PATH);
        assert_eq!(MAAS_CREDS_PATH, crate::sim::host::MAAS_CREDS_PATH);
    }

    #[test]
    fn the_simulator_reads_the_agent_env_from_the_payload() {
        let rendered = render(&input()).unwrap();
        use base64::Engine as _;
        let stored = base64::engine::general_purpose::STANDARD.encode(rendered.user_data.expose());
        let files = crate::sim::host::files_from_user_data(&stored);
        let env = crate::sim::host::parse_env(&files[AGENT_ENV_PATH]);
        assert_eq!(
            env["METALFORM_ENROLL_URL"],
            "http://10.176.46.5:8740/agent/v1/enroll"
        );
        assert_eq!(
            env["METALFORM_ENROLL_TOKEN"],
            "tok_Abcdefghijklmnopqrstuvwxyz0123456789"
        );
        assert_eq!(env["METALFORM_NODE"], "c07u43");
        // Every script reads back byte for byte.
        for (name, script) in SCRIPTS {
            assert_eq!(files[&format!("{LIB_DIR}/{name}")], *script, "{name}");
        }
    }
}
