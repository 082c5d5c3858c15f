//! One version of each hashing and encoding crate in the tree (issue 19), read from
//! Cargo.lock. base64: exactly one. sha2: sqlx 0.9 itself needs two (sqlx-core's `migrate`
//! feature, which the `sqlx` crate always enables, is on sha2 0.10; sqlx-postgres is on 0.11),
//! so the test holds that metalform adds none beyond those: every sha2 version in the tree is
//! one that sqlx requires. When sqlx moves sqlx-core to sha2 0.11, drop metalform and sha-crypt
//! to that one and make this `exactly one` too.

use std::collections::{BTreeMap, BTreeSet};

fn packages() -> Vec<toml::Table> {
    let lock: toml::Table = include_str!("../Cargo.lock")
        .parse()
        .expect("Cargo.lock parses");
    lock["package"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_table().unwrap().clone())
        .collect()
}

/// Versions of `name` in the lock file, each with the packages that depend on it.
fn versions(name: &str) -> BTreeMap<String, BTreeSet<String>> {
    let packages = packages();
    let versions: Vec<String> = packages
        .iter()
        .filter(|p| p["name"].as_str() == Some(name))
        .map(|p| p["version"].as_str().unwrap().to_owned())
        .collect();
    let mut out: BTreeMap<String, BTreeSet<String>> = versions
        .iter()
        .map(|v| (v.clone(), BTreeSet::new()))
        .collect();
    for package in &packages {
        let Some(deps) = package.get("dependencies").and_then(|d| d.as_array()) else {
            continue;
        };
        for dep in deps.iter().filter_map(|d| d.as_str()) {
            let mut words = dep.split_whitespace();
            if words.next() != Some(name) {
                continue;
            }
            // `name` alone when only one version is locked, else `name version`.
            let version = words
                .next()
                .map(str::to_owned)
                .unwrap_or_else(|| versions[0].clone());
            out.entry(version)
                .or_default()
                .insert(package["name"].as_str().unwrap().to_owned());
        }
    }
    out
}

#[test]
fn one_base64() {
    let base64 = versions("base64");
    assert_eq!(
        base64.len(),
        1,
        "several base64 versions: {base64:?}. reqwest 0.13.5, hyper-util 0.1.21 and rcgen \
         0.14.10 (through pem 4) moved to 0.23 while sqlx 0.9 is on 0.22: keep them at 0.13.4 / \
         0.1.20 / 0.14.9 (`cargo update -p rcgen --precise 0.14.9`) until sqlx follows"
    );
}

#[test]
fn sha2_versions_are_only_those_sqlx_needs() {
    let sha2 = versions("sha2");
    for (version, users) in &sha2 {
        assert!(
            users.iter().any(|u| u.starts_with("sqlx-")),
            "sha2 {version} is used only by {users:?}, not by sqlx: move them to the version sqlx uses ({sha2:?})"
        );
    }
    assert!(sha2.len() <= 2, "{sha2:?}");
}
