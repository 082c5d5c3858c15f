//! `metalform observe` and `metalform plan` transcripts (issue 5 "Show"): observe a simulator
//! and plan from the exported snapshot with no MAAS or store access, `--detailed-exitcode`
//! 0/2/1, `--out PLANFILE`, every format, and the errors (each with its hint).

use crate::plan_support;

use std::path::Path;
use std::process::Command;

use metalform::lifecycle::{MaasStatus, NodeState};
use metalform::observe::Snapshot;
use metalform::plan;
use metalform::sim::{self, FleetOptions, InitialState, SimConfig};
use plan_support::*;

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn metalform(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_metalform"))
        .args(args)
        .env_remove("METALFORM_STATE")
        .env_remove("METALFORM_SECRETS")
        .env("NO_COLOR", "1")
        .output()
        .expect("run metalform");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// Run the binary off the async runtime, so an in-process simulator keeps serving.
async fn metalform_async(args: Vec<String>) -> Run {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        metalform(&args)
    })
    .await
    .unwrap()
}

fn fixture_dir() -> String {
    golden_dir().join("fleet").display().to_string()
}

/// A state URL nothing listens on: a command that touched the store would fail.
const NO_STORE: &str = "postgres://nobody@127.0.0.1:1/none";

fn write_snapshot(dir: &Path, snapshot: &Snapshot) -> String {
    let path = dir.join("observed.json");
    std::fs::write(&path, snapshot.to_json()).unwrap();
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_then_plan_from_the_export_without_maas() {
    let mut config = SimConfig::generated(
        9,
        &FleetOptions {
            machines: 3,
            initial: InitialState::Ready,
            no_boss_every: 0,
            unknown: 0,
        },
    );
    config.machines[2].initial = InitialState::Deployed;
    let nodes = nodes_of(&config);
    let maas = sim::start(config).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (fleet, secrets) = write_world(
        dir.path(),
        &[
            SiteSpec {
                name: "lab",
                url: maas.maas_url.clone(),
                key: Some(maas.api_key().expose().to_owned()),
                nodes: nodes.clone(),
            },
            SiteSpec {
                name: "far",
                url: maas.maas_url.clone(),
                key: Some("wrongconsumer:wrongtoken:wrongsecret".into()),
                nodes: vec![("far01".into(), "10.9.9.9".into())],
            },
        ],
    );
    let (fleet, secrets) = (
        fleet.display().to_string(),
        format!("file://{}", secrets.display()),
    );
    let state = format!("sqlite://{}/state.db", dir.path().display());

    let run = metalform_async(
        [
            "observe",
            "--fleet",
            &fleet,
            "--state",
            &state,
            "--secrets",
            &secrets,
            "--site",
            "lab",
        ]
        .map(String::from)
        .to_vec(),
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    // observe only reads: the store that does not exist yet is not created.
    assert_eq!(
        run.stderr,
        format!(
            "note: no state store at {}/state.db yet (nothing was applied with it): reading an empty one\n",
            dir.path().display()
        )
    );
    assert!(!dir.path().join("state.db").exists());
    let snapshot = Snapshot::from_json(&run.stdout).unwrap();
    assert_eq!(snapshot.sites.len(), 1, "--site lab observes lab only");
    let lists = maas
        .ops()
        .iter()
        .filter(|op| op.action.as_deref() == Some("machines.read"))
        .count();
    assert_eq!(lists, 1, "one machines list for the one site");
    let observed = write_snapshot(dir.path(), &snapshot);

    // An unreadable site: observe succeeds, records it, and warns with a hint.
    let run = metalform_async(
        [
            "observe",
            "--fleet",
            &fleet,
            "--state",
            &state,
            "--secrets",
            &secrets,
            "--site",
            "far",
        ]
        .map(String::from)
        .to_vec(),
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut lines = run.stderr.lines();
    assert!(
        lines
            .next()
            .unwrap()
            .starts_with("note: no state store at "),
        "{}",
        run.stderr
    );
    assert!(
        lines
            .next()
            .unwrap()
            .starts_with("warning: site far could not be read: cannot list the machines from MAAS at http://127.0.0.1:")
            && run.stderr.contains("unauthorized (401)"),
        "{}",
        run.stderr
    );
    assert!(
        lines.next().unwrap().starts_with("hint: "),
        "{}",
        run.stderr
    );
    // MAAS goes away; the export still plans, and the store is not touched either.
    maas.shutdown();
    let run = metalform_async(
        [
            "plan",
            "--fleet",
            &fleet,
            "--observed",
            &observed,
            "--state",
            NO_STORE,
            "--detailed-exitcode",
        ]
        .map(String::from)
        .to_vec(),
    )
    .await;
    assert_eq!(run.code, 2, "changes: {}", run.stderr);
    assert!(
        run.stdout
            .contains(&format!("    + lab/{}  onboard", nodes[0].0)),
        "{}",
        run.stdout
    );
    // A Deployed machine metalform has no record of: adopted as it runs (issue 15).
    assert!(
        run.stdout
            .contains(&format!("   <= lab/{}  adopt", nodes[2].0)),
        "a Deployed machine metalform did not deploy: {}",
        run.stdout
    );
    assert!(
        run.stdout
            .ends_with("Plan: 2 to onboard, 1 to adopt; 0 unchanged.\n"),
        "{}",
        run.stdout
    );
    assert!(
        !run.stdout.contains("far"),
        "only the observed site is planned"
    );
}

#[test]
fn detailed_exitcode_is_0_without_changes_2_with_and_1_on_error() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = fixture_dir();
    // A converged dc1: every active node active and Deployed.
    let converged = World::new()
        .machines(
            "dc1",
            vec![
                machine("aaa001", "n01", MaasStatus::Deployed, "10.176.16.11"),
                machine("aaa002", "n02", MaasStatus::Deployed, "10.176.16.12"),
                machine("aaa003", "n03", MaasStatus::Deployed, "10.176.16.13"),
            ],
        )
        .node(inventory("dc1", "n01", NodeState::Active))
        .node(inventory("dc1", "n02", NodeState::Active))
        .node(inventory("dc1", "n03", NodeState::Active))
        .done();
    let observed = write_snapshot(dir.path(), &converged);
    let args = |extra: &[&str]| {
        let mut args = vec![
            "plan",
            "--fleet",
            fleet.as_str(),
            "--observed",
            observed.as_str(),
            "--state",
            NO_STORE,
        ];
        args.extend_from_slice(extra);
        args.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let run_args = |extra: &[&str]| {
        let a = args(extra);
        metalform(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };

    let run = run_args(&["--site", "dc1", "--detailed-exitcode"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout.ends_with("Plan: no changes; 4 unchanged.\n"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("        3 unchanged nodes not shown\n"));
    let run = run_args(&["--site", "dc1", "--show-unchanged"]);
    assert!(
        run.stdout
            .contains("    = dc1/n01  noop     active; Deployed in MAAS (aaa001)\n"),
        "{}",
        run.stdout
    );

    // dc2 has nothing in MAAS: changes. Exit 2 only with --detailed-exitcode.
    let run = run_args(&["--detailed-exitcode"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    let run = run_args(&[]);
    assert_eq!(run.code, 0, "{}", run.stderr);

    // Errors are 1, whatever the flag.
    let run = run_args(&["--detailed-exitcode", "--site", "dc9"]);
    assert_eq!(run.code, 1);
    assert_eq!(
        run.stderr,
        "error: the snapshot ".to_owned()
            + &observed
            + " has no observation of site `dc9` (it observed: dc1, dc2)\nhint: observe it: `metalform observe --site dc9 > FILE`\n"
    );
}

#[test]
fn out_writes_the_plan_file_and_every_format_prints() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = fixture_dir();
    let observed = write_snapshot(dir.path(), &World::new().done());
    let out = dir.path().join("plan.json");
    let out_s = out.display().to_string();
    let state = format!("sqlite://{}", dir.path().join("state.db").display());
    let run = metalform(&[
        "plan",
        "--fleet",
        &fleet,
        "--observed",
        &observed,
        // The plan file is signed with the store's key: --out opens the store, even with
        // --observed.
        "--state",
        &state,
        "--out",
        &out_s,
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stderr,
        format!("Saved the plan to {out_s}; apply it with `metalform apply {out_s}`.\n")
    );
    let saved = plan::load(&out).unwrap();
    assert!(run.stdout.starts_with(&format!(
        "Plan {} of working tree sha256:",
        plan::short_id(&saved.id)
    )));
    assert_eq!(saved.summary.onboard, 5);

    // --format json prints the plan file's document: the same plan.
    let run = metalform(&[
        "plan",
        "--fleet",
        &fleet,
        "--observed",
        &observed,
        "--state",
        NO_STORE,
        "--format",
        "json",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // The same plan; the file is also signed (stdout is not: it is shown, not applied).
    assert!(
        saved
            .signature
            .as_deref()
            .is_some_and(|s| s.starts_with(plan::SIGNATURE_PREFIX))
    );
    let unsigned = plan::Plan {
        signature: None,
        ..saved.clone()
    };
    assert_eq!(
        plan::from_json(&run.stdout, "stdout".as_ref()).unwrap(),
        unsigned
    );
    let mut file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    file.as_object_mut().unwrap().remove("signature");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&run.stdout).unwrap(),
        file
    );

    let run = metalform(&[
        "plan",
        "--fleet",
        &fleet,
        "--observed",
        &observed,
        "--state",
        NO_STORE,
        "--format",
        "markdown",
        "--max-bytes",
        "900",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.starts_with("### metalform plan\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("**Left out to stay under 900 bytes:**"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .ends_with("**Plan: 5 to onboard; 1 unchanged.**\n"),
        "{}",
        run.stdout
    );
}

#[test]
fn bad_input_is_refused_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = fixture_dir();

    // No secret store and no snapshot: nothing to observe with.
    let run = metalform(&["plan", "--fleet", &fleet, "--state", NO_STORE]);
    assert_eq!(run.code, 1);
    assert_eq!(
        run.stderr,
        "error: no secret store to read the sites' MAAS API keys from\n\
         hint: pass --secrets vault://HOST:PORT (or file://PATH), or set METALFORM_SECRETS; to plan without MAAS access, pass --observed FILE from `metalform observe`\n"
    );

    // An unknown site.
    let run = metalform(&[
        "observe",
        "--fleet",
        &fleet,
        "--site",
        "dc9",
        "--secrets",
        "file:///nonexistent",
    ]);
    assert_eq!(run.code, 1);
    assert_eq!(
        run.stderr,
        "error: site `dc9` is not in the fleet (sites: dc1, dc2)\nhint: pass --site with one of the fleet's sites\n"
    );

    // A snapshot that is not one.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"format\": 1,\n \"sites\": 3}\n").unwrap();
    let bad_s = bad.display().to_string();
    let run = metalform(&[
        "plan",
        "--fleet",
        &fleet,
        "--observed",
        &bad_s,
        "--state",
        NO_STORE,
    ]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.starts_with(&format!(
            "error: {bad_s}: not a metalform snapshot: line 2, column"
        )),
        "{}",
        run.stderr
    );
    assert!(run.stderr.ends_with(
        "hint: write it with `metalform observe [--site S] > FILE` (same metalform version)\n"
    ));
    let run = metalform(&[
        "plan",
        "--fleet",
        &fleet,
        "--observed",
        "/nonexistent/snap.json",
        "--state",
        NO_STORE,
    ]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr
            .starts_with("error: cannot read the snapshot /nonexistent/snap.json: "),
        "{}",
        run.stderr
    );

    // An invalid fleet: its diagnostics, then the error.
    let broken = dir.path().join("broken");
    std::fs::create_dir_all(broken.join("sites")).unwrap();
    std::fs::write(
        broken.join("sites/x.yaml"),
        "apiVersion: metalform/v1\nkind: Site\nmetadata: {name: x}\nspec: {}\n",
    )
    .unwrap();
    let broken_s = broken.display().to_string();
    let observed = write_snapshot(dir.path(), &World::new().done());
    let run = metalform(&["plan", "--fleet", &broken_s, "--observed", &observed]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains(&format!("{broken_s}/sites/x.yaml:4:")),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.ends_with(&format!(
            "hint: run `metalform validate --fleet {broken_s}` and fix them\n"
        )),
        "{}",
        run.stderr
    );

    // An --out path that cannot be written.
    let run = metalform(&[
        "plan",
        "--fleet",
        &fleet,
        "--observed",
        &observed,
        "--state",
        &format!("sqlite://{}", dir.path().join("state.db").display()),
        "--out",
        "/nonexistent/dir/plan.json",
    ]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr
            .starts_with("error: cannot write the plan file /nonexistent/dir/plan.json: "),
        "{}",
        run.stderr
    );
}

/// `plan` and `observe` read an existing store while the manifests load; what is wrong is
/// still said in the order it was before: the fleet's errors, an unknown site, then the
/// store's. Here the store is one a newer metalform wrote, so opening it fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_read_while_the_fleet_loads_speaks_after_the_fleet() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("state.db").display());
    crate::store_suite::sqlite_from_a_newer_metalform(&url).await;
    let secrets = dir.path().join("secrets.json");
    std::fs::write(&secrets, "{}").unwrap();
    let secrets = format!("file://{}", secrets.display());
    let fleet = fixture_dir();
    let broken = dir.path().join("broken");
    std::fs::create_dir_all(broken.join("sites")).unwrap();
    std::fs::write(
        broken.join("sites/dc1.yaml"),
        "apiVersion: metalform/v1\nkind: Site\nmetadata: {name: dc1}\nspec: [\n",
    )
    .unwrap();
    let broken = broken.display().to_string();

    for command in ["plan", "observe"] {
        let run = |args: &[&str]| {
            let mut all = vec![command, "--state", &url, "--secrets", &secrets];
            all.extend_from_slice(args);
            metalform(&all)
        };
        let store_error = format!(
            "error: the state store has schema version 99, newer than this metalform ({})\n\
             hint: upgrade metalform: a newer version wrote this store\n",
            metalform::store::SCHEMA_VERSION
        );
        let valid = run(&["--fleet", &fleet]);
        assert_eq!(
            (valid.code, valid.stderr.as_str()),
            (1, store_error.as_str())
        );
        assert_eq!(valid.stdout, "");

        let unknown = run(&["--fleet", &fleet, "--site", "dc9"]);
        assert_eq!(
            (unknown.code, unknown.stderr.as_str()),
            (
                1,
                "error: site `dc9` is not in the fleet (sites: dc1, dc2)\nhint: pass --site with one of the fleet's sites\n"
            )
        );

        let invalid = run(&["--fleet", &broken]);
        assert_eq!(invalid.code, 1, "{}", invalid.stderr);
        assert!(
            invalid.stderr.ends_with(&format!(
                "error: the fleet has 1 error(s); nothing was planned, observed or applied\n\
                 hint: run `metalform validate --fleet {broken}` and fix them\n"
            )),
            "{}",
            invalid.stderr
        );
        assert!(
            !invalid.stderr.contains("schema version"),
            "{}",
            invalid.stderr
        );
    }
}
