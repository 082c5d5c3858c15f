//! What the benchmarks share: argument handling (a full run under `cargo bench`, a small smoke
//! run under `cargo test --all-targets` so the benchmarks cannot rot) and the timing summary
//! they print. Figures only: nothing here asserts anything about time.
#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};

/// The benchmark's command line: `[--bench] [--machines N] [--runs R] [--against WHAT]`.
#[derive(Debug, Clone)]
pub struct Args {
    /// `cargo bench` passes `--bench`; `cargo test --all-targets` runs the binary without it.
    pub benchmarking: bool,
    pub machines: usize,
    pub runs: usize,
    /// What to measure, when the benchmark has several targets.
    pub against: Option<String>,
}

/// `cargo bench` passes `--bench`; `cargo test --all-targets` runs the binary without it.
pub fn benchmarking() -> bool {
    std::env::args().any(|arg| arg == "--bench")
}

impl Args {
    /// Parses the arguments; `full` is (machines, runs) under `cargo bench`, `smoke` otherwise.
    pub fn parse(full: (usize, usize), smoke: (usize, usize)) -> Args {
        let benchmarking = benchmarking();
        let (machines, runs) = if benchmarking { full } else { smoke };
        let mut args = Args {
            benchmarking,
            machines,
            runs,
            against: None,
        };
        let mut iter = std::env::args().skip(1);
        while let Some(arg) = iter.next() {
            let mut value = |name: &str| -> String {
                iter.next()
                    .unwrap_or_else(|| panic!("{name} needs a value"))
            };
            let number = |name: &str, text: String| -> usize {
                text.parse()
                    .unwrap_or_else(|_| panic!("{name} needs a number, not {text:?}"))
            };
            match arg.as_str() {
                "--machines" => args.machines = number("--machines", value("--machines")),
                "--runs" => args.runs = number("--runs", value("--runs")).max(1),
                "--against" => args.against = Some(value("--against")),
                // --bench, or a name filter: nothing to do.
                _ => {}
            }
        }
        args
    }
}

/// The value after `--name` on the command line, for a benchmark's own options.
pub fn option(name: &str) -> Option<String> {
    let mut args = std::env::args().skip_while(|arg| arg != name);
    args.next()?;
    args.next()
}

/// [`option`] as a number, or `default`.
pub fn number_option<T: std::str::FromStr>(name: &str, default: T) -> T {
    match option(name) {
        Some(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{name} needs a number, not {text:?}")),
        None => default,
    }
}

/// Durations of repeated runs of one measurement.
#[derive(Debug, Default, Clone)]
pub struct Samples(Vec<Duration>);

impl From<Vec<Duration>> for Samples {
    fn from(samples: Vec<Duration>) -> Self {
        Samples(samples)
    }
}

impl Samples {
    /// Times `runs` calls of `run` (sequentially).
    pub async fn measure<F, Fut, T>(runs: usize, mut run: F) -> (Samples, T)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = T>,
    {
        let mut samples = Samples::default();
        let mut last = None;
        for _ in 0..runs.max(1) {
            let started = Instant::now();
            let value = run().await;
            samples.0.push(started.elapsed());
            last = Some(value);
        }
        (samples, last.expect("at least one run"))
    }

    /// `min …, median …, p95 …, max … ms (R runs)`.
    pub fn summary(&self) -> String {
        let mut sorted = self.0.clone();
        sorted.sort();
        let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
        format!(
            "min {:.1} ms, median {:.1} ms, p95 {:.1} ms, max {:.1} ms ({} runs)",
            ms(at(0.0)),
            ms(at(0.5)),
            ms(at(0.95)),
            ms(at(1.0)),
            sorted.len()
        )
    }

    /// Adds one duration measured by the caller.
    pub fn push(&mut self, sample: Duration) {
        self.0.push(sample);
    }

    pub fn median(&self) -> Duration {
        let mut sorted = self.0.clone();
        sorted.sort();
        sorted[(sorted.len() - 1) / 2]
    }
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `(elapsed, value)` of one timed call.
pub async fn timed<T>(future: impl Future<Output = T>) -> (Duration, T) {
    let started = Instant::now();
    let value = future.await;
    (started.elapsed(), value)
}

/// A valid recipe whose JSON text is `size` bytes (± a few), most of it user-data.
pub fn recipe_of(size: usize, seed: u64) -> serde_json::Value {
    use base64::{Engine, engine::general_purpose::STANDARD};
    use rand::{RngExt, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let base = serde_json::json!({
        "task_target": "install-linux.target",
        "target_disk": "/dev/disk/by-id/nvme-SAMSUNG_MZ1L21T9HCLS-00A07_S666NE0R800001",
        "oci_url": "controller.internal:8080/os-images/ubuntu-rootfs:22.04",
        "partition_layout": [
            {"size": "512M", "type_guid": "ef00", "format": "vfat", "label": "EFI"},
            {"size": "100%", "type_guid": "8300", "format": "ext4", "label": "root"}
        ],
        "assets": {"unattend.xml": STANDARD.encode("<unattend/>\n")}
    });
    let room = size.saturating_sub(serde_json::to_vec(&base).unwrap().len() + 16);
    let raw: Vec<u8> = (0..room * 3 / 4).map(|_| rng.random::<u8>()).collect();
    let mut recipe = base;
    recipe["user_data"] = serde_json::json!(STANDARD.encode(raw));
    recipe
}

/// CPU seconds (user + system) process `pid` used so far, from /proc (0 once it is gone).
pub fn cpu_seconds(pid: u32) -> f64 {
    stat_seconds(pid, 11)
}

/// CPU seconds (user + system) of the children process `pid` has waited for (its `git`
/// fetches, for example), from /proc/PID/stat.
pub fn children_cpu_seconds(pid: u32) -> f64 {
    stat_seconds(pid, 13)
}

/// The sum of the two clock-tick fields of /proc/PID/stat at `first` and `first + 1`, counted
/// after the command name, in seconds.
fn stat_seconds(pid: u32, first: usize) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')';
    // utime and stime are the 12th and 13th of them, cutime and cstime the 14th and 15th.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // SAFETY: sysconf has no preconditions.
    (ticks(first) + ticks(first + 1)) / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// Resident set of process `pid` now and at its peak, in MiB (VmRSS, VmHWM from /proc).
pub fn memory_mib(pid: u32) -> Memory {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .map(|kib| kib / 1024.0)
            .unwrap_or(f64::NAN)
    };
    Memory {
        rss: field("VmRSS:"),
        peak: field("VmHWM:"),
    }
}

/// A process's resident set, MiB.
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    pub rss: f64,
    pub peak: f64,
}

/// How a child process ran: wall time, peak resident set and CPU.
#[derive(Debug)]
pub struct Finished {
    pub success: bool,
    pub wall: Duration,
    pub peak_rss_mib: f64,
    pub cpu_seconds: f64,
}

/// Runs `command` to its end (stdout and stderr to `log`) and reports how it ran. The peak
/// resident set is the child's own VmHWM, read every few milliseconds while it runs: the
/// `ru_maxrss` that `wait4` reports would count the benchmark's own pages, which the child
/// had until it called exec.
pub fn run_measured(command: &mut std::process::Command, log: &std::path::Path) -> Finished {
    let out = std::fs::File::create(log).expect("the log file");
    let started = Instant::now();
    #[expect(
        clippy::zombie_processes,
        reason = "reaped below with wait4, which std's Child does not know of"
    )]
    let child = command
        .stdout(out.try_clone().expect("the log file"))
        .stderr(out)
        .spawn()
        .expect("the command starts");
    let pid = child.id() as i32;
    let mut peak = 0.0f64;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        let hwm = memory_mib(child.id()).peak;
        if hwm.is_finite() {
            peak = peak.max(hwm);
        }
        // SAFETY: the pid is our own child, not yet reaped; both pointers are valid.
        let waited = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if waited == pid {
            break;
        }
        assert_eq!(waited, 0, "wait4 on the child");
        std::thread::sleep(Duration::from_millis(5));
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Finished {
        success: libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        wall: started.elapsed(),
        peak_rss_mib: peak,
        cpu_seconds: seconds(usage.ru_utime) + seconds(usage.ru_stime),
    }
}
