//! Benchmark: 200 provisioning jobs at once against simulated BMCs (issue 14 "Performance":
//! each ISO build < 200 ms for a 64 KiB recipe, no job waits on another server's Redfish
//! latency, controller RSS < 150 MB). A standalone controller (jobs API, workers, webhook,
//! task ISOs, SQLite store) and simulated BMCs of every vendor run in this process; the jobs
//! are posted through the API with 64 KiB recipes and run to `complete` (maintenance OS
//! report and cleanup included).
//!
//! Two runs in one invocation: all BMCs answering at once (the baseline), then the same with
//! every tenth BMC answering each request 500 ms late. The figure for "no job waits on
//! another server's latency" is the duration of the fast servers' jobs (picked → complete)
//! in the second run against the baseline. In the baseline the BMCs run in a separate
//! `metalform sim --redfish-bmcs N` process, so this process's peak RSS (VmHWM) after it is the
//! controller's; the second run has the BMCs in this process (their faults are injected
//! directly).
//!
//! `cargo bench --bench redfish_provisioning [-- --machines N]`: the built-in ISO writer, or
//! xorriso when `METALFORM_XORRISO` is set. Under `cargo test --all-targets`: a smoke run of
//! 4 jobs.

#[path = "../tests/provisioning_support/mod.rs"]
#[allow(unused_imports)]
mod provisioning_support;
mod support;

use std::time::{Duration, Instant};

use metalform::lifecycle::ProvisioningStatus;
use metalform::provider::redfish::iso::IsoTool;
use metalform::sim::redfish::FaultRule;
use provisioning_support::{Bed, Options};
use support::{Args, Samples, recipe_of};

/// Every tenth BMC answers each request this late in the second run (the smoke run: 50 ms).
fn slow_latency(args: &Args) -> &'static str {
    if args.benchmarking { "500ms" } else { "50ms" }
}

struct Run {
    /// picked → complete, of the servers that answer at once.
    fast: Samples,
    /// picked → complete, of the slow servers.
    slow: Samples,
    isos: Samples,
    iso_bytes: u64,
    all_done: Duration,
}

/// `metalform sim` serving `count` Redfish BMCs whose maintenance OS reports to `controller`,
/// and the BMCs it printed: (serial, vendor, URL).
fn bmcs_process(
    count: usize,
    controller: &url::Url,
) -> (std::process::Child, Vec<(String, String, String)>) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_metalform"))
        .args(["sim", "--listen", "127.0.0.1:0", "--time-scale", "100"])
        .args(["--redfish-bmcs", &count.to_string()])
        .args(["--redfish-webhook", controller.as_str()])
        .env(
            "METALFORM_WEBHOOK_SECRET",
            provisioning_support::WEBHOOK_SECRET,
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("metalform sim starts");
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut bmcs = Vec::new();
    while bmcs.len() < count {
        let line = lines
            .next()
            .expect("metalform sim printed its BMCs")
            .unwrap();
        // "Redfish BMC RF-0001 (dell): http://127.0.0.1:PORT/redfish/v1/ (login …)"
        let Some(rest) = line.strip_prefix("Redfish BMC ") else {
            continue;
        };
        let (serial, rest) = rest.split_once(" (").unwrap();
        let (vendor, rest) = rest.split_once("): ").unwrap();
        let url = rest.split_once("/redfish/v1/").unwrap().0;
        bmcs.push((serial.to_owned(), vendor.to_owned(), url.to_owned()));
    }
    (child, bmcs)
}

/// One run of `jobs` jobs. `separate_bmcs`: the BMCs run in a `metalform sim` process, so
/// this process is the controller alone (its RSS is the controller's).
async fn run(
    jobs: usize,
    slow: Option<(usize, &str)>,
    xorriso: Option<&str>,
    separate_bmcs: bool,
) -> Run {
    let bed = Bed::start(Options {
        bmcs: if separate_bmcs { 0 } else { jobs },
        vendor: None,
        concurrency: jobs,
        iso_tool: if xorriso.is_some() {
            IsoTool::Xorriso
        } else {
            IsoTool::Builtin
        },
        xorriso: xorriso.map(Into::into),
        // Power changes land 20 ms after they are asked, the maintenance OS runs 300 ms.
        time_scale: 100.0,
        stuck_timeout: Duration::from_secs(600),
        lease_ttl: Duration::from_secs(30),
        ..Options::default()
    })
    .await;
    let (sim_process, serials) = if separate_bmcs {
        let (child, bmcs) = bmcs_process(jobs, &bed.controller_url());
        let servers: Vec<metalform::store::Server> = bmcs
            .iter()
            .map(|(serial, vendor, url)| metalform::store::Server {
                serial: serial.clone(),
                bmc_address: url.clone(),
                credentials: metalform::secrets::SecretRef::new(
                    provisioning_support::CREDENTIALS,
                    None,
                ),
                vendor: Some(vendor.clone()),
                last_seen: None,
                site: "dc1".into(),
                hostname: format!("rf{}", serial.to_lowercase()),
            })
            .collect();
        bed.store.upsert_servers(&servers).await.unwrap();
        (Some(child), bmcs.into_iter().map(|b| b.0).collect())
    } else {
        (None, (0..jobs).map(|i| bed.serial(i)).collect::<Vec<_>>())
    };
    let latency = slow.map(|(_, l)| l).unwrap_or("0ms");
    let slow: Vec<bool> = (0..jobs)
        .map(|i| slow.is_some_and(|(n, _)| i % n == n - 1))
        .collect();
    for (i, is_slow) in slow.iter().enumerate() {
        if *is_slow {
            bed.sims.inject(
                &bed.serial(i),
                FaultRule::parse(&format!("any:latency={latency}")).unwrap(),
            );
        }
    }
    let started = Instant::now();
    let posts = (0..jobs).map(|i| {
        let (bed, serials) = (&bed, &serials);
        async move {
            let (status, body) = bed
                .post_job(&serials[i], recipe_of(64 * 1024, i as u64))
                .await;
            assert_eq!(status, 202, "{body}");
            body["job_id"].as_str().unwrap().to_owned()
        }
    });
    let ids = futures::future::join_all(posts).await;
    let mut fast = Samples::default();
    let mut slow_samples = Samples::default();
    for (i, id) in ids.iter().enumerate() {
        let job = bed.complete(id, Duration::from_secs(900)).await;
        let failed = match &job.spec {
            metalform::store::JobSpec::Provisioning { failed_step, .. } => failed_step.clone(),
            _ => None,
        };
        assert_eq!(failed, None, "{:#?}", bed.events(id).await);
        let ran = (job.completed_at.unwrap() - job.started_at.unwrap())
            .to_std()
            .unwrap();
        if slow[i] {
            slow_samples.push(ran);
        } else {
            fast.push(ran);
        }
    }
    let all_done = started.elapsed();
    if let Some(mut child) = sim_process {
        let _ = child.kill();
        let _ = child.wait();
    }
    let isos = bed.recorder.isos.lock().unwrap().clone();
    let statuses = bed.recorder.statuses.lock().unwrap().clone();
    assert_eq!(
        statuses
            .iter()
            .filter(|s| **s == ProvisioningStatus::Complete)
            .count(),
        jobs
    );
    Run {
        fast,
        slow: slow_samples,
        iso_bytes: isos.iter().map(|(_, b)| *b).max().unwrap_or(0),
        isos: isos
            .iter()
            .map(|(s, _)| Duration::from_secs_f64(*s))
            .collect::<Vec<_>>()
            .into(),
        all_done,
    }
}

async fn bench(args: &Args) {
    let jobs = args.machines;
    let xorriso = std::env::var("METALFORM_XORRISO").ok();
    let tool = xorriso.as_deref().unwrap_or("the built-in ISO writer");
    println!("{jobs} jobs at once, WORKER_CONCURRENCY={jobs}, 64 KiB recipes, task ISOs by {tool}");
    // The baseline with the BMCs in their own process: this process is the controller alone.
    let baseline = run(jobs, None, xorriso.as_deref(), true).await;
    let controller_peak = support::memory_mib(std::process::id()).peak;
    println!(
        "baseline (every BMC answers at once): all complete in {:.2} s; each job picked → complete {}",
        baseline.all_done.as_secs_f64(),
        baseline.fast.summary()
    );
    println!(
        "  ISO builds ({} bytes each): {}",
        baseline.iso_bytes,
        baseline.isos.summary()
    );
    // Every tenth (the smoke run's last of its few).
    let latency = slow_latency(args);
    let slowed = run(
        jobs,
        Some((10.min(jobs), latency)),
        xorriso.as_deref(),
        false,
    )
    .await;
    println!(
        "every 10th BMC {latency} late per request: all complete in {:.2} s",
        slowed.all_done.as_secs_f64()
    );
    println!("  fast servers' jobs: {}", slowed.fast.summary());
    println!("  slow servers' jobs: {}", slowed.slow.summary());
    println!(
        "  fast servers' median job vs the baseline: {:.2}x",
        slowed.fast.median().as_secs_f64() / baseline.fast.median().as_secs_f64()
    );
    println!("  ISO builds: {}", slowed.isos.summary());
    println!(
        "controller RSS (the baseline; BMCs in a `metalform sim` process): peak {controller_peak:.1} MiB"
    );
    let support::Memory { peak, rss: now } = support::memory_mib(std::process::id());
    println!(
        "process RSS after the second run (controller + {jobs} simulated BMCs in this process): \
         peak {peak:.1} MiB, now {now:.1} MiB"
    );
}

fn main() {
    // Full run: 200 jobs; smoke: 4.
    let args = Args::parse((200, 1), (4, 1));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench(&args));
}
