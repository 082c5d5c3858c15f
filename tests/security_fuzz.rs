//! Bounded fuzzing in the normal suite (issue 16 point 10, docs/security.md "How each point is
//! tested"): the manifest reader, the plan-file reader and every JSON body the daemon's APIs
//! accept, fed generated and mutated input. Each must answer with a typed error — never panic,
//! never hang (every run is under a watchdog), never a 500. The case counts are small so the
//! suite stays fast; `PROPTEST_CASES=N` runs more.

use crate::daemon_support;
use crate::manifest_support;

use std::path::Path;
use std::time::Duration;

use daemon_support::{ADMIN_TOKEN, AGENT_TOKEN, DaemonBed, one_site};
use manifest_support::repo_root;
use proptest::prelude::*;
use proptest::strategy::ValueTree as _;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};

/// Cases per property unless PROPTEST_CASES says otherwise.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Run `work` on its own thread; a run longer than `limit` is a hang.
fn within<T: Send + 'static>(limit: Duration, work: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, result) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(move || {
            let _ = done.send(work());
        })
        .unwrap();
    result
        .recv_timeout(limit)
        .unwrap_or_else(|_| panic!("no answer within {limit:?}: a hang"))
}

/// The sample fleet's files, as (path, text).
fn sample_files() -> Vec<(String, String)> {
    let snapshot = metalform::source::read(&metalform::source::FleetSource::Directory(
        repo_root().join("fleet"),
    ))
    .unwrap();
    snapshot
        .files
        .into_iter()
        .map(|f| (f.path, String::from_utf8(f.bytes).unwrap()))
        .collect()
}

/// Characters that stress YAML and TOML syntax.
const SYNTAX: &[&str] = &[
    ":",
    "- ",
    "[",
    "]",
    "{",
    "}",
    "&a ",
    "*a",
    "!!str ",
    "\"",
    "'",
    "#",
    "\n",
    "\t",
    "|",
    ">",
    "---\n",
    "...\n",
    "%YAML 1.2\n",
    "? ",
    "=",
    "[[",
    "]]",
    "\\",
    "\u{0}",
    "\u{feff}",
    "0x",
    "1e999",
    "~",
    "<<: *a",
];

fn mutate(text: &str, edits: &[(usize, usize, usize)]) -> String {
    let mut bytes = text.as_bytes().to_vec();
    for &(at, kind, pick) in edits {
        if bytes.is_empty() {
            break;
        }
        let at = at % bytes.len();
        match kind % 4 {
            0 => {
                let snippet = SYNTAX[pick % SYNTAX.len()].as_bytes();
                bytes.splice(at..at, snippet.iter().copied());
            }
            1 => {
                let end = (at + pick % 16).min(bytes.len());
                bytes.drain(at..end);
            }
            2 => bytes[at] = (pick % 256) as u8,
            _ => bytes.truncate(at),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Validate one snapshot of files on disk through the real reader and validator.
fn validate_files(files: Vec<(String, Vec<u8>)>) -> usize {
    let dir = tempfile::tempdir().unwrap();
    for (path, bytes) in &files {
        let full = dir.path().join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, bytes).unwrap();
    }
    let root = dir.path().to_path_buf();
    within(Duration::from_secs(20), move || {
        match metalform::source::read(&metalform::source::FleetSource::Directory(root)) {
            Ok(snapshot) => {
                let validation = metalform::manifest::load(&snapshot);
                // Every problem is a diagnostic with a position.
                for d in validation.errors.iter().chain(&validation.warnings) {
                    assert!(d.line >= 1 && d.column >= 1, "{d}");
                }
                validation.errors.len()
            }
            Err(err) => {
                assert!(!err.to_string().is_empty());
                1
            }
        }
    })
}

#[test]
fn the_manifest_reader_answers_any_input_with_diagnostics() {
    let files = sample_files();
    let mut runner = TestRunner::new(Config {
        cases: cases(48),
        failure_persistence: None,
        ..Config::default()
    });
    // Mutations of the real manifests: one file at a time, several edits.
    let strategy = (
        0..files.len(),
        proptest::collection::vec((any::<usize>(), any::<usize>(), any::<usize>()), 1..8),
    );
    runner
        .run(&strategy, |(which, edits)| {
            let mut set: Vec<(String, Vec<u8>)> = files
                .iter()
                .map(|(p, t)| (p.clone(), t.clone().into_bytes()))
                .collect();
            set[which].1 = mutate(&files[which].1, &edits).into_bytes();
            validate_files(set);
            Ok(())
        })
        .unwrap();
    // Arbitrary bytes, as YAML and as TOML.
    let strategy = (
        proptest::collection::vec(any::<u8>(), 0..2048),
        any::<bool>(),
    );
    runner
        .run(&strategy, |(bytes, toml)| {
            let name = if toml { "x.toml" } else { "x.yaml" };
            validate_files(vec![(name.into(), bytes)]);
            Ok(())
        })
        .unwrap();
    // Deep and wide structures built from the syntax characters.
    let strategy = proptest::collection::vec(0..SYNTAX.len(), 0..4096);
    runner
        .run(&strategy, |picks| {
            let text: String = picks.iter().map(|i| SYNTAX[*i]).collect();
            validate_files(vec![("x.yaml".into(), text.into_bytes())]);
            Ok(())
        })
        .unwrap();
}

#[test]
fn the_plan_file_reader_answers_any_input_with_a_typed_error() {
    let golden = repo_root().join("tests/golden/plan/decommission.json");
    let text = std::fs::read_to_string(&golden).unwrap();
    metalform::plan::from_json(&text, Path::new("plan.json")).expect("the golden plan reads");
    let mut runner = TestRunner::new(Config {
        cases: cases(256),
        failure_persistence: None,
        ..Config::default()
    });
    let strategy =
        proptest::collection::vec((any::<usize>(), any::<usize>(), any::<usize>()), 1..6);
    runner
        .run(&strategy, |edits| {
            let forged = mutate(&text, &edits);
            let result = within(Duration::from_secs(10), move || {
                metalform::plan::from_json(&forged, Path::new("plan.json"))
                    .map(|_| ())
                    .map_err(|e| (e.to_string(), e.hint()))
            });
            if let Err((message, hint)) = result {
                prop_assert!(message.starts_with("plan.json"), "{}", message);
                prop_assert!(!hint.is_empty());
            }
            Ok(())
        })
        .unwrap();
    // Nesting far past serde_json's recursion limit: an error, not a stack overflow.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(metalform::plan::from_json(&deep, Path::new("plan.json")).is_err());
}

/// A JSON value of any shape, strings included that look like what the API reads.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        "\\PC{0,40}".prop_map(Value::String),
        prop_oneof![
            Just("dc1"),
            Just("c07u43"),
            Just("retry"),
            Just("soft_reset"),
            Just("00000000-0000-0000-0000-000000000000"),
            Just("acknowledge"),
            Just("reactivate"),
            Just("a:b:c"),
        ]
        .prop_map(|s| Value::String(s.into())),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map(
                prop_oneof![
                    Just("reason".to_string()),
                    Just("action".to_string()),
                    Just("mode".to_string()),
                    Just("token".to_string()),
                    Just("hostname".to_string()),
                    Just("system_id".to_string()),
                    Just("maas_api_key".to_string()),
                    Just("status".to_string()),
                    "[a-z_]{1,12}",
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_json_body_the_daemon_accepts_answers_with_a_typed_error() {
    let d = DaemonBed::start(one_site(97, vec![0]), "").await;
    let daemon = metalform::daemon::start(d.config(), Default::default())
        .await
        .unwrap();
    let base = format!("http://{}", daemon.local_addr());
    let node = uuid::Uuid::nil().to_string();
    // Every route that reads a body, its path parameters filled in.
    let routes: Vec<(reqwest::Method, String, bool)> = metalform::daemon::server::served_routes()
        .into_iter()
        .filter(|(m, _, _)| matches!(m.as_str(), "POST" | "PUT" | "PATCH"))
        .map(|(method, path, access)| {
            let filled = path
                .replace("{id}", "dc1")
                .replace("{node_id}", &node)
                .replace("{task_id}", &node)
                .replace("{aid}", "1")
                .replace("{job_id}", &node);
            let admin = matches!(access, metalform::api::Access::Admin);
            (
                reqwest::Method::from_bytes(method.as_str().as_bytes()).unwrap(),
                filled,
                admin,
            )
        })
        .collect();
    assert!(routes.len() >= 8, "routes with bodies: {routes:?}");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases: cases(12),
        failure_persistence: None,
        ..Config::default()
    });
    let mut bodies = Vec::new();
    for _ in 0..runner.config().cases {
        bodies.push(json_value().new_tree(&mut runner).unwrap().current());
    }
    // Raw bytes that are not JSON at all, too.
    let garbage: Vec<Vec<u8>> = vec![
        b"{".to_vec(),
        b"\xff\xfe\x00".to_vec(),
        format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)).into_bytes(),
        b"{\"reason\": \"\\ud800\"}".to_vec(),
    ];
    for (method, path, admin) in &routes {
        let token = if *admin { ADMIN_TOKEN } else { AGENT_TOKEN };
        let mut sends: Vec<Vec<u8>> = bodies
            .iter()
            .map(|b| serde_json::to_vec(b).unwrap())
            .collect();
        sends.extend(garbage.iter().cloned());
        for body in sends {
            let response = client
                .request(method.clone(), format!("{base}{path}"))
                .bearer_auth(token)
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .await
                .unwrap_or_else(|e| panic!("{method} {path}: no answer: {e}"));
            let status = response.status().as_u16();
            let text = response.text().await.unwrap();
            assert!(
                status < 500 || status == 503,
                "{method} {path} with {}: {status} {text}",
                String::from_utf8_lossy(&body)
            );
            if status >= 400 {
                let answer: Value = serde_json::from_str(&text).unwrap_or_else(|_| {
                    panic!("{method} {path}: {status} is not a typed JSON error: {text}")
                });
                assert!(
                    answer["error"].is_string(),
                    "{method} {path}: {status} {text}"
                );
            }
        }
    }
    daemon.shutdown().await;
}
