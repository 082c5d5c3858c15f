//! Shared reads of the machines nodes wait on (seed 000 §4.3 WaitForDeployed,
//! WaitForAgentEnrollment; issue 17 "Big waves"): while hundreds of nodes of a site wait for
//! MAAS to finish their deployments, each reading its own machine every poll step costs MAAS
//! (and the executor) one request per node per step. Instead the waiting nodes of a site share
//! one listing of their machines (`GET machines/?id=…`) per step.
//!
//! A waiting node asks for its machine as a listing made after the one it saw last: it never
//! gets older news than its previous pass had, and a listing is made only when some node needs
//! a newer one — about one per poll step however many nodes wait. A listing names the
//! machines asked for since the previous one started; a node that stopped waiting drops out of
//! it by itself. Only waits read through here: a stage that acts on MAAS reads its machine
//! itself, just before acting (000 §4.13).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::provider::maas::{MaasClient, MaasError, Machine, MachineFilter};

/// System ids per listing request (they travel in the query string).
const IDS_PER_REQUEST: usize = 100;

/// One site's shared listing.
#[derive(Debug, Default)]
pub struct SiteWatch {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// System id → when a node last asked for it.
    asked: HashMap<String, Instant>,
    /// The last listing that completed.
    latest: Option<Listing>,
    /// The listing under way: its leader drops the sending end when it is done (or cancelled).
    in_flight: Option<tokio::sync::watch::Receiver<()>>,
}

#[derive(Debug, Clone)]
struct Listing {
    /// When the listing was asked for: what it shows is at least this recent.
    at: Instant,
    /// The machines it asked for.
    ids: Arc<BTreeSet<String>>,
    machines: Arc<HashMap<String, Machine>>,
}

/// What a caller does next.
enum Step {
    Seen(Instant, Box<Machine>),
    Missing,
    Wait(tokio::sync::watch::Receiver<()>),
    Lead(
        Instant,
        Arc<BTreeSet<String>>,
        tokio::sync::watch::Sender<()>,
    ),
}

impl SiteWatch {
    /// The machine `system_id` as a listing made after `after` (the listing the caller saw
    /// last; `None`: one made from now on) shows it, with that listing's time. `None`: the
    /// listing does not show it (deleted, or not visible): read it directly.
    pub async fn machine(
        &self,
        client: &MaasClient,
        system_id: &str,
        after: Option<Instant>,
    ) -> Result<Option<(Instant, Machine)>, MaasError> {
        let after = after.unwrap_or_else(Instant::now);
        loop {
            match self.step(system_id, after) {
                Step::Seen(at, machine) => return Ok(Some((at, *machine))),
                Step::Missing => return Ok(None),
                Step::Wait(mut done) => {
                    // Err: the sender is gone, i.e. the listing ended; look again.
                    let _ = done.changed().await;
                }
                Step::Lead(at, ids, done) => {
                    let listed = list(client, &ids).await;
                    let mut inner = self.lock();
                    inner.in_flight = None;
                    drop(done);
                    let machines = Arc::new(listed?);
                    inner.latest = Some(Listing {
                        at,
                        ids,
                        machines: machines.clone(),
                    });
                    return Ok(machines.get(system_id).map(|m| (at, m.clone())));
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn step(&self, system_id: &str, after: Instant) -> Step {
        let now = Instant::now();
        let mut inner = self.lock();
        inner.asked.insert(system_id.to_owned(), now);
        if let Some(latest) = inner.latest.as_ref().filter(|l| l.at > after) {
            if let Some(machine) = latest.machines.get(system_id) {
                return Step::Seen(latest.at, Box::new(machine.clone()));
            }
            // Named in that listing and not shown: gone. Not named: list again.
            if latest.ids.contains(system_id) {
                return Step::Missing;
            }
        }
        self.next_step(&mut inner, now)
    }

    /// Start a listing of every machine asked for lately, unless one is under way.
    fn next_step(&self, inner: &mut Inner, now: Instant) -> Step {
        if let Some(done) = &inner.in_flight {
            // A leader that was cancelled (its node stopped) dropped its sender: start anew.
            if done.has_changed().is_ok() {
                return Step::Wait(done.clone());
            }
        }
        // Machines asked for since the previous listing started: the nodes still waiting ask
        // once a step; one that stopped waiting drops out (a machine object is tens of
        // kilobytes: a listing must carry only what someone still waits on).
        if let Some(since) = inner.latest.as_ref().map(|l| l.at) {
            inner.asked.retain(|_, asked| *asked >= since);
        }
        let ids: Arc<BTreeSet<String>> = Arc::new(inner.asked.keys().cloned().collect());
        let (sender, receiver) = tokio::sync::watch::channel(());
        inner.in_flight = Some(receiver);
        Step::Lead(now, ids, sender)
    }
}

/// One listing of `ids`, a request per [`IDS_PER_REQUEST`].
async fn list(
    client: &MaasClient,
    ids: &BTreeSet<String>,
) -> Result<HashMap<String, Machine>, MaasError> {
    let ids: Vec<&String> = ids.iter().collect();
    let mut machines = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(IDS_PER_REQUEST) {
        let filter = chunk
            .iter()
            .fold(MachineFilter::all(), |f, id| f.system_id(id.as_str()));
        for machine in client.list_machines(&filter).await? {
            machines.insert(machine.system_id.clone(), machine);
        }
    }
    Ok(machines)
}
