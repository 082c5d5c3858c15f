//! Benchmark of the agent channel as the daemon serves it (issue 12 "Performance";
//! docs/agent.md, docs/performance.md):
//!
//! 1. 10,000 simulated agents against a real `metalform daemon` process (release build, TLS with
//!    its development CA, SQLite), each from its own loopback address with its own TLS session
//!    cache, as `metalform agent` behaves: 9,000 idle agents heartbeat every 30 s (a poll that
//!    does not wait, on a connection closed after the answer, the TLS session resumed) and 1,000
//!    busy ones hold long-polls open back to back on kept connections.
//!    After a warm-up in which every agent called once, the daemon's CPU (of one core) and RSS are
//!    read from /proc over a measurement window.
//! 2. 1,000 tasks queued for the long-polling agents: the time until each was handed out and
//!    its result stored.
//! 3. The idle RSS of a real agent (`metalform-agent`, and `metalform agent` for comparison)
//!    polling that daemon, and the size of both executables.
//!
//! `cargo bench --bench agent [-- --machines N]` (N agents, a tenth of them long-polling; the
//! enrolled nodes are made first, not measured). Under `cargo test --all-targets` it runs on 60
//! agents for a few seconds as a smoke test. Figures are printed, never asserted; what is
//! asserted is behaviour (every task stored as succeeded, every call answered).

mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use metalform::clock::SystemClock;
use metalform::lifecycle::{NodeState, Provider};
use metalform::store::{Actor, EnrollmentRequest, NewNode, Store, TaskStatus};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsConnector;
use uuid::Uuid;

const ADMIN_TOKEN: &str = "bench-admin-token-0123456789";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = support::Args::parse((10_000, 1), (60, 1));
    let agents = args.machines.max(10);
    let long_polls = agents / 10;
    let (warmup, window, long_wait) = if args.benchmarking {
        (Duration::from_secs(40), Duration::from_secs(60), 30)
    } else {
        (Duration::from_secs(2), Duration::from_secs(3), 2)
    };
    let heartbeat = if args.benchmarking {
        Duration::from_secs(30)
    } else {
        Duration::from_secs(2)
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let agent_port = free_port();
    let admin_port = free_port();
    let state = dir.path().join("state.db");

    // Setup (not measured): `agents + 1` enrolled nodes (the last for the real agent).
    let started = Instant::now();
    let nodes = enrolled_nodes(&state, agents + 1, agent_port).await;
    println!(
        "setup: {} enrolled nodes in {:.1} s (not measured)",
        nodes.len(),
        started.elapsed().as_secs_f64()
    );
    let config = daemon_files(dir.path(), &state, admin_port, agent_port);
    let log = dir.path().join("daemon.log");
    let mut daemon = spawn_daemon(&config, &log);
    let pid = daemon.id();
    wait_healthz(admin_port, &log).await;
    let ca = std::fs::read_to_string(dir.path().join("data/dev-ca/ca.pem")).unwrap();
    let tls = tls_config(&ca);
    let server: SocketAddr = ([127, 0, 0, 1], agent_port).into();

    // The load.
    let stats = Arc::new(Load::default());
    let mut load = tokio::task::JoinSet::new();
    for (k, node) in nodes[..agents].iter().enumerate() {
        let agent = SimAgent {
            node: node.0,
            token: node.1.clone(),
            source: source_of(k),
            conn: None,
        };
        // Each agent its own session cache (a host resumes its own sessions).
        let mut own = (*tls).clone();
        own.resumption = rustls::client::Resumption::in_memory_sessions(4);
        let (tls, stats) = (Arc::new(own), stats.clone());
        if k < long_polls {
            load.spawn(agent.long_poll(tls, server, long_wait, stats));
        } else {
            let offset = heartbeat.mul_f64((k - long_polls) as f64 / (agents - long_polls) as f64);
            load.spawn(agent.heartbeat(tls, server, heartbeat, offset, stats));
        }
    }
    tokio::time::sleep(warmup).await;
    let (cpu0, at0, calls0) = (support::cpu_seconds(pid), Instant::now(), stats.calls());
    tokio::time::sleep(window).await;
    let (cpu1, at1, calls1) = (support::cpu_seconds(pid), Instant::now(), stats.calls());
    let cpu = (cpu1 - cpu0) / (at1 - at0).as_secs_f64() * 100.0;
    let support::Memory { rss, peak } = support::memory_mib(pid);
    let rate = (calls1 - calls0) as f64 / (at1 - at0).as_secs_f64();
    println!(
        "load: {agents} agents ({} heartbeating every {} s, {long_polls} long-polls held open): \
         daemon CPU {cpu:.1}% of one core, RSS {rss:.1} MiB (peak {peak:.1} MiB) over {:.0} s; \
         {rate:.0} calls/s answered, {} failed calls",
        agents - long_polls,
        heartbeat.as_secs(),
        window.as_secs_f64(),
        stats.failures.load(Ordering::Relaxed),
    );

    // 1,000 tasks to the long-polling agents.
    let store = Store::open(
        &format!("sqlite://{}", state.display()),
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    let done_before = stats.results.load(Ordering::Relaxed);
    let first = Instant::now();
    let mut ids = Vec::new();
    for node in &nodes[..long_polls] {
        let (task, _) = store
            .ensure_task(node.0, "node.heartbeat_check", &serde_json::json!({}), None)
            .await
            .unwrap();
        ids.push(task.id);
    }
    let queued = first.elapsed();
    while stats.results.load(Ordering::Relaxed) - done_before < long_polls as u64 {
        assert!(
            first.elapsed() < Duration::from_secs(120),
            "tasks not done: {} of {long_polls}",
            stats.results.load(Ordering::Relaxed) - done_before
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let all = first.elapsed();
    for id in &ids {
        assert_eq!(store.task(*id).await.unwrap().status, TaskStatus::Succeeded);
    }
    println!(
        "tasks: {long_polls} tasks queued in {:.2} s; all handed out and their results stored {:.2} s after the first was queued",
        queued.as_secs_f64(),
        all.as_secs_f64()
    );

    // A real agent, idle.
    let agent_node = nodes.last().unwrap();
    for (name, exe, sub) in [
        (
            "metalform-agent",
            env!("CARGO_BIN_EXE_metalform-agent"),
            false,
        ),
        ("metalform agent", env!("CARGO_BIN_EXE_metalform"), true),
    ] {
        let (rss, size) = idle_agent_rss(
            dir.path(),
            name,
            exe,
            sub,
            agent_node,
            agent_port,
            &ca,
            if args.benchmarking { 10 } else { 2 },
        )
        .await;
        println!("agent: `{name}` idle RSS {rss:.1} MiB, executable {size:.1} MiB");
    }

    // SIGTERM with every connection still open.
    let stopping = Instant::now();
    // SAFETY: kill(2) on our child.
    unsafe {
        libc::kill(pid as i32, libc::SIGTERM);
    }
    let status = daemon.wait().unwrap();
    println!(
        "shutdown: SIGTERM with {} connections open: exited {} after {:.2} s",
        agents,
        status.code().unwrap_or(-1),
        stopping.elapsed().as_secs_f64()
    );
    load.abort_all();
    store.close().await;
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Agent `k`'s own loopback address (the per-peer limit sees one agent per address).
fn source_of(k: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        127,
        100 + (k / 62_500) as u8,
        ((k / 250) % 250) as u8,
        (k % 250 + 1) as u8,
    ))
}

/// `n` nodes in site `bench`, each enrolled: (node, agent token).
async fn enrolled_nodes(state: &Path, n: usize, _port: u16) -> Vec<(Uuid, String)> {
    let store = Store::open(
        &format!("sqlite://{}", state.display()),
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    let actor = Actor::system("bench");
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        let hostname = format!("bench{i:05}");
        let node = store
            .create_node(
                &NewNode {
                    site: "bench".into(),
                    hostname: hostname.clone(),
                    provider: Provider::Maas,
                    status: NodeState::Enrolling,
                    sku: None,
                    gpus: None,
                    ipmi_ip: None,
                },
                &actor,
            )
            .await
            .unwrap();
        let (token, _) = store
            .issue_enrollment_token(node.id, None, chrono::Duration::hours(2))
            .await
            .unwrap();
        let enrolled = store
            .enroll_agent(&EnrollmentRequest {
                token,
                hostname,
                system_id: format!("s{i:05}"),
                agent_version: "bench".into(),
                remote_addr: None,
                layers: Default::default(),
            })
            .await
            .unwrap();
        nodes.push((node.id, enrolled.agent_token.expose().to_owned()));
    }
    store.close().await;
    nodes
}

/// A fleet repository (the quickstart, its MAAS on a closed port), secrets and the daemon's
/// configuration; the configuration's path.
fn daemon_files(dir: &Path, state: &Path, admin: u16, agent: u16) -> PathBuf {
    let fleet = dir.join("fleet");
    let quickstart = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/quickstart");
    for sub in ["sites", "profiles", "nodes"] {
        std::fs::create_dir_all(fleet.join(sub)).unwrap();
        for entry in std::fs::read_dir(quickstart.join(sub)).unwrap() {
            let entry = entry.unwrap();
            let text = std::fs::read_to_string(entry.path())
                .unwrap()
                .replace("http://192.168.50.2:5240/MAAS", "http://127.0.0.1:1/MAAS");
            std::fs::write(fleet.join(sub).join(entry.file_name()), text).unwrap();
        }
    }
    for args in [
        vec!["init", "-q", "-b", "main"],
        vec!["add", "-A"],
        vec![
            "-c",
            "user.name=b",
            "-c",
            "user.email=b@b",
            "commit",
            "-q",
            "-m",
            "fleet",
        ],
    ] {
        assert!(
            Command::new("git")
                .args(&args)
                .current_dir(&fleet)
                .status()
                .unwrap()
                .success()
        );
    }
    std::fs::write(dir.join("secrets.json"), "{}").unwrap();
    let config = dir.join("daemon.toml");
    std::fs::write(
        &config,
        format!(
            r#"[source]
repository = "{fleet}"
poll_interval = "60s"

[state]
url = "sqlite://{state}"
data_dir = "{data}"

[secrets]
url = "file://{secrets}"

[reconcile]
interval = "5m"

[self_heal]
onboard = false

[api]
listen = "127.0.0.1:{admin}"
plain_http = true

[[api.tokens]]
name = "bench"
role = "admin"
env = "BENCH_ADMIN_TOKEN"

[agent]
listen = "127.0.0.1:{agent}"
"#,
            fleet = fleet.display(),
            state = state.display(),
            data = dir.join("data").display(),
            secrets = dir.join("secrets.json").display(),
        ),
    )
    .unwrap();
    config
}

/// `metalform daemon` (release), with the open-file limit a systemd unit would give it.
fn spawn_daemon(config: &Path, log: &Path) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_metalform"));
    command
        .args(["daemon", "--config"])
        .arg(config)
        .env("BENCH_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("METALFORM_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    // SAFETY: setrlimit in the child before exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, || {
            let limit = libc::rlimit {
                rlim_cur: 65_536,
                rlim_max: 65_536,
            };
            // Without the privilege to raise it, the daemon keeps the inherited limit.
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
            Ok(())
        });
    }
    command.spawn().unwrap()
}

async fn wait_healthz(port: u16, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // The admin socket is bound (and accepts) before the daemon serves: wait for an answer.
        if healthz_answers(port).await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the daemon did not start: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn healthz_answers(port: u16) -> bool {
    let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return false;
    };
    let request = "GET /healthz HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n";
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    let read = tokio::time::timeout(Duration::from_secs(2), stream.read_exact(&mut head)).await;
    matches!(read, Ok(Ok(_))) && head.starts_with(b"HTTP/1.1 ")
}

fn tls_config(ca: &str) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    Arc::new(
        rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

#[derive(Default)]
struct Load {
    calls: AtomicU64,
    failures: AtomicU64,
    results: AtomicU64,
}

impl Load {
    fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

/// A simulated agent: one keep-alive TLS connection from its own address.
struct SimAgent {
    node: Uuid,
    token: String,
    source: IpAddr,
    conn: Option<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>,
}

impl SimAgent {
    async fn connect(
        &mut self,
        tls: &Arc<rustls::ClientConfig>,
        server: SocketAddr,
    ) -> std::io::Result<()> {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(SocketAddr::new(self.source, 0))?;
        let tcp = socket.connect(server).await?;
        tcp.set_nodelay(true)?;
        let name = ServerName::IpAddress(server.ip().into());
        self.conn = Some(TlsConnector::from(tls.clone()).connect(name, tcp).await?);
        Ok(())
    }

    /// One request on the kept connection (made again when it was closed): the status and
    /// the body.
    async fn call(
        &mut self,
        tls: &Arc<rustls::ClientConfig>,
        server: SocketAddr,
        method: &str,
        path: &str,
        body: &str,
        close: bool,
    ) -> std::io::Result<(u16, Vec<u8>)> {
        for attempt in 0..2 {
            if self.conn.is_none() {
                self.connect(tls, server).await?;
            }
            let conn = self.conn.as_mut().expect("connected");
            let request = format!(
                "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{}\r\n{body}",
                self.token,
                body.len(),
                if close { "Connection: close\r\n" } else { "" }
            );
            match exchange(conn, request.as_bytes()).await {
                Ok((status, body, close)) => {
                    if close {
                        self.conn = None;
                    }
                    return Ok((status, body));
                }
                // A kept connection the server closed meanwhile: once more on a new one.
                Err(err) if attempt == 0 => {
                    self.conn = None;
                    let _ = err;
                }
                Err(err) => {
                    self.conn = None;
                    return Err(err);
                }
            }
        }
        unreachable!()
    }

    async fn long_poll(
        mut self,
        tls: Arc<rustls::ClientConfig>,
        server: SocketAddr,
        wait: u64,
        stats: Arc<Load>,
    ) {
        let tasks = format!("/agent/v1/nodes/{}/tasks", self.node);
        loop {
            match self
                .call(
                    &tls,
                    server,
                    "GET",
                    &format!("{tasks}/wait?wait={wait}"),
                    "",
                    false,
                )
                .await
            {
                Ok((200, body)) => {
                    stats.calls.fetch_add(1, Ordering::Relaxed);
                    let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    let id = answer["task"]["id"].as_str().unwrap().to_owned();
                    let result = r#"{"status":"succeeded","message":"alive"}"#;
                    match self
                        .call(
                            &tls,
                            server,
                            "POST",
                            &format!("{tasks}/{id}/result"),
                            result,
                            false,
                        )
                        .await
                    {
                        Ok((200, _)) => {
                            stats.calls.fetch_add(1, Ordering::Relaxed);
                            stats.results.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {
                            stats.failures.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                Ok((204, _)) => {
                    stats.calls.fetch_add(1, Ordering::Relaxed);
                }
                _ => {
                    stats.failures.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    async fn heartbeat(
        mut self,
        tls: Arc<rustls::ClientConfig>,
        server: SocketAddr,
        every: Duration,
        offset: Duration,
        stats: Arc<Load>,
    ) {
        let path = format!("/agent/v1/nodes/{}/tasks/wait?wait=0", self.node);
        let mut next = tokio::time::Instant::now() + offset;
        loop {
            tokio::time::sleep_until(next).await;
            next += every;
            match self.call(&tls, server, "GET", &path, "", true).await {
                Ok((204 | 200, _)) => {
                    stats.calls.fetch_add(1, Ordering::Relaxed);
                }
                _ => {
                    stats.failures.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// Write a request, read one response: (status, body, the server closes).
async fn exchange<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    stream: &mut S,
    request: &[u8],
) -> std::io::Result<(u16, Vec<u8>, bool)> {
    stream.write_all(request).await?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let close = head.contains("connection: close");
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok((status, buf[head_end..head_end + length].to_vec(), close))
}

/// Start a real agent with the credentials of `node` (already enrolled), let it poll idle for
/// `seconds`, read its RSS; stop it. (RSS MiB, executable MiB.)
#[allow(clippy::too_many_arguments)]
async fn idle_agent_rss(
    dir: &Path,
    name: &str,
    exe: &str,
    subcommand: bool,
    node: &(Uuid, String),
    port: u16,
    ca: &str,
    seconds: u64,
) -> (f64, f64) {
    let home = dir.join(name.replace(' ', "-"));
    let state = home.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(home.join("ca.pem"), ca).unwrap();
    std::fs::write(home.join("agent.env"), "").unwrap();
    std::fs::write(
        state.join("credentials.json"),
        serde_json::json!({
            "node_id": node.0,
            "agent_token": node.1,
            "tasks_url": format!("https://127.0.0.1:{port}/agent/v1/nodes/{}/tasks", node.0),
            "enroll_url": format!("https://127.0.0.1:{port}/agent/v1/enroll"),
            "heartbeat_interval_seconds": 30,
            "enrolled_at": "bench",
        })
        .to_string(),
    )
    .unwrap();
    let mut command = Command::new(exe);
    if subcommand {
        command.arg("agent");
    }
    let mut child = command
        .arg("--config")
        .arg(home.join("agent.toml"))
        .arg("--env-file")
        .arg(home.join("agent.env"))
        .arg("--state-dir")
        .arg(&state)
        .arg("--ca-file")
        .arg(home.join("ca.pem"))
        .arg("run")
        .env("METALFORM_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(home.join("agent.log")).unwrap())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "{name} stopped: {}",
        std::fs::read_to_string(home.join("agent.log")).unwrap_or_default()
    );
    let rss = support::memory_mib(child.id()).rss;
    // SAFETY: kill(2) on our child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let _ = child.wait();
    let size = std::fs::metadata(exe).map(|m| m.len()).unwrap_or(0) as f64 / 1048576.0;
    (rss, size)
}
