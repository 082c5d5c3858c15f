//! CPU per MAAS request (issue 17 item 7): the requests one node's onboarding makes, through
//! metalform's `MaasClient`, against the embedded MAAS simulator over loopback HTTP, for many
//! machines with 50 in flight, as an onboarding wave makes them.
//!
//! The simulator runs on its own tokio runtime (threads `sim-rt`), the client on another
//! (`client-rt`), so the CPU time of each side is read apart from `/proc/self/task/*/stat`;
//! the process total is `getrusage`. Each call's answer is checked (the machine asked for, in
//! the status the lifecycle says); times and CPU are printed, never asserted.
//!
//! The request mix per machine is what the onboarding stages make for a machine MAAS knows as
//! Ready (src/stages/onboard/, counted by the wave bench's requests per node): discovery looks
//! the hostname up and reads that machine's power parameters; commissioning reads the machine
//! and sets its power parameters; storage, RoCE and PXE stages read the machine, its block
//! devices and interfaces, look the node's RoCE /31 up by CIDR (MAAS answers 404: it is new),
//! create it and link its address (the simulator's Ready machines already have the profile's
//! storage layout); deploying reads the newest event, deploys, and polls the machine's status
//! until MAAS says Deployed; hardware sync reads the machine token. About 46 requests per
//! machine, 34 of them machine reads.
//!
//! ```sh
//! cargo bench --profile dev --bench maas_requests                      # 1,000 machines
//! cargo bench --profile dev --bench maas_requests -- --machines 200 --runs 3
//! ```
//!
//! Under `cargo test --all-targets` (no `--bench`) it runs one small wave as a smoke test.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use metalform::lifecycle::MaasStatus;
use metalform::provider::maas::{
    CreateSubnetParams, DeployParams, EventLevel, EventsQuery, IpmiPower, LinkRequest,
    LinkSubnetParams, MaasClient, MaasClientOptions, MachineFilter, PowerParameters, SubnetRef,
    UpdateMachineParams,
};
use metalform::secrets::Secret;
use metalform::sim::{self, FleetOptions, InitialState, SimConfig};
use support::Args;

/// Machines onboarded at once, as a wave with a few sites' `maxParallel` would.
const IN_FLIGHT: usize = 50;
/// The onboarding test bed's time scale (a 600 s deployment takes 1 s).
const TIME_SCALE: f64 = 600.0;
/// The test bed executor's poll interval of waiting stages.
const POLL: Duration = Duration::from_millis(40);
/// Reads of the machine while it deploys: what an apply pass of the test bed makes (about 33
/// reads per machine in all).
const DEPLOY_POLLS: usize = 24;

/// CPU time (user + system) so far: the whole process, and its threads by name prefix.
#[derive(Debug, Clone, Copy, Default)]
struct Cpu {
    process: Duration,
    sim: Duration,
    client: Duration,
}

impl Cpu {
    fn now() -> Cpu {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: getrusage writes the struct it is given; RUSAGE_SELF is always valid.
        let usage = unsafe {
            libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
            usage.assume_init()
        };
        let tv = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
        };
        let mut cpu = Cpu {
            process: tv(usage.ru_utime) + tv(usage.ru_stime),
            ..Cpu::default()
        };
        // SAFETY: sysconf has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        for task in std::fs::read_dir("/proc/self/task").into_iter().flatten() {
            let Ok(task) = task else { continue };
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            // Fields after `(comm)`: state is field 3, utime 14, stime 15.
            let fields: Vec<&str> = stat
                .rsplit_once(')')
                .map_or("", |(_, rest)| rest)
                .split_whitespace()
                .collect();
            let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
            let (Some(user), Some(system)) = (field(11), field(12)) else {
                continue;
            };
            let spent = Duration::from_micros((user + system) * 1_000_000 / ticks);
            if comm.starts_with("sim-rt") {
                cpu.sim += spent;
            } else if comm.starts_with("client-rt") {
                cpu.client += spent;
            }
        }
        cpu
    }

    fn since(self, before: Cpu) -> Cpu {
        Cpu {
            process: self.process.saturating_sub(before.process),
            sim: self.sim.saturating_sub(before.sim),
            client: self.client.saturating_sub(before.client),
        }
    }
}

fn runtime(name: &str) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        // Blocking threads (the client decodes lists on one) must live until CPU is read:
        // a thread that exits takes its CPU time out of /proc/self/task.
        .thread_keep_alive(Duration::from_secs(3600))
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// What one machine's onboarding asked MAAS, by operation.
type Mix = BTreeMap<&'static str, u64>;

struct Wave<'a> {
    client: &'a MaasClient,
    hostnames: &'a [String],
    requests: AtomicU64,
}

impl Wave<'_> {
    fn counted(&self, mix: &mut Mix, operation: &'static str) {
        *mix.entry(operation).or_insert(0) += 1;
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// One machine's onboarding requests, each answer checked.
    async fn onboard(&self, index: usize) -> Mix {
        let maas = self.client;
        let hostname = &self.hostnames[index];
        let mut mix = Mix::new();

        // create_or_find_in_maas: the hostname, then that machine's power parameters alone.
        let found = maas
            .list_machines(&MachineFilter::all().hostname(hostname))
            .await
            .expect("list_machines hostname=");
        self.counted(&mut mix, "list_machines");
        assert_eq!(found.len(), 1, "{hostname} is one machine");
        let sid = found[0].system_id.clone();
        let power = maas
            .power_parameters(std::slice::from_ref(&sid))
            .await
            .expect("power_parameters id=");
        self.counted(&mut mix, "power_parameters");
        assert_eq!(power.len(), 1, "{sid}'s power parameters only");
        let bmc = power[&sid].power_address.clone().expect("a BMC address");

        // commission_node (Ready: the identity is set), wait_for_ready.
        let machine = self.read(&mut mix, &sid).await;
        assert_eq!(machine.status.known(), Some(MaasStatus::Ready));
        let update = UpdateMachineParams {
            power: Some(PowerParameters::Ipmi(IpmiPower {
                power_address: bmc.clone(),
                power_user: "metalform".into(),
                power_pass: Secret::new("bench-power-pass"),
                power_driver: Some("LAN_2_0".into()),
                power_boot_type: None,
                cipher_suite_id: None,
                privilege_level: None,
                k_g: None,
                mac_address: None,
            })),
            ..UpdateMachineParams::default()
        };
        let updated = maas
            .update_machine(&sid, &update)
            .await
            .expect("update_machine");
        self.counted(&mut mix, "update_machine");
        assert_eq!(updated.system_id, sid);
        self.read(&mut mix, &sid).await;

        // configure_storage: the machine and its block devices (commissioning already put
        // the profile's flat layout on the boot disk, so nothing is set).
        self.read(&mut mix, &sid).await;
        let devices = maas
            .list_block_devices(&sid)
            .await
            .expect("list_block_devices");
        self.counted(&mut mix, "list_block_devices");
        assert!(
            devices.iter().any(|d| d.id_path.is_some()),
            "{sid} has disks"
        );

        // apply_roce_phase2: a /31 subnet on the RoCE port's VLAN and a STATIC link of the
        // node's address (the test bed's fleet: 172.30.<i / 120>.<(i % 120) * 2 + 1>/31).
        self.read(&mut mix, &sid).await;
        let interfaces = maas.list_interfaces(&sid).await.expect("list_interfaces");
        self.counted(&mut mix, "list_interfaces");
        let roce = interfaces
            .iter()
            .find(|i| i.name == "enp28s0np0")
            .expect("the RoCE port");
        let address =
            std::net::Ipv4Addr::new(172, 30, (index / 120) as u8, ((index % 120) * 2 + 1) as u8);
        let cidr = format!("172.30.{}.{}/31", index / 120, (index % 120) * 2);
        let found = maas
            .find_subnet_by_cidr(&cidr)
            .await
            .expect("subnets/cidr:");
        self.counted(&mut mix, "read_subnet");
        assert!(found.is_none(), "{cidr} is new");
        let mut create = CreateSubnetParams::new(cidr.clone());
        create.vlan = roce.vlan.as_ref().map(|v| v.id);
        let subnet = maas.create_subnet(&create).await.expect("create_subnet");
        self.counted(&mut mix, "create_subnet");
        assert_eq!(subnet.cidr, cidr);
        let link = LinkSubnetParams::new(LinkRequest::Static {
            subnet: SubnetRef::Id(subnet.id),
            ip_address: Some(address.into()),
        });
        let linked = maas
            .link_subnet(&sid, roce.id, &link)
            .await
            .expect("link_subnet");
        self.counted(&mut mix, "link_subnet");
        let wanted = address.to_string();
        assert!(
            linked
                .links
                .iter()
                .any(|l| l.ip_address.as_deref() == Some(wanted.as_str())),
            "{sid} has {wanted}"
        );

        // ensure_pxe_interface_auto: the boot interface's AUTO link is there already.
        self.read(&mut mix, &sid).await;
        let interfaces = maas.list_interfaces(&sid).await.expect("list_interfaces");
        self.counted(&mut mix, "list_interfaces");
        assert_eq!(interfaces.first().map(|i| i.name.as_str()), Some("eno8303"));

        // deploy_via_maas: the newest event, then deploy.
        self.read(&mut mix, &sid).await;
        let events = maas
            .query_events(&EventsQuery::machine(sid.clone(), EventLevel::Debug, 1))
            .await
            .expect("query_events");
        self.counted(&mut mix, "query_events");
        assert!(
            events
                .events
                .iter()
                .all(|e| e.node.as_deref() == Some(&sid))
        );
        let deploy = DeployParams {
            distro_series: Some("ubuntu/noble".into()),
            enable_hw_sync: Some(true),
            ..DeployParams::default()
        };
        let deploying = maas.deploy(&sid, &deploy).await.expect("deploy");
        self.counted(&mut mix, "deploy");
        assert_eq!(deploying.status.known(), Some(MaasStatus::Deploying));

        // wait_for_deployed: a fixed number of polls POLL apart (a deployment takes ~1 s at
        // this time scale), then more only if MAAS does not say Deployed yet: the same mix
        // however fast the machine runs the wave.
        for poll in 0.. {
            let machine = self
                .client
                .read_machine_summary(&sid)
                .await
                .expect("read_machine");
            self.counted(&mut mix, "read_machine");
            assert_eq!(machine.system_id, sid);
            match machine.status.known() {
                Some(MaasStatus::Deployed) if poll + 1 >= DEPLOY_POLLS => break,
                Some(MaasStatus::Deployed | MaasStatus::Deploying) => {
                    tokio::time::sleep(POLL).await
                }
                _ => panic!("{sid} is {} while deploying", machine.status_label()),
            }
        }

        // ensure_hardware_sync_configured, wait_for_agent_enrollment: the token, the machine.
        let token = maas.get_token(&sid).await.expect("get_token");
        self.counted(&mut mix, "get_token");
        assert!(token.is_some(), "a deployed machine has a token");
        for _ in 0..4 {
            let machine = self.read(&mut mix, &sid).await;
            assert_eq!(machine.status.known(), Some(MaasStatus::Deployed));
        }
        mix
    }

    async fn read(&self, mix: &mut Mix, sid: &str) -> metalform::provider::maas::Machine {
        let machine = self.client.read_machine(sid).await.expect("read_machine");
        self.counted(mix, "read_machine");
        assert_eq!(machine.system_id, sid);
        machine
    }
}

struct Run {
    wall: Duration,
    requests: u64,
    cpu: Cpu,
    mix: Mix,
}

fn run_wave(
    client_rt: &tokio::runtime::Runtime,
    client: MaasClient,
    hostnames: Arc<Vec<String>>,
) -> Run {
    let before = Cpu::now();
    let started = Instant::now();
    let (requests, mix) = client_rt
        .block_on(client_rt.spawn(async move {
            let wave = Wave {
                client: &client,
                hostnames: &hostnames,
                requests: AtomicU64::new(0),
            };
            let mixes: Vec<Mix> = futures::stream::iter(0..hostnames.len())
                .map(|i| wave.onboard(i))
                .buffer_unordered(IN_FLIGHT)
                .collect()
                .await;
            let mut total = Mix::new();
            for mix in mixes {
                for (operation, n) in mix {
                    *total.entry(operation).or_insert(0) += n;
                }
            }
            (wave.requests.load(Ordering::Relaxed), total)
        }))
        .expect("the wave");
    Run {
        wall: started.elapsed(),
        requests,
        cpu: Cpu::now().since(before),
        mix,
    }
}

fn main() {
    let args = Args::parse((1000, 3), (20, 1));
    let _ = rustls::crypto::ring::default_provider().install_default();
    let per_request = |d: Duration, n: u64| d.as_secs_f64() * 1e6 / n.max(1) as f64;
    println!(
        "CPU per MAAS request: {} machines onboarded through MaasClient against the embedded \
         simulator, {IN_FLIGHT} in flight, {} run(s)",
        args.machines, args.runs
    );
    for run in 0..args.runs {
        // A fresh region each run: every machine Ready again.
        let sim_rt = runtime("sim-rt");
        let client_rt = runtime("client-rt");
        let mut config = SimConfig::generated(
            7,
            &FleetOptions {
                machines: args.machines,
                initial: InitialState::Ready,
                no_boss_every: 0,
                unknown: 0,
            },
        );
        config.time_scale = TIME_SCALE;
        let hostnames: Vec<String> = config
            .machines
            .iter()
            .map(|m| m.hostname.clone().expect("a known machine's hostname"))
            .collect();
        let handle = sim_rt
            .block_on(sim::start(config))
            .expect("simulator starts");
        let client = MaasClient::new(
            &handle.maas_url,
            handle.api_key().clone(),
            MaasClientOptions::default(),
        )
        .expect("client");
        let metrics = client.metrics().clone();
        let result = run_wave(&client_rt, client, Arc::new(hostnames));
        assert_eq!(metrics.total(), result.requests, "no request retried");
        let deployed = handle.with_world(|w| {
            w.machines
                .values()
                .filter(|m| m.status == metalform::sim::status::Status::Deployed)
                .count()
        });
        assert_eq!(deployed, args.machines, "every machine deployed");
        let cpu = result.cpu;
        println!(
            "run {}: {} requests in {:.1} s ({:.0}/s) | CPU per request: process {:.0} µs, \
             simulator {:.0} µs, client {:.0} µs | process CPU {:.2} s | load {}",
            run + 1,
            result.requests,
            result.wall.as_secs_f64(),
            result.requests as f64 / result.wall.as_secs_f64(),
            per_request(cpu.process, result.requests),
            per_request(cpu.sim, result.requests),
            per_request(cpu.client, result.requests),
            cpu.process.as_secs_f64(),
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .split_whitespace()
                .next()
                .unwrap_or("?"),
        );
        if run == 0 {
            let per_machine: Vec<String> = result
                .mix
                .iter()
                .map(|(op, n)| format!("{op} {:.1}", *n as f64 / args.machines as f64))
                .collect();
            println!("  requests per machine: {}", per_machine.join(", "));
        }
        drop(handle);
        drop(client_rt);
        drop(sim_rt);
    }
}
