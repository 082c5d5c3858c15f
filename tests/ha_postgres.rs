//! The replica suite on a real PostgreSQL (scripts/services/10-postgres.sh). Fails, never
//! skips, when the service is missing.
#![cfg(feature = "services")]

use crate::ha_suite;
use crate::postgres_support;

use postgres_support::fresh_database;

crate::ha_suite_tests!(fresh_database);

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metalform::daemon::sharing::Sharing;
use metalform::model::SiteName;

/// A TCP proxy to PostgreSQL that can cut every connection and refuse new ones (a store that
/// loses its network) and be restored.
struct Cable {
    port: u16,
    cut: Arc<AtomicBool>,
    links: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Cable {
    async fn to(target: String) -> Cable {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let links: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let (c, l) = (cut.clone(), links.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                if c.load(Ordering::SeqCst) {
                    continue; // dropped: the connection is refused
                }
                let target = target.clone();
                let link = tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                l.lock().unwrap().push(link.abort_handle());
            }
        });
        Cable { port, cut, links }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for link in self.links.lock().unwrap().drain(..) {
            link.abort();
        }
    }

    fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

/// A replica whose store connection is lost mid-pass holds nothing once its leases could have
/// expired (the other replica takes its sites, never both at once), says so, and rejoins when
/// the store answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cut_off_from_the_store_stands_down_and_rejoins() {
    let url = fresh_database().await;
    let parsed = url::Url::parse(&url).unwrap();
    let target = format!("{}:{}", parsed.host_str().unwrap(), parsed.port().unwrap());
    let cable = Cable::to(target).await;
    let mut via = parsed.clone();
    via.set_port(Some(cable.port)).unwrap();
    let ttl = Duration::from_millis(1500);
    let all: BTreeSet<SiteName> = ["dc1", "dc2"].into_iter().map(SiteName::new).collect();
    let cut_off = Sharing::new(ha_suite::open(via.as_str()).await, "daemon@a:1".into(), ttl);
    let other = Sharing::new(ha_suite::open(&url).await, "daemon@b:2".into(), ttl);
    cut_off.tick(&all).await;
    assert!(all.iter().all(|s| cut_off.holds(s)));

    cable.cut();
    both_until(&cut_off, &other, &all, |a, b| {
        all.iter().all(|s| b.holds(s)) && !all.iter().any(|s| a.holds(s))
    })
    .await;
    let standing = cut_off.view()["standing_down"].as_str().unwrap().to_owned();
    assert!(
        standing.starts_with("the store is unreachable (")
            && standing.ends_with("); this replica holds no sites until it answers again"),
        "{standing}"
    );

    cable.restore();
    both_until(&cut_off, &other, &all, |a, b| {
        all.iter().any(|s| a.holds(s)) && all.iter().any(|s| b.holds(s))
    })
    .await;
    assert_eq!(cut_off.view()["standing_down"], serde_json::Value::Null);
}

/// Rounds of both replicas until `done`; no site is ever held by both.
async fn both_until(
    a: &Sharing,
    b: &Sharing,
    all: &BTreeSet<SiteName>,
    done: impl Fn(&Sharing, &Sharing) -> bool,
) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        a.tick(all).await;
        b.tick(all).await;
        for site in all {
            assert!(
                !(a.holds(site) && b.holds(site)),
                "{site} held by both replicas"
            );
        }
        if done(a, b) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} / {}",
            a.view(),
            b.view()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
