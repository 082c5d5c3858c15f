//! The status pages in a real browser (issue 19): headless Chromium from Debian
//! (scripts/services/52-chromium.sh exports METALFORM_CHROMIUM) opens the pages of a running
//! daemon with the admin token as its Basic password. `--dump-dom` gives the DOM after the
//! page's script ran (under the pages' Content-Security-Policy); a screenshot of the node list
//! is written and checked to be a PNG of the window's size.
#![cfg(feature = "services")]

use crate::daemon_support;
use crate::web_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use daemon_support::ADMIN_TOKEN;
use web_support::{HOSTILE_HOST, HOSTILE_SITE, Pages};

fn chromium() -> PathBuf {
    PathBuf::from(std::env::var("METALFORM_CHROMIUM").expect(
        "METALFORM_CHROMIUM is not set: run scripts/test-all, or source scripts/services/52-chromium.sh",
    ))
}

/// Chromium with a fresh profile, run headless (as root it needs `--no-sandbox`).
fn browser(profile: &Path, args: &[String]) -> std::process::Output {
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .output()
        .expect("chromium runs");
    assert!(
        out.status.success(),
        "chromium {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The DOM of `path` after its scripts ran.
fn dump_dom(profile: &Path, base: &str, path: &str) -> String {
    let url = with_credentials(base, path);
    let out = browser(profile, &["--dump-dom".into(), url]);
    String::from_utf8(out.stdout).unwrap()
}

/// `http://metalform:TOKEN@host:port/path`: the browser answers the Basic challenge with it.
fn with_credentials(base: &str, path: &str) -> String {
    let rest = base.strip_prefix("http://").unwrap();
    format!("http://metalform:{ADMIN_TOKEN}@{rest}{path}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_renders_the_pages_and_shows_markup_as_text() {
    let p = Pages::start().await;
    let profile = tempfile::tempdir().unwrap();
    let base = p.base.clone();
    let hosts = p.hosts.clone();
    let dir = profile.path().to_path_buf();

    let (overview, list, node, hostile, plan) = tokio::task::spawn_blocking(move || {
        let overview = dump_dom(&dir, &base, "/ui/");
        let list = dump_dom(&dir, &base, "/ui/nodes?site=dc1&state=active");
        let node = dump_dom(&dir, &base, &format!("/ui/nodes/dc1/{}", hosts[0]));
        let hostile = dump_dom(&dir, &base, &Pages::node_path(HOSTILE_SITE, HOSTILE_HOST));
        let plan = dump_dom(&dir, &base, "/ui/plan");
        (overview, list, node, hostile, plan)
    })
    .await
    .unwrap();

    // The script ran (it marks the body live): the CSP lets the pages' own script through.
    for (name, dom) in [("overview", &overview), ("list", &list), ("node", &node)] {
        assert!(
            dom.contains(r#"<body data-refresh="5" class="live">"#),
            "{name}: the page's script did not run\n{dom}"
        );
    }
    assert!(overview.contains(r#"href="/ui/nodes?site=dc1&amp;state=active">2</a>"#));
    assert!(overview.contains("lab&amp;co"), "{overview}");
    assert!(list.contains("2 of 3 nodes"), "{list}");
    for host in &p.hosts {
        assert!(list.contains(&format!(">{host}</a>")), "{list}");
    }
    assert!(node.contains("wait_for_agent_enrollment"), "{node}");
    assert!(node.contains("<code>ACTIVE</code>"), "{node}");

    // The hostile hostname is a text node in the browser's DOM, never an element.
    assert!(
        hostile.contains("&lt;script&gt;alert(\"pwned\")&lt;/script&gt;"),
        "{hostile}"
    );
    assert!(!hostile.contains("<script>alert"), "{hostile}");
    assert!(plan.contains("id=\"site-dc1\""), "{plan}");

    // A screenshot of the overview and the node list, kept under target/ for a person to look at.
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let base = p.base.clone();
    let hosts = p.hosts.clone();
    let dir = profile.path().to_path_buf();
    let files = tokio::task::spawn_blocking(move || {
        let mut files = Vec::new();
        let node = format!("/ui/nodes/dc1/{}", hosts[0]);
        for (name, path) in [
            ("overview", "/ui/"),
            ("nodes", "/ui/nodes"),
            ("node", node.as_str()),
        ] {
            let file = shots.join(format!("{name}.png"));
            let _ = std::fs::remove_file(&file);
            browser(
                &dir,
                &[
                    format!("--screenshot={}", file.display()),
                    "--window-size=1280,900".into(),
                    with_credentials(&base, path),
                ],
            );
            files.push(file);
        }
        files
    })
    .await
    .unwrap();
    for file in &files {
        let png = std::fs::read(file).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{}", file.display());
        let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
        let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
        assert_eq!((width, height), (1280, 900), "{}", file.display());
        assert!(png.len() > 10_000, "{} looks blank", file.display());
        eprintln!("screenshot: {}", file.display());
    }
    p.daemon.shutdown().await;
}
