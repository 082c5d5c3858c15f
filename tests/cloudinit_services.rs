//! Rendered payloads checked by the real peers (DESIGN.md §7, §9): Debian `cloud-init schema`
//! on every payload of the sample fleet (with the agent install: pinned binary, unit, CA), real
//! `curl` running the payload's enrollment bootstrap over TLS against a real `AgentServer`
//! (its development CA carried by the payload), `openssl passwd -6` recomputing the deploy user's hash,
//! and the deploy password read from a real OpenBao. Needs `METALFORM_CLOUD_INIT` (set by
//! scripts/services/30-cloud-init.sh) and `METALFORM_TEST_VAULT_ADDR` (11-openbao.sh); fails,
//! never skips, without them.
#![cfg(feature = "services")]

use crate::agent_suite;
use crate::manifest_support;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use base64::Engine as _;
use manifest_support::{metalform, repo_root, stderr, stdout};
use metalform::cloudinit::{
    self, AgentBootstrap, AgentInstall, CloudInitInput, DeployUser, HwSyncLayer,
};
use metalform::model::{DataDisks, SiteBundle};
use metalform::secrets::Secret;

fn cloud_init() -> PathBuf {
    let path = std::env::var("METALFORM_CLOUD_INIT").expect(
        "METALFORM_CLOUD_INIT is not set: run scripts/test-all (it sources scripts/services/30-cloud-init.sh)",
    );
    PathBuf::from(path)
}

/// `cloud-init schema --config-file F`: (success, stdout + stderr).
fn schema(file: &Path) -> (bool, String) {
    let out = Command::new(cloud_init())
        .args(["schema", "--config-file"])
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("cloud-init does not run: {e}"));
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The python that runs cloud-init (its shebang), for reading cloud-init's own schema.
fn cloud_init_python() -> String {
    let text = std::fs::read_to_string(cloud_init()).expect("cloud-init is a script");
    text.lines()
        .next()
        .and_then(|l| l.strip_prefix("#!"))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .expect("a #! line")
}

fn output_text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn every_payload_of_the_sample_fleet_passes_cloud_init_schema() {
    let fleet = metalform::manifest::load_fleet(&metalform::source::FleetSource::new(
        repo_root().join("fleet"),
        None,
    ))
    .unwrap()
    .fleet;
    let dir = tempfile::tempdir().unwrap();
    let secrets = dir.path().join("secrets.json");
    // dc1's profile gives each node its own password (kept under deploy-nodes/<host>); dc2's
    // deploy user has none (keys only).
    let mut doc = serde_json::Map::new();
    for node in fleet.nodes.values().filter(|n| n.id.site.as_str() == "dc1") {
        doc.insert(
            format!("kv/maas-sites/dc1/deploy-nodes/{}", node.id.hostname),
            serde_json::json!({"password": format!("{} \"quoted\" $pass", node.id.hostname)}),
        );
    }
    std::fs::write(&secrets, serde_json::Value::Object(doc).to_string()).unwrap();
    let secrets = format!("file://{}", secrets.display());
    let mut files = Vec::new();
    for (i, node) in fleet.nodes.values().enumerate() {
        let id = node.id.to_string();
        let system_id = format!("sys{i:03}");
        let mut variants = vec![(
            "shown",
            vec![
                "--show-secrets",
                "--secrets",
                secrets.as_str(),
                "--agent-url",
                "https://10.176.46.5:8741/",
                "--agent-binary-url",
                "https://artifacts.example/metalform/0.1.0/metalform-agent",
                "--agent-binary-sha256",
                "4f2c5e0d8a7b9c1e3f5a7b9d1c3e5f7a9b1d3c5e7f9a1b3d5c7e9f1a3b5d7c9e",
                "--agent-ca",
                "tests/fixtures/agent-ca.pem",
                "--boot-disk",
                "/dev/disk/by-id/ata-Dell_BOSS-N1_S1A2B3",
            ],
        )];
        // Redacted previews (placeholders) are valid cloud-config too.
        variants.push(("redacted", vec![]));
        for (label, extra) in variants {
            let mut args = vec!["render", "cloud-init", id.as_str(), "--fleet", "fleet"];
            args.extend(["--system-id", system_id.as_str()]);
            args.extend(extra.iter().copied());
            let out = metalform(&repo_root(), &args);
            assert!(out.status.success(), "{id}: {}", stderr(&out));
            let file = dir.path().join(format!(
                "{}-{}-{label}.yaml",
                node.id.site, node.id.hostname
            ));
            std::fs::write(&file, stdout(&out)).unwrap();
            let (ok, report) = schema(&file);
            assert!(ok, "{id} ({label}) is not valid cloud-config:\n{report}");
            assert!(report.contains("Valid cloud-config"), "{report}");
            files.push(file);
        }
    }
    assert_eq!(files.len(), fleet.nodes.len() * 2);
    assert!(files.len() >= 60, "the whole sample fleet: {}", files.len());

    // `cloud-init schema` ignores unknown top-level keys: every key we write must be one a
    // cloud-init module reads.
    let script = r#"
import sys, yaml
from cloudinit.config.schema import get_schema
schema = get_schema()
known = set(schema.get("properties", {}))
for d in schema.get("$defs", {}).values():
    known.update(d.get("properties", {}))
bad = []
for f in sys.argv[1:]:
    for key in yaml.safe_load(open(f)):
        if key not in known:
            bad.append(f"{f}: {key}")
print("\n".join(bad) if bad else "all keys known")
sys.exit(1 if bad else 0)
"#;
    let out = Command::new(cloud_init_python())
        .arg("-c")
        .arg(script)
        .args(&files)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));

    // The checker is not a rubber stamp: a broken user entry is refused.
    let broken = dir.path().join("broken.yaml");
    let text = std::fs::read_to_string(&files[0])
        .unwrap()
        .replace("lock_passwd: false", "lock_passwd: \"maybe\"")
        .replace("lock_passwd: true", "lock_passwd: \"maybe\"");
    std::fs::write(&broken, text).unwrap();
    let (ok, report) = schema(&broken);
    assert!(!ok, "{report}");
    assert!(report.contains("users.1"), "{report}");
}

fn input(
    enroll_url: &str,
    token: &Secret,
    hostname: &str,
    system_id: &str,
    ca_bundle: Option<String>,
) -> CloudInitInput {
    CloudInitInput {
        hostname: hostname.into(),
        system_id: system_id.into(),
        site_bundle: Some(SiteBundle {
            reference: "bundles/dc1-base".into(),
            version: "3".into(),
        }),
        agent: AgentBootstrap {
            enroll_url: enroll_url.into(),
            enroll_token: token.clone(),
            install: AgentInstall {
                binary: None,
                ca_bundle,
            },
        },
        hw_sync: HwSyncLayer {
            maas_url: "http://10.176.46.1:5240/MAAS".into(),
            system_id: system_id.into(),
            interval: Duration::from_secs(900),
        },
        data_disks: DataDisks::Skip,
        boot_disk_hint: None,
        roce: vec![],
        deploy_user: DeployUser {
            name: "hpcadmin".into(),
            password: Some(Secret::new("Deploy-Pa55 with spaces")),
            ssh_keys: vec![
                "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIC8vbWV0YWxmb3JtLWhhcmR3YXJlLXN5bmMtcHVzaA ops@example".into(),
            ],
            policy: metalform::model::DeployUserPolicy {
                sudo: metalform::model::SudoPolicy::Password,
                password: metalform::model::DeployPassword::PerNode,
                ssh_password_login: false,
            },
        },
    }
}

/// The payload's files under a temporary root.
fn materialise(input: &CloudInitInput) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let rendered = cloudinit::render(input).unwrap();
    let stored = base64::engine::general_purpose::STANDARD.encode(rendered.user_data.expose());
    for (path, content) in metalform::sim::host::files_from_user_data(&stored) {
        let target = root.path().join(path.trim_start_matches('/'));
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::write(&target, content).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    root
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_payload_bootstrap_enrolls_with_real_curl() {
    let db = tempfile::tempdir().unwrap();
    let (store, _) = agent_suite::open(&format!(
        "sqlite://{}",
        db.path().join("state.db").display()
    ))
    .await;
    // TLS with a development CA: the payload carries its ca.pem and curl trusts it.
    let server = agent_suite::tls_server(&store, &db.path().join("ca")).await;
    let o = agent_suite::onboarding(&store, "c07u43", "x7k3pa").await;
    let input = input(
        &server.enroll_url(),
        &o.token,
        "c07u43",
        "x7k3pa",
        server.client_ca().map(str::to_owned),
    );
    assert!(input.agent.enroll_url.starts_with("https://"));
    let root = materialise(&input);
    let lib = root.path().join("usr/local/lib/metalform");
    // First boot as runcmd runs it: the site bundle is missing (recorded as failed), then the
    // agent bootstrap, which finds no agent unit and enrolls with curl.
    let run_layer = |args: &[&str]| {
        let root = root.path().to_path_buf();
        let lib = lib.clone();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        async move {
            tokio::task::spawn_blocking(move || {
                Command::new("/bin/sh")
                    .arg(lib.join("run-layer"))
                    .args(&args)
                    .env("METALFORM_ROOT", &root)
                    .output()
                    .unwrap()
            })
            .await
            .unwrap()
        }
    };
    let site = run_layer(&[
        "site-bundle",
        "3",
        &lib.join("site-bundle").display().to_string(),
    ])
    .await;
    assert_eq!(site.status.code(), Some(3), "{}", output_text(&site));
    let agent = run_layer(&[
        "agent-bootstrap",
        "2",
        &lib.join("agent-bootstrap").display().to_string(),
    ])
    .await;
    let log = std::fs::read_to_string(
        root.path()
            .join("var/log/metalform/layer-agent-bootstrap.log"),
    )
    .unwrap_or_default();
    assert!(agent.status.success(), "{}\n{log}", output_text(&agent));

    let enrollment = store
        .agent_enrollment(o.node)
        .await
        .unwrap()
        .expect("curl enrolled the node");
    assert_eq!(enrollment.agent_version, "metalform-bootstrap/2");
    assert_eq!(
        enrollment.layers,
        BTreeMap::from([("site-bundle".to_string(), "failed".to_string())]),
        "the failed site bundle is visible at enrollment"
    );
    let answer: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.path().join("etc/metalform/enrollment.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(answer["node_id"], o.node.to_string());
    let token = Secret::new(answer["agent_token"].as_str().unwrap());
    assert_eq!(
        store
            .authenticate_agent(&token)
            .await
            .unwrap()
            .map(|w| w.node_id),
        Some(o.node)
    );
    let mode = std::fs::metadata(root.path().join("etc/metalform/enrollment.json"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "the agent token file is owner-only");
    let marker =
        std::fs::read_to_string(root.path().join("var/lib/metalform/layers/agent-bootstrap"))
            .unwrap();
    assert!(marker.contains("status=ok"), "{marker}");

    // Booting again with the spent token: curl gets the 401 and the layer records a failure.
    let again = run_layer(&[
        "agent-bootstrap",
        "2",
        &lib.join("agent-bootstrap").display().to_string(),
    ])
    .await;
    assert!(!again.status.success());
    let marker =
        std::fs::read_to_string(root.path().join("var/lib/metalform/layers/agent-bootstrap"))
            .unwrap();
    assert!(marker.contains("status=failed"), "{marker}");
    server.shutdown().await;
}

#[test]
fn openssl_recomputes_the_deploy_users_password_hash() {
    let input = input(
        "http://10.176.46.5:8740/agent/v1/enroll",
        &Secret::new("tok_Abcdefghijklmnopqrstuvwxyz0123456789"),
        "c07u43",
        "x7k3pa",
        None,
    );
    let text = cloudinit::render(&input)
        .unwrap()
        .user_data
        .expose()
        .to_string();
    let hash = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("hashed_passwd: \""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("hashed_passwd line");
    // `$6$rounds=656000$<salt>$<hash>`: openssl reads the rounds from the salt argument.
    let rounds_and_salt = hash
        .splitn(5, '$')
        .skip(2)
        .take(2)
        .collect::<Vec<_>>()
        .join("$");
    assert!(rounds_and_salt.starts_with("rounds=656000$"), "{hash}");
    let out = Command::new("openssl")
        .args([
            "passwd",
            "-6",
            "-salt",
            &rounds_and_salt,
            "Deploy-Pa55 with spaces",
        ])
        .output()
        .expect("openssl runs (scripts/services/30-cloud-init.sh installs it)");
    assert!(out.status.success(), "{}", output_text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), hash);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_secrets_reads_the_deploy_password_from_openbao() {
    let addr = std::env::var("METALFORM_TEST_VAULT_ADDR")
        .expect("METALFORM_TEST_VAULT_ADDR is not set: run scripts/test-all (it starts OpenBao)");
    let token = std::env::var("METALFORM_TEST_VAULT_TOKEN").unwrap_or_else(|_| "root".into());
    // The sample fleet with its references on OpenBao's dev mount `secret/`.
    let dir = tempfile::tempdir().unwrap();
    let fleet = dir.path().join("fleet");
    copy_dir(&repo_root().join("fleet"), &fleet, &|text: String| {
        text.replace("kv/maas-sites/", "secret/maas-sites/")
    });
    let path = format!(
        "secret/maas-sites/dc1/deploy-{}",
        uuid::Uuid::new_v4().simple()
    );
    // A fresh path per run: the dev server outlives one test run.
    let site = fleet.join("sites/dc1.yaml");
    let text = std::fs::read_to_string(&site)
        .unwrap()
        .replace("secret/maas-sites/dc1/deploy", &path);
    std::fs::write(&site, text).unwrap();
    let ca = std::env::var("METALFORM_TEST_VAULT_CACERT").expect(
        "METALFORM_TEST_VAULT_CACERT is not set: run scripts/test-all (OpenBao over https)",
    );
    let vault = metalform::secrets::VaultStore::new(
        &addr,
        Secret::new(token.clone()),
        Some(Path::new(&ca)),
    )
    .unwrap();
    // c07u27's own password (dc1's profile: perNode), under the site's nodePasswords.
    metalform::secrets::SecretStore::write(
        &vault,
        &format!("{path}-nodes/c07u27"),
        &BTreeMap::from([("password".to_string(), Secret::new("from-openbao-Pa55"))]),
    )
    .await
    .unwrap();
    let url = format!("vault://{}", addr.trim_start_matches("https://"));
    let fleet_arg = fleet.display().to_string();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_metalform"))
            .args([
                "render",
                "cloud-init",
                "c07u27",
                "--fleet",
                &fleet_arg,
                "--show-secrets",
                "--secrets",
                &url,
            ])
            .env("VAULT_TOKEN", token)
            .env("VAULT_CACERT", ca)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let hash = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("hashed_passwd: \""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("hashed_passwd line");
    let salt = hash.split('$').nth(3).unwrap();
    assert_eq!(
        cloudinit::sha512_crypt(&Secret::new("from-openbao-Pa55"), salt).expose(),
        hash
    );
    assert!(!text.contains("from-openbao-Pa55"));
}

fn copy_dir(from: &Path, to: &Path, edit: &dyn Fn(String) -> String) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target, edit);
        } else {
            let text = std::fs::read_to_string(entry.path()).unwrap();
            std::fs::write(target, edit(text)).unwrap();
        }
    }
}

/// Every sudo policy renders a rule real `visudo -c` accepts, for the line cloud-init writes
/// (`<user> <rule>` in /etc/sudoers.d/90-cloud-init-users).
#[test]
fn every_sudo_policy_renders_a_rule_visudo_accepts() {
    use metalform::model::{DeployPassword, DeployUserPolicy, SudoPolicy};
    let dir = tempfile::tempdir().unwrap();
    for (sudo, password) in [
        (SudoPolicy::Restricted, None),
        (SudoPolicy::Password, Some("Deploy-Pa55")),
        (SudoPolicy::Passwordless, None),
    ] {
        let mut input = input(
            "https://10.176.46.5:8741/agent/v1/enroll",
            &Secret::new("tok_Abcdefghijklmnopqrstuvwxyz0123456789"),
            "c07u43",
            "x7k3pa",
            None,
        );
        input.deploy_user.password = password.map(Secret::new);
        input.deploy_user.policy = DeployUserPolicy {
            sudo,
            password: if password.is_some() {
                DeployPassword::PerNode
            } else {
                DeployPassword::None
            },
            ssh_password_login: false,
        };
        let text = cloudinit::render(&input)
            .unwrap()
            .user_data
            .expose()
            .to_string();
        let rule = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("sudo: "))
            .map(|r| serde_json::from_str::<String>(r).unwrap_or_else(|_| r.to_owned()))
            .expect("a sudo line");
        let file = dir.path().join(format!("{sudo}"));
        std::fs::write(&file, format!("hpcadmin {rule}\n")).unwrap();
        let out = Command::new("visudo")
            .args(["-c", "-f"])
            .arg(&file)
            .output()
            .expect("visudo runs (scripts/services/30-cloud-init.sh installs sudo)");
        assert!(
            out.status.success(),
            "{sudo}: {rule}\n{}",
            output_text(&out)
        );
    }
}
