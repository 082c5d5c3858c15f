//! Benchmark of `metalform validate` at scale (issue 2): a generated fleet of 10,000 nodes over
//! 5 sites in 100 NodeGroup files. Goals on a 2-core machine: under 0.5 s and under 200 MB.
//!
//! `cargo bench --bench validate` prints:
//! - in-process timings of reading the fleet and of validating + resolving it (min/median/max
//!   of several runs);
//! - the wall time and peak RSS of the real binary, `metalform validate --fleet DIR`, measured
//!   with `/usr/bin/time -v` when it is installed (Debian package `time`);
//! - the time to diff two such fleets that differ in 100 nodes.
//!
//! Figures are printed, never asserted: a slow machine must not fail the test suite. Under
//! `cargo test --all-targets` (no `--bench` argument) it only runs once on a small fleet, as a
//! smoke test of the benchmark itself.

#[allow(dead_code)]
#[path = "../examples/large_fleet.rs"]
mod large_fleet;

mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use metalform::manifest;
use metalform::model::diff;
use metalform::source::{self, FleetSource};
use support::{Samples, benchmarking, ms};

fn runs() -> usize {
    if benchmarking() { 7 } else { 1 }
}

fn main() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let fleet = dir.path().join("fleet");
    let shape = if benchmarking() {
        large_fleet::Shape::default()
    } else {
        println!("smoke run (cargo test): a small fleet, one run; figures are not meaningful");
        large_fleet::Shape {
            nodes: 500,
            sites: 5,
            groups: 10,
        }
    };
    let files = large_fleet::generate(&fleet, shape).expect("the fleet is generated");
    let bytes: u64 = walk_size(&fleet);
    println!(
        "fleet: {} nodes, {} sites, {} NodeGroup files ({files} files, {:.1} MB)",
        shape.nodes,
        shape.sites,
        shape.groups,
        bytes as f64 / 1e6
    );

    let source = FleetSource::Directory(fleet.clone());
    let (mut read_times, mut load_times, mut total_times) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs() {
        let start = Instant::now();
        let snapshot = source::read(&source).expect("readable");
        let read = start.elapsed();
        let validation = manifest::load(&snapshot);
        let total = start.elapsed();
        assert!(
            validation.errors.is_empty(),
            "the generated fleet is valid: {:?}",
            &validation.errors[..1]
        );
        assert_eq!(
            validation.fleet.as_ref().map(|f| f.nodes.len()),
            Some(shape.nodes)
        );
        read_times.push(read);
        load_times.push(total - read);
        total_times.push(total);
    }
    println!("in-process, {} runs:", runs());
    println!(
        "  read files          {}",
        Samples::from(read_times).summary()
    );
    println!(
        "  validate + resolve  {}",
        Samples::from(load_times).summary()
    );
    println!(
        "  total               {}",
        Samples::from(total_times).summary()
    );

    binary_figures(&fleet);
    diff_figures(&fleet, &source, shape);
}

/// The real binary, as an operator runs it.
fn binary_figures(fleet: &Path) {
    let binary = env!("CARGO_BIN_EXE_metalform");
    let mut walls = Vec::new();
    for _ in 0..runs() {
        let start = Instant::now();
        let status = Command::new(binary)
            .args(["validate", "--fleet"])
            .arg(fleet)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("the binary runs");
        walls.push(start.elapsed());
        assert!(status.success());
    }
    println!(
        "binary `metalform validate --fleet DIR`, {} runs (wall): {}",
        runs(),
        Samples::from(walls.clone()).summary()
    );
    let time = Path::new("/usr/bin/time");
    if !time.exists() {
        println!("peak RSS: /usr/bin/time not installed (apt-get install time)");
        return;
    }
    let output = Command::new(time)
        .arg("-v")
        .arg(binary)
        .args(["validate", "--fleet"])
        .arg(fleet)
        .output()
        .expect("/usr/bin/time runs");
    let report = String::from_utf8_lossy(&output.stderr);
    let field = |name: &str| {
        report
            .lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| "?".into())
    };
    let rss_kb: f64 = field("Maximum resident set size (kbytes):")
        .parse()
        .unwrap_or(f64::NAN);
    let median = {
        walls.sort();
        walls[walls.len() / 2]
    };
    println!(
        "/usr/bin/time -v: elapsed {}, peak RSS {:.1} MB",
        field("Elapsed (wall clock) time (h:mm:ss or m:ss):"),
        rss_kb / 1024.0
    );
    if !benchmarking() {
        return;
    }
    println!(
        "goals: wall < 500 ms: {} (median {:.0} ms); RSS < 200 MB: {} ({:.1} MB)",
        if median < Duration::from_millis(500) {
            "met"
        } else {
            "MISSED"
        },
        ms(median),
        if rss_kb < 200.0 * 1024.0 {
            "met"
        } else {
            "MISSED"
        },
        rss_kb / 1024.0
    );
}

/// Diff of two generated fleets that differ in one node per group (retired).
fn diff_figures(fleet: &Path, source: &FleetSource, shape: large_fleet::Shape) {
    let base = manifest::load(&source::read(source).unwrap())
        .fleet
        .unwrap();
    let changed = fleet.with_file_name("changed");
    large_fleet::generate(&changed, shape).unwrap();
    for entry in walk_files(&changed.join("nodes")) {
        let text = std::fs::read_to_string(&entry).unwrap();
        let text = text.replacen(
            "n000, bmc",
            "n000, lifecycle: retired, retiredReason: bench, bmc",
            1,
        );
        std::fs::write(&entry, text).unwrap();
    }
    let head = manifest::load(&source::read(&FleetSource::Directory(changed)).unwrap())
        .fleet
        .unwrap();
    let mut times = Vec::new();
    let mut changes = 0;
    for _ in 0..runs() {
        let start = Instant::now();
        let result = diff::diff(&base, &head);
        times.push(start.elapsed());
        changes = result.changes.len();
    }
    println!(
        "diff of two {}-node fleets ({changes} node changes): {}",
        base.nodes.len(),
        Samples::from(times).summary()
    );
}

fn walk_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk_files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn walk_size(dir: &Path) -> u64 {
    walk_files(dir)
        .iter()
        .map(|p| p.metadata().unwrap().len())
        .sum()
}
