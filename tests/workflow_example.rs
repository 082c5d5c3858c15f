//! .github/workflows/fleet-plan.yml (issue 6): it parses as YAML, every `metalform` command it
//! runs exists in our CLI with the flags it passes, and it keeps one PR comment found by its
//! hidden marker.

use std::collections::BTreeSet;

use clap::CommandFactory;
use saphyr::{LoadableYamlNode, Yaml};

const WORKFLOW: &str = include_str!("../.github/workflows/fleet-plan.yml");

/// Every `metalform …` invocation in the workflow's `run:` scripts.
fn invocations() -> Vec<Vec<String>> {
    let docs = Yaml::load_from_str(WORKFLOW).expect("the workflow parses");
    let steps = docs[0]
        .as_mapping_get("jobs")
        .and_then(|j| j.as_mapping_get("plan"))
        .and_then(|p| p.as_mapping_get("steps"))
        .and_then(|s| s.as_sequence())
        .expect("jobs.plan.steps");
    // GitHub expressions (`${{ github.base_ref }}`) stand in for one shell word.
    let expressions = regex::Regex::new(r"\$\{\{[^}]*\}\}").unwrap();
    let mut found = Vec::new();
    for step in steps {
        let Some(script) = step.as_mapping_get("run").and_then(|r| r.as_str()) else {
            continue;
        };
        let script = expressions.replace_all(script, "main");
        for line in script.lines() {
            // A command line starts with `metalform` (not `cargo install … metalform`).
            let mut words = line.split_whitespace();
            if words.next() != Some("metalform") {
                continue;
            }
            found.push(
                words
                    .take_while(|w| !matches!(*w, ">" | "2>&1" | "|" | ";" | "&&"))
                    .map(str::to_owned)
                    .collect(),
            );
        }
    }
    found
}

#[test]
fn the_workflow_runs_real_commands_with_real_flags() {
    let calls = invocations();
    let subcommands: BTreeSet<&str> = calls.iter().map(|c| c[0].as_str()).collect();
    assert_eq!(
        subcommands,
        BTreeSet::from(["validate", "diff", "plan"]),
        "{calls:?}"
    );
    let cli = metalform::cli::Cli::command();
    for call in &calls {
        let sub = cli
            .find_subcommand(&call[0])
            .unwrap_or_else(|| panic!("no subcommand `{}`", call[0]));
        let longs: BTreeSet<String> = sub
            .get_arguments()
            .chain(cli.get_arguments())
            .filter_map(|a| a.get_long().map(str::to_owned))
            .collect();
        for flag in call.iter().filter(|w| w.starts_with("--")) {
            assert!(
                longs.contains(flag.trim_start_matches("--")),
                "`metalform {}` has no {flag} (has {longs:?})",
                call[0]
            );
        }
        // And clap accepts the whole invocation (values in place of shell expressions).
        let args: Vec<String> = std::iter::once("metalform".to_owned())
            .chain(call.iter().map(|w| w.trim_matches('"').to_owned()))
            .collect();
        metalform::cli::Cli::command()
            .try_get_matches_from(&args)
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    }
    assert!(
        calls
            .iter()
            .any(|c| c[0] == "diff" && c.windows(2).any(|w| w == ["--format", "markdown"]))
    );
    assert!(
        calls
            .iter()
            .any(|c| c[0] == "plan" && c.contains(&"--observed".to_owned()))
    );
}

#[test]
fn one_comment_is_updated_by_its_marker() {
    assert!(WORKFLOW.contains("echo '<!-- metalform-fleet-plan -->'"));
    assert!(WORKFLOW.contains("const marker = '<!-- metalform-fleet-plan -->'"));
    assert!(WORKFLOW.contains("updateComment") && WORKFLOW.contains("createComment"));
    let docs = Yaml::load_from_str(WORKFLOW).unwrap();
    let on = docs[0].as_mapping_get("on").expect("on:");
    assert!(on.as_mapping_get("pull_request").is_some());
}
