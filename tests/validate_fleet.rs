//! `metalform validate` on good fleets: the sample fleet and the quickstart are valid, and the
//! model they resolve to carries every value later stages need (defaults applied, overrides,
//! RoCE, retirement, provenance).

use crate::manifest_support;

use std::net::Ipv4Addr;
use std::time::Duration;

use manifest_support::{metalform, repo_root, stdout};
use metalform::manifest::load_fleet;
use metalform::model::{
    DataDisks, EraseMode, Fleet, Lifecycle, NodeId, PowerSelector, ProfileName, Revision,
    SecretRef, SiteName, SiteStatus,
};
use metalform::source::FleetSource;

fn sample_fleet() -> Fleet {
    let loaded =
        load_fleet(&FleetSource::Directory(repo_root().join("fleet"))).expect("fleet/ is valid");
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    loaded.fleet
}

#[test]
fn the_sample_fleet_validates() {
    let output = metalform(&repo_root(), &["validate", "--fleet", "fleet"]);
    let out = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{out}");
    assert!(
        out.starts_with("fleet `fleet` at working tree (sha256:"),
        "{out}"
    );
    assert!(
        out.trim_end()
            .ends_with("valid — 2 sites, 2 profiles, 39 nodes from 10 files; 0 warnings"),
        "{out}"
    );

    let output = metalform(
        &repo_root(),
        &[
            "validate",
            "--fleet",
            "fleet",
            "--format",
            "json",
            "--deny-warnings",
        ],
    );
    assert_eq!(output.status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(json["valid"], true);
    assert_eq!(
        json["counts"],
        serde_json::json!({"sites": 2, "profiles": 2, "nodes": 39})
    );
    assert_eq!(json["revision"]["kind"], "workingTree");
    assert_eq!(json["errors"], serde_json::json!([]));
}

#[test]
fn the_quickstart_validates() {
    let output = metalform(
        &repo_root(),
        &["validate", "--fleet", "examples/quickstart"],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
    assert!(stdout(&output).contains("valid — 1 site, 1 profile, 3 nodes from 3 files"));
}

#[test]
fn sites_resolve_with_defaults_secrets_and_overrides() {
    let fleet = sample_fleet();
    let dc1 = &fleet.sites[&SiteName::new("dc1")];
    assert_eq!(dc1.maas.url.as_str(), "https://10.176.46.1:5443/MAAS");
    assert_eq!(
        dc1.maas.api_key,
        SecretRef::new("kv/maas-sites/dc1/api-token", Some("token"))
    );
    assert_eq!(dc1.network.pxe_vlan_vid, 46);
    assert!(!dc1.reconcile.prune);
    assert_eq!(dc1.default_profile, Some(ProfileName::new("gpu-default")));
    let dc2 = &fleet.sites[&SiteName::new("dc2")];
    // dc2 leaves status, power type, deploy user and ssh interface to their defaults.
    assert_eq!(dc2.status, SiteStatus::Active);
    assert_eq!(dc2.deploy.user, "hpcadmin");
    assert_eq!(dc2.deploy.ssh_iface, "eno8303");
    assert!(dc2.reconcile.prune);
    assert_eq!(
        dc2.network.upstream_dns,
        [Ipv4Addr::new(10, 180, 0, 53), Ipv4Addr::new(1, 1, 1, 1)]
    );

    // The one override (old BMC firmware) selects c08u12's credentials by IPMI address.
    assert_eq!(dc1.power.overrides.len(), 1);
    assert_eq!(
        dc1.power.overrides[0].selector,
        PowerSelector::IpmiIp(Ipv4Addr::new(10, 176, 16, 212))
    );
    let old = &fleet.nodes[&NodeId::new("dc1", "c08u12")];
    assert_eq!(
        fleet.power_credentials_of(old).unwrap().path,
        "kv/maas-sites/dc1/power/overrides/old-bmc"
    );
    let other = &fleet.nodes[&NodeId::new("dc1", "c08u11")];
    assert_eq!(
        fleet.power_credentials_of(other).unwrap().path,
        "kv/maas-sites/dc1/power/default"
    );
}

#[test]
fn profiles_resolve_with_seed_defaults_and_network_overrides() {
    let fleet = sample_fleet();
    let dc1 = &fleet.profiles[&ProfileName::new("gpu-default")];
    assert_eq!(dc1.storage.data_disks, DataDisks::Initialize);
    assert!(dc1.storage.boot_disk.is_match("DELL BOSS-N1"));
    assert!(dc1.storage.boot_disk.is_match("Micron M.2 SSD"));
    assert!(!dc1.storage.boot_disk.is_match("Samsung PM1733"));
    assert_eq!(dc1.cloud_init.site_bundle.as_ref().unwrap().version, "3");
    assert_eq!(dc1.network.pxe_vlan_vid, 46, "no override: the site's VLAN");

    // dc2-gpu (TOML) writes only storage, release, concurrency and network: the rest are the
    // seed's defaults (000 §3.6/§3.7) and DESIGN's timeouts.
    let dc2 = &fleet.profiles[&ProfileName::new("dc2-gpu")];
    assert_eq!(dc2.site, SiteName::new("dc2"));
    assert_eq!(dc2.image.distro_series, "ubuntu/noble");
    assert_eq!(dc2.image.architecture, "amd64/generic");
    assert!(dc2.roce.enabled);
    assert!(dc2.hardware_sync.required);
    assert_eq!(dc2.hardware_sync.interval, Duration::from_secs(15 * 60));
    assert!(!dc2.discovery.auto_claim_single_new_machine);
    assert!(dc2.deploy.retry_on_datasource_failure);
    assert_eq!(dc2.deploy.max_retry_attempts, 1);
    assert_eq!(dc2.release.erase, EraseMode::Secure);
    assert!(dc2.release.fallback_no_erase);
    assert!(dc2.preflight.strict_pxe);
    assert_eq!(dc2.concurrency.max_parallel, 6);
    assert_eq!(dc2.enrollment.token_ttl, Duration::from_secs(2 * 3600));
    assert_eq!(dc2.timeouts.deploy, Duration::from_secs(60 * 60));
    assert_eq!(dc2.timeouts.hw_sync_health, Duration::from_secs(30 * 60));
    assert_eq!(dc2.cloud_init.site_bundle, None);
    // Site dc2's pxeIface, with the profile's own node interface and VLAN.
    assert_eq!(dc2.network.pxe_iface, "ens19");
    assert_eq!(dc2.network.node_pxe_iface, "eno8403");
    assert_eq!(dc2.network.pxe_vlan_vid, 53);
    assert_eq!(dc2.network_overrides.pxe_iface, None);
}

#[test]
fn nodes_resolve_from_groups_and_single_documents() {
    let fleet = sample_fleet();
    assert_eq!(fleet.nodes.len(), 39);
    assert_eq!(fleet.nodes_of_site(&SiteName::new("dc1")).count(), 26);
    assert_eq!(fleet.nodes_of_site(&SiteName::new("dc2")).count(), 13);

    let member = &fleet.nodes[&NodeId::new("dc1", "c07u30")];
    assert_eq!(member.group.as_ref().unwrap().as_str(), "rack-c07");
    assert_eq!(member.profile, ProfileName::new("gpu-default"));
    assert_eq!(member.bmc.ipmi_ip, Ipv4Addr::new(10, 176, 16, 130));
    let roce: Vec<String> = member
        .roce
        .iter()
        .map(|r| format!("{} {}", r.interface, r.address))
        .collect();
    assert_eq!(
        roce,
        ["enp28s0np0 172.30.9.7/31", "enp29s0np0 172.29.1.7/31"]
    );
    assert_eq!(
        member.provenance.file,
        format!(
            "{}/nodes/dc1/rack-c07.yaml",
            repo_root().join("fleet").display()
        )
    );
    assert_eq!((member.provenance.line, member.provenance.column), (16, 7));

    // The retired node keeps its reason and its own erase mode.
    let retired = &fleet.nodes[&NodeId::new("dc1", "c07u45")];
    assert_eq!(retired.lifecycle, Lifecycle::Retired);
    assert!(
        retired
            .retired_reason
            .as_deref()
            .unwrap()
            .starts_with("mainboard failure")
    );
    assert_eq!(retired.decommission.erase, EraseMode::Secure);
    assert_eq!(retired.decommission.erase_override, Some(EraseMode::Secure));
    assert_eq!(
        retired.profile,
        ProfileName::new("gpu-default"),
        "the site's default profile"
    );
    assert!(retired.group.is_none());

    // A dc2 node takes dc2's profile and its erase mode.
    let toml_node = &fleet.nodes[&NodeId::new("dc2", "a01u20")];
    assert_eq!(toml_node.profile, ProfileName::new("dc2-gpu"));
    assert_eq!(toml_node.reimage.generation, 2);
    assert_eq!(toml_node.decommission.erase, EraseMode::Secure);
    assert_eq!(toml_node.decommission.erase_override, None);
    assert!(fleet.nodes[&NodeId::new("dc2", "a01u03")].protected);
    assert_eq!(
        fleet.nodes[&NodeId::new("dc1", "c07u46")]
            .pxe_mac
            .unwrap()
            .to_string(),
        "3c:ec:ef:12:34:56"
    );
    assert!(matches!(fleet.revision, Revision::WorkingTree { .. }));
}

#[test]
fn warnings_are_separate_and_deny_warnings_fails_on_them() {
    let repo = manifest_support::GitRepo::new();
    repo.copy_dir(&repo_root().join("examples/quickstart"), "fleet");
    // A second profile nobody uses is worth a warning, not an error.
    repo.write(
        "fleet/profiles/spare.yaml",
        "apiVersion: metalform/v1\nkind: Profile\nmetadata: {name: spare, site: lab}\nspec: {storage: {dataDisks: skip}, enrollment: {tokenTtl: 30m}}\n",
    );
    let output = metalform(repo.path(), &["validate", "--fleet", "fleet"]);
    let out = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{out}");
    assert!(out.contains("fleet/profiles/spare.yaml:3:18: warning: metadata.name: profile `spare` is used by no node and is no site's defaultProfile"), "{out}");
    assert!(out.contains("fleet/profiles/spare.yaml:4:59: warning: spec.enrollment.tokenTtl: enrollment.tokenTtl 30m does not outlast timeouts.deploy + timeouts.enrollment (1h30m): a token can expire before the node enrolls"), "{out}");
    assert!(
        out.contains("valid — 1 site, 2 profiles, 3 nodes from 4 files; 2 warnings"),
        "{out}"
    );

    let output = metalform(
        repo.path(),
        &["validate", "--fleet", "fleet", "--deny-warnings"],
    );
    assert_eq!(output.status.code(), Some(1));
    let output = metalform(
        repo.path(),
        &["validate", "--fleet", "fleet", "--format", "json"],
    );
    let json: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(json["valid"], true);
    assert_eq!(json["warnings"][0]["code"], "unused-profile");
    assert_eq!(json["warnings"][0]["line"], 3);
}

#[test]
fn a_missing_fleet_directory_is_a_user_error_with_a_hint() {
    let output = metalform(&repo_root(), &["validate", "--fleet", "no-such-fleet"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        manifest_support::stderr(&output),
        "error: fleet path `no-such-fleet` does not exist\nhint: pass --fleet DIR pointing at a directory with sites/, profiles/ and nodes/\n"
    );
    assert_eq!(stdout(&output), "");
}
