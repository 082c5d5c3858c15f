//! Shared helpers of the plan tests: the fixture fleet, snapshot builders with fixed ids and
//! times, and golden-file comparison (`UPDATE_GOLDEN=1 cargo test --test suite plan_golden::` rewrites
//! the files; review the diff before committing).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Duration, Utc};
use metalform::lifecycle::{FailureClass, JobKind, JobState, MaasStatus, NodeState};
use metalform::manifest;
use metalform::model::{EraseMode, Fleet, NodePolicy, ProfileName, SiteName};
use metalform::observe::{
    InventoryNode, ObservedJob, ObservedMachine, ObservedStatus, SNAPSHOT_FORMAT, SiteObservation,
    Snapshot,
};
use metalform::source::FleetSource;
use uuid::Uuid;

pub fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/plan")
}

/// The fixture fleet: dc1 (n01–n03 active, r01 retired) and dc2 (m01, m02, prune on).
pub fn fixture_fleet() -> Fleet {
    let dir = golden_dir().join("fleet");
    manifest::load_fleet(&FleetSource::Directory(dir))
        .expect("the fixture fleet is valid")
        .fleet
}

pub fn at(minutes: i64) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-03-01T12:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
        + Duration::minutes(minutes)
}

/// A stable id per name: the same test data always has the same ids.
pub fn id(name: &str) -> Uuid {
    let mut n: u128 = 0xC0FFEE;
    for b in name.bytes() {
        n = n.wrapping_mul(131).wrapping_add(u128::from(b));
    }
    Uuid::from_u128(n)
}

pub fn machine(system_id: &str, hostname: &str, status: MaasStatus, bmc: &str) -> ObservedMachine {
    ObservedMachine {
        system_id: system_id.into(),
        hostname: hostname.into(),
        status: ObservedStatus {
            code: i64::from(status.code()),
            name: status.name().into(),
        },
        power_state: if status == MaasStatus::Deployed {
            "on".into()
        } else {
            "off".into()
        },
        power_address: Some(bmc.into()),
        macs: vec![],
        ip_addresses: if status == MaasStatus::Deployed {
            vec!["10.176.46.100".into()]
        } else {
            vec![]
        },
        owner: matches!(
            status,
            MaasStatus::Deployed | MaasStatus::Deploying | MaasStatus::Allocated
        )
        .then(|| "admin".to_owned()),
        enable_hw_sync: Some(status == MaasStatus::Deployed),
        last_sync: None,
        next_sync: None,
        sync_interval: None,
    }
}

pub fn inventory(site: &str, hostname: &str, status: NodeState) -> InventoryNode {
    InventoryNode {
        id: id(&format!("node/{site}/{hostname}")),
        site: site.into(),
        hostname: hostname.into(),
        status,
        retired: false,
        retired_reason: None,
        protected: false,
        paused: false,
        ipmi_ip: None,
        host: None,
        agent_contact_at: (status == NodeState::Active).then(|| at(-30)),
        reimage_generation: None,
        policy: None,
        sku: None,
        gpus: None,
    }
}

/// An inventory row whose release policy was recorded (pruning needs it), with its BMC.
pub fn recorded(
    mut node: InventoryNode,
    profile: &str,
    erase: EraseMode,
    bmc: &str,
) -> InventoryNode {
    node.policy = Some(NodePolicy {
        profile: ProfileName::new(profile),
        erase,
        fallback_no_erase: true,
        remove_from_maas: false,
        protected: false,
    });
    node.ipmi_ip = Some(bmc.into());
    node.sku = Some("mi300x.192g.8gpu".into());
    node.gpus = Some(8);
    node
}

pub fn job(site: &str, hostname: &str, state: JobState, stage: &str) -> ObservedJob {
    ObservedJob {
        id: id(&format!("job/{site}/{hostname}/{stage}")),
        kind: JobKind::Onboarding,
        mode: None,
        node_id: None,
        site: site.into(),
        hostname: hostname.into(),
        maas_system_id: None,
        stage: stage.into(),
        attempt: 1,
        state,
        adopted: false,
        failure_class: None,
        error_code: None,
        error_message: None,
        plan_id: None,
        requested_at: at(-120),
        updated_at: at(-60),
        retry_failures: 0,
        next_try_at: None,
        retry_spec: None,
        provisioning: None,
        payload: None,
    }
}

pub fn failed(mut job: ObservedJob, class: FailureClass, code: &str, message: &str) -> ObservedJob {
    job.failure_class = Some(class);
    job.error_code = Some(code.into());
    job.error_message = Some(message.into());
    job
}

/// A snapshot builder: every fleet site starts readable and empty.
pub struct World {
    pub snapshot: Snapshot,
}

impl World {
    pub fn new() -> Self {
        let sites = ["dc1", "dc2"]
            .into_iter()
            .map(|s| {
                (
                    SiteName::new(s),
                    SiteObservation::Readable {
                        maas_version: Some("3.6.1".into()),
                        machines: vec![],
                    },
                )
            })
            .collect::<BTreeMap<_, _>>();
        World {
            snapshot: Snapshot {
                format: SNAPSHOT_FORMAT,
                taken_at: at(0),
                store_serial: 7,
                sites,
                inventory: vec![],
                jobs: vec![],
            },
        }
    }

    pub fn machines(mut self, site: &str, machines: Vec<ObservedMachine>) -> Self {
        self.snapshot.sites.insert(
            SiteName::new(site),
            SiteObservation::Readable {
                maas_version: Some("3.6.1".into()),
                machines,
            },
        );
        self
    }

    pub fn unreadable(mut self, site: &str, error: &str, transient: bool) -> Self {
        self.snapshot.sites.insert(
            SiteName::new(site),
            SiteObservation::Unreadable {
                error: error.into(),
                transient,
                hint: None,
            },
        );
        self
    }

    pub fn node(mut self, node: InventoryNode) -> Self {
        self.snapshot.inventory.push(node);
        self
    }

    pub fn job(mut self, job: ObservedJob) -> Self {
        self.snapshot.jobs.push(job);
        self
    }

    pub fn done(self) -> Snapshot {
        self.snapshot
    }
}

/// A site of a generated test world: its name, where its MAAS is, the API key its secret
/// holds (none: no secret), and (hostname, BMC) of its nodes.
pub struct SiteSpec {
    pub name: &'static str,
    pub url: String,
    pub key: Option<String>,
    pub nodes: Vec<(String, String)>,
}

/// The nodes a fleet declares for the known machines of a simulator config.
pub fn nodes_of(config: &metalform::sim::SimConfig) -> Vec<(String, String)> {
    config
        .machines
        .iter()
        .filter_map(|m| Some((m.hostname.clone()?, m.bmc_ip.clone()?)))
        .collect()
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Write a fleet (`DIR/fleet`) with one site, profile and node group per spec, and a dev
/// secrets file (`DIR/secrets.json`) with their MAAS API keys. Returns both paths.
pub fn write_world(dir: &Path, sites: &[SiteSpec]) -> (PathBuf, PathBuf) {
    let root = dir.join("fleet");
    let mut secrets: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for site in sites {
        let s = site.name;
        write(
            &root.join(format!("sites/{s}.yaml")),
            &format!(
                "apiVersion: metalform/v1\nkind: Site\nmetadata: {{name: {s}}}\nspec:\n  region: r-{s}\n  \
                 maas: {{url: \"{url}\", apiKey: {{vault: kv/maas/{s}, key: token}}}}\n  \
                 power: {{defaultCredentials: {{vault: kv/power/{s}}}}}\n  \
                 network: {{pxeIface: ens19, pxeVlanVid: 46, nodePxeIface: eno8303}}\n  \
                 deploy: {{password: {{vault: kv/deploy/{s}, key: password}}}}\n  defaultProfile: {s}-gpu\n",
                url = site.url
            ),
        );
        write(
            &root.join(format!("profiles/{s}.yaml")),
            &format!(
                "apiVersion: metalform/v1\nkind: Profile\nmetadata: {{name: {s}-gpu, site: {s}}}\nspec:\n  storage: {{dataDisks: skip}}\n"
            ),
        );
        let mut group = format!(
            "apiVersion: metalform/v1\nkind: NodeGroup\nmetadata: {{name: rack-{s}}}\nspec:\n  site: {s}\n  sku: mi300x.192g.8gpu\n  gpus: 8\n  nodes:\n"
        );
        for (hostname, bmc) in &site.nodes {
            group.push_str(&format!(
                "    - {{hostname: {hostname}, bmc: {{ipmiIp: {bmc}}}}}\n"
            ));
        }
        write(&root.join(format!("nodes/{s}.yaml")), &group);
        if let Some(key) = &site.key {
            secrets.insert(
                format!("kv/maas/{s}"),
                BTreeMap::from([("token".to_owned(), key.clone())]),
            );
        }
    }
    let secrets_path = dir.join("secrets.json");
    std::fs::write(&secrets_path, serde_json::to_string(&secrets).unwrap()).unwrap();
    (root, secrets_path)
}

/// Compare `actual` with the golden file `name`, or rewrite it under `UPDATE_GOLDEN=1`.
pub fn golden(name: &str, actual: &str) {
    let path = golden_dir().join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run `UPDATE_GOLDEN=1 cargo test --test suite plan_golden::` and review the new file",
            path.display()
        )
    });
    if expected != actual {
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
        panic!(
            "{} differs from the output at line {}:\n  golden: {:?}\n  actual: {:?}\n(UPDATE_GOLDEN=1 rewrites it; review the diff)\n--- actual ---\n{actual}",
            path.display(),
            first + 1,
            expected.lines().nth(first),
            actual.lines().nth(first),
        );
    }
}
