//! A daemon test bed: the executor bed (simulated MAAS sites, real manifests, dev secrets,
//! SQLite) with its fleet in a real git repository made with real git, API tokens in the dev
//! secret store, and a daemon configuration pointing at all of it.
#![allow(dead_code)]

pub mod git_http;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::onboard_support::{Bed, Setup};
use metalform::lifecycle::NodeState;

pub const ADMIN_TOKEN: &str = "admin-token-0123456789abcdef";
pub const AGENT_TOKEN: &str = "agent-token-0123456789abcdef";

pub fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=Fleet Operator",
            "-c",
            "user.email=ops@example.invalid",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Commit everything in the fleet repository.
pub fn commit(dir: &Path, message: &str) {
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "--allow-empty", "-m", message]);
}

/// One simulated site `dc1` of four machines (`seed` picks them), the nodes `declared` of them
/// in the manifests.
pub fn one_site(seed: u64, declared: Vec<usize>) -> Setup {
    let mut site = crate::onboard_support::SiteSetup::generated("dc1", seed, 4, 0);
    site.declared = Some(declared);
    Setup::one_site(site).profile("  timeouts: {enrollment: 30s}\n")
}

pub struct DaemonBed {
    pub bed: Bed,
    pub config_path: PathBuf,
    pub events_path: PathBuf,
}

impl DaemonBed {
    /// The executor bed, its fleet committed on `main`, tokens in the secret store, and a
    /// daemon configuration (`extra` appended to it).
    pub async fn start(setup: Setup, extra: &str) -> DaemonBed {
        Self::start_with_state(setup, extra, None).await
    }

    /// [`DaemonBed::start`] on the store `state_url` (e.g. PostgreSQL) instead of SQLite.
    pub async fn start_with_state(
        setup: Setup,
        extra: &str,
        state_url: Option<String>,
    ) -> DaemonBed {
        let bed = Bed::start_with_state(setup, state_url).await;
        git(&bed.fleet_dir, &["init", "-q", "-b", "main"]);
        commit(&bed.fleet_dir, "fleet: first sites and nodes");
        bed.put_secret(
            "kv/metalform/api-tokens",
            serde_json::json!({"admin": ADMIN_TOKEN, "agent": AGENT_TOKEN}),
        );
        let sims: Vec<String> = bed
            .sims
            .iter()
            .map(|(name, sim)| format!("{name} = \"{}\"", sim.base_url()))
            .collect();
        let events_path = bed.dir.path().join("events.jsonl");
        let config = format!(
            r#"[source]
repository = "{repo}"
branch = "main"
poll_interval = "200ms"

[state]
url = "{state}"
data_dir = "{data}"

[secrets]
url = "file://{secrets}"

[reconcile]
interval = "1s"

[api]
listen = "127.0.0.1:0"
plain_http = true

[agent]
listen = "127.0.0.1:0"

[[api.tokens]]
name = "ops-alice"
role = "admin"
vault = "kv/metalform/api-tokens"
key = "admin"

[[api.tokens]]
name = "agents"
role = "agent"
vault = "kv/metalform/api-tokens"
key = "agent"

[events]
sink = "file"
path = "{events}"

[executor]
poll_interval = "40ms"
lease_ttl = "3s"
retry_base = "50ms"
seed = 7

[peers]
sim_control = {{ {sims} }}
{extra}"#,
            repo = bed.fleet_dir.display(),
            state = bed.state_url,
            data = bed.dir.path().join("daemon").display(),
            secrets = bed.secrets_path.display(),
            events = events_path.display(),
            sims = sims.join(", "),
        );
        let config_path = bed.dir.path().join("daemon.toml");
        std::fs::write(&config_path, config).unwrap();
        DaemonBed {
            bed,
            config_path,
            events_path,
        }
    }

    /// Replace the configuration's `repository = …` line with `lines` (a remote repository
    /// and its credentials).
    pub fn set_source(&self, lines: &str) {
        let text = std::fs::read_to_string(&self.config_path).unwrap();
        let local = format!("repository = \"{}\"", self.bed.fleet_dir.display());
        assert!(text.contains(&local));
        std::fs::write(&self.config_path, text.replace(&local, lines)).unwrap();
    }

    /// Replace the `[agent]` table's body (its listen address, TLS, leases).
    pub fn set_agent(&self, lines: &str) {
        let text = std::fs::read_to_string(&self.config_path).unwrap();
        let table = "[agent]\nlisten = \"127.0.0.1:0\"\n";
        assert!(text.contains(table));
        std::fs::write(
            &self.config_path,
            text.replace(table, &format!("[agent]\n{lines}\n")),
        )
        .unwrap();
    }

    /// Listen on fixed free ports (a spawned daemon's address must be known, and deployed
    /// hosts carry the agent channel's URL across a restart); the admin listener's address.
    pub fn listen_on_free_port(&self) -> String {
        let text = std::fs::read_to_string(&self.config_path).unwrap();
        let listen = format!("127.0.0.1:{}", crate::onboard_support::free_port());
        let agent = format!("127.0.0.1:{}", crate::onboard_support::free_port());
        // The admin listener is the first `127.0.0.1:0` of the file, the agent channel's the second.
        let text = text
            .replacen("127.0.0.1:0", &listen, 1)
            .replacen("127.0.0.1:0", &agent, 1);
        std::fs::write(&self.config_path, text).unwrap();
        listen
    }

    /// `metalform daemon --config …` as a process, its stderr appended to `log`.
    pub fn spawn(&self, log: &Path) -> DaemonProcess {
        spawn_daemon(&self.config_path, log)
    }

    pub fn config(&self) -> metalform::daemon::DaemonConfig {
        metalform::daemon::DaemonConfig::load(&self.config_path).expect("the test config is valid")
    }

    /// Wait until every host of `site` is an active node.
    pub async fn converged_hosts(&self, site: &str, hosts: &[String], within: Duration) {
        let nodes: Vec<(&str, &str)> = hosts.iter().map(|h| (site, h.as_str())).collect();
        self.converged(&nodes, within).await;
    }

    /// The (site, hostname) pairs that are not active nodes yet, as `site/host`.
    pub async fn not_active(&self, nodes: &[(&str, &str)]) -> Vec<String> {
        let mut missing = Vec::new();
        for (site, host) in nodes {
            let node = self.bed.store.find_node(site, host).await.unwrap();
            if node.is_none_or(|n| n.status != NodeState::Active) {
                missing.push(format!("{site}/{host}"));
            }
        }
        missing
    }

    /// Wait until every (site, hostname) is an active node.
    pub async fn converged(&self, nodes: &[(&str, &str)], within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let missing = self.not_active(nodes).await;
            if missing.is_empty() {
                return;
            }
            if Instant::now() > deadline {
                let jobs: Vec<String> = self
                    .bed
                    .jobs()
                    .await
                    .iter()
                    .map(|j| {
                        format!(
                            "{} {} {} {:?}",
                            j.hostname, j.state, j.stage, j.error_message
                        )
                    })
                    .collect();
                panic!("not converged: {missing:?}; jobs: {jobs:#?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Send `signal` (`TERM`, `HUP`) to a process.
pub fn signal(child: &std::process::Child, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// A JSON request to the daemon.
pub async fn call(
    method: reqwest::Method,
    url: String,
    token: Option<&str>,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let client = reqwest::Client::new();
    let mut request = client.request(method, url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("the daemon answers");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let json = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    (status, json)
}

/// `metalform daemon --config CONFIG` as a process, its stderr appended to `log`.
pub fn spawn_daemon(config: &Path, log: &Path) -> DaemonProcess {
    DaemonProcess(daemon_command(config, log).spawn().unwrap())
}

/// A `metalform daemon` process that is killed when dropped while still running, so a test
/// that fails before it stops the daemon leaves no daemon behind to load the machine.
pub struct DaemonProcess(pub std::process::Child);

impl std::ops::Deref for DaemonProcess {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for DaemonProcess {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The command [`spawn_daemon`] runs, for a caller that sets more of its environment.
pub fn daemon_command(config: &Path, log: &Path) -> Command {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_metalform"));
    command
        .args(["daemon", "--config"])
        .arg(config)
        .env_remove("METALFORM_STATE")
        .env_remove("METALFORM_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(log);
    command
}
