//! Status polls of many machines coalesced into one list request (API_REFERENCE §5.4
//! `GET machines/?id=…&id=…`: unknown ids yield fewer results, no error).
//!
//! A wave of onboardings keeps dozens of machines of one MAAS polled at once, each every poll
//! interval, and each poll was a request of its own: most of a wave's MAAS requests, and most
//! of their cost on both sides, were the fixed cost of a request, not the machine's answer.
//! Polls asked for while one list request is under way wait for it to return and then go
//! together in the next one; a poll with none under way goes at once, so a lone poll is not
//! delayed and a crowd of them costs one request per round trip.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::client::MaasClient;
use super::error::MaasError;
use super::machines::{MachineFilter, MachineSummary};

/// Machines asked for in one list request: their ids travel in the query string.
const MOST_PER_REQUEST: usize = 100;

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
}

impl std::fmt::Debug for MachinePolls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MachinePolls")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct QueueState {
    waiting: Vec<(String, oneshot::Sender<Answer>)>,
    sending: bool,
}

impl MachinePolls {
    pub fn new(client: MaasClient) -> Self {
        Self {
            client,
            queue: Arc::default(),
        }
    }

    /// `GET machines/{id}/` as a [`MachineSummary`], for a poll: polls made while another
    /// request of these polls is under way travel together in one `GET machines/?id=…`
    /// (counted as `list_machines`). Errors are those of the machine's own read.
    pub async fn summary(&self, system_id: &str) -> Result<MachineSummary, MaasError> {
        let (answer, answered) = oneshot::channel();
        let start_sending = {
            let mut state = self.queue.lock().expect("poll queue lock");
            state.waiting.push((system_id.to_owned(), answer));
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
            let batch: Vec<(String, oneshot::Sender<Answer>)> = {
                let mut state = self.queue.lock().expect("poll queue lock");
                if state.waiting.is_empty() {
                    state.sending = false;
                    return;
                }
                let n = state.waiting.len().min(MOST_PER_REQUEST);
                state.waiting.drain(..n).collect()
            };
            if let [(system_id, _)] = batch.as_slice() {
                // One poll: the machine's own read, as it would have made.
                let read = client.read_machine_summary(system_id).await;
                let (_, answer) = batch.into_iter().next().expect("one poll");
                let _ = answer.send(Answer::Read(Box::new(read)));
                continue;
            }
            let mut filter = MachineFilter::all();
            for (system_id, _) in &batch {
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
            for (system_id, answer) in batch {
                let _ = answer.send(match listed.get(&system_id) {
                    Some(machine) => Answer::Read(Box::new(Ok(machine.clone()))),
                    None => Answer::ReadItself,
                });
            }
        }
    }
}
