//! Observe against the simulator (issue 5 "Show"): one machines list per site (the client's
//! counters and the simulator's own op log agree), power addresses from the bulk read, the
//! inventory and jobs from a real SQLite store, and unreadable sites (bad key, non-admin key,
//! MAAS down, missing secret) recorded as unreadable — never as empty.

use crate::plan_support;

use std::sync::Arc;
use std::time::Duration;

use metalform::clock::SystemClock;
use metalform::lifecycle::{JobKind, JobState, NodeState, Provider};
use metalform::manifest;
use metalform::model::{Fleet, SiteName};
use metalform::observe::{self, MaasClients, SiteFilter, SiteObservation, Snapshot};
use metalform::plan::{self, Action, BlockCause, Moved, PlanOptions};
use metalform::provider::maas::{MaasClientOptions, MaasMetrics, RetryPolicy};
use metalform::secrets::{FileStore, SecretStore};
use metalform::sim::{self, FleetOptions, InitialState, SimConfig, SimHandle};
use metalform::source::FleetSource;
use metalform::store::{Actor, JobUpdate, NewNode, NewOnboarding, Store};
use plan_support::{SiteSpec, nodes_of, write_world};

struct Env {
    _dir: tempfile::TempDir,
    fleet: Fleet,
    store: Store,
    secrets: FileStore,
}

fn sim_config(seed: u64, machines: usize) -> SimConfig {
    let mut config = SimConfig::generated(
        seed,
        &FleetOptions {
            machines,
            initial: InitialState::Ready,
            no_boss_every: 0,
            unknown: 0,
        },
    );
    config.timings.jitter = 0.0;
    config
}

async fn env(sites: &[SiteSpec]) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let (root, secrets_path) = write_world(dir.path(), sites);
    let fleet = manifest::load_fleet(&FleetSource::Directory(root))
        .expect("a valid fleet")
        .fleet;
    let store = Store::open(
        &format!("sqlite://{}", dir.path().join("state.db").display()),
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    Env {
        secrets: FileStore::new(&secrets_path),
        _dir: dir,
        fleet,
        store,
    }
}

/// Clients that give up quickly on a dead MAAS (tests must not wait for production backoff).
fn clients() -> MaasClients {
    MaasClients::new(MaasClientOptions {
        timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(2),
        retry: RetryPolicy {
            max_attempts: 2,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(20),
            max_retry_after: Duration::from_secs(1),
            ..RetryPolicy::default()
        },
        metrics: MaasMetrics::new(),
        ..MaasClientOptions::default()
    })
}

async fn observe_all(env: &Env, clients: &MaasClients) -> Snapshot {
    observe::observe(
        &env.fleet,
        &SiteFilter::All,
        &env.store,
        &env.secrets as &dyn SecretStore,
        clients,
    )
    .await
    .unwrap()
}

fn list_calls(sim: &SimHandle) -> usize {
    sim.ops()
        .iter()
        .filter(|op| op.action.as_deref() == Some("machines.read"))
        .count()
}

fn site(snapshot: &Snapshot, name: &str) -> SiteObservation {
    snapshot.sites[&SiteName::new(name)].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_site_is_listed_exactly_once_and_planned_from_it() {
    let mut config_a = sim_config(1, 6);
    config_a.machines[1].initial = InitialState::New;
    let config_b = sim_config(2, 4);
    let (nodes_a, nodes_b) = (nodes_of(&config_a), nodes_of(&config_b));
    let sim_a = sim::start(config_a.clone()).await.unwrap();
    let sim_b = sim::start(config_b).await.unwrap();
    let env = env(&[
        SiteSpec {
            name: "east",
            url: sim_a.maas_url.clone(),
            key: Some(sim_a.api_key().expose().to_owned()),
            nodes: nodes_a.clone(),
        },
        SiteSpec {
            name: "west",
            url: sim_b.maas_url.clone(),
            key: Some(sim_b.api_key().expose().to_owned()),
            nodes: nodes_b,
        },
    ])
    .await;
    let clients = clients();
    let snapshot = observe_all(&env, &clients).await;

    // Exactly one machines list per site, by our counters and by each MAAS's own log.
    assert_eq!(clients.metrics().operation_total("list_machines"), 2);
    assert_eq!(clients.metrics().operation_total("power_parameters"), 2);
    assert_eq!(list_calls(&sim_a), 1);
    assert_eq!(list_calls(&sim_b), 1);

    let SiteObservation::Readable {
        maas_version,
        machines,
    } = site(&snapshot, "east")
    else {
        panic!("east is readable")
    };
    assert_eq!(maas_version.as_deref(), Some("3.6.1"));
    assert_eq!(machines.len(), 6);
    for (machine, spec) in machines.iter().zip(&config_a.machines) {
        assert_eq!(Some(&machine.hostname), spec.hostname.as_ref());
        // The BMC address comes from the bulk power-parameters read.
        assert_eq!(machine.power_address, spec.bmc_ip);
        let pxe = &spec.interfaces[0].mac;
        assert!(machine.macs.contains(pxe), "{:?} lacks {pxe}", machine.macs);
    }
    assert_eq!(machines[0].status.name, "Ready");
    assert_eq!(machines[1].status.name, "New");
    assert_eq!(snapshot.inventory, vec![]);
    assert_eq!(snapshot.store_serial, 0);

    // Observing an unchanged world again gives the same fingerprint, and costs one request per
    // site: the version and the BMC addresses of machines already seen are remembered.
    let before = clients.metrics().total();
    let again = observe_all(&env, &clients).await;
    assert_eq!(again.fingerprint(), snapshot.fingerprint());
    assert_eq!(list_calls(&sim_a), 2);
    assert_eq!(clients.metrics().total() - before, 2, "one list per site");
    assert_eq!(clients.metrics().operation_total("power_parameters"), 2);
    assert_eq!(site(&again, "east"), site(&snapshot, "east"));
    // Fresh clients (a `metalform plan` run) read everything again.
    let fresh = self::clients();
    let anew = observe_all(&env, &fresh).await;
    assert_eq!(anew.fingerprint(), snapshot.fingerprint());
    assert_eq!(fresh.metrics().operation_total("power_parameters"), 2);

    // The plan matches every node to its machine by hostname and BMC and onboards it.
    let plan = plan::plan(&env.fleet, &snapshot, &PlanOptions::default());
    assert_eq!(plan.summary.onboard, 10);
    let first = &plan.items[0];
    assert_eq!(first.node.to_string(), format!("east/{}", nodes_a[0].0));
    assert_eq!(
        first.target.as_ref().unwrap().system_id.as_deref(),
        Some(machines[0].system_id.as_str())
    );
    assert!(
        first.reason.contains("matched by hostname, BMC address"),
        "{}",
        first.reason
    );
    let revision = plan::revision_id(&env.fleet.revision);
    plan::check_fresh(&plan, &revision, &again, again.store_serial).unwrap();

    // An operator recommissions a machine at east: the plan is stale, and says where.
    sim_a
        .out_of_band(&machines[0].system_id, "recommission")
        .unwrap();
    let moved = observe_all(&env, &clients).await;
    let stale = plan::check_fresh(&plan, &revision, &moved, moved.store_serial).unwrap_err();
    assert_eq!(
        stale.moved,
        [Moved::Observed {
            part: "site/east".into()
        }]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_sites_are_recorded_and_block_their_nodes() {
    let config = sim_config(3, 2);
    let nodes = nodes_of(&config);
    let mut with_user = sim_config(4, 2);
    with_user.users.push(sim::config::UserSpec {
        username: "operator".into(),
        api_key: "opconsumer00000000:optoken0000000000000:opsecret000000000000000000000000".into(),
    });
    let good = sim::start(config.clone()).await.unwrap();
    let limited = sim::start(with_user).await.unwrap();
    // A MAAS that is down: a port nothing listens on any more.
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/MAAS/", listener.local_addr().unwrap())
    };
    let env = env(&[
        SiteSpec {
            name: "good",
            url: good.maas_url.clone(),
            key: Some(good.api_key().expose().to_owned()),
            nodes: nodes.clone(),
        },
        SiteSpec {
            name: "badkey",
            url: good.maas_url.clone(),
            key: Some("wrongconsumer:wrongtoken:wrongsecret".into()),
            nodes: nodes.clone(),
        },
        SiteSpec {
            name: "nonadmin",
            url: limited.maas_url.clone(),
            key: Some(
                "opconsumer00000000:optoken0000000000000:opsecret000000000000000000000000".into(),
            ),
            nodes: nodes.clone(),
        },
        SiteSpec {
            name: "down",
            url: dead,
            key: Some(good.api_key().expose().to_owned()),
            nodes: nodes.clone(),
        },
        SiteSpec {
            name: "nosecret",
            url: good.maas_url.clone(),
            key: None,
            nodes: nodes.clone(),
        },
    ])
    .await;
    let snapshot = observe_all(&env, &clients()).await;

    let unreadable = |name: &str| match site(&snapshot, name) {
        SiteObservation::Unreadable {
            error,
            transient,
            hint,
        } => (error, transient, hint.unwrap_or_default()),
        readable => panic!("{name} should be unreadable: {readable:?}"),
    };
    assert!(matches!(
        site(&snapshot, "good"),
        SiteObservation::Readable { .. }
    ));

    let (error, transient, hint) = unreadable("badkey");
    assert!(error.contains("unauthorized (401)"), "{error}");
    assert!(!transient);
    assert!(hint.contains("API key"), "{hint}");
    assert!(
        !error.contains("wrongsecret"),
        "the key never shows: {error}"
    );

    let (error, transient, hint) = unreadable("nonadmin");
    assert!(
        error.starts_with("cannot read the power parameters from MAAS at"),
        "{error}"
    );
    assert!(error.contains("forbidden (403)"), "{error}");
    assert!(!transient);
    assert!(hint.contains("must be a MAAS admin"), "{hint}");

    let (error, transient, _) = unreadable("down");
    assert!(
        error.starts_with("cannot list the machines from MAAS at http://127.0.0.1:"),
        "{error}"
    );
    assert!(transient, "a MAAS that is down is worth retrying");

    let (error, transient, hint) = unreadable("nosecret");
    assert_eq!(
        error,
        format!(
            "cannot read the MAAS API key of site nosecret (kv/maas/nosecret#token): secret `kv/maas/nosecret` not found in {}",
            env.secrets.describe()
        )
    );
    assert!(!transient);
    assert!(hint.contains("write the secret"), "{hint}");

    // Every node of an unreadable site is blocked; none is planned as if MAAS were empty.
    let plan = plan::plan(&env.fleet, &snapshot, &PlanOptions::default());
    for item in &plan.items {
        let readable = item.node.site.as_str() == "good";
        match (&item.action, readable) {
            (Action::Onboard, true) => {}
            (
                Action::Blocked {
                    cause: BlockCause::SiteUnreadable { .. },
                },
                false,
            ) => {}
            (other, _) => panic!("{}: {other:?}", item.node),
        }
    }
    assert_eq!(plan.summary.onboard, 2);
    assert_eq!(plan.summary.blocked, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inventory_and_jobs_come_from_the_store() {
    let config = sim_config(5, 3);
    let nodes = nodes_of(&config);
    let maas = sim::start(config).await.unwrap();
    let env = env(&[SiteSpec {
        name: "east",
        url: maas.maas_url.clone(),
        key: Some(maas.api_key().expose().to_owned()),
        nodes: nodes.clone(),
    }])
    .await;
    let system_id = maas.with_world(|w| w.find_machine(&nodes[0].0).unwrap().system_id.clone());

    // An apply that created the node and its onboarding, then died at commission_node.
    let actor = Actor::system("apply");
    let node = env
        .store
        .create_node(
            &NewNode {
                site: "east".into(),
                hostname: nodes[0].0.clone(),
                provider: Provider::Maas,
                status: NodeState::Enrolling,
                sku: Some("mi300x.192g.8gpu".into()),
                gpus: Some(8),
                ipmi_ip: Some(nodes[0].1.clone()),
            },
            &actor,
        )
        .await
        .unwrap();
    let job = env
        .store
        .create_onboarding(&NewOnboarding {
            node_id: Some(node.id),
            site: "east".into(),
            hostname: nodes[0].0.clone(),
            plan_id: Some("sha256:earlier".into()),
            ..NewOnboarding::default()
        })
        .await
        .unwrap();
    let mut running = JobUpdate::new(JobState::Running);
    running.stage = Some("commission_node".into());
    running.maas_system_id = Some(system_id.clone());
    env.store
        .advance_job(JobKind::Onboarding, job.id, &running)
        .await
        .unwrap();
    let serial = env.store.serial().await.unwrap();

    let clients = clients();
    let snapshot = observe_all(&env, &clients).await;
    assert_eq!(snapshot.store_serial, serial);
    assert_eq!(snapshot.inventory.len(), 1);
    assert_eq!(snapshot.inventory[0].id, node.id);
    assert_eq!(snapshot.inventory[0].status, NodeState::Enrolling);
    assert_eq!(snapshot.jobs.len(), 1);
    assert_eq!(snapshot.jobs[0].id, job.id);
    assert_eq!(snapshot.jobs[0].state, JobState::Running);
    assert_eq!(snapshot.jobs[0].stage, "commission_node");
    assert_eq!(
        snapshot.jobs[0].maas_system_id.as_deref(),
        Some(system_id.as_str())
    );

    let plan = plan::plan(&env.fleet, &snapshot, &PlanOptions::default());
    assert_eq!(plan.parent.as_deref(), Some("sha256:earlier"));
    let item = &plan.items[0];
    assert_eq!(
        item.action,
        Action::Resume {
            job_id: job.id,
            stage: "commission_node".into()
        }
    );
    let target = item.target.as_ref().unwrap();
    assert_eq!(target.node_id, Some(node.id));
    assert_eq!(target.job_id, Some(job.id));
    assert_eq!(target.system_id.as_deref(), Some(system_id.as_str()));

    // A store write after the plan makes it stale: the store serial and the jobs moved.
    let mut failed = JobUpdate::new(JobState::FailedRetryable);
    failed.failure = Some(metalform::store::JobFailure {
        class: metalform::lifecycle::FailureClass::UpstreamTransient,
        code: "maas_unreachable".into(),
        message: "MAAS did not answer".into(),
        details: serde_json::json!({}),
    });
    env.store
        .advance_job(JobKind::Onboarding, job.id, &failed)
        .await
        .unwrap();
    let now = observe_all(&env, &clients).await;
    let stale = plan::check_fresh(
        &plan,
        &plan::revision_id(&env.fleet.revision),
        &now,
        env.store.serial().await.unwrap(),
    )
    .unwrap_err();
    assert_eq!(
        stale.moved,
        [
            Moved::Observed {
                part: "jobs".into()
            },
            Moved::StoreSerial {
                planned: serial,
                current: serial + 1
            }
        ]
    );
}
