//! The deploy account in the rendered OS (issue 16 point 8, docs/cloud-init.md "deploy-user"):
//! SSH keys only and no password by default, a random password per node only when the profile
//! asks for one (kept in the secret store, hashed with SHA-512 crypt at 656,000 rounds), and
//! sudo as the profile says — never passwordless by default.

use crate::manifest_support;
use crate::onboard_support;

use base64::Engine as _;
use manifest_support::repo_root;
use metalform::cloudinit::{self, CRYPT_ROUNDS, CloudInitInput, NodeRuntime};
use metalform::model::{Fleet, NodeId};
use metalform::secrets::Secret;
use onboard_support::{Bed, Setup, SiteSetup};

fn sample_fleet() -> Fleet {
    metalform::manifest::load_fleet(&metalform::source::FleetSource::new(
        repo_root().join("fleet"),
        None,
    ))
    .unwrap()
    .fleet
}

fn render(fleet: &Fleet, node: &NodeId, password: Option<&str>) -> String {
    let node = &fleet.nodes[node];
    let site = fleet.site_of(node).unwrap();
    let profile = fleet.profile_of(node).unwrap();
    let input = CloudInitInput::for_node(
        site,
        profile,
        node,
        NodeRuntime {
            system_id: "x7k3pa".into(),
            enroll_url: "https://10.176.46.5:8741/agent/v1/enroll".into(),
            enroll_token: Secret::new("tok_Abcdefghijklmnopqrstuvwxyz0123456789"),
            deploy_password: password.map(Secret::new),
            boot_disk_hint: None,
            agent_install: Default::default(),
        },
    );
    cloudinit::render(&input)
        .unwrap()
        .user_data
        .expose()
        .to_owned()
}

#[test]
fn the_deploy_user_logs_in_with_keys_only_and_no_password_by_default() {
    let fleet = sample_fleet();
    // dc2's profile says nothing about the deploy user: the defaults.
    let text = render(&fleet, &NodeId::new("dc2", "a01u20"), None);
    assert!(text.contains("    lock_passwd: true\n"), "{text}");
    assert!(!text.contains("passwd: \""), "no password hash: {text}");
    assert!(text.contains("\nssh_pwauth: false\n"), "{text}");
    assert!(!text.contains("NOPASSWD:ALL"), "{text}");
    assert!(!text.contains("ALL=(ALL:ALL) ALL,"), "{text}");
    assert!(
        text.contains(&format!(
            "    sudo: \"{}\"\n",
            cloudinit::restricted_sudo_rule()
        )),
        "{text}"
    );
    assert!(
        text.contains("    groups: [adm]\n"),
        "not in the sudo group: {text}"
    );
    // A profile must not get a password it did not ask for.
    let node = &fleet.nodes[&NodeId::new("dc2", "a01u20")];
    let input = CloudInitInput::for_node(
        fleet.site_of(node).unwrap(),
        fleet.profile_of(node).unwrap(),
        node,
        NodeRuntime {
            system_id: "x7k3pa".into(),
            enroll_url: "https://10.176.46.5:8741/agent/v1/enroll".into(),
            enroll_token: Secret::new("tok_Abcdefghijklmnopqrstuvwxyz0123456789"),
            deploy_password: None,
            boot_disk_hint: None,
            agent_install: Default::default(),
        },
    );
    assert!(cloudinit::render(&input).is_ok());
}

#[test]
fn a_profile_asking_for_sudo_with_a_password_gets_a_high_round_hash_and_its_keys() {
    let fleet = sample_fleet();
    let text = render(
        &fleet,
        &NodeId::new("dc1", "c07u46"),
        Some("node-own-password"),
    );
    let hash = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("hashed_passwd: \""))
        .and_then(|l| l.strip_suffix('"'))
        .unwrap_or_else(|| panic!("no hashed_passwd in\n{text}"));
    assert!(
        hash.starts_with(&format!("$6$rounds={CRYPT_ROUNDS}$")),
        "{hash}"
    );
    assert!(!text.contains("node-own-password"));
    assert!(text.contains("    lock_passwd: false\n"), "{text}");
    assert!(
        text.contains("    sudo: \"ALL=(ALL:ALL) ALL, (root) NOPASSWD: /usr/bin/install "),
        "{text}"
    );
    assert!(text.contains("\nssh_pwauth: false\n"), "{text}");
    assert!(
        text.contains("    ssh_authorized_keys:\n      - \"ssh-ed25519 AAAA"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_node_gets_its_own_random_password_kept_in_the_secret_store() {
    let setup = Setup::one_site(SiteSetup::generated("dc1", 21, 2, 0))
        .profile("  deployUser: {sudo: password, password: perNode}\n");
    let bed = Bed::start(setup).await;
    let report = bed.executor().run(bed.onboard_all()).await;
    assert_eq!(report.converged(), 2, "{report:?}");
    let secrets: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&bed.secrets_path).unwrap()).unwrap();
    let mut passwords = Vec::new();
    for node in bed.fleet.nodes.values() {
        let host = node.id.hostname.as_str();
        let password = secrets[format!("kv/dc1/deploy-nodes/{host}")]["password"]
            .as_str()
            .unwrap_or_else(|| panic!("no password kept for {host}: {secrets}"))
            .to_owned();
        assert_eq!(password.len(), 24);
        assert!(password.chars().all(|c| c.is_ascii_alphanumeric()));
        // The payload MAAS got carries its hash, and the hash is of that password.
        let stored = bed
            .sim("dc1")
            .with_world(|w| w.find_machine(host).unwrap().user_data.clone())
            .expect("deployed with user_data");
        let user_data = base64::engine::general_purpose::STANDARD
            .decode(stored.trim())
            .map(|b| String::from_utf8(b).unwrap())
            .unwrap_or(stored);
        assert!(
            !user_data.contains(&password),
            "the password itself was sent"
        );
        let hash = user_data
            .lines()
            .find_map(|l| l.trim().strip_prefix("hashed_passwd: \""))
            .and_then(|l| l.strip_suffix('"'))
            .unwrap()
            .to_owned();
        let salt = hash.split('$').nth(3).unwrap();
        assert_eq!(
            cloudinit::sha512_crypt(&Secret::new(password.clone()), salt).expose(),
            hash
        );
        passwords.push(password);
    }
    assert_ne!(passwords[0], passwords[1], "two nodes, two passwords");
}
