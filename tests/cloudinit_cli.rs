//! `metalform render cloud-init NODE` (docs/cloud-init.md) on the sample fleet: golden
//! payloads (redacted), byte-identical reruns, secrets only with `--show-secrets` and secret
//! access, the system id from the state store, and the errors operators see.

use crate::manifest_support;

use std::path::Path;
use std::sync::Arc;

use manifest_support::{metalform, repo_root, stderr, stdout};
use serde_json::Value;

fn render(args: &[&str]) -> std::process::Output {
    let mut all = vec!["render", "cloud-init"];
    all.extend_from_slice(args);
    metalform(&repo_root(), &all)
}

/// A dev secrets file with c07u27's own deploy password (dc1's profile: one per node).
fn secrets_file(dir: &Path) -> String {
    let path = dir.join("secrets.json");
    std::fs::write(
        &path,
        r#"{"kv/maas-sites/dc1/deploy-nodes/c07u27": {"password": "dc1-Deploy-Pa55"},
            "kv/maas-sites/dc2/deploy": {"password": "dc2-Deploy-Pa55"}}"#,
    )
    .unwrap();
    format!("file://{}", path.display())
}

/// What the agent install adds: the binary's URL and pin, and the CA it trusts.
const AGENT_SHA256: &str = "4f2c5e0d8a7b9c1e3f5a7b9d1c3e5f7a9b1d3c5e7f9a1b3d5c7e9f1a3b5d7c9e";

#[test]
fn golden_payloads_of_the_sample_fleet() {
    // gpu-default (dc1): every layer, data disks initialised, the agent installed.
    let args = [
        "c07u46",
        "--fleet",
        "fleet",
        "--system-id",
        "x7k3pa",
        "--agent-url",
        "https://10.176.46.5:8741/",
        "--agent-binary-url",
        "https://artifacts.example/metalform/0.1.0/metalform-agent",
        "--agent-binary-sha256",
        AGENT_SHA256,
        "--agent-ca",
        "tests/fixtures/agent-ca.pem",
        "--boot-disk",
        "/dev/disk/by-id/ata-Dell_BOSS-N1_S1A2B3",
    ];
    let out = render(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    insta::assert_snapshot!("c07u46_gpu_default", stdout(&out));
    // Deterministic across processes.
    let again = render(&args);
    assert_eq!(out.stdout, again.stdout);
    assert_eq!(stderr(&out), "", "nothing is a placeholder");
}

#[test]
fn the_agent_install_is_pinned_or_refused() {
    let with = |extra: &[&str]| {
        let mut args = vec![
            "c07u46",
            "--fleet",
            "fleet",
            "--agent-binary-url",
            "https://artifacts.example/metalform-agent",
        ];
        args.extend_from_slice(extra);
        render(&args)
    };
    let text = stdout(&with(&[
        "--agent-binary-sha256",
        &AGENT_SHA256.to_uppercase(),
    ]));
    assert!(
        text.contains(&format!("METALFORM_AGENT_SHA256=\"{AGENT_SHA256}\"")),
        "{text}"
    );
    assert!(text.contains("path: /etc/systemd/system/metalform-agent.service"));
    assert!(text.contains("#   b agent-bootstrap v2    enroll at <enroll-url>; agent https://artifacts.example/metalform-agent (sha256 4f2c5e0d8a7b)"));
    // A URL without its pin, or a pin that is not a digest, is refused.
    let out = with(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--agent-binary-sha256"),
        "{}",
        stderr(&out)
    );
    let out = with(&["--agent-binary-sha256", "abc123"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "error: --agent-binary-sha256 must be 64 hex digits\nhint: sha256sum metalform-agent prints it\n"
    );
}

#[test]
fn golden_payload_of_a_profile_without_data_disks_or_site_bundle() {
    // dc2-gpu: dataDisks skip, no site bundle; placeholders for what is not known.
    let out = render(&["dc2/a01u20", "--fleet", "fleet"]);
    assert!(out.status.success(), "{}", stderr(&out));
    insta::assert_snapshot!("a01u20_dc2_gpu", stdout(&out));
    assert_eq!(
        stderr(&out),
        "note: placeholders stand for the system id (--system-id), the enrollment URL (--agent-url)\n"
    );
}

#[test]
fn show_secrets_needs_secret_access_and_shows_only_the_hash() {
    let out = render(&["c07u27", "--fleet", "fleet", "--show-secrets"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "error: --show-secrets needs access to the secret store to hash the deploy password\n\
         hint: pass --secrets vault://HOST:PORT (with VAULT_TOKEN) or --secrets file://PATH, or drop --show-secrets\n"
    );
    assert!(stdout(&out).is_empty());

    let dir = tempfile::tempdir().unwrap();
    let secrets = secrets_file(dir.path());
    let out = render(&[
        "c07u27",
        "--fleet",
        "fleet",
        "--show-secrets",
        "--secrets",
        &secrets,
        "--system-id",
        "x7k3pa",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        !text.contains("dc1-Deploy-Pa55"),
        "never the password itself"
    );
    let hash = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("hashed_passwd: \""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("a hashed_passwd line");
    assert!(hash.starts_with("$6$rounds=656000$"), "{hash}");
    let salt = hash.split('$').nth(3).unwrap();
    assert_eq!(
        metalform::cloudinit::sha512_crypt(
            &metalform::secrets::Secret::new("dc1-Deploy-Pa55"),
            salt
        )
        .expose(),
        hash
    );
    // The token does not exist before deploy: a placeholder, said so.
    assert!(text.contains("METALFORM_ENROLL_TOKEN=\"<enrollment-token>\""));
    assert!(stderr(&out).contains("the enrollment token (issued once, at deploy)"));

    // A missing secret is a user error naming the path, never a value.
    std::fs::write(dir.path().join("secrets.json"), "{}").unwrap();
    let out = render(&[
        "c07u27",
        "--fleet",
        "fleet",
        "--show-secrets",
        "--secrets",
        &secrets,
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with(
            "error: cannot read the deploy password: secret `kv/maas-sites/dc1/deploy-nodes/c07u27` not found in file://"
        ),
        "{}",
        stderr(&out)
    );
}

#[test]
fn json_names_the_layers_and_a_digest_that_ignores_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let secrets = secrets_file(dir.path());
    let redacted = render(&["c07u27", "--fleet", "fleet", "--format", "json"]);
    assert!(redacted.status.success(), "{}", stderr(&redacted));
    let redacted: Value = serde_json::from_slice(&redacted.stdout).unwrap();
    let shown = render(&[
        "c07u27",
        "--fleet",
        "fleet",
        "--format",
        "json",
        "--show-secrets",
        "--secrets",
        &secrets,
    ]);
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(
        redacted["node"],
        serde_json::json!({"site": "dc1", "hostname": "c07u27"})
    );
    assert_eq!(redacted["secrets"], "redacted");
    assert_eq!(shown["secrets"], "shown");
    assert_eq!(redacted["digest"], shown["digest"]);
    assert!(redacted["digest"].as_str().unwrap().starts_with("sha256:"));
    assert_ne!(redacted["user_data"], shown["user_data"]);
    let layers: Vec<(String, bool, bool)> = redacted["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                format!(
                    "{} {} v{}",
                    l["order"].as_str().unwrap(),
                    l["name"].as_str().unwrap(),
                    l["version"].as_str().unwrap()
                ),
                l["included"].as_bool().unwrap(),
                l["destructive"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        layers,
        [
            ("a site-bundle v3".to_string(), true, false),
            ("b agent-bootstrap v2".to_string(), true, false),
            ("c hw-sync v1".to_string(), true, false),
            ("d data-disks v1".to_string(), true, true),
            ("e roce-routing v1".to_string(), true, false),
            ("f deploy-user v2".to_string(), true, false),
        ]
    );
}

#[test]
fn the_system_id_comes_from_the_state_store_when_there_is_one() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = dir.path().join("fleet");
    copy_dir(&repo_root().join("fleet"), &fleet);
    let out = metalform(
        dir.path(),
        &["render", "cloud-init", "c07u28", "--fleet", "fleet"],
    );
    assert!(stdout(&out).contains("MAAS system <system-id>."));
    assert!(
        !fleet.join(".metalform").exists(),
        "render never creates a store"
    );
    // The onboarding recorded the machine it found.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = metalform::store::Store::open(
            &metalform::store::default_url(&fleet),
            Arc::new(metalform::clock::SystemClock),
        )
        .await
        .unwrap();
        let node = store
            .create_node(
                &metalform::store::NewNode {
                    site: "dc1".into(),
                    hostname: "c07u28".into(),
                    provider: metalform::lifecycle::Provider::Maas,
                    status: metalform::lifecycle::NodeState::Enrolling,
                    sku: None,
                    gpus: None,
                    ipmi_ip: None,
                },
                &metalform::store::Actor::system("test"),
            )
            .await
            .unwrap();
        store
            .upsert_maas_state(&metalform::store::MaasStateUpdate {
                node_id: node.id,
                site: "dc1".into(),
                maas_system_id: "q4w8e2".into(),
                status: Some("Deploying".into()),
                power_state: None,
                ips: vec![],
                drift: None,
            })
            .await
            .unwrap();
        store.close().await;
    });
    let out = metalform(
        dir.path(),
        &["render", "cloud-init", "c07u28", "--fleet", "fleet"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("MAAS system q4w8e2."), "{text}");
    assert!(text.contains("METALFORM_SYSTEM_ID=\"q4w8e2\""));
}

#[test]
fn errors_name_the_problem_and_what_to_do() {
    let out = render(&["c07u99", "--fleet", "fleet"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "error: no node `c07u99` in the fleet\n\
         hint: NODE is a hostname from the fleet's nodes/ (e.g. c07u27), or SITE/HOSTNAME\n"
    );
    let out = render(&["dc2/c07u27", "--fleet", "fleet"]);
    assert_eq!(
        stderr(&out).lines().next(),
        Some("error: no node `c07u27` in site `dc2` of the fleet")
    );
    let out = render(&["c07u27", "--fleet", "fleet", "--system-id", "x 7"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "error: cloud-init input `system_id` is invalid: \"x 7\" is not a MAAS system id (letters, digits, - and _)\n\
         hint: fix the value in the manifests or the flag that carries it\n"
    );
    let out = render(&["c07u27", "--fleet", "no-such-dir"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).starts_with("error: "), "{}", stderr(&out));
    let out = render(&["c07u27", "--fleet", "fleet", "--agent-url", "not a url"]);
    assert_eq!(out.status.code(), Some(2));
    // A node that is not onboarded still renders, with a note.
    let out = render(&["c07u45", "--fleet", "fleet"]);
    assert!(out.status.success());
    assert!(
        stderr(&out).contains("note: dc1/c07u45 has lifecycle retired"),
        "{}",
        stderr(&out)
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
