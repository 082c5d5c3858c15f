//! Benchmark: building a task ISO with xorriso for a 64 KiB recipe (issue 14 "each ISO build
//! < 200 ms for a 64 KiB recipe"): sequential builds, then a burst of concurrent builds as
//! when many jobs start at once. Also the pure part (validation + contents) on its own.
//!
//! `cargo bench --bench redfish_iso [-- --runs R --machines BURST]` prints the figures; it
//! needs xorriso (`METALFORM_XORRISO`, else `xorriso` from PATH). Under
//! `cargo test --all-targets` it runs a smoke pass of the pure part, plus one build when
//! `METALFORM_XORRISO` is set (the services run): the hermetic suite does not need xorriso.

mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use metalform::provider::redfish::iso::{IsoBuilder, TaskIsoContents};
use metalform::provider::redfish::recipe;
use serde_json::Value as Json;
use support::{Args, Samples, recipe_of};

fn contents(recipe: &Json) -> TaskIsoContents {
    let version = recipe::validate(recipe).expect("the bench recipe is valid");
    TaskIsoContents::from_recipe(recipe, version).unwrap()
}

fn xorriso(required: bool) -> Option<PathBuf> {
    if let Ok(path) = std::env::var("METALFORM_XORRISO") {
        return Some(PathBuf::from(path));
    }
    if !required {
        return None;
    }
    let found = std::process::Command::new("xorriso")
        .arg("-version")
        .output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "xorriso is needed: install the Debian package `xorriso` or set METALFORM_XORRISO"
    );
    Some(PathBuf::from("xorriso"))
}

async fn bench(args: &Args) {
    let recipe = recipe_of(64 * 1024, 1);
    let text_len = serde_json::to_vec(&recipe).unwrap().len();
    let pure = Samples::measure(args.runs.max(20), || async { contents(&recipe) }).await;
    println!(
        "recipe {text_len} bytes: validate + ISO contents: {}",
        pure.0.summary()
    );
    let Some(program) = xorriso(args.benchmarking) else {
        println!(
            "smoke run: no METALFORM_XORRISO, ISO builds not measured (run `cargo bench --bench redfish_iso`)"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let builder = Arc::new(IsoBuilder::new(program));
    let prepared = contents(&recipe);
    let mut n = 0u32;
    let (sequential, built) = Samples::measure(args.runs, || {
        n += 1;
        let out = dir.path().join(format!("seq-{n}/task.iso"));
        let (builder, prepared) = (&builder, &prepared);
        async move { builder.build(prepared, &out).await.unwrap() }
    })
    .await;
    println!(
        "build one 64 KiB-recipe ISO ({} bytes), sequential: {}",
        built.size,
        sequential.summary()
    );
    // A burst: `machines` jobs start at once, each with its own recipe; four build at a time
    // (WORKER_CONCURRENCY's default), the rest queue.
    let burst = args.machines;
    let limit = Arc::new(tokio::sync::Semaphore::new(4));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for job in 0..burst {
        let builder = builder.clone();
        let limit = limit.clone();
        let out = dir.path().join(format!("burst-{job}/task.iso"));
        let recipe = recipe_of(64 * 1024, 100 + job as u64);
        tasks.push(tokio::spawn(async move {
            let _permit = limit.acquire_owned().await.unwrap();
            let started = Instant::now();
            let prepared = contents(&recipe);
            builder.build(&prepared, &out).await.unwrap();
            started.elapsed()
        }));
    }
    let mut each = Samples::default();
    for task in tasks {
        each.push(task.await.unwrap());
    }
    let total = started.elapsed();
    println!(
        "burst of {burst} jobs, 4 builds at a time: each build (validate + contents + xorriso) {}; all done in {:.2} s ({:.1} ISOs/s)",
        each.summary(),
        total.as_secs_f64(),
        burst as f64 / total.as_secs_f64()
    );
}

fn main() {
    // Full run: 30 sequential builds and a burst of 200 jobs; smoke: 2 and 2.
    let args = Args::parse((200, 30), (2, 2));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench(&args));
}
