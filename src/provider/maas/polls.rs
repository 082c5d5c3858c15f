//! Status polls of many machines coalesced into one list request (API_REFERENCE §5.4
//! `GET machines/?id=…&id=…`: unknown ids yield fewer results, no error), and status polls
//! answered from MAAS's event log while it records no status change (§5.21; seed 000 §12,
//! "delta-based polling (MAAS events API)").
//!
//! A wave of onboardings keeps dozens of machines of one MAAS polled at once, each every poll
//! interval, and each poll was a request of its own: most of a wave's MAAS requests, and most
//! of their cost on both sides, were the fixed cost of a request, not the machine's answer.
//! Polls asked for while one list request is under way wait for it to return and then go
//! together in the next one; a poll with none under way goes at once, so a lone poll is not
//! delayed and a crowd of them costs one request per round trip.
//!
//! A deployment is polled for many minutes, and each answer is the whole machine object
//! (~28 KB, nearly all of it interfaces and disks) though only its status is wanted. MAAS
//! records every status change of a machine as a `Node changed status` event (DEBUG, from the
//! signal on the machine's status field, `emit_state_transition_event`), so a poll that asks
//! only for the status ([`MachinePolls::status`]) is answered from the machine's last reading
//! while the event log shows no status change (and no warning or error) for it since that
//! reading: one small events query per round instead of the machines. Each reading remembers
//! the newest event id known before it was made (any later event has a higher id); a machine
//! is read again when an event names it, and at least every [`CACHED_IN_A_ROW`]+1 polls
//! whatever the log says, so a change the log misses (an event committed out of id order, a
//! MAAS that records none) is late by a few polls, never lost.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::client::MaasClient;
use super::error::MaasError;
use super::events::{Event, EventLevel, EventsQuery};
use super::machines::{MachineFilter, MachineSummary};

/// Machines asked for in one list request: their ids travel in the query string.
const MOST_PER_REQUEST: usize = 100;

/// Status polls of one machine answered from its last reading in a row, at most; the next one
/// reads it.
pub const CACHED_IN_A_ROW: u32 = 7;

/// Events asked for per query (MAAS's maximum). A full page may have missed newer events: every
/// machine it was asked for is then read.
const EVENTS_PER_QUERY: u32 = 1000;

/// The event type MAAS records for every status change of a machine.
const STATUS_CHANGED: &str = "Node changed status";

/// Rounds after which the reading of a machine no longer polled is dropped.
const FORGET_AFTER_ROUNDS: u64 = 64;

/// What one poll learns from the request it went with.
enum Answer {
    /// The machine as the list (or its own read) answered.
    Read(Box<Result<MachineSummary, MaasError>>),
    /// Not answered (not in the list, or the list failed): the poll reads the machine itself,
    /// so a machine that is gone gets MAAS's own 404 and a failure is the poll's own.
    ReadItself,
}

/// Machine status polls of one MAAS, made through one client: cheap to clone (the clones
/// share the queue), so every node of a site polls through the same one.
#[derive(Clone)]
pub struct MachinePolls {
    client: MaasClient,
    queue: Arc<Mutex<QueueState>>,
    readings: Arc<Mutex<Readings>>,
}

impl std::fmt::Debug for MachinePolls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MachinePolls")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

/// What a poll asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    /// The machine as MAAS answers now.
    Summary,
    /// Its status: the last reading will do while MAAS recorded no status change since.
    Status,
}

#[derive(Default)]
struct QueueState {
    waiting: Vec<(String, Want, oneshot::Sender<Answer>)>,
    sending: bool,
}

/// The machines' last readings, used by the sending task only (one at a time).
#[derive(Default)]
struct Readings {
    /// The newest event id seen in any answer: every event recorded after that answer has a
    /// higher one, so it is the basis of any reading made after it.
    newest_event: Option<i64>,
    by_machine: HashMap<String, Reading>,
    round: u64,
}

struct Reading {
    summary: MachineSummary,
    /// Events of the machine with a higher id came after this reading.
    after_event: i64,
    /// Status polls answered from this reading so far.
    served: u32,
    /// The round the machine was last polled in.
    polled_in: u64,
}

/// Whether `event` may mean that its machine's status changed: MAAS's status-change record, or
/// anything it logged as a warning or worse (a failure marks the machine failed).
fn may_change_status(event: &Event) -> bool {
    event.event_type == STATUS_CHANGED
        || matches!(
            event.level,
            EventLevel::Warning | EventLevel::Error | EventLevel::Critical
        )
}

impl MachinePolls {
    pub fn new(client: MaasClient) -> Self {
        Self {
            client,
            queue: Arc::default(),
            readings: Arc::default(),
        }
    }

    /// `GET machines/{id}/` as a [`MachineSummary`], for a poll: polls made while another
    /// request of these polls is under way travel together in one `GET machines/?id=…`
    /// (counted as `list_machines`). Errors are those of the machine's own read.
    pub async fn summary(&self, system_id: &str) -> Result<MachineSummary, MaasError> {
        self.ask(system_id, Want::Summary).await
    }

    /// [`MachinePolls::summary`] for a poll that decides on the machine's status alone: while
    /// MAAS's event log shows no status change for the machine since its last reading, that
    /// reading answers (up to [`CACHED_IN_A_ROW`] times in a row; see the module doc). Its other
    /// fields (power state, addresses) may then be a few polls old.
    pub async fn status(&self, system_id: &str) -> Result<MachineSummary, MaasError> {
        self.ask(system_id, Want::Status).await
    }

    async fn ask(&self, system_id: &str, want: Want) -> Result<MachineSummary, MaasError> {
        let (answer, answered) = oneshot::channel();
        let start_sending = {
            let mut state = self.queue.lock().expect("poll queue lock");
            state.waiting.push((system_id.to_owned(), want, answer));
            !std::mem::replace(&mut state.sending, true)
        };
        if start_sending {
            // Its own task: a poll that is cancelled must not strand the others waiting on
            // the request it would have made.
            tokio::spawn(self.clone().send_waiting());
        }
        match answered.await {
            Ok(Answer::Read(read)) => *read,
            Ok(Answer::ReadItself) | Err(_) => self.client.read_machine_summary(system_id).await,
        }
    }

    /// Send the waiting polls, a request at a time, until none wait.
    async fn send_waiting(self) {
        let client = &self.client;
        loop {
            let batch: Vec<(String, Want, oneshot::Sender<Answer>)> = {
                let mut state = self.queue.lock().expect("poll queue lock");
                if state.waiting.is_empty() {
                    state.sending = false;
                    return;
                }
                let n = state.waiting.len().min(MOST_PER_REQUEST);
                state.waiting.drain(..n).collect()
            };
            let unchanged = self.unchanged_since_read(&batch).await;
            let basis = self.readings().newest_event;
            let mut to_read = Vec::new();
            for (system_id, want, answer) in batch {
                let cached = (want == Want::Status && unchanged.contains(&system_id))
                    .then(|| self.serve_cached(&system_id))
                    .flatten();
                match cached {
                    Some(summary) => {
                        let _ = answer.send(Answer::Read(Box::new(Ok(summary))));
                    }
                    None => to_read.push((system_id, answer)),
                }
            }
            if let [(system_id, _)] = to_read.as_slice() {
                // One poll: the machine's own read, as it would have made.
                let read = client.read_machine_summary(system_id).await;
                if let Ok(summary) = &read {
                    self.remember(summary, basis);
                }
                let (_, answer) = to_read.into_iter().next().expect("one poll");
                let _ = answer.send(Answer::Read(Box::new(read)));
                continue;
            }
            if to_read.is_empty() {
                continue;
            }
            let mut filter = MachineFilter::all();
            for (system_id, _) in &to_read {
                if !filter.system_ids.contains(system_id) {
                    filter.system_ids.push(system_id.clone());
                }
            }
            let listed: HashMap<String, MachineSummary> =
                match client.list_machine_summaries(&filter).await {
                    Ok(machines) => machines
                        .into_iter()
                        .map(|m| (m.system_id.clone(), m))
                        .collect(),
                    Err(_) => HashMap::new(),
                };
            for summary in listed.values() {
                self.remember(summary, basis);
            }
            for (system_id, answer) in to_read {
                let _ = answer.send(match listed.get(&system_id) {
                    Some(machine) => Answer::Read(Box::new(Ok(machine.clone()))),
                    None => Answer::ReadItself,
                });
            }
        }
    }

    fn readings(&self) -> std::sync::MutexGuard<'_, Readings> {
        self.readings.lock().expect("poll readings lock")
    }

    /// The machines of the batch's status polls whose last reading still holds by MAAS's event
    /// log: one events query for them since the oldest of their readings. It also moves the
    /// newest event known (the basis of the readings this round makes); a failed query leaves
    /// every machine to be read.
    async fn unchanged_since_read(
        &self,
        batch: &[(String, Want, oneshot::Sender<Answer>)],
    ) -> HashSet<String> {
        let (known, after, newest_known) = {
            let mut readings = self.readings();
            readings.round += 1;
            let round = readings.round;
            let mut known: HashMap<String, i64> = HashMap::new();
            for (system_id, want, _) in batch {
                if let Some(reading) = readings.by_machine.get_mut(system_id) {
                    reading.polled_in = round;
                    if *want == Want::Status && reading.served < CACHED_IN_A_ROW {
                        known.insert(system_id.clone(), reading.after_event);
                    }
                }
            }
            if round.is_multiple_of(FORGET_AFTER_ROUNDS) {
                readings
                    .by_machine
                    .retain(|_, r| round - r.polled_in < FORGET_AFTER_ROUNDS);
            }
            let wants_status = batch.iter().any(|(_, want, _)| *want == Want::Status);
            if !wants_status {
                return HashSet::new();
            }
            let after = known.values().min().copied();
            (known, after, readings.newest_event)
        };
        let query = match after {
            Some(after) => EventsQuery {
                system_ids: known.keys().cloned().collect(),
                level: Some(EventLevel::Debug),
                limit: Some(EVENTS_PER_QUERY),
                after: Some(after),
                ..EventsQuery::default()
            },
            // Nothing to check yet: only the newest event of the region, the basis of the
            // readings about to be made.
            None if newest_known.is_none() => EventsQuery {
                level: Some(EventLevel::Debug),
                limit: Some(1),
                ..EventsQuery::default()
            },
            None => return HashSet::new(),
        };
        let Ok(page) = self.client.query_events(&query).await else {
            return HashSet::new();
        };
        let newest = page.newest_id().into_iter().chain(after).max().unwrap_or(0);
        let mut readings = self.readings();
        readings.newest_event = Some(readings.newest_event.map_or(newest, |n| n.max(newest)));
        if after.is_none() || page.events.len() >= EVENTS_PER_QUERY as usize {
            return HashSet::new();
        }
        let mut unchanged: HashSet<String> = known.keys().cloned().collect();
        for event in page.events.iter().filter(|e| may_change_status(e)) {
            if let Some(node) = &event.node
                && known
                    .get(node)
                    .is_some_and(|read_after| event.id > *read_after)
            {
                unchanged.remove(node);
            }
        }
        unchanged
    }

    /// The machine's last reading for one more status poll, counted.
    fn serve_cached(&self, system_id: &str) -> Option<MachineSummary> {
        let mut readings = self.readings();
        let reading = readings.by_machine.get_mut(system_id)?;
        reading.served += 1;
        Some(reading.summary.clone())
    }

    /// Keep a reading made after the event `basis` (none known: it cannot be checked later, so
    /// it is not kept).
    fn remember(&self, summary: &MachineSummary, basis: Option<i64>) {
        let Some(after_event) = basis else {
            return;
        };
        let mut readings = self.readings();
        let polled_in = readings.round;
        readings.by_machine.insert(
            summary.system_id.clone(),
            Reading {
                summary: summary.clone(),
                after_event,
                served: 0,
                polled_in,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(event_type: &str, level: EventLevel) -> Event {
        Event {
            id: 7,
            node: Some("abc123".into()),
            hostname: None,
            username: None,
            level,
            created: String::new(),
            event_type: event_type.into(),
            description: String::new(),
        }
    }

    #[test]
    fn status_changes_and_failures_mean_a_read_other_events_do_not() {
        assert!(may_change_status(&event(STATUS_CHANGED, EventLevel::Debug)));
        assert!(may_change_status(&event(
            "Marking node failed",
            EventLevel::Error
        )));
        assert!(may_change_status(&event(
            "Failed to query node's BMC",
            EventLevel::Warning
        )));
        assert!(!may_change_status(&event("PXE Request", EventLevel::Debug)));
        assert!(!may_change_status(&event(
            "Installing OS",
            EventLevel::Info
        )));
    }
}
