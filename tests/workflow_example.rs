//! The pull-request plan workflow (issues 6, 19): .github/workflows/fleet-plan.yml runs
//! scripts/ci/fleet-plan.sh and scripts/ci/post-comment.sh from the release that
//! .github/workflows/release.yml packages — no compile per pull request, one run per PR at a
//! time. The scripts run here for real (real git, the real metalform, jq), `gh` replaced by a
//! recorder: invalid manifests still make the comment, the snapshot's age is shown, a report
//! over the limit becomes a summary plus the full artifact, and the one comment is updated in
//! place.

use crate::plan_support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::CommandFactory;
use saphyr::{LoadableYamlNode, Yaml};

const WORKFLOW: &str = include_str!("../.github/workflows/fleet-plan.yml");
const RELEASE: &str = include_str!("../.github/workflows/release.yml");
const FLEET_PLAN: &str = include_str!("../scripts/ci/fleet-plan.sh");
const MARKER: &str = "<!-- metalform-fleet-plan -->";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn job_steps<'a>(doc: &'a Yaml<'a>, job: &str) -> &'a [Yaml<'a>] {
    doc.as_mapping_get("jobs")
        .and_then(|j| j.as_mapping_get(job))
        .and_then(|p| p.as_mapping_get("steps"))
        .and_then(|s| s.as_sequence())
        .expect("jobs.<job>.steps")
}

fn run_scripts(steps: &[Yaml]) -> String {
    steps
        .iter()
        .filter_map(|s| s.as_mapping_get("run").and_then(|r| r.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_workflow_installs_a_release_and_runs_one_report_per_pull_request() {
    let docs = Yaml::load_from_str(WORKFLOW).expect("the workflow parses");
    let doc = &docs[0];
    assert!(
        doc.as_mapping_get("on")
            .and_then(|o| o.as_mapping_get("pull_request"))
            .is_some()
    );
    let concurrency = doc.as_mapping_get("concurrency").expect("concurrency");
    assert_eq!(
        concurrency.as_mapping_get("group").and_then(|g| g.as_str()),
        Some("fleet-plan-${{ github.event.pull_request.number }}")
    );
    assert_eq!(
        concurrency
            .as_mapping_get("cancel-in-progress")
            .and_then(|c| c.as_bool()),
        Some(true)
    );
    let steps = job_steps(doc, "plan");
    let uses: Vec<&str> = steps
        .iter()
        .filter_map(|s| s.as_mapping_get("uses").and_then(|u| u.as_str()))
        .collect();
    for action in [
        "actions/checkout@v4",
        "actions/cache@v4",
        "actions/upload-artifact@v4",
    ] {
        assert!(uses.contains(&action), "{action} in {uses:?}");
    }
    let scripts = run_scripts(steps);
    // The binary comes from the release (checked), never from a compile.
    assert!(!scripts.contains("cargo"), "{scripts}");
    assert!(scripts.contains("gh release download"));
    assert!(scripts.contains("sha256sum --check"));
    assert!(scripts.contains("\"$METALFORM_CI/fleet-plan.sh\""));
    assert!(scripts.contains("\"$METALFORM_CI/post-comment.sh\""));
    // The release packages exactly those scripts and publishes what the workflow downloads.
    let package = std::fs::read_to_string(repo().join("scripts/ci/package.sh")).unwrap();
    assert!(package.contains("\"$here/fleet-plan.sh\" \"$here/post-comment.sh\""));
    assert!(package.contains("metalform-x86_64-linux.tar.gz"));
    assert!(WORKFLOW.contains("--pattern 'metalform-x86_64-linux.tar.gz' --pattern SHA256SUMS"));
    let release = Yaml::load_from_str(RELEASE).expect("the release workflow parses");
    let release_scripts = run_scripts(job_steps(&release[0], "build"));
    assert!(release_scripts.contains("cargo build --release --locked --bin metalform"));
    assert!(release_scripts.contains("scripts/ci/package.sh target/release/metalform dist"));
}

#[test]
fn the_script_runs_real_commands_with_real_flags() {
    // Every `"$METALFORM" SUBCOMMAND --flag …` of the script (continuation lines joined).
    let joined = FLEET_PLAN.replace("\\\n", " ");
    let cli = metalform::cli::Cli::command();
    let mut subcommands = BTreeSet::new();
    for line in joined.lines() {
        let Some(rest) = line.trim().strip_prefix("if ! ").or(Some(line.trim())) else {
            continue;
        };
        let Some(call) = rest.strip_prefix("\"$METALFORM\" ") else {
            continue;
        };
        let words: Vec<&str> = call
            .split_whitespace()
            .take_while(|w| !w.starts_with('>') && !w.starts_with("2>") && *w != ";")
            .collect();
        let sub = cli
            .find_subcommand(words[0])
            .unwrap_or_else(|| panic!("no subcommand `{}`", words[0]));
        subcommands.insert(words[0].to_owned());
        let longs: BTreeSet<String> = sub
            .get_arguments()
            .chain(cli.get_arguments())
            .filter_map(|a| a.get_long().map(str::to_owned))
            .collect();
        for flag in words.iter().filter(|w| w.starts_with("--")) {
            assert!(
                longs.contains(flag.trim_start_matches("--")),
                "`metalform {}` has no {flag}",
                words[0]
            );
        }
    }
    assert_eq!(
        subcommands,
        BTreeSet::from(["validate".into(), "diff".into(), "plan".into()])
    );
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=Ops",
            "-c",
            "user.email=ops@example.invalid",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let path = entry.path();
        let target = to.join(entry.file_name());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

/// A fleet repository: the golden fleet on `main` (also as `origin/main`), then a PR commit
/// that changes one node; `snapshot` committed as observed/snapshot.json when given.
fn fleet_repo(dir: &Path, snapshot: bool) -> PathBuf {
    fleet_repo_with(dir, snapshot, 0)
}

/// [`fleet_repo`] whose PR also adds `more` nodes to dc1's rack.
fn fleet_repo_with(dir: &Path, snapshot: bool, more: usize) -> PathBuf {
    let fleet = dir.join("fleet-repo");
    copy_dir(&repo().join("tests/golden/plan/fleet"), &fleet);
    git(&fleet, &["init", "-q", "-b", "main"]);
    git(&fleet, &["add", "-A"]);
    git(&fleet, &["commit", "-q", "-m", "fleet"]);
    git(&fleet, &["update-ref", "refs/remotes/origin/main", "HEAD"]);
    git(&fleet, &["checkout", "-q", "-b", "pr"]);
    let nodes = fleet.join("nodes/dc1.yaml");
    let text = std::fs::read_to_string(&nodes).unwrap();
    let mut text = text.replacen("gpus: 8", "gpus: 4", 1);
    let added: String = (0..more)
        .map(|i| {
            format!(
                "    - {{hostname: x{i:03}, bmc: {{ipmiIp: 10.176.17.{}}}}}\n",
                i + 1
            )
        })
        .collect();
    text = text.replacen("\n---\n", &format!("\n{added}---\n"), 1);
    std::fs::write(&nodes, text).unwrap();
    if snapshot {
        std::fs::create_dir_all(fleet.join("observed")).unwrap();
        std::fs::write(
            fleet.join("observed/snapshot.json"),
            plan_support::World::new().done().to_json(),
        )
        .unwrap();
    }
    git(&fleet, &["add", "-A"]);
    git(&fleet, &["commit", "-q", "-m", "pr"]);
    fleet
}

struct Report {
    code: i32,
    stderr: String,
    comment: String,
    full: String,
    outputs: String,
}

/// The snapshot's `taken_at` (plan_support's `at(0)`) as Unix seconds.
const TAKEN_AT: i64 = 1_772_366_400;

fn report(fleet: &Path, env: &[(&str, String)]) -> Report {
    let out_dir = fleet.join("metalform-report");
    let outputs = fleet.join("github-output");
    let _ = std::fs::remove_dir_all(&out_dir);
    let _ = std::fs::remove_file(&outputs);
    let mut command = Command::new("bash");
    command
        .arg(repo().join("scripts/ci/fleet-plan.sh"))
        .current_dir(fleet)
        .env("BASE_REF", "main")
        .env("METALFORM", env!("CARGO_BIN_EXE_metalform"))
        .env("GITHUB_OUTPUT", &outputs)
        .env("RUN_URL", "https://ci.example.invalid/runs/7")
        .env("XDG_STATE_HOME", fleet.join(".state"))
        .env_remove("METALFORM_STATE");
    for (key, value) in env {
        command.env(key, value);
    }
    let out = command.output().unwrap();
    let read = |name: &str| std::fs::read_to_string(out_dir.join(name)).unwrap_or_default();
    Report {
        code: out.status.code().unwrap_or(-1),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        comment: read("comment.md"),
        full: read("full.md"),
        outputs: std::fs::read_to_string(&outputs).unwrap_or_default(),
    }
}

#[test]
fn a_valid_pull_request_gets_the_diff_and_the_plan_with_the_snapshots_age() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = fleet_repo(dir.path(), true);
    let now = (TAKEN_AT + 3 * 3600 + 12 * 60).to_string();
    let r = report(&fleet, &[("NOW", now)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.comment
            .starts_with(&format!("{MARKER}\n### metalform\n\n✅ manifests valid — ")),
        "{}",
        r.comment
    );
    assert!(r.comment.contains("### metalform plan"), "{}", r.comment);
    assert!(
        r.comment.contains("gpus"),
        "the diff shows the change: {}",
        r.comment
    );
    assert!(
        r.comment
            .contains("**MAAS snapshot** taken 2026-03-01T12:00:00Z, 3 h 12 min before this run."),
        "{}",
        r.comment
    );
    assert_eq!(r.comment, r.full, "it fits: the comment is the full report");
    assert_eq!(r.outputs, "valid=true\ntruncated=false\n");

    // Two days later the same snapshot is flagged.
    let r = report(&fleet, &[("NOW", (TAKEN_AT + 2 * 86_400 + 60).to_string())]);
    assert!(
        r.comment.contains(
            "> ⚠️ **MAAS snapshot taken 2026-03-01T12:00:00Z, 2 d 0 h before this run** — older than 24 h"
        ),
        "{}",
        r.comment
    );

    // Without a snapshot: the diff, and what to commit to see a plan.
    std::fs::remove_dir_all(fleet.join("observed")).unwrap();
    let r = report(&fleet, &[]);
    assert!(
        r.comment
            .contains("_No MAAS snapshot is committed (`observed/snapshot.json`)")
    );
    assert!(!r.comment.contains("### metalform plan"));
}

#[test]
fn invalid_manifests_are_the_comment() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = fleet_repo_with(dir.path(), true, 40);
    let nodes = fleet.join("nodes/dc1.yaml");
    let text = std::fs::read_to_string(&nodes).unwrap();
    // Forty BMC addresses that are no IPv4 addresses.
    let text = text.replace("ipmiIp: 10.176.17.", "ipmiIp: 10.176.300.");
    std::fs::write(&nodes, text).unwrap();
    let r = report(&fleet, &[]);
    assert_eq!(
        r.code, 0,
        "the report is written; the workflow fails the job after posting it"
    );
    assert_eq!(r.outputs, "valid=false\ntruncated=false\n");
    assert!(r.comment.starts_with(MARKER));
    assert!(
        r.comment
            .contains("❌ **manifests invalid**: nothing was diffed or planned.")
    );
    let error_line = r
        .comment
        .lines()
        .find(|l| l.contains(": error: "))
        .unwrap_or_else(|| panic!("no error line in {}", r.comment));
    let location = error_line.split(": error: ").next().unwrap();
    let parts: Vec<&str> = location.rsplitn(3, ':').collect();
    assert!(
        parts[0].parse::<u32>().is_ok() && parts[1].parse::<u32>().is_ok(),
        "FILE:LINE:COL in {error_line}"
    );
    assert!(parts[2].ends_with("nodes/dc1.yaml"), "{error_line}");
    assert!(!r.comment.contains("### metalform plan"));

    // Too many errors for one comment: the first ones, whole lines, and where the rest are.
    assert!(r.comment.chars().count() > 2000);
    let r = report(&fleet, &[("MAX_CHARS", "2000".into())]);
    assert_eq!(r.outputs, "valid=false\ntruncated=true\n");
    assert!(
        r.comment.chars().count() <= 2000,
        "{}",
        r.comment.chars().count()
    );
    assert!(
        r.comment
            .contains("The first errors (all 40 are in the artifact)"),
        "{}",
        r.comment
    );
    assert!(
        r.full.contains("`10.176.300.40` is not an IPv4 address"),
        "the full report has every error"
    );
    assert!(
        r.comment.contains(
            "The full report is the artifact `metalform-plan` of https://ci.example.invalid/runs/7."
        ),
        "{}",
        r.comment
    );
}

#[test]
fn a_report_over_the_limit_is_a_summary_and_the_full_one_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = fleet_repo_with(dir.path(), true, 120);
    let r = report(
        &fleet,
        &[("NOW", TAKEN_AT.to_string()), ("MAX_CHARS", "12000".into())],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.outputs, "valid=true\ntruncated=true\n");
    let chars = r.comment.chars().count();
    assert!(chars <= 12000, "{chars} characters");
    assert!(r.full.chars().count() > 12000);
    assert!(r.comment.starts_with(MARKER));
    assert!(
        r.comment.contains(&format!(
            "📦 **The full report is {} characters, over the 12000 a comment can hold**",
            r.full.chars().count()
        )),
        "{}",
        r.comment
    );
    // What the summary leaves out, it counts; the summary line of the plan is still there.
    assert!(
        r.comment.contains("**Left out to stay under"),
        "{}",
        r.comment
    );
    assert!(r.comment.contains("**Plan: "), "{}", r.comment);
    assert!(
        r.full.contains("`dc1/x119`"),
        "the full report has every node"
    );
    assert!(
        !r.full.contains("**Left out to stay under"),
        "and leaves nothing out"
    );
}

/// A `gh` that records its calls and answers the comment listing from a JSON file through
/// real jq (so the script's filter is what selects).
fn fake_gh(dir: &Path, comments: &str) -> (PathBuf, PathBuf) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = dir.join("gh.log");
    let listing = dir.join("comments.json");
    std::fs::write(&listing, comments).unwrap();
    let script = format!(
        r#"#!/usr/bin/env bash
printf '%s\n' "$*" >> '{log}'
jq_filter=""; prev=""
for a in "$@"; do [ "$prev" = "--jq" ] && jq_filter="$a"; prev="$a"; done
case "$*" in
  *--paginate*) jq -r "$jq_filter" < '{listing}' ;;
  *"-X POST"*|*"-X PATCH"*)
    for a in "$@"; do case "$a" in body=@*) cp "${{a#body=@}}" '{dir}/posted.md' ;; esac; done
    echo "https://github.example.invalid/comment" ;;
esac
"#,
        log = log.display(),
        listing = listing.display(),
        dir = dir.display()
    );
    let gh = bin.join("gh");
    std::fs::write(&gh, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&gh, std::fs::Permissions::from_mode(0o755)).unwrap();
    (bin, log)
}

fn post(dir: &Path, comments: &str, body: &str) -> (i32, Vec<String>) {
    let (bin, log) = fake_gh(dir, comments);
    let _ = std::fs::remove_file(&log);
    let body_file = dir.join("comment.md");
    std::fs::write(&body_file, body).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let out = Command::new("bash")
        .arg(repo().join("scripts/ci/post-comment.sh"))
        .env("PATH", path)
        .env("REPO", "ops/fleet")
        .env("PR_NUMBER", "42")
        .env("BODY_FILE", &body_file)
        .output()
        .unwrap();
    let calls = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    (out.status.code().unwrap_or(-1), calls)
}

#[test]
fn one_comment_per_pull_request_is_updated_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let body = format!("{MARKER}\n### metalform\nhello\n");
    let list = format!(
        "api --paginate repos/ops/fleet/issues/42/comments --jq .[] | select(.body | startswith(\"{MARKER}\")) | .id"
    );
    let body_arg = format!("body=@{}", dir.path().join("comment.md").display());

    // None yet: one is created.
    let other = r#"[{"id": 5, "body": "LGTM"}]"#;
    let (code, calls) = post(dir.path(), other, &body);
    assert_eq!(code, 0);
    assert_eq!(
        calls,
        vec![
            list.clone(),
            format!("api -X POST repos/ops/fleet/issues/42/comments -F {body_arg} --jq .html_url")
        ]
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("posted.md")).unwrap(),
        body
    );

    // Ours exists (among others): it is edited, nothing is created.
    let ours = format!(
        r#"[{{"id": 5, "body": "LGTM"}}, {{"id": 9, "body": "{MARKER}\nold"}}, {{"id": 11, "body": "quoting {MARKER}"}}]"#
    );
    let (_, calls) = post(dir.path(), &ours, &body);
    assert_eq!(
        calls,
        vec![
            list.clone(),
            format!("api -X PATCH repos/ops/fleet/issues/comments/9 -F {body_arg} --jq .html_url")
        ]
    );

    // Two of ours (an earlier race): the first is edited, the other deleted.
    let two = format!(
        r#"[{{"id": 9, "body": "{MARKER}\nold"}}, {{"id": 12, "body": "{MARKER}\nolder"}}]"#
    );
    let (_, calls) = post(dir.path(), &two, &body);
    assert_eq!(
        calls,
        vec![
            list,
            format!("api -X PATCH repos/ops/fleet/issues/comments/9 -F {body_arg} --jq .html_url"),
            "api -X DELETE repos/ops/fleet/issues/comments/12".to_owned(),
        ]
    );

    // A body without the marker would never be found again: refused, nothing called.
    let (code, calls) = post(dir.path(), other, "### metalform\n");
    assert_eq!(code, 1);
    assert!(calls.is_empty(), "{calls:?}");
}
