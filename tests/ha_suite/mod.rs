//! Replicas sharing one store (issue 17; docs/ha.md), run on SQLite (hermetic) and PostgreSQL
//! (services): site shares, takeover after a replica stops renewing, rebalancing when one
//! joins, clearing a gone replica's leases, concurrency slots counted in the store, the
//! fleet-wide enrollment URL, a newer schema, and per-sink event cursors.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use metalform::clock::SystemClock;
use metalform::daemon::sharing::{Sharing, agree_enroll_url};
use metalform::lifecycle::{JobKind, JobState};
use metalform::model::SiteName;
use metalform::store::{
    DomainEvent, JobUpdate, NewOnboarding, SlotOutcome, SlotPick, SlotRequest, Store,
};

pub async fn open(url: &str) -> Store {
    Store::open(url, Arc::new(SystemClock)).await.unwrap()
}

fn sites(n: usize) -> BTreeSet<SiteName> {
    (0..n).map(|i| SiteName::new(format!("dc{i}"))).collect()
}

fn held(replicas: &[&Sharing], sites: &BTreeSet<SiteName>) -> Vec<BTreeSet<SiteName>> {
    replicas
        .iter()
        .map(|r| sites.iter().filter(|s| r.holds(s)).cloned().collect())
        .collect()
}

const TTL: Duration = Duration::from_millis(1500);

pub async fn sites_are_shared_taken_over_and_rebalanced(url: String) {
    let store = open(&url).await;
    let all = sites(4);
    let a = Sharing::new(store.clone(), "daemon@a:1".into(), TTL);
    let b = Sharing::new(store.clone(), "daemon@b:2".into(), TTL);
    // Membership first, then shares: two rounds each.
    for _ in 0..2 {
        a.tick(&all).await;
        b.tick(&all).await;
    }
    // A gave up what B's arrival made B's; B takes it at its next round.
    b.tick(&all).await;
    let shares = held(&[&a, &b], &all);
    assert_eq!(shares[0].len(), 2, "{shares:?}");
    assert_eq!(shares[1].len(), 2, "{shares:?}");
    assert!(shares[0].is_disjoint(&shares[1]), "{shares:?}");

    // B stops renewing (killed): within one TTL its sites expire and A takes every site.
    let b_sites = shares[1].clone();
    tokio::time::sleep(TTL + Duration::from_millis(100)).await;
    a.tick(&all).await;
    let now = held(&[&a], &all);
    assert_eq!(now[0], all, "A holds every site after B's lease expired");
    // B's leases were cleared once its sites were held: no row names it any more.
    assert!(
        store
            .lease_holders("")
            .await
            .unwrap()
            .iter()
            .all(|h| h != "daemon@b:2"),
        "{:?}",
        store.lease_holders("").await.unwrap()
    );
    // B comes back (SIGCONT): it does not believe its old leases (its monotonic clock says
    // they ran out), rejoins, and the shares even out again.
    assert!(b_sites.iter().all(|s| !b.holds(s)));
    for _ in 0..2 {
        b.tick(&all).await;
        a.tick(&all).await;
    }
    b.tick(&all).await;
    let shares = held(&[&a, &b], &all);
    assert_eq!((shares[0].len(), shares[1].len()), (2, 2), "{shares:?}");

    // A third replica joins: 4 sites over 3 replicas, at most 2 each, each site held once.
    let c = Sharing::new(store.clone(), "daemon@c:3".into(), TTL);
    for _ in 0..3 {
        c.tick(&all).await;
        a.tick(&all).await;
        b.tick(&all).await;
    }
    let shares = held(&[&a, &b, &c], &all);
    let total: usize = shares.iter().map(BTreeSet::len).sum();
    assert_eq!(total, 4, "{shares:?}");
    assert!(shares.iter().all(|s| s.len() <= 2), "{shares:?}");

    // Leaving (SIGTERM) hands the sites over at once, not after a TTL.
    c.leave().await;
    for _ in 0..2 {
        a.tick(&all).await;
        b.tick(&all).await;
    }
    a.tick(&all).await;
    let shares = held(&[&a, &b], &all);
    assert_eq!(shares[0].len() + shares[1].len(), 4, "{shares:?}");
}

async fn slot(store: &Store, hostname: &str, pick: SlotPick, holder: &str) -> Option<String> {
    let ask = SlotRequest {
        group: "dc1/gpu",
        limit: 2,
        site: "dc1",
        hostname,
    };
    let ttl = chrono::Duration::milliseconds(1500);
    match store.acquire_slot(&ask, pick, holder, ttl).await.unwrap() {
        SlotOutcome::Taken(lease) => Some(lease.name),
        SlotOutcome::Busy | SlotOutcome::NoneLeft => None,
    }
}

/// An onboarding of dc1/`hostname` in `state`.
async fn onboarding(store: &Store, hostname: &str, state: JobState) -> uuid::Uuid {
    let job = store
        .create_onboarding(&NewOnboarding {
            site: "dc1".into(),
            hostname: hostname.into(),
            ..NewOnboarding::default()
        })
        .await
        .unwrap();
    store
        .advance_job(JobKind::Onboarding, job.id, &JobUpdate::new(state))
        .await
        .unwrap();
    job.id
}

pub async fn concurrency_slots_hold_across_processes(url: String) {
    let one = open(&url).await;
    let two = open(&url).await;
    let (a, b) = ("daemon@a:1", "daemon@b:2");
    let first = slot(&one, "n1", SlotPick::Free, a).await.unwrap();
    let second = slot(&two, "n2", SlotPick::Free, b).await.unwrap();
    assert_ne!(first, second);
    // maxParallel 2 is reached, whichever replica asks.
    assert_eq!(slot(&one, "n3", SlotPick::Free, a).await, None);
    assert_eq!(slot(&two, "n3", SlotPick::Free, b).await, None);
    // Another group counts on its own.
    let other = SlotRequest {
        group: "dc2/gpu",
        limit: 2,
        site: "dc2",
        hostname: "n1",
    };
    assert!(matches!(
        two.acquire_slot(&other, SlotPick::Free, b, chrono::Duration::seconds(1))
            .await
            .unwrap(),
        SlotOutcome::Taken(_)
    ));
    // A released slot is free again (its node's job is not running).
    let lease = one.lease(&first).await.unwrap().unwrap();
    assert!(one.release_lease(&lease).await.unwrap());
    assert_eq!(slot(&two, "n3", SlotPick::Free, b).await, Some(first));
    assert_eq!(slot(&one, "n4", SlotPick::Free, a).await, None);
    // A dead holder's slot is free after its TTL.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert!(slot(&one, "n4", SlotPick::Free, a).await.is_some());
}

/// A replica that dies mid-operation leaves its node's machine busy in MAAS: the slot stays
/// with that node while its job runs, for whichever replica resumes it.
pub async fn a_dead_holders_slot_is_kept_for_its_running_node(url: String) {
    let one = open(&url).await;
    let two = open(&url).await;
    let (a, b) = ("daemon@a:1", "daemon@b:2");
    let n1_job = onboarding(&one, "n1", JobState::Running).await;
    let n1_slot = slot(&one, "n1", SlotPick::Free, a).await.unwrap();
    let n2_slot = slot(&one, "n2", SlotPick::Free, a).await.unwrap();
    // Nothing left to n3, whose node never held a slot.
    assert_eq!(slot(&two, "n3", SlotPick::Left, b).await, None);
    assert!(matches!(
        two.acquire_slot(
            &SlotRequest {
                group: "dc1/gpu",
                limit: 2,
                site: "dc1",
                hostname: "n1",
            },
            SlotPick::Left,
            b,
            chrono::Duration::seconds(1),
        )
        .await
        .unwrap(),
        SlotOutcome::Busy
    ));
    // Replica a dies: both leases run out. n2's job is not running (it never started or has
    // ended): its slot is free; n1's is kept for n1.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert_eq!(slot(&two, "n3", SlotPick::Free, b).await, Some(n2_slot));
    assert_eq!(slot(&two, "n4", SlotPick::Free, b).await, None);
    // Cleared with the rest of the dead replica's leases, still kept.
    assert!(one.clear_expired_leases_of(a).await.unwrap() >= 1);
    assert_eq!(slot(&two, "n4", SlotPick::Free, b).await, None);
    // The replica resuming n1 takes its slot back.
    assert_eq!(
        slot(&two, "n1", SlotPick::Left, b).await,
        Some(n1_slot.clone())
    );
    let lease = two.lease(&n1_slot).await.unwrap().unwrap();
    assert!(two.release_lease(&lease).await.unwrap());
    assert_eq!(slot(&two, "n4", SlotPick::Free, b).await, None);
    // n1's job ended: its slot goes to the next node.
    one.advance_job(
        JobKind::Onboarding,
        n1_job,
        &JobUpdate::new(JobState::Completed),
    )
    .await
    .unwrap();
    assert_eq!(slot(&two, "n1", SlotPick::Left, b).await, None);
    assert_eq!(slot(&two, "n4", SlotPick::Free, b).await, Some(n1_slot));
}

pub async fn replicas_agree_on_one_enrollment_url(url: String) {
    let store = open(&url).await;
    let lb = url::Url::parse("https://metalform.example:8443/").unwrap();
    let own = url::Url::parse("http://10.0.0.7:8080/").unwrap();
    agree_enroll_url(&store, Some(&lb), &lb, "daemon@a:1")
        .await
        .unwrap();
    // The same URL again (a restart, another replica): accepted.
    agree_enroll_url(&store, Some(&lb), &lb, "daemon@b:2")
        .await
        .unwrap();
    let err = agree_enroll_url(&store, Some(&own), &own, "daemon@c:3")
        .await
        .unwrap_err();
    assert!(
        err.starts_with(
            "agent.public_url http://10.0.0.7:8080/ differs from the fleet-wide enrollment URL https://metalform.example:8443/ recorded in the store by daemon@a:1 at "
        ),
        "{err}"
    );
    assert!(
        err.ends_with("set [agent] public_url = \"https://metalform.example:8443/\""),
        "{err}"
    );
    let err = agree_enroll_url(&store, None, &own, "daemon@d:4")
        .await
        .unwrap_err();
    assert!(
        err.starts_with(
            "agent.public_url is not set, so this replica's own address http://10.0.0.7:8080/ differs from the fleet-wide enrollment URL https://metalform.example:8443/"
        ),
        "{err}"
    );
    assert_eq!(
        store
            .fleet_setting("enrollment_url")
            .await
            .unwrap()
            .unwrap()
            .value,
        lb.as_str()
    );
}

pub async fn a_newer_schema_stands_a_replica_down_until_it_is_gone(url: String) {
    let store = open(&url).await;
    let all = sites(2);
    let a = Sharing::new(store.clone(), "daemon@a:1".into(), TTL);
    a.tick(&all).await;
    a.tick(&all).await;
    assert!(all.iter().all(|s| a.holds(s)));
    // A newer metalform migrated the store.
    raw(&url, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (99, 'future', '2030-01-01T00:00:00Z')").await;
    a.tick(&all).await;
    assert!(all.iter().all(|s| !a.holds(s)));
    let view = a.view();
    assert_eq!(
        view["standing_down"],
        format!(
            "the store was migrated to schema version 99 by a newer metalform; this replica (schema version {}) takes no more work: upgrade it",
            metalform::store::SCHEMA_VERSION
        )
    );
    // Its leases were given up, so another (upgraded) replica need not wait for them.
    assert!(store.live_leases("site:").await.unwrap().is_empty());
    raw(&url, "DELETE FROM schema_migrations WHERE version = 99").await;
    a.tick(&all).await;
    a.tick(&all).await;
    assert!(all.iter().all(|s| a.holds(s)), "{}", a.view());
    assert_eq!(a.view()["standing_down"], serde_json::Value::Null);
}

/// One statement straight to the database (what another program would do).
async fn raw(url: &str, sql: &str) {
    use sqlx::{AssertSqlSafe, Connection};
    if url.starts_with("sqlite://") {
        let path = url.trim_start_matches("sqlite://");
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{path}"))
            .await
            .unwrap();
        sqlx::query(AssertSqlSafe(sql.to_owned()))
            .execute(&mut conn)
            .await
            .unwrap();
    } else {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::query(AssertSqlSafe(sql.to_owned()))
            .execute(&mut conn)
            .await
            .unwrap();
    }
}

pub async fn each_sink_gets_every_event_once_in_order(url: String) {
    use metalform::events::{Outbox, Pacing, Sink};
    let store = open(&url).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let publish = |n: usize| {
        let store = store.clone();
        async move {
            for i in 0..n {
                store
                    .publish(&DomainEvent {
                        event_type: "node.onboarding.completed".into(),
                        subject_id: format!("job-{i}"),
                        payload: serde_json::json!({"i": i}),
                    })
                    .await
                    .unwrap();
            }
        }
    };
    publish(5).await;
    let pacing = Pacing::default();
    let replica = |name: &str| {
        Outbox::new(
            store.clone(),
            Sink::File(path.clone()),
            pacing,
            Arc::new(()),
        )
        .holder(name, Duration::from_millis(1500))
    };
    let a = replica("daemon@a:1");
    let b = replica("daemon@b:2");
    // Both replicas try: only the lease holder delivers.
    let (da, db) = tokio::join!(a.deliver_pending(), b.deliver_pending());
    assert_eq!(da.delivered + db.delivered, 5, "{da:?} {db:?}");
    let (a, b) = if da.delivered > 0 { (a, b) } else { (b, a) };
    publish(3).await;
    assert_eq!(
        b.deliver_pending().await.delivered,
        0,
        "the other does not hold the sink"
    );
    assert_eq!(a.deliver_pending().await.delivered, 3);
    // The holder dies after writing an event but before recording it: the one who takes over finds
    // it in the file and does not write it twice.
    publish(1).await;
    let next = store
        .events_for_sink(&Sink::File(path.clone()).id(), 10)
        .await
        .unwrap();
    assert_eq!(next.len(), 1);
    Sink::File(path.clone()).deliver(&next[0]).await.unwrap();
    drop(a);
    tokio::time::sleep(Duration::from_millis(1600)).await;
    publish(2).await;
    assert_eq!(b.deliver_pending().await.delivered, 2);
    let ids = ids_in(&path);
    assert_eq!(ids.len(), 11, "{ids:?}");
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "in order, once each: {ids:?}"
    );
    // A second sink that was never up gets everything, in order.
    let other = dir.path().join("late.jsonl");
    let late = Outbox::new(
        store.clone(),
        Sink::File(other.clone()),
        pacing,
        Arc::new(()),
    );
    assert_eq!(late.deliver_pending().await.delivered, 11);
    let late_ids = ids_in(&other);
    assert_eq!(late_ids, ids);
}

/// The event ids in a JSON-lines sink file, in file order.
fn ids_in(path: &std::path::Path) -> Vec<i64> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_i64()
                .unwrap()
        })
        .collect()
}

#[macro_export]
macro_rules! ha_suite_tests {
    ($make_url:path) => {
        $crate::ha_suite_tests!(@cases $make_url;
            sites_are_shared_taken_over_and_rebalanced,
            concurrency_slots_hold_across_processes,
            a_dead_holders_slot_is_kept_for_its_running_node,
            replicas_agree_on_one_enrollment_url,
            a_newer_schema_stands_a_replica_down_until_it_is_gone,
            each_sink_gets_every_event_once_in_order,
        );
    };
    (@cases $make_url:path; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                ha_suite::$case($make_url().await).await;
            }
        )+
    };
}
