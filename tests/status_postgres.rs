//! `metalform status --state postgres://…` on a real PostgreSQL (scripts/services/10-postgres.sh).
//! Fails, never skips, when the service is missing.
#![cfg(feature = "services")]

use crate::postgres_support;

use std::process::Command;
use std::sync::Arc;

use metalform::clock::SystemClock;
use metalform::lifecycle::{NodeState, Provider};
use metalform::store::{Actor, NewNode, Store};
use postgres_support::fresh_database;

fn status(url: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_metalform"))
        .args(["status", "--state", url])
        .output()
        .expect("run metalform")
}

#[tokio::test]
async fn empty_postgres_store_twice_then_concurrently() {
    let url = fresh_database().await;
    for _ in 0..2 {
        let out = status(&url);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            "SITE  HOSTNAME  STATE  FLAGS  NODE ID\n\n0 nodes\n"
        );
    }
    // Two processes migrating a fresh database at once.
    let fresh = fresh_database().await;
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| status(&fresh));
        let b = s.spawn(|| status(&fresh));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
}

#[tokio::test]
async fn seeded_postgres_store_lists_nodes() {
    let url = fresh_database().await;
    let store = Store::open(&url, Arc::new(SystemClock)).await.unwrap();
    store
        .create_node(
            &NewNode {
                site: "dc1".into(),
                hostname: "c07u43".into(),
                provider: Provider::Maas,
                status: NodeState::Enrolling,
                sku: None,
                gpus: None,
                ipmi_ip: None,
            },
            &Actor::system("test"),
        )
        .await
        .unwrap();
    store.close().await;
    let out = status(&url);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("dc1   c07u43    enrolling  -"), "{text}");
    assert!(text.ends_with("\n1 node: 1 enrolling\n"), "{text}");
}
