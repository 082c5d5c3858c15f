//! `metalform demo` (DESIGN.md §3; issue 5): the whole slice on embedded defaults, with no
//! service to install — the sample fleet, an in-process MAAS simulator per site seeded with the
//! fleet's machines (most already commissioned, some new, some only discoverable by PXE-booting
//! their BMC), dev secrets and a SQLite store in a temporary directory; then validate → plan →
//! apply with progress → the final status table → a fresh plan, which is empty. Planning and
//! applying go through the same library path as `metalform plan` and `metalform apply`
//! (`apply::plan_now`, `Executor::run_plan`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::apply::{ExecArgs, Runtime, plan_refused, render_report};
use super::output::table;
use super::world::{FleetArgs, SecretArgs, load_fleet, store_error, warn_unreadable};
use super::{CliError, Exit, GlobalArgs};
use crate::apply::{ExecutorOptions, Progress, StderrProgress};
use crate::lifecycle::JobKind;
use crate::model::{Fleet, Lifecycle, SecretRef};
use crate::plan::PlanOptions;
use crate::plan::render;
use crate::sim::{self, AgentBehaviour, DiskSpec, InitialState, MachineSpec, NicSpec, SimConfig};
use crate::store::{Actor, JobFilter};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Use this fleet instead of the embedded sample (its sites get simulators).
    #[arg(long, value_name = "DIR")]
    pub fleet: Option<PathBuf>,
    /// Simulated MAAS seconds per real second (a deployment takes ~600 simulated seconds).
    #[arg(long, default_value_t = 600.0, value_name = "X")]
    pub time_scale: f64,
    /// Seed of the simulators and the executor's jitter.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub seed: u64,
    /// Keep the working directory (fleet, secrets, state.db) instead of removing it.
    #[arg(long)]
    pub keep: bool,
    /// Servers installed by the Redfish provisioner (simulated BMCs) next to the MAAS nodes.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub redfish_servers: usize,
}

/// The sample fleet (fleet/ in the repository), embedded so the demo runs anywhere.
const SAMPLE_FLEET: &[(&str, &str)] = &[
    ("sites/dc1.yaml", include_str!("../../fleet/sites/dc1.yaml")),
    ("sites/dc2.yaml", include_str!("../../fleet/sites/dc2.yaml")),
    (
        "profiles/gpu-default.yaml",
        include_str!("../../fleet/profiles/gpu-default.yaml"),
    ),
    (
        "profiles/dc2-gpu.toml",
        include_str!("../../fleet/profiles/dc2-gpu.toml"),
    ),
    (
        "nodes/dc1/c07u45.yaml",
        include_str!("../../fleet/nodes/dc1/c07u45.yaml"),
    ),
    (
        "nodes/dc1/c07u46.yaml",
        include_str!("../../fleet/nodes/dc1/c07u46.yaml"),
    ),
    (
        "nodes/dc1/rack-c07.yaml",
        include_str!("../../fleet/nodes/dc1/rack-c07.yaml"),
    ),
    (
        "nodes/dc1/rack-c08.yaml",
        include_str!("../../fleet/nodes/dc1/rack-c08.yaml"),
    ),
    (
        "nodes/dc2/a01u20.toml",
        include_str!("../../fleet/nodes/dc2/a01u20.toml"),
    ),
    (
        "nodes/dc2/rack-a01.yaml",
        include_str!("../../fleet/nodes/dc2/rack-a01.yaml"),
    ),
];

/// The password every BMC and deploy user has in the demo's dev secrets.
const DEMO_PASSWORD: &str = "demo-only-password";

/// How the simulated MAAS knows a node's machine.
fn initial_state(node: &crate::model::Node, index: usize) -> InitialState {
    if node.pxe_mac.is_some() {
        // Known MAC, unknown to MAAS: metalform creates the machine.
        return InitialState::Unknown;
    }
    match index % 7 {
        3 => InitialState::Unknown,
        5 => InitialState::New,
        _ => InitialState::Ready,
    }
}

/// One simulator per site, with a machine for every node the fleet wants in service.
pub(crate) fn sim_config(
    fleet: &Fleet,
    site: &crate::model::SiteName,
    site_index: usize,
    seed: u64,
    time_scale: f64,
) -> SimConfig {
    let mut config = SimConfig {
        seed: seed.wrapping_add(site_index as u64),
        time_scale,
        ..SimConfig::default()
    };
    // The PXE network of the region: the /24 of its MAAS address, as on the sample sites.
    if let Some(url::Host::Ipv4(ip)) = fleet.sites.get(site).and_then(|s| s.maas.url.host()) {
        let [a, b, c, _] = ip.octets();
        config.pxe_cidr = format!("{a}.{b}.{c}.0/24");
        config.pxe_gateway = format!("{a}.{b}.{c}.1");
    }
    for (index, node) in fleet
        .nodes_of_site(site)
        .filter(|n| n.lifecycle == Lifecycle::Active && n.provisioner.redfish().is_none())
        .enumerate()
    {
        let Some(profile) = fleet.profile_of(node) else {
            continue;
        };
        let mac = |nic: usize| {
            format!(
                "52:54:{site_index:02x}:{:02x}:{:02x}:{nic:02x}",
                index >> 8,
                index & 0xff
            )
        };
        let mut interfaces = vec![NicSpec {
            name: profile.network.node_pxe_iface.clone(),
            mac: node
                .pxe_mac
                .map(|m| m.to_string())
                .unwrap_or_else(|| mac(0)),
            speed_mbps: 1000,
        }];
        for (n, roce) in node.roce.iter().enumerate() {
            if interfaces.iter().all(|i| i.name != roce.interface) {
                interfaces.push(NicSpec {
                    name: roce.interface.clone(),
                    mac: mac(n + 1),
                    speed_mbps: 400_000,
                });
            }
        }
        let serial = |d: usize| format!("S{site_index:02}{index:04}{d:02}");
        let mut disks = vec![DiskSpec::boss("sda", &serial(0))];
        disks.extend((0..4).map(|d| DiskSpec::nvme(&format!("nvme{d}n1"), &serial(d + 1))));
        let initial = initial_state(node, index);
        config.machines.push(MachineSpec {
            bmc_ip: Some(node.bmc.ipmi_ip.to_string()),
            hostname: (initial != InitialState::Unknown).then(|| node.id.hostname.to_string()),
            interfaces,
            disks,
            initial,
            agent: AgentBehaviour::OnTime,
            ..MachineSpec::default()
        });
    }
    config
}

/// Dev secrets for every reference the fleet makes.
fn demo_secrets(fleet: &Fleet, api_keys: &BTreeMap<String, String>) -> serde_json::Value {
    let mut doc = serde_json::Map::new();
    let mut put = |reference: &SecretRef, fields: serde_json::Value| {
        doc.insert(reference.path.clone(), fields);
    };
    for (name, site) in &fleet.sites {
        let key = site
            .maas
            .api_key
            .key
            .clone()
            .unwrap_or_else(|| "token".into());
        put(
            &site.maas.api_key,
            json!({ key: api_keys.get(name.as_str()).cloned().unwrap_or_default() }),
        );
        let login = json!({"user": "root", "pass": DEMO_PASSWORD});
        put(&site.power.default_credentials, login.clone());
        for o in &site.power.overrides {
            put(&o.credentials, login.clone());
        }
        if let Some(password) = &site.deploy.password {
            let key = password.key.clone().unwrap_or_else(|| "password".into());
            put(password, json!({ key: DEMO_PASSWORD }));
        }
    }
    serde_json::Value::Object(doc)
}

fn write(path: &Path, text: &str) -> Result<(), CliError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, text).map_err(|e| CliError::user(format!("{}: {e}", path.display())))
}

/// A file only its owner can read (0600): the dev secrets, kept by `--keep`.
fn write_private(path: &Path, text: &str) -> Result<(), CliError> {
    crate::secrets::write_private_file(path, text.as_bytes())
        .map_err(|e| CliError::user(format!("{}: {e}", path.display())))
}

/// Copy a fleet directory's manifests (not its .metalform/ or other dot-dirs).
fn copy_fleet(from: &Path, to: &Path) -> Result<(), CliError> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            copy_fleet(&path, &to.join(&name))?;
        } else {
            std::fs::create_dir_all(to)?;
            std::fs::copy(&path, to.join(&name))?;
        }
    }
    Ok(())
}

pub async fn run(global: &GlobalArgs, args: Args) -> Result<Exit, CliError> {
    let started = Instant::now();
    let workdir = tempfile::Builder::new()
        .prefix("metalform-demo.")
        .tempdir()?;
    let root = workdir.path().to_path_buf();
    // It holds dev secrets and the state store, and `--keep` leaves it behind: owner only.
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700))?;
    }
    let fleet_dir = root.join("fleet");
    match &args.fleet {
        Some(dir) => copy_fleet(dir, &fleet_dir)?,
        None => {
            for (path, text) in SAMPLE_FLEET {
                write(&fleet_dir.join(path), text)?;
            }
        }
    }
    println!("metalform demo: the sample fleet against an embedded MAAS simulator per site");
    println!(
        "workdir {} ({})\n",
        root.display(),
        if args.keep {
            "kept"
        } else {
            "removed at the end; --keep keeps it"
        }
    );

    // 1. validate
    let exec_for = |sim_control: Vec<String>| ExecArgs {
        fleet: FleetArgs {
            fleet: fleet_dir.clone(),
            rev: None,
        },
        secrets: SecretArgs {
            secrets: Some(format!("file://{}", root.join("secrets.json").display())),
        },
        agent_listen: "127.0.0.1:0".parse().expect("address"),
        agent_url: None,
        agent_tls: Default::default(),
        agent_binary: Default::default(),
        sim_control,
        ssh_identity: None,
        actor: Some("demo".into()),
        poll_interval: Duration::from_millis(100),
        lease_ttl: Duration::from_secs(15),
        retry_base: Duration::from_millis(200),
        failed_retry_base: crate::apply::DEFAULT_FAILED_RETRY.base,
        failed_retry_cap: crate::apply::DEFAULT_FAILED_RETRY.cap,
        seed: Some(args.seed),
    };
    let mut fleet = load_fleet(&exec_for(Vec::new()).fleet)?;
    // Redfish servers join the first site; their manifests name the simulated BMCs.
    let redfish = match fleet.sites.keys().next() {
        Some(site) if args.redfish_servers > 0 => {
            let demo = super::demo_redfish::RedfishDemo::start(
                &fleet_dir,
                site.as_str(),
                args.redfish_servers,
                args.time_scale,
            )
            .await?;
            fleet = load_fleet(&exec_for(Vec::new()).fleet)?;
            Some(demo)
        }
        _ => None,
    };
    println!(
        "1. validate: {} sites, {} profiles, {} nodes: valid",
        fleet.sites.len(),
        fleet.profiles.len(),
        fleet.nodes.len()
    );

    // The simulated MAAS regions, and the fleet pointed at them.
    let mut sims = Vec::new();
    let mut api_keys = BTreeMap::new();
    let mut sim_control = Vec::new();
    for (index, (name, site)) in fleet.sites.iter().enumerate() {
        let config = sim_config(&fleet, name, index, args.seed, args.time_scale);
        let (known, discoverable) =
            config
                .machines
                .iter()
                .fold((0, 0), |(k, d), m| match m.initial {
                    InitialState::Unknown => (k, d + 1),
                    _ => (k + 1, d),
                });
        let handle = sim::start(config)
            .await
            .map_err(|e| CliError::unexpected(format!("the simulator did not start: {e}")))?;
        println!(
            "   site {name}: simulated MAAS at {} with {known} machines ({discoverable} more only discoverable by PXE)",
            handle.maas_url
        );
        let original = site.maas.url.as_str().trim_end_matches('/').to_owned();
        let file = fleet_dir.join("sites").join(format!("{name}.yaml"));
        let text = std::fs::read_to_string(&file).map_err(|e| {
            CliError::user(format!("{}: {e}", file.display()))
                .hint("the demo expects each site in sites/<name>.yaml")
        })?;
        if !text.contains(&original) {
            return Err(CliError::user(format!(
                "{} does not spell its MAAS URL as {original}",
                file.display()
            )));
        }
        write(
            &file,
            &text.replace(&original, handle.maas_url.trim_end_matches('/')),
        )?;
        api_keys.insert(name.to_string(), handle.api_key().expose().to_owned());
        sim_control.push(format!("{name}={}", handle.base_url()));
        sims.push(handle);
    }
    let mut secrets = demo_secrets(&fleet, &api_keys);
    if let Some(redfish) = &redfish {
        println!("   {}", redfish.describe());
        let (path, login) = redfish.secrets();
        secrets[path] = login;
    }
    write_private(&root.join("secrets.json"), &secrets.to_string())?;

    let global = GlobalArgs {
        state: Some(format!("sqlite://{}", root.join("state.db").display())),
        state_from_env: false,
        log: global.log.clone(),
    };
    let progress: Arc<dyn Progress> = Arc::new(StderrProgress::new());
    let runtime = Runtime::start(
        &global,
        &exec_for(sim_control),
        Actor::admin("demo"),
        ExecutorOptions {
            reason: Some("metalform demo".into()),
            ..ExecutorOptions::default()
        },
        progress,
    )
    .await?;
    let controller = match &redfish {
        Some(redfish) => Some(
            redfish
                .controller(
                    runtime.world.store.clone(),
                    &format!("file://{}", root.join("secrets.json").display()),
                    &root,
                )
                .await?,
        ),
        None => None,
    };
    let result = async {
        // 2. plan: observe every site's MAAS and the store, as `metalform plan` does.
        let (snapshot, plan) = runtime
            .world
            .plan(&runtime.fleet, &PlanOptions::default())
            .await?;
        warn_unreadable(&snapshot);
        println!(
            "\n2. plan\n{}",
            render::render_text(
                &plan,
                render::TextOptions {
                    show_unchanged: false
                }
            )
        );
        // 3. apply the plan's changes, as `metalform apply` does.
        println!("3. apply (progress on stderr)");
        let report = runtime
            .executor
            .run_plan(&plan, false)
            .await
            .map_err(plan_refused)?;
        print!("{}", render_report(&report));
        // 4. status
        println!("\n4. status");
        let jobs = runtime
            .world
            .store
            .list_jobs(JobKind::Onboarding, &JobFilter::default())
            .await
            .map_err(store_error)?;
        let mut rows = Vec::new();
        for node in fleet
            .nodes
            .values()
            .filter(|n| n.provisioner.redfish().is_none())
        {
            let record = runtime
                .world
                .store
                .find_node(node.id.site.as_str(), node.id.hostname.as_str())
                .await
                .map_err(store_error)?;
            let job = jobs.iter().find(|j| {
                j.site == node.id.site.as_str() && j.hostname == node.id.hostname.as_str()
            });
            rows.push(vec![
                node.id.site.to_string(),
                node.id.hostname.to_string(),
                record
                    .as_ref()
                    .map(|r| r.status.to_string())
                    .unwrap_or_else(|| format!("- ({})", node.lifecycle.as_str())),
                job.map(|j| j.state.to_string())
                    .unwrap_or_else(|| "-".into()),
                job.and_then(|j| j.maas_system_id.clone())
                    .unwrap_or_else(|| "-".into()),
                record.and_then(|r| r.host).unwrap_or_else(|| "-".into()),
            ]);
        }
        print!(
            "{}",
            table(
                &["SITE", "HOSTNAME", "STATE", "JOB", "MACHINE", "HOST"],
                &rows
            )
        );
        if controller.is_some() {
            // Each provisioning: ISO, CD1 and CD2, boot, reset, the maintenance OS's report,
            // cleanup (~40 simulated seconds of BMC power changes and the maintenance OS).
            let limit = Duration::from_secs_f64((600.0 / args.time_scale.max(1.0)).max(30.0));
            let rows =
                super::demo_redfish::finished_rows(&runtime.world.store, limit).await?;
            println!("\n   Redfish provisioning (`metalform jobs show --kind provisioning ID` shows a journal)");
            print!(
                "{}",
                table(&["SITE", "HOSTNAME", "SERIAL", "STATUS", "FAILED STEP"], &rows)
            );
        }
        // 5. A fresh plan of the world apply left is empty (DESIGN.md §4).
        let (_, again) = runtime
            .world
            .plan(&runtime.fleet, &PlanOptions::default())
            .await?;
        println!("\n5. plan again: {}", render::summary_line(&again.summary));
        println!(
            "\nDone in {:.1} s: {} converged, {} failed; {} MAAS requests.",
            started.elapsed().as_secs_f64(),
            report.converged(),
            report.failed(),
            runtime.maas.metrics().total()
        );
        super::apply::finish(&report)
    }
    .await;
    if let Some(controller) = controller {
        controller.shutdown().await;
    }
    runtime.shutdown().await;
    drop(sims);
    drop(redfish);
    if args.keep {
        let _ = workdir.keep();
    }
    result
}
