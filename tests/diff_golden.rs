//! `metalform diff` golden tests on a real git repository built here with real commits: add
//! nodes, change a profile field, retire a node, bump a reimage generation, remove nodes — each
//! step, the whole range (text, markdown, JSON), uncommitted work-tree changes, and the
//! markdown size cap. Commit ids and content hashes are replaced by stable labels.

use crate::manifest_support;

use manifest_support::{GitRepo, metalform, repo_root, stderr, stdout};

struct History {
    repo: GitRepo,
    /// c0 (the sample fleet) .. c5.
    commits: Vec<String>,
}

fn history() -> History {
    let mut repo = GitRepo::new();
    repo.copy_dir(&repo_root().join("fleet"), "fleet");
    let mut commits = vec![repo.commit("the sample fleet")];

    // 1. Add nodes: two members of rack-c07 and a single dc2 node.
    let rack = "fleet/nodes/dc1/rack-c07.yaml";
    let text = repo.read(rack)
        + "    - {hostname: c07u43, bmc: {ipmiIp: 10.176.16.143}}\n    - {hostname: c07u44, bmc: {ipmiIp: 10.176.16.144}, protected: true}\n";
    repo.write(rack, &text);
    repo.write(
        "fleet/nodes/dc2/a01u21.yaml",
        "apiVersion: metalform/v1\nkind: Node\nmetadata: {name: a01u21}\nspec: {site: dc2, sku: h100.80g.8gpu, gpus: 8, bmc: {ipmiIp: 10.180.16.121}}\n",
    );
    commits.push(repo.commit("add c07u43, c07u44, a01u21"));

    // 2. Change profile fields.
    let profile = "fleet/profiles/gpu-default.yaml";
    repo.edit(
        profile,
        "concurrency: {maxParallel: 10}",
        "concurrency: {maxParallel: 20}",
    );
    repo.edit(profile, "interval: 15m", "interval: 10m");
    commits.push(repo.commit("gpu-default: more parallel, faster hardware sync"));

    // 3. Retire a node of a group.
    repo.edit(
        rack,
        "{hostname: c07u30, bmc: {ipmiIp: 10.176.16.130},",
        "{hostname: c07u30, bmc: {ipmiIp: 10.176.16.130}, lifecycle: retired, retiredReason: \"GPU 3 fails ECC\",",
    );
    commits.push(repo.commit("retire c07u30"));

    // 4. Bump a reimage generation.
    repo.edit(
        "fleet/nodes/dc2/a01u20.toml",
        "reimage = { generation = 2 }",
        "reimage = { generation = 3 }",
    );
    commits.push(repo.commit("reimage a01u20"));

    // 5. Remove a node from a site that does not prune and one from a site that does.
    repo.remove_line("fleet/nodes/dc1/rack-c08.yaml", "c08u06");
    repo.remove_line("fleet/nodes/dc2/rack-a01.yaml", "a01u12");
    commits.push(repo.commit("remove c08u06 and a01u12"));
    History { repo, commits }
}

impl History {
    /// Run diff and replace commit ids and content hashes by labels.
    fn diff(&self, args: &[&str]) -> String {
        let mut full = vec!["diff", "--fleet", "fleet"];
        full.extend_from_slice(args);
        let output = metalform(self.repo.path(), &full);
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let mut text = stdout(&output);
        for (i, id) in self.commits.iter().enumerate() {
            text = text.replace(id.as_str(), &format!("<c{i}>"));
            text = text.replace(&id[..12], &format!("<c{i}>"));
        }
        redact_hashes(&text)
    }

    fn range(&self, base: usize, head: usize, format: &str) -> String {
        self.diff(&[
            "--base",
            &self.commits[base],
            "--head",
            &self.commits[head],
            "--format",
            format,
        ])
    }
}

/// `sha256:<hex>` (full or shortened) -> `sha256:<hash>`.
fn redact_hashes(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("sha256:") {
        out.push_str(&rest[..at + 7]);
        rest = &rest[at + 7..];
        let hex = rest.chars().take_while(char::is_ascii_hexdigit).count();
        out.push_str("<hash>");
        rest = &rest[hex..];
    }
    out.push_str(rest);
    out
}

#[test]
fn each_step_of_the_history() {
    let h = history();
    insta::assert_snapshot!("1_add_nodes", h.range(0, 1, "text"));
    insta::assert_snapshot!("2_change_profile", h.range(1, 2, "text"));
    insta::assert_snapshot!("3_retire_node", h.range(2, 3, "text"));
    insta::assert_snapshot!("4_bump_reimage", h.range(3, 4, "text"));
    insta::assert_snapshot!("5_remove_nodes", h.range(4, 5, "text"));
}

#[test]
fn the_whole_range_in_every_format() {
    let h = history();
    insta::assert_snapshot!("range_text", h.range(0, 5, "text"));
    insta::assert_snapshot!("range_markdown", h.range(0, 5, "markdown"));
    let json = h.range(0, 5, "json");
    insta::assert_snapshot!("range_json", json);
    let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(parsed["format"], "metalform.diff/v1");
    // Two lifecycle changes; the removal from a pruning site is a note (pruning is not
    // carried out yet).
    assert_eq!(parsed["destructive"], 2);
    assert_eq!(
        parsed["summary"]["nodes"],
        serde_json::json!({"added": 3, "removed": 2, "changed": 2, "destructive": 2})
    );
    // Nodes of groups are diffed one by one, never as a list.
    let ids: Vec<&str> = parsed["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"dc1/c07u43")
            && ids.contains(&"dc1/c07u30")
            && !ids.iter().any(|id| id.contains("rack"))
    );
}

#[test]
fn same_revision_has_no_changes_and_head_defaults_to_the_work_tree() {
    let h = history();
    assert_eq!(
        h.diff(&["--base", "HEAD"]),
        "Fleet diff: commit <c5> → working tree (sha256:<hash>)\n\nNo desired-state changes.\n"
    );
    // Uncommitted: protection of a01u03 turned off, a secret reference moved.
    h.repo.edit(
        "fleet/nodes/dc2/rack-a01.yaml",
        "protected: true",
        "protected: false",
    );
    h.repo.edit(
        "fleet/sites/dc1.yaml",
        "kv/maas-sites/dc1/deploy-nodes, key: password",
        "kv/maas-sites/dc1/deploy-nodes-v2, key: password",
    );
    insta::assert_snapshot!("work_tree", h.diff(&["--base", "HEAD"]));
}

#[test]
fn markdown_is_capped_and_says_what_it_left_out() {
    let h = history();
    let full = h.range(0, 5, "markdown");
    let capped = h.diff(&[
        "--base",
        &h.commits[0],
        "--head",
        &h.commits[5],
        "--format",
        "markdown",
        "--max-bytes",
        "1200",
    ]);
    assert!(
        full.len() > 1200,
        "the full comment is larger than the cap ({} bytes)",
        full.len()
    );
    assert!(capped.len() <= 1200, "capped to {} bytes", capped.len());
    insta::assert_snapshot!("range_markdown_capped", capped);
}

#[test]
fn an_invalid_side_is_reported_not_diffed() {
    let h = history();
    h.repo.write("fleet/nodes/dc1/bad.yaml", "apiVersion: metalform/v1\nkind: Node\nmetadata: {name: c07u99}\nspec: {site: dc1, sku: x, gpus: 8, bmc: {ipmiIp: 10.176.16.300}}\n");
    let output = metalform(
        h.repo.path(),
        &["diff", "--fleet", "fleet", "--base", "HEAD"],
    );
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(stdout(&output), "");
    let err = redact_hashes(&stderr(&output));
    assert_eq!(
        err,
        "fleet/nodes/dc1/bad.yaml:4:50: error: spec.bmc.ipmiIp: `10.176.16.300` is not an IPv4 address\n\
         error: the head fleet (working tree (sha256:<hash>)) has 1 error(s); diff compares valid fleets\n\
         hint: run `metalform validate --fleet fleet` and fix them\n"
    );
}
