//! The six ordered layers of the first-boot payload (seed 000 §9, §4.3
//! CreateGPUaaSNodeAndRenderCloudInit step 3 a–f). Each layer is named and versioned and
//! contributes files, `runcmd` steps (wrapped by the `run-layer` runner so each one records
//! its own outcome on the host) and top-level cloud-config keys.
//!
//! Scripts are fixed files (`scripts/`) that read their values from env/conf files the layer
//! writes next to them, so the only text generated per node is values that were checked
//! first (`check`).

use std::time::Duration;

use super::yaml::Yaml;
use super::{CloudInitInput, LayerSummary, Reveal, password};
use crate::model::{DataDisks, RoceAssignment};

/// Where metalform's first-boot scripts are installed.
pub const LIB_DIR: &str = "/usr/local/lib/metalform";
/// Where the layers' configuration lands.
pub const ETC_DIR: &str = "/etc/metalform";
/// The node-agent env file (docs/contracts.md §4).
pub const AGENT_ENV_PATH: &str = "/etc/metalform/agent.env";
/// The MAAS hardware-sync credentials file metalform writes after deployment (seed 000 §9.1).
pub const MAAS_CREDS_PATH: &str = "/etc/maas/maas-machine-creds.yml";
/// The runner every `runcmd` step goes through.
pub const RUN_LAYER: &str = "/usr/local/lib/metalform/run-layer";

/// Version of metalform's own layers (b–f). Bump it when a layer's behaviour on the host
/// changes, so a failure report names the layer version that ran.
pub const METALFORM_LAYER_VERSION: &str = "1";

const RUN_LAYER_SCRIPT: &str = include_str!("scripts/run-layer");
const SITE_BUNDLE_SCRIPT: &str = include_str!("scripts/site-bundle");
const AGENT_BOOTSTRAP_SCRIPT: &str = include_str!("scripts/agent-bootstrap");
const HW_SYNC_SCRIPT: &str = include_str!("scripts/hw-sync");
const DATA_DISKS_SCRIPT: &str = include_str!("scripts/data-disks");
const ROCE_ROUTING_SCRIPT: &str = include_str!("scripts/roce-routing");

/// The fixed scripts, by install name (for tests that run them).
pub const SCRIPTS: &[(&str, &str)] = &[
    ("run-layer", RUN_LAYER_SCRIPT),
    ("site-bundle", SITE_BUNDLE_SCRIPT),
    ("agent-bootstrap", AGENT_BOOTSTRAP_SCRIPT),
    ("hw-sync", HW_SYNC_SCRIPT),
    ("data-disks", DATA_DISKS_SCRIPT),
    ("roce-routing", ROCE_ROUTING_SCRIPT),
];

/// A `write_files` entry.
pub(super) struct WriteFile {
    pub path: String,
    pub permissions: &'static str,
    pub content: String,
}

impl WriteFile {
    fn new(path: impl Into<String>, permissions: &'static str, content: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            permissions,
            content: content.into(),
        }
    }

    fn script(name: &str, content: &str) -> Self {
        Self::new(format!("{LIB_DIR}/{name}"), "0755", content)
    }

    pub fn to_yaml(&self) -> Yaml {
        Yaml::map([
            ("path", Yaml::str(&self.path)),
            ("owner", Yaml::str("root:root")),
            ("permissions", Yaml::str(self.permissions)),
            ("content", Yaml::Text(self.content.clone())),
        ])
    }
}

/// What one layer adds to the document.
pub(super) struct LayerParts {
    pub summary: LayerSummary,
    pub files: Vec<WriteFile>,
    pub runcmd: Vec<Vec<String>>,
    pub top_level: Vec<(String, Yaml)>,
}

impl LayerParts {
    fn new(order: char, name: &'static str, version: &str, detail: String) -> Self {
        Self {
            summary: LayerSummary {
                order,
                name,
                version: version.to_string(),
                included: true,
                destructive: false,
                detail,
            },
            files: Vec::new(),
            runcmd: Vec::new(),
            top_level: Vec::new(),
        }
    }

    fn skipped(order: char, name: &'static str, detail: &str) -> Self {
        let mut parts = Self::new(order, name, METALFORM_LAYER_VERSION, detail.to_string());
        parts.summary.included = false;
        parts
    }

    /// A runcmd step through the runner: `run-layer NAME VERSION COMMAND…`.
    fn run(&mut self, command: &[&str]) {
        let mut step = vec![
            RUN_LAYER.to_string(),
            self.summary.name.to_string(),
            self.summary.version.clone(),
        ];
        step.extend(command.iter().map(|s| s.to_string()));
        self.runcmd.push(step);
    }
}

/// `KEY="value"` lines; every value was checked to hold no quote, `$`, `` ` `` or `\`.
fn env_file(comment: &str, entries: &[(&str, &str)]) -> String {
    let mut out = format!("# {comment}\n");
    for (key, value) in entries {
        out.push_str(&format!("{key}=\"{value}\"\n"));
    }
    out
}

/// The runner itself: not a layer, installed first.
pub(super) fn runner() -> WriteFile {
    WriteFile::script("run-layer", RUN_LAYER_SCRIPT)
}

/// (a) The infra-owned site bootstrap bundle, by reference and version.
pub(super) fn site_bundle(input: &CloudInitInput) -> LayerParts {
    let Some(bundle) = &input.site_bundle else {
        return LayerParts::skipped(
            'a',
            "site-bundle",
            "no site bundle in the profile (cloudInit.siteBundle)",
        );
    };
    let mut parts = LayerParts::new(
        'a',
        "site-bundle",
        &bundle.version,
        format!("{}@{}", bundle.reference, bundle.version),
    );
    parts.files.push(WriteFile::new(
        format!("{ETC_DIR}/site-bundle.env"),
        "0644",
        env_file(
            "metalform layer a: the infra-owned site bootstrap bundle (versioned separately)",
            &[
                ("METALFORM_SITE_BUNDLE_REF", &bundle.reference),
                ("METALFORM_SITE_BUNDLE_VERSION", &bundle.version),
            ],
        ),
    ));
    parts
        .files
        .push(WriteFile::script("site-bundle", SITE_BUNDLE_SCRIPT));
    parts.run(&[&format!("{LIB_DIR}/site-bundle")]);
    parts
}

/// (b) The node-agent bootstrap: enrollment URL and single-use token (docs/contracts.md §4).
pub(super) fn agent_bootstrap(input: &CloudInitInput, reveal: Reveal) -> LayerParts {
    let agent = &input.agent;
    let mut parts = LayerParts::new(
        'b',
        "agent-bootstrap",
        METALFORM_LAYER_VERSION,
        format!("enroll at {}", agent.enroll_url),
    );
    let token = match reveal {
        Reveal::Secrets => agent.enroll_token.expose(),
        Reveal::Redacted => super::REDACTED,
    };
    let mut entries = vec![
        ("METALFORM_ENROLL_URL", agent.enroll_url.as_str()),
        ("METALFORM_ENROLL_TOKEN", token),
        ("METALFORM_NODE", input.hostname.as_str()),
        ("METALFORM_SYSTEM_ID", input.system_id.as_str()),
    ];
    if let Some(url) = &agent.agent_package_url {
        entries.push(("METALFORM_AGENT_PACKAGE_URL", url));
    }
    parts.files.push(WriteFile::new(
        AGENT_ENV_PATH,
        "0600",
        env_file(
            "metalform layer b: node-agent enrollment (single-use token)",
            &entries,
        ),
    ));
    if let Some(ca) = &agent.ca_bundle {
        let mut pem = ca.replace("\r\n", "\n");
        if !pem.ends_with('\n') {
            pem.push('\n');
        }
        parts
            .files
            .push(WriteFile::new(format!("{ETC_DIR}/ca.pem"), "0644", pem));
    }
    parts
        .files
        .push(WriteFile::script("agent-bootstrap", AGENT_BOOTSTRAP_SCRIPT));
    parts.run(&[&format!("{LIB_DIR}/agent-bootstrap")]);
    parts
}

/// (c) MAAS hardware sync: the unit, timer and path unit that run `maas-run-scripts
/// report-results` with the credentials file metalform pushes after deployment.
pub(super) fn hw_sync(input: &CloudInitInput) -> LayerParts {
    let sync = &input.hw_sync;
    let interval = sync.interval.as_secs();
    let mut parts = LayerParts::new(
        'c',
        "hw-sync",
        METALFORM_LAYER_VERSION,
        format!(
            "every {} with {MAAS_CREDS_PATH} (written after deploy)",
            crate::model::duration::format(sync.interval)
        ),
    );
    parts.files.push(WriteFile::new(
        format!("{ETC_DIR}/hw-sync.env"),
        "0644",
        env_file(
            "metalform layer c: MAAS hardware sync",
            &[
                ("MAAS_URL", &sync.maas_url),
                ("MAAS_SYSTEM_ID", &sync.system_id),
                ("MAAS_CREDS", MAAS_CREDS_PATH),
                ("INTERVAL_SECONDS", &interval.to_string()),
            ],
        ),
    ));
    parts
        .files
        .push(WriteFile::script("hw-sync", HW_SYNC_SCRIPT));
    let version = METALFORM_LAYER_VERSION;
    parts.files.push(WriteFile::new(
        "/etc/systemd/system/metalform-hw-sync.service",
        "0644",
        format!(
            "[Unit]\n\
             Description=metalform: report hardware to MAAS (layer hw-sync v{version})\n\
             Wants=network-online.target\n\
             After=network-online.target\n\
             \n\
             [Service]\n\
             Type=oneshot\n\
             ExecStart={LIB_DIR}/hw-sync\n"
        ),
    ));
    parts.files.push(WriteFile::new(
        "/etc/systemd/system/metalform-hw-sync.timer",
        "0644",
        format!(
            "[Unit]\n\
             Description=metalform: MAAS hardware sync every {interval}s (layer hw-sync v{version})\n\
             \n\
             [Timer]\n\
             OnBootSec=60s\n\
             OnUnitActiveSec={interval}s\n\
             \n\
             [Install]\n\
             WantedBy=timers.target\n"
        ),
    ));
    // Runs the sync as soon as metalform writes the credentials, not one interval later.
    parts.files.push(WriteFile::new(
        "/etc/systemd/system/metalform-hw-sync.path",
        "0644",
        format!(
            "[Unit]\n\
             Description=metalform: MAAS hardware sync when its credentials change (layer hw-sync v{version})\n\
             \n\
             [Path]\n\
             PathChanged={MAAS_CREDS_PATH}\n\
             Unit=metalform-hw-sync.service\n\
             \n\
             [Install]\n\
             WantedBy=paths.target\n"
        ),
    ));
    parts.run(&[
        "sh",
        "-c",
        "systemctl daemon-reload && systemctl enable --now metalform-hw-sync.timer metalform-hw-sync.path",
    ]);
    parts
}

/// (d) Data disks to /shareN: destructive, only when the profile says `initialize`.
pub(super) fn data_disks(input: &CloudInitInput) -> LayerParts {
    if input.data_disks != DataDisks::Initialize {
        return LayerParts::skipped(
            'd',
            "data-disks",
            "profile storage.dataDisks is skip: disks are left as they are",
        );
    }
    let boot = input.boot_disk_hint.as_deref().unwrap_or("");
    let mut parts = LayerParts::new(
        'd',
        "data-disks",
        METALFORM_LAYER_VERSION,
        format!(
            "DESTRUCTIVE: formats every data disk as /shareN, never the boot disk{}",
            if boot.is_empty() {
                String::new()
            } else {
                format!(" ({boot})")
            }
        ),
    );
    parts.summary.destructive = true;
    parts.files.push(WriteFile::new(
        format!("{ETC_DIR}/data-disks.env"),
        "0644",
        env_file(
            "metalform layer d: data disks to /shareN (destructive; profile storage.dataDisks: initialize)",
            &[("BOOT_DISK", boot)],
        ),
    ));
    parts
        .files
        .push(WriteFile::script("data-disks", DATA_DISKS_SCRIPT));
    parts.run(&[&format!("{LIB_DIR}/data-disks")]);
    parts
}

/// One line of roce.conf: `IFACE ADDRESS PREFIX NETWORK TABLE PRIORITY GATEWAY|-`. A /31's
/// gateway is its other end; other prefixes get only the connected route.
fn roce_line(index: usize, assignment: &RoceAssignment) -> String {
    let addr = assignment.address;
    let gateway = if addr.prefix_len == 31 {
        std::net::Ipv4Addr::from(u32::from(addr.address) ^ 1).to_string()
    } else {
        "-".to_string()
    };
    format!(
        "{} {} {} {} {} {} {}\n",
        assignment.interface,
        addr.address,
        addr.prefix_len,
        addr.network().address,
        ROCE_TABLE_BASE + index,
        ROCE_RULE_PRIORITY_BASE + index,
        gateway
    )
}

/// Routing tables 101, 102, … and rule priorities 1001, 1002, … in assignment order.
const ROCE_TABLE_BASE: usize = 100;
const ROCE_RULE_PRIORITY_BASE: usize = 1000;

/// (e) RoCE routing: per-interface policy routing matching the MAAS STATIC links.
pub(super) fn roce_routing(input: &CloudInitInput) -> LayerParts {
    if input.roce.is_empty() {
        return LayerParts::skipped(
            'e',
            "roce-routing",
            "no RoCE assignments for this node (or the profile disables roce)",
        );
    }
    let mut parts = LayerParts::new(
        'e',
        "roce-routing",
        METALFORM_LAYER_VERSION,
        input
            .roce
            .iter()
            .map(|r| format!("{} {}", r.interface, r.address))
            .collect::<Vec<_>>()
            .join(", "),
    );
    let mut conf = String::from(
        "# metalform layer e: IFACE ADDRESS PREFIX NETWORK TABLE PRIORITY GATEWAY|- (the MAAS STATIC links)\n",
    );
    for (i, assignment) in input.roce.iter().enumerate() {
        conf.push_str(&roce_line(i + 1, assignment));
    }
    parts
        .files
        .push(WriteFile::new(format!("{ETC_DIR}/roce.conf"), "0644", conf));
    parts
        .files
        .push(WriteFile::script("roce-routing", ROCE_ROUTING_SCRIPT));
    parts.files.push(WriteFile::new(
        "/etc/systemd/system/metalform-roce-routing.service",
        "0644",
        format!(
            "[Unit]\n\
             Description=metalform: RoCE policy routing (layer roce-routing v{METALFORM_LAYER_VERSION})\n\
             Wants=network-online.target\n\
             After=network-online.target\n\
             \n\
             [Service]\n\
             Type=oneshot\n\
             RemainAfterExit=yes\n\
             ExecStart={LIB_DIR}/roce-routing\n\
             \n\
             [Install]\n\
             WantedBy=multi-user.target\n"
        ),
    ));
    parts.run(&[
        "sh",
        "-c",
        "systemctl daemon-reload && systemctl enable --now metalform-roce-routing.service",
    ]);
    parts
}

/// The hardware-sync units metalform enables and restarts over SSH after writing the
/// credentials file (seed 000 §4.3 EnsureHardwareSyncConfigured).
pub const HW_SYNC_UNITS: &[&str] = &["metalform-hw-sync.timer", "metalform-hw-sync.service"];

/// The deploy-user layer's own version: 2 since it is keys-only by default (issue 16).
const DEPLOY_USER_LAYER_VERSION: &str = "2";

/// The sudoers commands the deploy user may run without a password: exactly what metalform
/// runs on the host over SSH (`provider::host::SshHost`) — install the hardware-sync
/// credentials file, enable and restart its units. Arguments are matched as written.
fn metalform_commands() -> String {
    let units = HW_SYNC_UNITS.join(" ");
    format!(
        "(root) NOPASSWD: /usr/bin/install -D -m 0600 -o root -g root /dev/stdin {MAAS_CREDS_PATH}, \
         /usr/bin/systemctl enable {units}, /usr/bin/systemctl restart {units}"
    )
}

/// The sudoers rule of `sudo: restricted`: metalform's own commands, nothing else.
pub fn restricted_sudo_rule() -> String {
    format!("ALL={}", metalform_commands())
}

/// (f) The site's deploy user, set up as the profile's `deployUser` says: SSH keys, a locked
/// password unless the profile gives one (then only its SHA-512 crypt hash, at
/// [`password::CRYPT_ROUNDS`] rounds), sudo restricted to metalform's own commands unless the
/// profile asks for more, SSH password login off unless asked for. `default` stays first so
/// MAAS's default user and its SSH keys are kept.
pub(super) fn deploy_user(input: &CloudInitInput, reveal: Reveal) -> LayerParts {
    use crate::model::SudoPolicy;
    let user = &input.deploy_user;
    let policy = user.policy;
    let password_note = match &user.password {
        Some(_) => "password hash",
        None => "no password",
    };
    let sudo_note = match policy.sudo {
        SudoPolicy::Restricted => "sudo for metalform's commands only",
        SudoPolicy::Password => "sudo with password",
        SudoPolicy::Passwordless => "passwordless sudo",
    };
    let ssh_note = if policy.ssh_password_login {
        "SSH password login"
    } else {
        "SSH keys only"
    };
    let mut parts = LayerParts::new(
        'f',
        "deploy-user",
        DEPLOY_USER_LAYER_VERSION,
        format!("{} ({password_note}, {sudo_note}, {ssh_note})", user.name),
    );
    // One sudoers rule (cloud-init's schema takes a string): for `password`, everything with
    // the password, then metalform's commands — sudo uses the last match, so those need none.
    let sudo = Yaml::str(match policy.sudo {
        SudoPolicy::Restricted => restricted_sudo_rule(),
        SudoPolicy::Password => format!("ALL=(ALL:ALL) ALL, {}", metalform_commands()),
        SudoPolicy::Passwordless => "ALL=(ALL) NOPASSWD:ALL".to_owned(),
    });
    let mut entry = vec![
        ("name", Yaml::str(&user.name)),
        ("gecos", Yaml::str("metalform deploy user")),
        ("groups", Yaml::Flow(vec!["adm".into()])),
        ("shell", Yaml::str("/bin/bash")),
        ("sudo", sudo),
        ("lock_passwd", Yaml::Bool(user.password.is_none())),
    ];
    if let Some(secret) = &user.password {
        let hash = match reveal {
            Reveal::Secrets => password::sha512_crypt(secret, &password::salt_for(input))
                .expose()
                .to_string(),
            Reveal::Redacted => super::REDACTED.to_string(),
        };
        entry.push(("hashed_passwd", Yaml::Str(hash)));
    }
    if !user.ssh_keys.is_empty() {
        entry.push((
            "ssh_authorized_keys",
            Yaml::Seq(user.ssh_keys.iter().map(Yaml::str).collect()),
        ));
    }
    parts.top_level.push((
        "users".into(),
        Yaml::Seq(vec![Yaml::str("default"), Yaml::map(entry)]),
    ));
    // Set either way: an image that allows password logins is told not to.
    parts
        .top_level
        .push(("ssh_pwauth".into(), Yaml::Bool(policy.ssh_password_login)));
    parts
}

/// The interval as a whole number of seconds, at least one minute.
pub(super) fn interval_ok(interval: Duration) -> bool {
    interval.as_secs() >= 60 && interval.subsec_nanos() == 0
}
