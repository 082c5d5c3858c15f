//! A test bed for the executor and the CLI: simulated MAAS sites (one simulator each, on a
//! high time scale), a fleet written as real manifests pointing at them, dev secrets, a SQLite
//! store, the enrollment endpoint, and an executor with short poll intervals.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use metalform::agent::{AgentServer, AgentServerConfig};
use metalform::apply::{
    Executor, ExecutorOptions, MemoryProgress, NodeOutcome, SiteMaas, StageEnv, Work, WorkItem,
};
use metalform::clock::SystemClock;
use metalform::lifecycle::{JobKind, JobState};
use metalform::model::Fleet;
use metalform::observe::MaasClients;
use metalform::plan::NodeTarget;
use metalform::provider::bmc::SimBmc;
use metalform::provider::host::SimHost;
use metalform::provider::maas::{MaasClientOptions, MaasMetrics, RetryPolicy};
use metalform::secrets::{FileStore, SecretStore};
use metalform::sim::{self, FleetOptions, InitialState, SimConfig, SimHandle};
use metalform::source::FleetSource;
use metalform::stages::onboard::{Peers, SitePeers};
use metalform::store::{Actor, Job, JobFilter, Store};

/// Simulated seconds per real second: commissioning takes ~0.5 s, a deployment ~1 s.
pub const TIME_SCALE: f64 = 600.0;

/// One site: its name and the simulated machines behind it.
pub struct SiteSetup {
    pub name: String,
    pub config: SimConfig,
    /// Hostnames (index into config.machines) the fleet declares; `None`: all machines.
    pub declared: Option<Vec<usize>>,
}

impl SiteSetup {
    /// `n` Ready machines known to MAAS (`gpu00001…`), `unknown` more that MAAS discovers.
    pub fn generated(name: &str, seed: u64, n: usize, unknown: usize) -> SiteSetup {
        let mut config = SimConfig::generated(
            seed,
            &FleetOptions {
                machines: n,
                initial: InitialState::Ready,
                no_boss_every: 0,
                unknown,
            },
        );
        config.time_scale = TIME_SCALE;
        config.timings.jitter = 0.1;
        SiteSetup {
            name: name.into(),
            config,
            declared: None,
        }
    }

    pub fn faults(mut self, spec: &str) -> Self {
        self.config.faults = spec.to_owned();
        self
    }
}

/// The bed's knobs.
pub struct Setup {
    pub sites: Vec<SiteSetup>,
    /// YAML lines added under the profile's `spec:` (indented by the caller's 2 spaces).
    pub profile_spec: String,
    /// YAML lines added at the end of every site's `spec:` (2-space indented).
    pub site_spec: String,
    pub max_parallel: u32,
}

impl Setup {
    pub fn one_site(site: SiteSetup) -> Setup {
        Setup {
            sites: vec![site],
            profile_spec: String::new(),
            site_spec: String::new(),
            max_parallel: 10,
        }
    }

    pub fn profile(mut self, yaml: &str) -> Self {
        self.profile_spec = yaml.to_owned();
        self
    }

    pub fn site(mut self, yaml: &str) -> Self {
        self.site_spec = yaml.to_owned();
        self
    }
}

/// The hostname the fleet gives machine `index` of a site: MAAS's for known machines,
/// `new{index}` for the ones MAAS discovers.
pub fn hostname_of(config: &SimConfig, index: usize) -> String {
    config.machines[index]
        .hostname
        .clone()
        .unwrap_or_else(|| format!("new{:05}", index + 1))
}

pub struct Bed {
    pub dir: tempfile::TempDir,
    pub sims: Vec<(String, SimHandle)>,
    pub fleet_dir: PathBuf,
    pub secrets_path: PathBuf,
    pub state_url: String,
    pub store: Store,
    pub secrets: Arc<dyn SecretStore>,
    pub enroll: AgentServer,
    pub fleet: Fleet,
    pub metrics: MaasMetrics,
    pub progress: Arc<MemoryProgress>,
}

/// The profile every bed uses, plus the test's additions.
fn profile_yaml(site: &str, max_parallel: u32, extra: &str) -> String {
    format!(
        "apiVersion: metalform/v1
kind: Profile
metadata: {{name: {site}-gpu, site: {site}}}
spec:
  storage: {{dataDisks: skip}}
  concurrency: {{maxParallel: {max_parallel}}}
  enrollment: {{tokenTtl: 2h}}
{extra}"
    )
}

pub fn write_fleet(dir: &Path, setup: &Setup, sims: &[(String, SimHandle)]) {
    let urls: Vec<(String, String)> = sims
        .iter()
        .map(|(name, sim)| (name.clone(), sim.maas_url.clone()))
        .collect();
    write_fleet_at(dir, setup, &urls);
}

/// The fleet of `setup` for MAAS regions at `urls` (site name, MAAS URL), e.g. regions of a
/// `metalform sim` process.
pub fn write_fleet_at(dir: &Path, setup: &Setup, urls: &[(String, String)]) {
    for sub in ["sites", "profiles", "nodes"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    for (site, (name, maas_url)) in setup.sites.iter().zip(urls) {
        assert_eq!(&site.name, name);
        std::fs::write(
            dir.join(format!("sites/{name}.yaml")),
            format!(
                "apiVersion: metalform/v1
kind: Site
metadata: {{name: {name}}}
spec:
  region: test-1
  maas:
    url: {url}
    apiKey: {{vault: kv/{name}/api-token, key: token}}
  power:
    defaultCredentials: {{vault: kv/{name}/power/default}}
  network: {{pxeIface: ens19, pxeVlanVid: 46, nodePxeIface: eno8303}}
  deploy:
    password: {{vault: kv/{name}/deploy, key: password}}
    nodePasswords: {{vault: kv/{name}/deploy-nodes}}
  defaultProfile: {name}-gpu
{extra}",
                url = maas_url.trim_end_matches('/'),
                extra = setup.site_spec,
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join(format!("profiles/{name}.yaml")),
            profile_yaml(name, setup.max_parallel, &setup.profile_spec),
        )
        .unwrap();
        let indices: Vec<usize> = site
            .declared
            .clone()
            .unwrap_or_else(|| (0..site.config.machines.len()).collect());
        let mut nodes = String::new();
        for i in indices {
            let spec = &site.config.machines[i];
            nodes.push_str(&format!(
                "    - {{hostname: {}, bmc: {{ipmiIp: {}}}, roce: [{{interface: enp28s0np0, address: 172.30.{}.{}/31}}]}}\n",
                hostname_of(&site.config, i),
                spec.bmc_ip.as_deref().unwrap(),
                i / 120,
                (i % 120) * 2 + 1,
            ));
        }
        std::fs::write(
            dir.join(format!("nodes/{name}.yaml")),
            format!(
                "apiVersion: metalform/v1
kind: NodeGroup
metadata: {{name: {name}-rack}}
spec:
  site: {name}
  sku: mi300x.192g.8gpu
  gpus: 8
  nodes:
{nodes}"
            ),
        )
        .unwrap();
    }
}

pub fn write_secrets(path: &Path, sims: &[(String, SimHandle)]) {
    let keys: Vec<(String, String)> = sims
        .iter()
        .map(|(name, sim)| (name.clone(), sim.api_key().expose().to_owned()))
        .collect();
    write_secrets_for(path, &keys);
}

/// The dev secrets of sites whose MAAS API keys are `keys` (site name, key).
pub fn write_secrets_for(path: &Path, keys: &[(String, String)]) {
    let mut doc = serde_json::Map::new();
    for (name, key) in keys {
        doc.insert(
            format!("kv/{name}/api-token"),
            serde_json::json!({"token": key}),
        );
        doc.insert(
            format!("kv/{name}/power/default"),
            serde_json::json!({"user": "root", "pass": "calvin"}),
        );
        doc.insert(
            format!("kv/{name}/deploy"),
            serde_json::json!({"password": "deploy-pass"}),
        );
    }
    std::fs::write(path, serde_json::Value::Object(doc).to_string()).unwrap();
}

impl Bed {
    pub async fn start(setup: Setup) -> Bed {
        Bed::start_with_state(setup, None).await
    }

    /// A bed whose store is `state_url` (e.g. PostgreSQL) instead of a SQLite file.
    pub async fn start_with_state(setup: Setup, state_url: Option<String>) -> Bed {
        let dir = tempfile::tempdir().unwrap();
        let mut sims = Vec::new();
        for site in &setup.sites {
            let handle = sim::start(site.config.clone())
                .await
                .expect("simulator starts");
            sims.push((site.name.clone(), handle));
        }
        let fleet_dir = dir.path().join("fleet");
        write_fleet(&fleet_dir, &setup, &sims);
        let secrets_path = dir.path().join("secrets.json");
        write_secrets(&secrets_path, &sims);
        let state_url = state_url
            .unwrap_or_else(|| format!("sqlite://{}", dir.path().join("state.db").display()));
        let store = Store::open(&state_url, Arc::new(SystemClock))
            .await
            .unwrap();
        let secrets: Arc<dyn SecretStore> = Arc::new(FileStore::new(&secrets_path));
        let fleet = metalform::manifest::load_fleet(&FleetSource::new(&fleet_dir, None))
            .unwrap_or_else(|e| panic!("test fleet is valid: {e:?}"))
            .fleet;
        // The agent channel as apply and the daemon serve it: TLS with a development CA the
        // simulated hosts pin (their payload carries it).
        let enroll = AgentServer::start(
            store.clone(),
            AgentServerConfig::new(
                "127.0.0.1:0".parse().unwrap(),
                None,
                metalform::listener::TlsSetting::dev_ca(dir.path().join("agent-ca")),
            ),
        )
        .await
        .unwrap();
        Bed {
            dir,
            sims,
            fleet_dir,
            secrets_path,
            state_url,
            store,
            secrets,
            enroll,
            fleet,
            metrics: MaasMetrics::new(),
            progress: Arc::new(MemoryProgress::default()),
        }
    }

    pub fn sim(&self, site: &str) -> &SimHandle {
        &self.sims.iter().find(|(n, _)| n == site).unwrap().1
    }

    /// Test pacing: fast polls and retries, short leases.
    pub fn options() -> ExecutorOptions {
        ExecutorOptions {
            poll_interval: Duration::from_millis(40),
            retry_base: Duration::from_millis(50),
            retry_cap: Duration::from_millis(400),
            lease_ttl: Duration::from_secs(3),
            seed: 7,
            ..ExecutorOptions::default()
        }
    }

    pub fn env(&self) -> StageEnv {
        // One simulator per site; BMC and host stand-ins go to the site's simulator.
        let peers_of = |sim: &SimHandle| {
            let control = url::Url::parse(&sim.base_url()).unwrap();
            SitePeers {
                bmc: Arc::new(SimBmc::new(&control)),
                host: Arc::new(SimHost::new(&control)),
            }
        };
        let peers = Peers {
            default: peers_of(&self.sims[0].1),
            per_site: self
                .sims
                .iter()
                .map(|(name, sim)| (name.clone(), peers_of(sim)))
                .collect(),
        };
        let options = MaasClientOptions {
            metrics: self.metrics.clone(),
            retry: RetryPolicy {
                base_delay: Duration::from_millis(50),
                max_delay: Duration::from_millis(500),
                ..RetryPolicy::default()
            },
            ..MaasClientOptions::default()
        };
        StageEnv {
            store: self.store.clone(),
            secrets: self.secrets.clone(),
            maas: Arc::new(SiteMaas::new(
                self.secrets.clone(),
                MaasClients::new(options),
            )),
            peers,
            clock: Arc::new(SystemClock),
            enroll_url: self.enroll.enroll_url(),
            agent_install: metalform::cloudinit::AgentInstall {
                binary: None,
                ca_bundle: self.enroll.client_ca().map(str::to_owned),
            },
            actor: Actor::system("metalform-test"),
            poll_interval: Bed::options().poll_interval,
            agent_signals: Some(self.enroll.channel().signals().clone()),
        }
    }

    pub fn executor(&self) -> Executor {
        Executor::new(self.env(), Bed::options(), self.progress.clone())
    }

    pub fn target(&self, site: &str, hostname: &str) -> NodeTarget {
        let node = self
            .fleet
            .nodes
            .values()
            .find(|n| n.id.site.as_str() == site && n.id.hostname.as_str() == hostname)
            .unwrap_or_else(|| panic!("{site}/{hostname} is in the fleet"));
        NodeTarget::resolve(&self.fleet, node).unwrap()
    }

    /// Onboard every node of the fleet.
    pub fn onboard_all(&self) -> Vec<WorkItem> {
        self.fleet
            .nodes
            .values()
            .map(|node| {
                WorkItem::new(
                    NodeTarget::resolve(&self.fleet, node).unwrap(),
                    Work::Onboard,
                )
            })
            .collect()
    }

    pub fn onboard(&self, site: &str, hostname: &str) -> WorkItem {
        WorkItem::new(self.target(site, hostname), Work::Onboard)
    }

    pub async fn jobs(&self) -> Vec<Job> {
        self.store
            .list_jobs(JobKind::Onboarding, &JobFilter::default())
            .await
            .unwrap()
    }

    pub async fn job_of(&self, site: &str, hostname: &str) -> Job {
        self.jobs()
            .await
            .into_iter()
            .find(|j| j.site == site && j.hostname == hostname)
            .unwrap_or_else(|| panic!("{site}/{hostname} has a job"))
    }

    /// Deploy requests that took effect, per hostname, for one site.
    pub fn deploys(&self, site: &str) -> std::collections::BTreeMap<String, u64> {
        let sim = self.sim(site);
        let counters = sim.counters();
        sim.with_world(|w| {
            w.machines
                .values()
                .map(|m| {
                    (
                        m.hostname.clone(),
                        counters.get(&m.system_id).map(|c| c.deploy).unwrap_or(0),
                    )
                })
                .collect()
        })
    }

    pub fn progress_lines(&self) -> Vec<String> {
        self.progress
            .events
            .lock()
            .unwrap()
            .iter()
            .map(|e| format!("{} {} {} {}", e.node, e.stage, e.status.label(), e.message))
            .collect()
    }
}

/// The most machines seen booting at once (commissioning, testing or deploying), counted from
/// MAAS's `Node changed status` events fed in id order: no moment between two samples is
/// missed.
#[derive(Debug, Default)]
pub struct BootingAtOnce {
    now: i64,
    pub most: usize,
}

impl BootingAtOnce {
    /// One event of MAAS's log: its type's description and its text.
    pub fn see(&mut self, event_type: &str, description: &str) {
        let busy = |status: &str| matches!(status, "Commissioning" | "Testing" | "Deploying");
        let change = description
            .strip_prefix("From '")
            .and_then(|rest| rest.split_once("' to '"))
            .filter(|_| event_type == "Node changed status");
        if let Some((from, to)) = change {
            let to = to.trim_end_matches('\'');
            self.now += i64::from(busy(to)) - i64::from(busy(from));
            self.most = self.most.max(usize::try_from(self.now).unwrap_or(0));
        }
    }
}

/// A free loopback port (bound and released: the caller binds it again soon).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Bed {
    /// Edit a file of the fleet (a manifest change an operator commits).
    pub fn edit_fleet(&self, file: &str, from: &str, to: &str) {
        let path = self.fleet_dir.join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(from), "{file} has no `{from}`:\n{text}");
        std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    }

    /// Add or replace one secret in the dev secret file.
    pub fn put_secret(&self, path: &str, value: serde_json::Value) {
        let text = std::fs::read_to_string(&self.secrets_path).unwrap();
        let mut doc: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&text).unwrap();
        doc.insert(path.to_owned(), value);
        std::fs::write(
            &self.secrets_path,
            serde_json::Value::Object(doc).to_string(),
        )
        .unwrap();
    }

    /// The audit rows of one job.
    pub async fn audit_of(&self, job: uuid::Uuid) -> Vec<metalform::store::AuditRecord> {
        self.store
            .audit_log("onboarding", &job.to_string())
            .await
            .unwrap()
    }

    /// `metalform SUBCOMMAND …` reading this bed's store only (list, show, status).
    pub fn cli_store(&self, args: &[&str]) -> std::process::Command {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_metalform"));
        command
            .args(args)
            .args(["--state", &self.state_url])
            .env_remove("METALFORM_STATE")
            .env("NO_COLOR", "1");
        command
    }

    /// `metalform plan|observe …` against this bed: its fleet, store and secrets.
    pub fn cli_plan(&self, args: &[&str]) -> std::process::Command {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_metalform"));
        command
            .args(args)
            .arg("--fleet")
            .arg(&self.fleet_dir)
            .args(["--state", &self.state_url])
            .arg("--secrets")
            .arg(format!("file://{}", self.secrets_path.display()))
            .env_remove("METALFORM_STATE")
            .env_remove("METALFORM_SECRETS")
            .env("NO_COLOR", "1");
        command
    }

    /// `metalform plan --out DIR/name` against this bed: the signed plan file's path.
    pub fn plan_to(&self, name: &str) -> PathBuf {
        let file = self.dir.path().join(name);
        let out = self
            .cli_plan(&["plan", "--out", file.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        file
    }

    /// The MAAS requests a site's simulator received that change something (not GET).
    pub fn maas_writes(&self, site: &str) -> Vec<String> {
        self.sim(site)
            .ops()
            .into_iter()
            .filter(|op| op.method != "GET")
            .map(|op| format!("{} {} {:?}", op.method, op.path, op.op))
            .collect()
    }

    /// The agent channel as `apply` serves it on `port` (the development CA it keeps with the
    /// fleet's state): what hosts deployed by an apply of this bed reach and trust.
    pub async fn agent_channel_like_apply(&self, port: u16) -> AgentServer {
        AgentServer::start(
            self.store.clone(),
            AgentServerConfig::new(
                format!("127.0.0.1:{port}").parse().unwrap(),
                None,
                metalform::listener::TlsSetting::DevCa {
                    dir: self.fleet_dir.join(".metalform").join("agent-ca"),
                    names: vec!["127.0.0.1".into()],
                },
            ),
        )
        .await
        .unwrap()
    }

    /// `metalform SUBCOMMAND …` against this bed: its store, secrets, simulators (BMC and
    /// host stand-ins) and an enrollment endpoint on `agent_port`, with test pacing.
    pub fn cli(&self, args: &[&str], agent_port: u16) -> std::process::Command {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_metalform"));
        command.args(args);
        let sims: Vec<String> = self
            .sims
            .iter()
            .map(|(name, sim)| format!("{name}={}", sim.base_url()))
            .collect();
        command
            .arg("--fleet")
            .arg(&self.fleet_dir)
            .args(["--state", &self.state_url])
            .arg("--secrets")
            .arg(format!("file://{}", self.secrets_path.display()))
            .args(["--sim-control", &sims.join(",")])
            .args(["--agent-listen", &format!("127.0.0.1:{agent_port}")])
            .args([
                "--poll-interval",
                "40ms",
                "--lease-ttl",
                "2s",
                "--retry-base",
                "50ms",
            ])
            .env_remove("METALFORM_STATE")
            .env_remove("METALFORM_SECRETS")
            .env("NO_COLOR", "1");
        command
    }
}

/// Two executors (two applies, or two daemon replicas) given the same nodes at once.
pub async fn race_two_executors(bed: &Bed) {
    let executor = |holder: &str, seed: u64| {
        Executor::new(
            bed.env(),
            ExecutorOptions {
                holder: holder.into(),
                seed,
                lease_ttl: Duration::from_secs(2),
                ..Bed::options()
            },
            bed.progress.clone(),
        )
    };
    let a = executor("apply@a:1:aaaa", 1);
    let b = executor("apply@b:2:bbbb", 2);
    let (ra, rb) = tokio::join!(a.run(bed.onboard_all()), b.run(bed.onboard_all()));
    let mut converged: BTreeMap<String, usize> = BTreeMap::new();
    for result in ra.results.iter().chain(rb.results.iter()) {
        match &result.outcome {
            NodeOutcome::Converged { .. } => {
                *converged.entry(result.node.clone()).or_default() += 1
            }
            NodeOutcome::Left { .. } => {}
            other => panic!("{}: {other:?}", result.node),
        }
    }
    let nodes = bed.fleet.nodes.len();
    assert_eq!(
        converged.len(),
        nodes,
        "every node converged: {converged:?}"
    );
    assert!(
        converged.values().all(|n| *n == 1),
        "each node by exactly one executor: {converged:?}"
    );
    let jobs = bed.jobs().await;
    assert_eq!(jobs.len(), nodes, "one job per node");
    assert!(jobs.iter().all(|j| j.state == JobState::Completed));
    assert!(bed.deploys("dc1").values().all(|d| *d == 1));
}
