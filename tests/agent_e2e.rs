//! The node agent end to end, with real processes (issue 12 "Tests"): `metalform daemon` as a
//! child process, the MAAS simulator, and real `metalform agent` processes — each with its own
//! state directory and host root, in a network namespace of its own where the machine allows
//! it, its tools pointed at recording scripts.
//!
//! - Onboard → the real agent enrolls (over TLS, pinning the CA its payload carried) → active;
//!   a soft reset runs terminal.close, revoke_user, drain, storage cleanup, GPU scrub and
//!   validation through the agent → completed, node active again; `lifecycle: decommissioned`
//!   runs the forced revoke and the drain through it → completed, node deleted, and the agent,
//!   its token revoked, stops with exit status 78.
//! - kill -9 of an agent in the middle of a task: the lease runs out, the task is handed out
//!   again, and every change is made once.
//! - 2,000 slow and idle connections on the agent listener: `/healthz` on the admin listener
//!   answers within 100 ms, a real agent still gets its tasks, SIGTERM ends the daemon within
//!   10 s.
//! - 1,100 slow connections against a daemon limited to 1,024 descriptors: it keeps its
//!   descriptors (connections over its budget are closed at once) and keeps answering.

use crate::agent_node_support;
use crate::daemon_support;
use crate::onboard_support;

use std::time::{Duration, Instant};

use agent_node_support::{AgentHost, Network, payload_of};
use daemon_support::{ADMIN_TOKEN, DaemonBed, commit};
use metalform::lifecycle::{JobKind, JobState, NodeState};
use metalform::sim::config::AgentBehaviour;
use onboard_support::{Setup, SiteSetup, free_port, hostname_of};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

/// A site of `n` machines whose agents are real processes (the simulator's own never call).
fn setup(seed: u64, n: usize) -> (Setup, Vec<String>) {
    let mut site = SiteSetup::generated("dc1", seed, n, 0);
    for machine in &mut site.config.machines {
        machine.agent = AgentBehaviour::Never;
    }
    let hosts = (0..n).map(|i| hostname_of(&site.config, i)).collect();
    (
        Setup::one_site(site).profile("  timeouts: {enrollment: 120s, agentTask: 120s}\n"),
        hosts,
    )
}

/// The daemon bed with the agent channel on the network's server address, a short task lease.
async fn daemon_bed(setup: Setup, network: &Network) -> (DaemonBed, String) {
    let d = DaemonBed::start(setup, "[self_heal]\nallow_destructive = true\n").await;
    let agent_listen = format!("{}:{}", network.server_ip, free_port());
    d.set_agent(&format!(
        "listen = \"{agent_listen}\"\ntask_lease = \"3s\"\ncontact_flush = \"500ms\""
    ));
    let admin = d.listen_on_free_port();
    (d, admin)
}

/// Real agents for `hosts`, started as their machines are deployed.
async fn start_agents(d: &DaemonBed, network: &Network, hosts: &[String]) -> Vec<AgentHost> {
    let mut agents = Vec::new();
    for (k, host) in hosts.iter().enumerate() {
        let files = payload_of(d.bed.sim("dc1"), host, Duration::from_secs(120)).await;
        let mut agent = AgentHost::new(&d.bed.dir.path().join(format!("agent-{host}")), &files);
        agent.start(network.place(k));
        agents.push(agent);
    }
    agents
}

async fn api(admin: &str, path: &str, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("http://{admin}/api/v1/admin{path}"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Wait until the node's latest decommission job is `state`.
async fn decommission_in(d: &DaemonBed, node: uuid::Uuid, state: JobState, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let jobs = d
            .bed
            .store
            .list_jobs(JobKind::Decommission, &Default::default())
            .await
            .unwrap();
        let job = jobs.iter().rfind(|j| j.node_id == Some(node));
        if job.is_some_and(|j| j.state == state) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "decommission of {node} never got {state:?}: {job:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn node_of(d: &DaemonBed, host: &str) -> metalform::store::Node {
    d.bed.store.find_node("dc1", host).await.unwrap().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_agents_enroll_then_run_a_soft_reset_and_a_decommission_through_the_daemon() {
    let network = Network::new(2);
    let (setup, hosts) = setup(301, 2);
    let (d, admin) = daemon_bed(setup, &network).await;
    let mut daemon = d.spawn(&d.bed.dir.path().join("daemon.log"));
    let mut agents = start_agents(&d, &network, &hosts).await;
    d.converged_hosts("dc1", &hosts, Duration::from_secs(120))
        .await;

    // The real agent enrolled, from its own address when it has one.
    for (k, host) in hosts.iter().enumerate() {
        let node = node_of(&d, host).await;
        let enrollment = d
            .bed
            .store
            .agent_enrollment(node.id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            enrollment.agent_version,
            format!("metalform-agent/{}", env!("CARGO_PKG_VERSION"))
        );
        if let Some((_, address)) = network.place(k) {
            assert_eq!(enrollment.remote_addr.as_deref(), Some(address.as_str()));
        }
        let credentials = std::fs::metadata(agents[k].state.join("credentials.json")).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&credentials.permissions()) & 0o777,
            0o600
        );
    }

    // Soft reset of the first node: every host task through its agent.
    let first = node_of(&d, &hosts[0]).await;
    let (status, body) = api(
        &admin,
        &format!("/nodes/{}/soft-reset", first.id),
        json!({"reason": "tenant turnover (TKT-12)", "storage_cleanup": "local"}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    decommission_in(&d, first.id, JobState::Completed, Duration::from_secs(120)).await;
    assert_eq!(node_of(&d, &hosts[0]).await.status, NodeState::Active);
    assert_eq!(
        agents[0].done(),
        [
            "userdel --remove tenant1",
            "systemctl stop tenant-workload.service",
            "find /scratch1 -xdev -mindepth 1 -delete",
            "find /scratch2 -xdev -mindepth 1 -delete",
            "nvidia-smi --gpu-reset -i 0",
        ]
    );
    let tasks = d.bed.store.tasks_for_node(first.id).await.unwrap();
    let kinds: Vec<(&str, &str)> = tasks
        .iter()
        .map(|t| (t.task_type.as_str(), t.status.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("terminal.close", "succeeded"),
            ("allocation.revoke_user", "succeeded"),
            ("node.drain", "succeeded"),
            ("node.storage_cleanup", "succeeded"),
            ("node.gpu_scrub", "succeeded"),
            ("node.validate_clean", "succeeded"),
        ]
    );
    assert_eq!(
        tasks[5].result_message.as_deref(),
        Some("clean: no tenant accounts, processes, mounts or GPU memory")
    );
    // The other agent ran nothing.
    assert!(agents[1].done().is_empty(), "{:?}", agents[1].done());

    // A commit decommissions the second node: the forced revoke and the drain run through its
    // agent, then the control plane revokes the agent's token and the agent stops for good.
    d.bed.edit_fleet(
        "nodes/dc1.yaml",
        &format!("{{hostname: {}, ", hosts[1]),
        &format!("{{hostname: {}, lifecycle: decommissioned, ", hosts[1]),
    );
    commit(&d.bed.fleet_dir, "fleet: decommission the second node");
    let second = node_of(&d, &hosts[1]).await;
    decommission_in(&d, second.id, JobState::Completed, Duration::from_secs(120)).await;
    assert_eq!(
        d.bed.store.node(second.id).await.unwrap().status,
        NodeState::Deleted
    );
    assert_eq!(
        agents[1].done(),
        [
            "userdel --remove tenant1",
            "systemctl stop tenant-workload.service"
        ]
    );
    let status = agents[1].exited_within(Duration::from_secs(30));
    assert_eq!(status, Some(78), "log:\n{}", agents[1].log_text());
    assert!(
        agents[1]
            .log_text()
            .contains("the control plane refuses this agent's token"),
        "{}",
        agents[1].log_text()
    );

    // The first agent stops on SIGTERM, exit 0.
    assert_eq!(agents[0].stop(), Some(0));
    daemon_support::signal(&daemon, "TERM");
    assert_eq!(daemon.wait().unwrap().code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_task_the_lease_runs_out_the_task_is_handed_out_again_and_each_change_is_made_once()
 {
    let network = Network::new(1);
    let (setup, hosts) = setup(302, 1);
    let (d, admin) = daemon_bed(setup, &network).await;
    let mut daemon = d.spawn(&d.bed.dir.path().join("daemon.log"));
    let mut agents = start_agents(&d, &network, &hosts).await;
    d.converged_hosts("dc1", &hosts, Duration::from_secs(120))
        .await;
    let node = node_of(&d, &hosts[0]).await;
    let agent = &mut agents[0];
    agent.without_tenants();

    // The second scratch directory takes long: the agent dies while its `find` runs, after the
    // first one was cleaned and journaled.
    agent.make_slow("find /scratch2 -xdev -mindepth 1 -delete");
    let (status, body) = api(
        &admin,
        &format!("/nodes/{}/storage-cleanup", node.id),
        json!({"reason": "tenant turnover (TKT-13)", "scope": "local"}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    agent
        .wait_begun(
            "find /scratch2 -xdev -mindepth 1 -delete",
            Duration::from_secs(60),
        )
        .await;
    agent.kill();
    let task = d
        .bed
        .store
        .tasks_for_node(node.id)
        .await
        .unwrap()
        .into_iter()
        .find(|t| t.task_type == "node.storage_cleanup")
        .unwrap();
    assert_eq!(
        (task.status.as_str(), task.dispatch_count),
        ("dispatched", 1)
    );
    // The command died with the agent: nothing finished it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(agent.done(), ["find /scratch1 -xdev -mindepth 1 -delete"]);

    // Restarted (its state directory kept): no new lease until the old one runs out, then the
    // same task again — and the first directory is not cleaned a second time.
    agent.make_quick();
    agent.start(network.place(0));
    decommission_in(&d, node.id, JobState::Completed, Duration::from_secs(120)).await;
    assert_eq!(
        agent.done(),
        [
            "find /scratch1 -xdev -mindepth 1 -delete",
            "find /scratch2 -xdev -mindepth 1 -delete",
        ]
    );
    assert_eq!(
        agent.begun(),
        [
            "find /scratch1 -xdev -mindepth 1 -delete",
            "find /scratch2 -xdev -mindepth 1 -delete",
            "find /scratch2 -xdev -mindepth 1 -delete",
        ],
        "the interrupted change started twice and finished once"
    );
    let task = d.bed.store.task(task.id).await.unwrap();
    assert_eq!(
        (task.status.as_str(), task.dispatch_count),
        ("succeeded", 2)
    );
    let journal: Value = serde_json::from_slice(
        &std::fs::read(agent.state.join("tasks").join(format!("{}.json", task.id))).unwrap(),
    )
    .unwrap();
    assert_eq!(journal["dispatches"], 2);
    assert_eq!(journal["reported"], "stored");
    assert!(
        agent
            .log_text()
            .contains("already done by an earlier run of this task; skipped"),
        "{}",
        agent.log_text()
    );
    assert_eq!(agent.stop(), Some(0));
    daemon_support::signal(&daemon, "TERM");
    assert_eq!(daemon.wait().unwrap().code(), Some(0));
}

/// Open `n` connections to `addr` from loopback addresses 127.77.x.y (so per-peer limits see
/// many peers), each sending half a request head.
async fn slow_connections(addr: std::net::SocketAddr, n: usize) -> Vec<tokio::net::TcpStream> {
    let mut held = Vec::with_capacity(n);
    for i in 0..n {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        let source = format!("127.77.{}.{}:0", i / 200, i % 200 + 1);
        socket.bind(source.parse().unwrap()).unwrap();
        let Ok(mut stream) = socket.connect(addr).await else {
            continue;
        };
        if i % 2 == 0 {
            let _ = stream.write_all(b"GET /agent/v1/nodes/").await;
        }
        held.push(stream);
    }
    held
}

/// The slowest of `n` `/healthz` answers of the admin listener.
async fn healthz_worst(admin: &str, n: usize) -> Duration {
    let client = reqwest::Client::new();
    let mut worst = Duration::ZERO;
    for _ in 0..n {
        let started = Instant::now();
        let response = client
            .get(format!("http://{admin}/healthz"))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success() || response.status().as_u16() == 503);
        worst = worst.max(started.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worst
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_slow_connections_leave_healthz_fast_and_agents_served_and_sigterm_quick() {
    // The agent channel on loopback here: the flood comes from 127.77.0.0/16.
    let (setup, hosts) = setup(303, 1);
    let d = DaemonBed::start(setup, "").await;
    let agent_port = free_port();
    let agent_listen = format!("127.0.0.1:{agent_port}");
    d.set_agent(&format!(
        "listen = \"{agent_listen}\"\ntask_lease = \"3s\"\nheader_timeout = \"60s\"\nidle_timeout = \"60s\""
    ));
    let admin = d.listen_on_free_port();
    let mut daemon = d.spawn(&d.bed.dir.path().join("daemon.log"));
    // This agent cannot sit in a namespace: the listener is on loopback.
    let mut agents = start_agents(&d, &Network::loopback(), &hosts).await;
    d.converged_hosts("dc1", &hosts, Duration::from_secs(120))
        .await;

    let quiet = healthz_worst(&admin, 20).await;
    let held = slow_connections(agent_listen.parse().unwrap(), 2000).await;
    assert!(held.len() >= 1990, "only {} connections opened", held.len());
    let worst = healthz_worst(&admin, 50).await;
    eprintln!(
        "/healthz: worst {worst:?} of 50 with 2,000 slow connections open ({quiet:?} before)"
    );
    assert!(
        worst < Duration::from_millis(100),
        "/healthz took {worst:?} under the flood ({quiet:?} before it)"
    );
    // A real agent still gets its tasks.
    agents[0].without_tenants();
    let node = node_of(&d, &hosts[0]).await;
    let (status, body) = api(
        &admin,
        &format!("/nodes/{}/storage-cleanup", node.id),
        json!({"reason": "cleanup under load", "scope": "local"}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    decommission_in(&d, node.id, JobState::Completed, Duration::from_secs(90)).await;
    assert_eq!(agents[0].done().len(), 2, "{:?}", agents[0].done());

    // SIGTERM with the 2,000 connections still open: out well within 10 s.
    assert_eq!(agents[0].stop(), Some(0));
    let started = Instant::now();
    daemon_support::signal(&daemon, "TERM");
    let status = daemon.wait().unwrap();
    let took = started.elapsed();
    assert_eq!(status.code(), Some(0));
    eprintln!("SIGTERM with 2,000 connections open: exited after {took:?}");
    assert!(took < Duration::from_secs(10), "SIGTERM took {took:?}");
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_loris_1100_connections_do_not_exhaust_file_descriptors() {
    let (setup, _) = setup(304, 1);
    let d = DaemonBed::start(setup, "[self_heal]\nonboard = false\n").await;
    let agent_listen = format!("127.0.0.1:{}", free_port());
    d.set_agent(&format!(
        "listen = \"{agent_listen}\"\nheader_timeout = \"60s\""
    ));
    let admin = d.listen_on_free_port();
    let log = d.bed.dir.path().join("daemon.log");
    // The daemon with 1,024 descriptors, as a default systemd service would have.
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_metalform"));
    command
        .args(["daemon", "--config"])
        .arg(&d.config_path)
        .env_remove("METALFORM_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    // SAFETY: setrlimit in the child before exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, || {
            let limit = libc::rlimit {
                rlim_cur: 1024,
                rlim_max: 1024,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut daemon = command.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while reqwest::get(format!("http://{admin}/healthz"))
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "{}",
            std::fs::read_to_string(&log).unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let held = slow_connections(agent_listen.parse().unwrap(), 1100).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Still answering (descriptors to spare), quickly.
    let worst = healthz_worst(&admin, 20).await;
    assert!(worst < Duration::from_millis(100), "{worst:?}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("connection limit lowered to fit the open-file limit"),
        "{text}"
    );
    assert!(
        text.contains("connection refused"),
        "the surplus is refused: {text}"
    );
    assert!(!text.contains("out of descriptors"), "{text}");
    drop(held);
    daemon_support::signal(&daemon, "TERM");
    assert_eq!(daemon.wait().unwrap().code(), Some(0));
}
