//! Work sharing between daemon replicas on one store (issue 17; docs/ha.md).
//!
//! Every replica holds a membership lease `replica:<id>` and the site leases `site:<name>` of
//! its share; it observes, plans, applies and runs the drift pass only for sites it holds. The
//! share is a bounded-load rendezvous: each site goes to the live replica that ranks it highest
//! among those not yet at ⌈sites / replicas⌉, so shares are even, and a replica joining or
//! leaving moves few sites. A replica that stops renewing (killed, stopped, cut off from the
//! store) loses its leases at their expiry and the others take its sites at their next tick;
//! once every site is held again, the leases it left behind are cleared.
//!
//! A replica holds no work while it cannot trust its leases: the store is unreachable for a
//! lease TTL, the store was migrated past this build's schema, or its clock disagrees with the
//! store's (every expiry is judged by the writer's clock). It rejoins when the cause is gone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::model::SiteName;
use crate::store::{Lease, SCHEMA_VERSION, Store, StoreError};

/// The fleet-wide setting holding the URL deployed hosts enroll with.
pub const ENROLL_URL_SETTING: &str = "enrollment_url";

const MEMBER: &str = "replica:";
const SITE: &str = "site:";

/// The sites `me` should hold among `replicas` (bounded-load rendezvous; pure).
pub fn share<'a>(
    sites: impl IntoIterator<Item = &'a SiteName>,
    replicas: &[String],
    me: &str,
) -> BTreeSet<SiteName> {
    let sites: BTreeSet<&SiteName> = sites.into_iter().collect();
    if replicas.is_empty() {
        return BTreeSet::new();
    }
    let cap = sites.len().div_ceil(replicas.len());
    let mut load: BTreeMap<&str, usize> = BTreeMap::new();
    let mut mine = BTreeSet::new();
    for site in sites {
        let mut ranked: Vec<&String> = replicas.iter().collect();
        ranked.sort_by_key(|r| std::cmp::Reverse(rank(site.as_str(), r)));
        let owner = ranked
            .into_iter()
            .find(|r| load.get(r.as_str()).copied().unwrap_or(0) < cap)
            .expect("the cap leaves room for every site");
        *load.entry(owner.as_str()).or_default() += 1;
        if owner == me {
            mine.insert(site.clone());
        }
    }
    mine
}

/// FNV-1a of `site`, a separator and `replica`: stable across builds and hosts.
fn rank(site: &str, replica: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in site.bytes().chain([0]).chain(replica.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// Why a replica holds no work right now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StandDown {
    #[error(
        "the store is unreachable ({error}); this replica holds no sites until it answers again"
    )]
    StoreLost { error: String },
    #[error(
        "the store was migrated to schema version {found} by a newer metalform; this replica (schema version {known}) takes no more work: upgrade it"
    )]
    SchemaNewer { found: i64, known: i64 },
    #[error(
        "this host's clock is {skew_ms} ms {direction} the store's; leases would be misjudged, so this replica holds no sites until the clocks agree (fix NTP)"
    )]
    ClockSkew {
        skew_ms: i64,
        direction: &'static str,
    },
}

/// Whether this host's clock agrees with the store's closely enough to judge leases of `ttl`:
/// the store's time, read between `before` and `after` by this host's clock, must fall in that
/// window widened by the tolerance (a slow answer is not a skewed clock).
pub fn check_clock(
    before: chrono::DateTime<chrono::Utc>,
    after: chrono::DateTime<chrono::Utc>,
    store: chrono::DateTime<chrono::Utc>,
    ttl: Duration,
) -> Result<(), StandDown> {
    let tolerance = chrono::Duration::from_std((ttl / 4).max(Duration::from_millis(500)))
        .unwrap_or(chrono::Duration::seconds(15));
    let skew = if store < before - tolerance {
        before - store
    } else if store > after + tolerance {
        -(store - after)
    } else {
        return Ok(());
    };
    let skew_ms = skew.num_milliseconds();
    Err(StandDown::ClockSkew {
        skew_ms: skew_ms.abs(),
        direction: if skew_ms > 0 { "ahead of" } else { "behind" },
    })
}

struct Held {
    lease: Lease,
    /// By this process's monotonic clock: the lease is not trusted past this instant.
    until: Instant,
}

#[derive(Default)]
struct State {
    held: BTreeMap<SiteName, Held>,
    /// Sites taken since the loop last asked (they are due at once).
    newly: Vec<SiteName>,
    /// The last tick that reached the store.
    reached: Option<Instant>,
    standing_down: Option<StandDown>,
    replicas: Vec<String>,
}

/// This replica's share of the fleet.
pub struct Sharing {
    store: Store,
    replica: String,
    ttl: Duration,
    state: Mutex<State>,
}

impl Sharing {
    pub fn new(store: Store, replica: String, ttl: Duration) -> Self {
        Self {
            store,
            replica,
            ttl,
            state: Mutex::new(State::default()),
        }
    }

    pub fn replica(&self) -> &str {
        &self.replica
    }

    fn chrono_ttl(&self) -> chrono::Duration {
        chrono::Duration::from_std(self.ttl).unwrap_or(chrono::Duration::seconds(60))
    }

    /// Whether this replica holds `site` now (a live lease, by its own monotonic clock).
    pub fn holds(&self, site: &SiteName) -> bool {
        let state = self.state.lock().expect("lock");
        state.standing_down.is_none()
            && state
                .held
                .get(site)
                .is_some_and(|held| held.until > Instant::now())
    }

    /// The replica holding `site` by the store, for messages.
    pub async fn holder_of(&self, site: &SiteName) -> Option<String> {
        self.store
            .lease(&format!("{SITE}{site}"))
            .await
            .ok()
            .flatten()
            .map(|lease| lease.holder)
    }

    /// Sites taken since the last call.
    pub fn take_newly_held(&self) -> Vec<SiteName> {
        std::mem::take(&mut self.state.lock().expect("lock").newly)
    }

    /// For /healthz: sites held, live replicas, and why no work is held, if so.
    pub fn view(&self) -> serde_json::Value {
        let state = self.state.lock().expect("lock");
        serde_json::json!({
            "id": self.replica,
            "sites": state.held.keys().map(|s| s.to_string()).collect::<Vec<_>>(),
            "replicas": state.replicas,
            "standing_down": state.standing_down.as_ref().map(|s| s.to_string()),
        })
    }

    /// One round: renew membership, check schema and clock, take this replica's share and
    /// give up the rest, and clear what gone replicas left once their sites are held.
    pub async fn tick(&self, sites: &BTreeSet<SiteName>) {
        match self.round(sites).await {
            Ok(()) => {
                let mut state = self.state.lock().expect("lock");
                state.reached = Some(Instant::now());
                if let Some(was) = state.standing_down.take() {
                    tracing::info!(target: "metalform::ha", replica = %self.replica, was = %was, "replica rejoined: taking its share of the sites again");
                }
            }
            Err(Fault::Stand(reason)) => {
                // Released while the store answers, so the others need not wait for expiry.
                self.give_up_all().await;
                self.stand_down(reason);
            }
            Err(Fault::Store(error)) => {
                // Lost after a TTL without the store, or as soon as a site's lease lapsed by
                // this replica's clock: it holds nothing then, and says why at once.
                let lost = {
                    let state = self.state.lock().expect("lock");
                    state.reached.is_none_or(|at| at.elapsed() >= self.ttl)
                        || state.held.values().any(|held| held.until <= Instant::now())
                };
                if lost {
                    self.stand_down(StandDown::StoreLost {
                        error: error.to_string(),
                    });
                } else {
                    tracing::warn!(target: "metalform::ha", replica = %self.replica, error = %error, "replica round failed; retrying");
                }
            }
        }
    }

    fn stand_down(&self, reason: StandDown) {
        let mut state = self.state.lock().expect("lock");
        state.held.clear();
        state.newly.clear();
        if state.standing_down.as_ref() != Some(&reason) {
            tracing::error!(target: "metalform::ha", replica = %self.replica, "{reason}");
            state.standing_down = Some(reason);
        }
    }

    async fn round(&self, sites: &BTreeSet<SiteName>) -> Result<(), Fault> {
        let found = self.store.stored_schema_version().await?;
        if found > SCHEMA_VERSION {
            return Err(Fault::Stand(StandDown::SchemaNewer {
                found,
                known: SCHEMA_VERSION,
            }));
        }
        let before = chrono::Utc::now();
        let store_now = self.store.database_now().await?;
        check_clock(before, chrono::Utc::now(), store_now, self.ttl).map_err(Fault::Stand)?;
        let ttl = self.chrono_ttl();
        let started = Instant::now();
        self.store
            .acquire_lease(&format!("{MEMBER}{}", self.replica), &self.replica, ttl)
            .await?;
        let replicas: Vec<String> = self
            .store
            .live_leases(MEMBER)
            .await?
            .into_iter()
            .map(|lease| lease.holder)
            .collect();
        let mine = share(sites, &replicas, &self.replica);
        let held: Vec<(SiteName, Lease)> = {
            let mut state = self.state.lock().expect("lock");
            state.replicas = replicas.clone();
            state
                .held
                .iter()
                .map(|(site, held)| (site.clone(), held.lease.clone()))
                .collect()
        };
        for (site, lease) in held {
            if mine.contains(&site) {
                match self.store.renew_lease(&lease, ttl).await {
                    Ok(lease) => self.keep(site, lease, started, false),
                    Err(StoreError::LeaseLost { .. }) => self.drop_site(&site, "lease lost"),
                    Err(err) => return Err(err.into()),
                }
            } else {
                // Another replica's share now (one joined) or no longer in the fleet.
                self.drop_site(&site, "rebalanced");
                self.store.release_lease(&lease).await?;
            }
        }
        for site in &mine {
            if self.state.lock().expect("lock").held.contains_key(site) {
                continue;
            }
            match self
                .store
                .acquire_lease(&format!("{SITE}{site}"), &self.replica, ttl)
                .await
            {
                Ok(lease) => self.keep(site.clone(), lease, started, true),
                // Its previous owner gives it up at its next round, or its lease expires.
                Err(StoreError::LeaseHeld { .. }) => {}
                Err(err) => return Err(err.into()),
            }
        }
        self.clear_gone(sites, &replicas).await?;
        Ok(())
    }

    fn keep(&self, site: SiteName, lease: Lease, renewed: Instant, new: bool) {
        let mut state = self.state.lock().expect("lock");
        if new {
            tracing::info!(target: "metalform::ha", replica = %self.replica, site = %site, fencing = lease.fencing, "site taken");
            state.newly.push(site.clone());
        }
        state.held.insert(
            site,
            Held {
                lease,
                until: renewed + self.ttl,
            },
        );
    }

    fn drop_site(&self, site: &SiteName, why: &str) {
        tracing::info!(target: "metalform::ha", replica = %self.replica, site = %site, why, "site given up");
        self.state.lock().expect("lock").held.remove(site);
    }

    /// A replica whose membership expired and whose sites are all held by live replicas is
    /// gone and its work taken over: free the leases it left behind.
    async fn clear_gone(
        &self,
        sites: &BTreeSet<SiteName>,
        live: &[String],
    ) -> Result<(), StoreError> {
        let gone: Vec<String> = self
            .store
            .lease_holders(MEMBER)
            .await?
            .into_iter()
            .filter(|holder| !live.contains(holder))
            .collect();
        if gone.is_empty() {
            return Ok(());
        }
        let held: BTreeSet<String> = self
            .store
            .live_leases(SITE)
            .await?
            .into_iter()
            .filter(|lease| live.contains(&lease.holder))
            .map(|lease| lease.name)
            .collect();
        if !sites
            .iter()
            .all(|site| held.contains(&format!("{SITE}{site}")))
        {
            return Ok(());
        }
        for replica in gone {
            let cleared = self.store.clear_expired_leases_of(&replica).await?;
            tracing::info!(target: "metalform::ha", replica = %self.replica, gone = %replica, cleared, "a replica is gone and its sites are held by others: its leases are cleared");
        }
        Ok(())
    }

    async fn give_up_all(&self) {
        let held: Vec<Lease> = {
            let mut state = self.state.lock().expect("lock");
            std::mem::take(&mut state.held)
                .into_values()
                .map(|held| held.lease)
                .collect()
        };
        for lease in held {
            let _ = self.store.release_lease(&lease).await;
        }
        if let Ok(Some(member)) = self.store.lease(&format!("{MEMBER}{}", self.replica)).await
            && member.holder == self.replica
        {
            let _ = self.store.release_lease(&member).await;
        }
    }

    /// Leave at shutdown: every site and the membership are released, so the other replicas
    /// take them at their next round instead of after a TTL.
    pub async fn leave(&self) {
        self.state.lock().expect("lock").standing_down = Some(StandDown::StoreLost {
            error: "shutting down".into(),
        });
        self.give_up_all().await;
    }
}

enum Fault {
    Stand(StandDown),
    Store(StoreError),
}

impl From<StoreError> for Fault {
    fn from(err: StoreError) -> Self {
        Fault::Store(err)
    }
}

/// Agree on the enrollment URL deployed hosts carry: `configured` (`[agent] public_url`) is
/// recorded as the fleet-wide one by the first replica and must equal it on every other; a
/// replica without one may run alone on a SQLite store, where its own address `effective`
/// is used, unless the store already names another URL.
pub async fn agree_enroll_url(
    store: &Store,
    configured: Option<&url::Url>,
    effective: &url::Url,
    replica: &str,
) -> Result<(), String> {
    let differs = |recorded: &crate::store::FleetSetting, ours: &str, what: &str| {
        format!(
            "{what} {ours} differs from the fleet-wide enrollment URL {} recorded in the store by {} at {}; every replica must hand deployed hosts the same address, the load balancer or VIP in front of the replicas: set [agent] public_url = \"{}\"",
            recorded.value,
            recorded.set_by,
            recorded
                .set_at
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            recorded.value
        )
    };
    let store_error = |e: StoreError| format!("cannot read the fleet-wide enrollment URL: {e}");
    match configured {
        Some(url) => {
            let recorded = store
                .claim_fleet_setting(ENROLL_URL_SETTING, url.as_str(), replica)
                .await
                .map_err(store_error)?;
            if recorded.value != url.as_str() {
                return Err(differs(&recorded, url.as_str(), "agent.public_url"));
            }
            Ok(())
        }
        None => {
            if let Some(recorded) = store
                .fleet_setting(ENROLL_URL_SETTING)
                .await
                .map_err(store_error)?
            {
                return Err(differs(
                    &recorded,
                    effective.as_str(),
                    "agent.public_url is not set, so this replica's own address",
                ));
            }
            if store.backend() == crate::store::Backend::Postgres {
                return Err("agent.public_url is not set: replicas sharing a PostgreSQL store need one enrollment URL for the whole fleet, the load balancer or VIP in front of them (a host given one replica's own address cannot enroll once that replica is gone)".into());
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sites(n: usize) -> Vec<SiteName> {
        (0..n).map(|i| SiteName::new(format!("dc{i}"))).collect()
    }

    #[test]
    fn shares_are_even_disjoint_and_cover_every_site() {
        let all = sites(7);
        let replicas: Vec<String> = ["daemon@a:1", "daemon@b:2", "daemon@c:3"]
            .map(String::from)
            .to_vec();
        let shares: Vec<BTreeSet<SiteName>> =
            replicas.iter().map(|r| share(&all, &replicas, r)).collect();
        let mut union = BTreeSet::new();
        for s in &shares {
            assert!(s.len() <= 3 && !s.is_empty(), "{shares:?}");
            for site in s {
                assert!(union.insert(site.clone()), "{site} in two shares");
            }
        }
        assert_eq!(union.len(), 7);
    }

    #[test]
    fn a_replica_leaving_moves_only_its_sites() {
        let all = sites(8);
        let two: Vec<String> = ["daemon@a:1", "daemon@b:2"].map(String::from).to_vec();
        let a_before = share(&all, &two, "daemon@a:1");
        assert_eq!(a_before.len(), 4);
        let alone = share(&all, &two[..1], "daemon@a:1");
        assert_eq!(alone.len(), 8);
        assert!(a_before.is_subset(&alone));
    }

    #[test]
    fn a_skewed_clock_is_named_with_its_direction() {
        let store = chrono::Utc::now();
        let ttl = Duration::from_secs(60);
        let at = |local: chrono::DateTime<chrono::Utc>| check_clock(local, local, store, ttl);
        assert!(at(store + chrono::Duration::seconds(2)).is_ok());
        // A slow answer (read between 20 s before and just after) is no skew.
        assert!(check_clock(store - chrono::Duration::seconds(20), store, store, ttl).is_ok());
        let err = at(store + chrono::Duration::seconds(3600)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "this host's clock is 3600000 ms ahead of the store's; leases would be misjudged, so this replica holds no sites until the clocks agree (fix NTP)"
        );
        let err = at(store - chrono::Duration::seconds(30)).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("this host's clock is 30000 ms behind the store's")
        );
    }
}
