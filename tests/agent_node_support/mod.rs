//! Real `metalform agent` processes for tests: each with its own state directory, a host root
//! of its own (accounts, mounts, one NVIDIA GPU on a fake PCI bus), and every tool its tasks
//! run pointed at a harmless recording script. Where the machine allows it (root, `ip netns`),
//! each agent runs in a network namespace of its own with its own address on a bridge; else on
//! loopback, with the skip printed.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Where agents live on the network.
pub struct Network {
    /// The address servers listen on for agents (the bridge's, or 127.0.0.1).
    pub server_ip: String,
    namespaces: Vec<(String, String)>,
    bridge: Option<String>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Network {
    /// `n` network namespaces on a bridge of their own, or loopback when that cannot be done
    /// here (printed).
    pub fn new(n: usize) -> Network {
        match Network::namespaces(n) {
            Ok(network) => network,
            Err(reason) => {
                eprintln!(
                    "skip: network namespaces are not available ({reason}); the agents run on loopback"
                );
                Network::loopback()
            }
        }
    }

    /// Agents on loopback.
    pub fn loopback() -> Network {
        Network {
            server_ip: "127.0.0.1".into(),
            namespaces: Vec::new(),
            bridge: None,
        }
    }

    fn namespaces(n: usize) -> Result<Network, String> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let id = std::process::id() % 10_000 * 10 + NEXT.fetch_add(1, Ordering::SeqCst) % 10;
        // A /24 of 10.214.0.0/16 per network (parallel tests and test binaries rarely meet).
        let subnet = (std::process::id() * 7 + id) % 250 + 1;
        let bridge = format!("mfb{id}");
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        let mut network = Network {
            server_ip: format!("10.214.{subnet}.1"),
            namespaces: Vec::new(),
            bridge: Some(bridge.clone()),
        };
        ip(&[
            "addr",
            "add",
            &format!("{}/24", network.server_ip),
            "dev",
            &bridge,
        ])?;
        ip(&["link", "set", &bridge, "up"])?;
        for k in 0..n {
            let ns = format!("mfn{id}-{k}");
            let (host_end, ns_end) = (format!("mfh{id}{k}"), format!("mfv{id}{k}"));
            let address = format!("10.214.{subnet}.{}", k + 10);
            ip(&["netns", "add", &ns])?;
            network.namespaces.push((ns.clone(), address.clone()));
            ip(&[
                "link", "add", &host_end, "type", "veth", "peer", "name", &ns_end,
            ])?;
            ip(&["link", "set", &ns_end, "netns", &ns])?;
            ip(&["link", "set", &host_end, "master", &bridge])?;
            ip(&["link", "set", &host_end, "up"])?;
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{address}/24"),
                "dev",
                &ns_end,
            ])?;
            ip(&["-n", &ns, "link", "set", &ns_end, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(network)
    }

    pub fn isolated(&self) -> bool {
        self.bridge.is_some()
    }

    /// The namespace and address of agent `k` (none on loopback).
    pub fn place(&self, k: usize) -> Option<&(String, String)> {
        self.namespaces.get(k)
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for (ns, _) in &self.namespaces {
            let _ = ip(&["netns", "del", ns]);
        }
        if let Some(bridge) = &self.bridge {
            let _ = ip(&["link", "del", bridge]);
        }
    }
}

/// The recording script every tool points at: probes answer as an idle host would; a change is
/// appended to `begun` when it starts and to `done` when it ends. A change whose line is in
/// `slow` takes 20 s (a test kills the agent meanwhile). `userdel` removes the account from
/// the host root's passwd, as the real one would.
const RECORDER: &str = r#"#!/bin/sh
dir="@DIR@"
root="@ROOT@"
name=${0##*/}
line="$name $*"
case "$line" in
  "systemctl is-active "*) echo "$line" >>"$dir/probes"; echo inactive; exit 3 ;;
  "loginctl list-sessions"*) echo "$line" >>"$dir/probes"; exit 0 ;;
  "nvidia-smi --query-gpu=index --format=csv,noheader") echo "$line" >>"$dir/probes"; echo 0; exit 0 ;;
  "nvidia-smi --query-gpu=index,memory.used"*) echo "$line" >>"$dir/probes"; echo "0, 1"; exit 0 ;;
  "nvidia-smi --query-compute-apps"*) echo "$line" >>"$dir/probes"; exit 0 ;;
esac
echo "$line" >>"$dir/begun"
if [ -f "$dir/slow" ] && [ "$(cat "$dir/slow")" = "$line" ]; then
  sleep "$(cat "$dir/slow-seconds" 2>/dev/null || echo 20)"
fi
if [ "$name" = userdel ]; then
  for user in "$@"; do :; done
  sed -i "/^$user:/d" "$root/etc/passwd"
fi
echo "$line" >>"$dir/done"
"#;

/// One node's agent: its files and, once started, its process.
pub struct AgentHost {
    pub dir: PathBuf,
    pub root: PathBuf,
    pub state: PathBuf,
    pub calls: PathBuf,
    pub config: PathBuf,
    pub env_file: PathBuf,
    pub ca_file: PathBuf,
    pub log: PathBuf,
    pub child: Option<Child>,
}

impl AgentHost {
    /// A host under `dir`: accounts root, the deploy user hpcadmin and a tenant `tenant1`, one
    /// NVIDIA GPU, a scratch directory; the agent's files from the host's cloud-init payload
    /// (`files`: path → content, as the simulator's host holds them).
    pub fn new(dir: &Path, files: &std::collections::BTreeMap<String, String>) -> AgentHost {
        let root = dir.join("root");
        let calls = dir.join("calls");
        let bin = dir.join("bin");
        for d in [&root, &calls, &bin] {
            std::fs::create_dir_all(d).unwrap();
        }
        let write = |path: &str, text: &str| {
            let path = root.join(path.trim_start_matches('/'));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write(
            "/etc/passwd",
            "root:x:0:0:root:/root:/bin/bash\nhpcadmin:x:1000:1000::/home/hpcadmin:/bin/bash\ntenant1:x:2001:2001::/home/tenant1:/bin/bash\n",
        );
        write("/proc/mounts", "/dev/nvme0n1p2 / ext4 rw 0 0\n");
        write("/sys/bus/pci/devices/0000:17:00.0/vendor", "0x10de\n");
        write("/sys/bus/pci/devices/0000:17:00.0/class", "0x030200\n");
        write("/scratch1/job.out", "tenant data\n");
        write("/scratch2/job.out", "tenant data\n");
        let recorder = RECORDER
            .replace("@DIR@", &calls.display().to_string())
            .replace("@ROOT@", &root.display().to_string());
        let script = bin.join("recorder");
        std::fs::write(&script, recorder).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut paths = Vec::new();
        for tool in metalform::agent::node::config::TOOLS {
            std::os::unix::fs::symlink(&script, bin.join(tool)).unwrap();
            paths.push(format!("\"{tool}\" = \"{}\"", bin.join(tool).display()));
        }
        let config = dir.join("agent.toml");
        std::fs::write(
            &config,
            format!(
                "[server]\npoll_wait = \"2s\"\nhot_period = \"1h\"\nretry_base = \"100ms\"\nretry_cap = \"1s\"\n\n\
                 [drain]\nunits = [\"tenant-workload.service\"]\n\n\
                 [storage]\nscratch = [\"/scratch1\", \"/scratch2\"]\n\n\
                 [host]\nroot = \"{}\"\n\n\
                 [commands]\npaths = {{ {} }}\n",
                root.display(),
                paths.join(", ")
            ),
        )
        .unwrap();
        let env_file = dir.join("agent.env");
        std::fs::write(&env_file, &files["/etc/metalform/agent.env"]).unwrap();
        let ca_file = dir.join("ca.pem");
        std::fs::write(
            &ca_file,
            files
                .get("/etc/metalform/ca.pem")
                .cloned()
                .unwrap_or_default(),
        )
        .unwrap();
        AgentHost {
            dir: dir.to_owned(),
            state: dir.join("state"),
            root,
            calls,
            config,
            env_file,
            ca_file,
            log: dir.join("agent.log"),
            child: None,
        }
    }

    /// A host whose tenants are gone already (for storage cleanups, which do not revoke).
    pub fn without_tenants(&self) {
        std::fs::write(
            self.root.join("etc/passwd"),
            "root:x:0:0:root:/root:/bin/bash\nhpcadmin:x:1000:1000::/home/hpcadmin:/bin/bash\n",
        )
        .unwrap();
    }

    /// `metalform agent run …` (in the network namespace `place` when given).
    pub fn start(&mut self, place: Option<&(String, String)>) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let agent = env!("CARGO_BIN_EXE_metalform");
        let mut command = match place {
            Some((ns, _)) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, agent]);
                c
            }
            None => Command::new(agent),
        };
        command
            .args(["agent", "--config"])
            .arg(&self.config)
            .arg("--env-file")
            .arg(&self.env_file)
            .arg("--state-dir")
            .arg(&self.state)
            .arg("--ca-file")
            .arg(&self.ca_file)
            .args(["--log", "info", "run"])
            .env_remove("METALFORM_LOG")
            .stdout(Stdio::null())
            .stderr(log);
        self.child = Some(command.spawn().unwrap());
    }

    /// kill -9.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on our child.
            unsafe {
                libc::kill(child.id() as i32, libc::SIGKILL);
            }
            let _ = child.wait();
        }
    }

    /// SIGTERM, then the exit status.
    pub fn stop(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        // SAFETY: kill(2) on our child.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        child.wait().ok().and_then(|s| s.code())
    }

    /// The exit status if the agent exited within `within`.
    pub fn exited_within(&mut self, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait().unwrap()
            {
                self.child = None;
                return status.code();
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn lines(&self, name: &str) -> Vec<String> {
        std::fs::read_to_string(self.calls.join(name))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Changes that finished, in order.
    pub fn done(&self) -> Vec<String> {
        self.lines("done")
    }

    /// Changes that started (a killed one shows here and not in `done`).
    pub fn begun(&self) -> Vec<String> {
        self.lines("begun")
    }

    pub fn make_slow(&self, line: &str) {
        std::fs::write(self.calls.join("slow"), line).unwrap();
    }

    /// `line` takes `seconds`.
    pub fn make_slow_for(&self, line: &str, seconds: u64) {
        std::fs::write(self.calls.join("slow-seconds"), seconds.to_string()).unwrap();
        self.make_slow(line);
    }

    pub fn make_quick(&self) {
        let _ = std::fs::remove_file(self.calls.join("slow"));
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait until `check` holds of the finished changes.
    pub async fn wait_done(&self, what: &str, within: Duration, check: impl Fn(&[String]) -> bool) {
        let deadline = Instant::now() + within;
        while !check(&self.done()) {
            assert!(
                Instant::now() < deadline,
                "{what}: changes {:?}\nagent log:\n{}",
                self.done(),
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn wait_begun(&self, line: &str, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.begun().iter().any(|l| l == line) {
            assert!(
                Instant::now() < deadline,
                "`{line}` never started: {:?}\nagent log:\n{}",
                self.begun(),
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for AgentHost {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The cloud-init files the simulator's machine `hostname` holds, once it is deployed with
/// an agent payload.
pub async fn payload_of(
    sim: &metalform::sim::SimHandle,
    hostname: &str,
    within: Duration,
) -> std::collections::BTreeMap<String, String> {
    let deadline = Instant::now() + within;
    loop {
        let files = sim.with_world(|w| {
            w.machines
                .values()
                .find(|m| m.hostname == hostname)
                .map(|m| m.host_files.clone())
        });
        if let Some(files) = files
            && files.contains_key("/etc/metalform/agent.env")
        {
            return files.into_iter().collect();
        }
        assert!(
            Instant::now() < deadline,
            "{hostname} was never deployed with an agent payload"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
