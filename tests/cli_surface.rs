//! The CLI's rough edges (issue 19): `show PLANFILE`; `--fleet` that is not a fleet; the state
//! store outside the fleet's git tree (XDG state directory, the old `.metalform/` store still
//! read); read-only commands create no store; a missing `--secrets` file; METALFORM_STATE with
//! `sim` and the daemon; exit codes; help and metrics text without spec references; man pages
//! and completions.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `metalform ARGS` with its own XDG state directory and no METALFORM_* from the caller.
fn metalform_in(state_home: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_metalform"));
    command
        .args(args)
        .env("XDG_STATE_HOME", state_home)
        .env_remove("METALFORM_STATE")
        .env_remove("METALFORM_SECRETS")
        .env_remove("METALFORM_LOG");
    for (key, value) in env {
        command.env(key, value);
    }
    let out = command.output().expect("metalform runs");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file below `dir`, relative.
fn files_below(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                out.push(path.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

/// A copy of the sample fleet in a temporary directory.
fn sample_fleet(root: &Path) -> PathBuf {
    let fleet = root.join("fleet");
    for file in files_below(&repo().join("fleet")) {
        let to = fleet.join(&file);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(repo().join("fleet").join(&file), to).unwrap();
    }
    fleet
}

#[test]
fn show_prints_a_plan_file_as_plan_printed_it() {
    let dir = tempfile::tempdir().unwrap();
    let golden = repo().join("tests/golden/plan");
    let mut shown = 0;
    for entry in std::fs::read_dir(&golden).unwrap().flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let file = path.to_str().unwrap();
        for (format, ext) in [("text", "txt"), ("markdown", "md"), ("json", "json")] {
            let run = metalform_in(dir.path(), &["show", file, "--format", format], &[]);
            assert_eq!(run.code, 0, "{file}: {}", run.stderr);
            let want = std::fs::read_to_string(path.with_extension(ext)).unwrap();
            assert_eq!(run.stdout, want, "show {file} --format {format}");
        }
        shown += 1;
    }
    assert!(shown > 10, "{shown} golden plans");

    // A missing file, a plan edited after it was written, a file that is not a plan.
    let run = metalform_in(dir.path(), &["show", "/nonexistent/plan.json"], &[]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr
            .ends_with("\nhint: check the path of the plan file\n"),
        "{}",
        run.stderr
    );
    let edited = dir.path().join("edited.json");
    let text = std::fs::read_to_string(golden.join("adopt.json")).unwrap();
    std::fs::write(
        &edited,
        text.replacen("\"reason\": \"", "\"reason\": \"X", 1),
    )
    .unwrap();
    let run = metalform_in(dir.path(), &["show", edited.to_str().unwrap()], &[]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("does not match its id")
            && run
                .stderr
                .contains("the file was changed after `metalform plan` wrote it"),
        "{}",
        run.stderr
    );
    let not_plan = dir.path().join("not-a-plan.json");
    std::fs::write(&not_plan, "{\"hello\": 1}").unwrap();
    let run = metalform_in(dir.path(), &["show", not_plan.to_str().unwrap()], &[]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr
            .contains("hint: plan again with `metalform plan --out PLANFILE`; plan files are not edited by hand"),
        "{}",
        run.stderr
    );
    // No PLANFILE: a usage error.
    let run = metalform_in(dir.path(), &["show"], &[]);
    assert_eq!(run.code, 2, "{}", run.stderr);
}

#[test]
fn a_directory_that_is_not_a_fleet_is_refused_with_where_the_fleets_are() {
    let state = tempfile::tempdir().unwrap();
    let root = repo();
    let root = root.to_str().unwrap();
    for args in [
        vec!["validate", "--fleet", root],
        vec!["plan", "--fleet", root, "--observed", "/nonexistent.json"],
    ] {
        let run = metalform_in(state.path(), &args, &[]);
        assert_eq!(run.code, 1, "{args:?}: {}", run.stderr);
        assert!(run.stdout.is_empty(), "{args:?}: no report\n{}", run.stdout);
        let lines: Vec<&str> = run.stderr.lines().collect();
        assert_eq!(lines.len(), 3, "{}", run.stderr);
        assert!(
            lines[0].starts_with(&format!(
                "error: `{root}` is not a fleet: it has no sites/, profiles/ or nodes/ directory ("
            )),
            "{}",
            run.stderr
        );
        assert_eq!(
            lines[1],
            format!(
                "hint: fleets below it: {root}/examples/quickstart, {root}/fleet, {root}/tests/golden/plan/fleet"
            )
        );
        assert_eq!(lines[2], format!("hint: pass --fleet {root}/fleet"));
    }
    let empty = tempfile::tempdir().unwrap();
    let run = metalform_in(
        state.path(),
        &["validate", "--fleet", empty.path().to_str().unwrap()],
        &[],
    );
    assert_eq!(run.code, 1);
    assert_eq!(
        run.stderr,
        format!(
            "error: `{}` holds no manifest (.yaml, .yml or .toml): it is not a fleet\n\
             hint: pass --fleet DIR pointing at a fleet repository: sites/, profiles/ and nodes/ with YAML or TOML manifests\n\
             hint: to try metalform without one, run `metalform demo`\n",
            empty.path().display()
        )
    );
    // A fleet still validates, flat or in directories.
    for fleet in ["fleet", "examples/quickstart"] {
        let run = metalform_in(
            state.path(),
            &["validate", "--fleet", repo().join(fleet).to_str().unwrap()],
            &[],
        );
        assert_eq!(run.code, 0, "{fleet}: {}", run.stderr);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_store_lives_outside_the_fleet_and_reads_never_create_one() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = sample_fleet(dir.path());
    let state = dir.path().join("state-home");
    let fleet_arg = fleet.to_str().unwrap();

    // Read-only commands: an empty inventory, a note, and no store anywhere.
    for args in [
        vec!["status", "--fleet", fleet_arg],
        vec!["status", "--fleet", fleet_arg, "--format", "json"],
        vec!["onboardings", "list", "--fleet", fleet_arg],
        vec!["decommissions", "list", "--fleet", fleet_arg],
        vec!["drift", "list", "--fleet", fleet_arg],
        vec!["drift", "status", "--fleet", fleet_arg],
    ] {
        let run = metalform_in(&state, &args, &[]);
        assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.starts_with("note: no state store at ")
                && run
                    .stderr
                    .contains("yet (nothing was applied with it): reading an empty one"),
            "{args:?}: {}",
            run.stderr
        );
        assert_eq!(files_below(&state), Vec::<String>::new(), "{args:?}");
    }
    let before: Vec<String> = files_below(&fleet);
    // A command that writes creates the store under the XDG state directory, never in the fleet.
    let run = metalform_in(
        &state,
        &[
            "decommissions",
            "cancel",
            "00000000-0000-4000-8000-000000000000",
            "--fleet",
            fleet_arg,
            "--reason",
            "test",
        ],
        &[],
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    let created = files_below(&state);
    assert!(
        created
            .iter()
            .any(|f| f.starts_with("metalform/fleets/fleet-") && f.ends_with("/state.db")),
        "{created:?}"
    );
    assert_eq!(
        files_below(&fleet),
        before,
        "nothing written into the fleet"
    );
    // Now it exists: no note any more.
    let run = metalform_in(&state, &["status", "--fleet", fleet_arg], &[]);
    assert_eq!(run.code, 0);
    assert_eq!(run.stderr, "", "{}", run.stderr);

    // A store an older metalform made inside the fleet is still used, with a note.
    let old = dir.path().join("old-fleet");
    std::fs::rename(&fleet, &old).unwrap();
    let legacy = old.join(".metalform/state.db");
    let store = metalform::store::Store::open(
        &format!("sqlite://{}", legacy.display()),
        Arc::new(metalform::clock::SystemClock),
    )
    .await
    .unwrap();
    store
        .create_node(
            &metalform::store::NewNode {
                site: "dc1".into(),
                hostname: "c07u43".into(),
                provider: metalform::lifecycle::Provider::Maas,
                status: metalform::lifecycle::NodeState::Enrolling,
                sku: None,
                gpus: None,
                ipmi_ip: None,
            },
            &metalform::store::Actor::admin("test"),
        )
        .await
        .unwrap();
    store.close().await;
    let run = metalform_in(&state, &["status", "--fleet", old.to_str().unwrap()], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("c07u43"), "{}", run.stdout);
    assert!(
        run.stderr.starts_with(&format!(
            "note: using the state store inside the fleet directory ({}), where older metalform versions made it\n\
             note: new stores live outside the git tree; to move it: mkdir -p ",
            legacy.display()
        )),
        "{}",
        run.stderr
    );
}

#[test]
fn a_missing_secrets_file_is_an_error() {
    let state = tempfile::tempdir().unwrap();
    let fleet = repo().join("fleet");
    let run = metalform_in(
        state.path(),
        &[
            "plan",
            "--fleet",
            fleet.to_str().unwrap(),
            "--secrets",
            "file:///nonexistent/secrets.json",
        ],
        &[],
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(
        run.stderr,
        "error: the secrets file /nonexistent/secrets.json does not exist\n\
         hint: check the path after file:// (docs/secrets.md shows the file's shape), or pass --secrets vault://HOST:PORT\n"
    );
    assert!(files_below(state.path()).is_empty(), "no store was made");
}

#[test]
fn metalform_state_neither_breaks_sim_nor_overrides_a_daemon_config() {
    let state = tempfile::tempdir().unwrap();
    let env = [("METALFORM_STATE", "sqlite:///tmp/elsewhere.db")];
    // The simulator's machine state is its own flag: the variable does not reach it.
    let run = metalform_in(state.path(), &["sim", "--machine-state", "asleep"], &env);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr
            .starts_with("error: unknown --machine-state `asleep`"),
        "{}",
        run.stderr
    );
    let config = repo().join("examples/daemon.toml");
    let config = config.to_str().unwrap();
    let run = metalform_in(
        state.path(),
        &["daemon", "--config", config, "--check"],
        &env,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stderr,
        format!(
            "warning: METALFORM_STATE is ignored: the daemon uses [state] url of {config} (postgres://***@db.example:5432/metalform)\n"
        )
    );
    let run = metalform_in(
        state.path(),
        &[
            "daemon",
            "--config",
            config,
            "--check",
            "--state",
            "sqlite:///tmp/x.db",
        ],
        &[],
    );
    assert_eq!(
        run.stderr,
        format!("note: --state sqlite:///tmp/x.db overrides [state] url of {config}\n")
    );
}

#[test]
fn usage_errors_exit_2_and_1_under_detailed_exitcode() {
    let state = tempfile::tempdir().unwrap();
    let run = metalform_in(state.path(), &["plan", "--bogus"], &[]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .starts_with("error: unexpected argument '--bogus' found")
    );
    let run = metalform_in(
        state.path(),
        &["plan", "--detailed-exitcode", "--bogus"],
        &[],
    );
    assert_eq!(run.code, 1, "2 would read as 'changes'");
    let run = metalform_in(state.path(), &["nosuch"], &[]);
    assert_eq!(run.code, 2);
    let run = metalform_in(state.path(), &["--help"], &[]);
    assert_eq!(run.code, 0);
}

/// The async runtime's worker threads come from `TOKIO_WORKER_THREADS` when it is set (docs/ha.md:
/// replicas sharing a host); a value the runtime cannot use is refused before any work, not a
/// panic.
#[test]
fn a_worker_thread_count_that_is_not_a_number_is_refused() {
    let state = tempfile::tempdir().unwrap();
    for bad in ["0", "two", "-1", ""] {
        let run = metalform_in(
            state.path(),
            &["validate", "--fleet", "/nonexistent"],
            &[("TOKIO_WORKER_THREADS", bad)],
        );
        assert_eq!(
            (run.code, run.stderr.as_str()),
            (
                2,
                format!(
                    "error: TOKIO_WORKER_THREADS is `{bad}`: it must be a whole number of at least 1 \
                     (the worker threads of metalform's async runtime)\n\
                     hint: unset TOKIO_WORKER_THREADS to run one worker thread per core\n"
                )
                .as_str()
            )
        );
    }
    let run = metalform_in(
        state.path(),
        &["validate", "--fleet", "/nonexistent"],
        &[("TOKIO_WORKER_THREADS", "1")],
    );
    assert_eq!(run.code, 1, "one thread runs: {}", run.stderr);
    assert!(
        !run.stderr.contains("TOKIO_WORKER_THREADS"),
        "{}",
        run.stderr
    );
}

#[test]
fn help_and_metrics_speak_the_operators_language() {
    use clap::CommandFactory;
    let mut command = metalform::cli::Cli::command();
    command.build();
    let mut pending = vec![command];
    let mut checked = 0;
    while let Some(mut command) = pending.pop() {
        let help = command.render_long_help().to_string();
        for needle in ["§", "seed 0", "DESIGN.md"] {
            assert!(
                !help.contains(needle),
                "`{}` help says {needle}:\n{help}",
                command.get_name()
            );
        }
        checked += 1;
        pending.extend(command.get_subcommands().cloned());
    }
    assert!(checked > 30, "{checked} commands");
    let metrics = metalform::daemon::Metrics::new(metalform::provider::maas::MaasMetrics::new());
    let text = metrics.encode();
    assert!(text.contains("# HELP"), "{text}");
    for line in text.lines().filter(|l| l.starts_with("# HELP")) {
        assert!(!line.contains('§') && !line.contains("seed 0"), "{line}");
    }
}

#[test]
fn man_pages_and_completions_come_from_the_command_definitions() {
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().join("man1");
    let run = metalform_in(state.path(), &["man", "--dir", dir.to_str().unwrap()], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let pages = files_below(&dir);
    for page in [
        "metalform.1",
        "metalform-plan.1",
        "metalform-show.1",
        "metalform-onboardings-retry.1",
    ] {
        assert!(pages.contains(&page.to_owned()), "{page} in {pages:?}");
    }
    let plan = std::fs::read_to_string(dir.join("metalform-plan.1")).unwrap();
    assert!(plan.contains(".TH metalform-plan 1"), "{plan}");
    assert!(plan.contains("detailed\\-exitcode"), "{plan}");
    for shell in ["bash", "zsh", "fish"] {
        let run = metalform_in(state.path(), &["completions", shell], &[]);
        assert_eq!(run.code, 0);
        assert!(
            run.stdout.contains("show") && run.stdout.contains("fleet"),
            "{shell}"
        );
    }
}
