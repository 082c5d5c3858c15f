//! Output injection (issue 16 point 4, docs/security.md "Output"): manifest values and MAAS
//! answers reach the operator's terminal and the pull-request comment. Control characters are
//! shown as escapes, never sent; markdown and HTML in a value stay text. Plan and diff share one
//! escaping path (`metalform::sanitize`).

use crate::manifest_support;
use crate::plan_support;

use manifest_support::{GitRepo, metalform, repo_root, stderr, stdout};
use metalform::plan::{self, PlanOptions, render};
use plan_support::{World, fixture_fleet};

/// No byte that a terminal obeys: C0 controls but newline and tab, DEL, and C1 (as UTF-8).
fn assert_terminal_safe(text: &str) {
    for c in text.chars() {
        let bad = matches!(c, '\u{0}'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        assert!(!bad, "raw {c:?} in output:\n{text}");
    }
}

/// Whether `needle` occurs in `md` other than escaped (right after a backslash).
fn raw_in(md: &str, needle: &str) -> bool {
    md.match_indices(needle)
        .any(|(at, _)| !md[..at].ends_with('\\'))
}

/// Our own collapsible sections: the lines that open and close them pair up.
fn details_balanced(md: &str) -> bool {
    let opens = md.lines().filter(|l| l.starts_with("<details>")).count();
    let closes = md.lines().filter(|l| *l == "</details>").count();
    opens == closes
}

const HOSTILE: &str = "\u{1b}]0;owned\u{7}\u{1b}[2J\u{9b}31m\u{202e}";

#[test]
fn ansi_escapes_in_a_manifest_value_are_shown_not_sent_by_validate() {
    let dir = tempfile::tempdir().unwrap();
    let site = std::fs::read_to_string(repo_root().join("examples/invalid/invalid-bmc-ip.yaml"))
        .unwrap()
        .replace("region: r1", "region: \"r1\\e]0;owned\\a\\e[2J\\x9b31m\"");
    std::fs::write(dir.path().join("fleet.yaml"), site).unwrap();
    let out = metalform(dir.path(), &["validate", "--fleet", "."]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert_terminal_safe(&text);
    assert!(
        text.contains("`r1\\x1b]0;owned\\x07\\x1b[2J\\u{9b}31m` is not valid"),
        "{text}"
    );
    // The JSON report keeps the value exactly (JSON escapes it).
    let out = metalform(
        dir.path(),
        &["validate", "--fleet", ".", "--format", "json"],
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        report["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("r1\u{1b}]0;owned")
    );
}

#[test]
fn bel_c1_and_bidi_overrides_in_a_maas_error_are_shown_not_sent_by_plan() {
    let fleet = fixture_fleet();
    let snapshot = World::new()
        .unreadable("dc1", &format!("MAAS said {HOSTILE}"), true)
        .done();
    let plan = plan::plan(&fleet, &snapshot, &PlanOptions::default());
    let text = render::render_text(&plan, render::TextOptions::default());
    assert_terminal_safe(&text);
    assert!(
        text.contains("MAAS said \\x1b]0;owned\\x07\\x1b[2J\\u{9b}31m\\u{202e}"),
        "{text}"
    );
}

#[test]
fn html_comments_links_and_details_in_plan_markdown_stay_text() {
    let fleet = fixture_fleet();
    let payload = "</details><img src=x onerror=alert(1)><!-- [pay](https://evil.example) ![px](https://evil.example/p.png) | x";
    let snapshot = World::new().unreadable("dc1", payload, true).done();
    let plan = plan::plan(&fleet, &snapshot, &PlanOptions::default());
    let md = render::render_markdown(&plan, 60_000);
    for raw in [
        "</details><img",
        "<img",
        "<!--",
        "[pay]",
        "](https://evil.example)",
        "![px]",
        "| x",
    ] {
        assert!(!raw_in(&md, raw), "`{raw}` reached the comment raw:\n{md}");
    }
    assert!(
        md.contains(
            "\\</details\\>\\<img src=x onerror=alert(1)\\>\\<\\!-- \\[pay\\](https://evil.example)"
        ),
        "{md}"
    );
    // Our own collapsible sections still open and close in pairs.
    assert!(details_balanced(&md), "{md}");
}

#[test]
fn diff_markdown_escapes_values_the_way_plan_markdown_does() {
    let mut repo = GitRepo::new();
    repo.copy_dir(&repo_root().join("fleet"), "fleet");
    let base = repo.commit("fleet");
    repo.edit(
        "fleet/nodes/dc1/c07u45.yaml",
        "\"mainboard failure, RMA refused (ticket HW-2291)\"",
        "\"</details><img src=x> `x` [a](https://evil.example)\"",
    );
    repo.commit("retire");
    let out = metalform(
        repo.path(),
        &[
            "diff", "--fleet", "fleet", "--base", &base, "--head", "HEAD", "--format", "markdown",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let md = stdout(&out);
    assert!(
        md.contains("``\"</details><img src=x> `x` [a](https://evil.example)\"``"),
        "a value is one code span, backticks and all:\n{md}"
    );
    assert!(details_balanced(&md), "{md}");
}
