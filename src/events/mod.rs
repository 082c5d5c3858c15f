//! Domain-event delivery from the outbox (seed 000 §8.0; docs/daemon.md "Events"; docs/ha.md):
//! the events the store wrote in the transactions that caused them (`node.onboarding.*`,
//! `node.decommission.*`) go to a JSON-lines file or an HTTP webhook, once each, in outbox
//! order.
//!
//! Each sink has a delivery cursor in the store and a delivery lease (`events:<sink>`): of all
//! the replicas sharing the store, only the lease holder delivers, and it moves the cursor past
//! an event only after the sink acknowledged it (the file written and synced, a 2xx from the
//! webhook), fenced by that lease. A sink that was down gets everything after its cursor, in
//! order. A failure is retried with capped exponential backoff; later events wait behind it.
//! A deliverer that dies between the acknowledgement and the cursor leaves one event to go
//! again: the file sink finds it in the file already and skips it; a webhook gets it again with
//! the same `Idempotency-Key`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::io::AsyncWriteExt;

use crate::store::{Lease, OutboxEvent, Store, StoreError};

/// Where events go.
#[derive(Debug, Clone)]
pub enum Sink {
    /// One JSON object per line, appended.
    File(PathBuf),
    /// One `POST` of a JSON object per event; any 2xx acknowledges it.
    Webhook {
        url: url::Url,
        client: reqwest::Client,
    },
}

/// The wire form of an event (one line, or one webhook body).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventMessage<'a> {
    /// The outbox id: the deduplication key.
    pub id: i64,
    #[serde(rename = "type")]
    pub event_type: &'a str,
    pub subject: &'a str,
    pub occurred_at: chrono::DateTime<chrono::Utc>,
    pub data: &'a serde_json::Value,
}

impl<'a> From<&'a OutboxEvent> for EventMessage<'a> {
    fn from(event: &'a OutboxEvent) -> Self {
        Self {
            id: event.id,
            event_type: &event.event_type,
            subject: &event.subject_id,
            occurred_at: event.created_at,
            data: &event.payload,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    #[error("writing {path}: {source}")]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("webhook {url}: {message}")]
    Webhook { url: String, message: String },
}

impl Sink {
    /// A webhook sink with a per-request timeout.
    pub fn webhook(url: url::Url, timeout: Duration) -> Self {
        // The process's TLS provider, as every other HTTPS client here (idempotent).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .expect("an HTTP client with default TLS settings");
        Sink::Webhook { url, client }
    }

    /// Deliver one event; `Ok` only once the sink has it.
    pub async fn deliver(&self, event: &OutboxEvent) -> Result<(), DeliveryError> {
        let message = EventMessage::from(event);
        match self {
            Sink::File(path) => {
                let file_error = |source| DeliveryError::File {
                    path: path.clone(),
                    source,
                };
                if let Some(dir) = path.parent() {
                    tokio::fs::create_dir_all(dir).await.map_err(file_error)?;
                }
                let mut line = serde_json::to_string(&message).expect("JSON");
                line.push('\n');
                let mut file = tokio::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .await
                    .map_err(file_error)?;
                file.write_all(line.as_bytes()).await.map_err(file_error)?;
                file.sync_data().await.map_err(file_error)?;
                Ok(())
            }
            Sink::Webhook { url, client } => {
                // The URL may carry the receiver's token (`?token=…`): shown masked.
                let failed = |message: String| DeliveryError::Webhook {
                    url: crate::sanitize::redact::url(url.as_str()),
                    message: crate::sanitize::redact::text(&message).into_owned(),
                };
                let response = client
                    .post(url.clone())
                    .header("X-Metalform-Event", event.event_type.as_str())
                    .header("X-Metalform-Event-Id", event.id.to_string())
                    .header("Idempotency-Key", idempotency_key(event.id))
                    .json(&message)
                    .send()
                    .await
                    .map_err(|e| failed(e.to_string()))?;
                if response.status().is_success() {
                    Ok(())
                } else {
                    Err(failed(format!("answered {}", response.status())))
                }
            }
        }
    }

    /// The id of the last event already in the sink, where the sink can tell (the file's last
    /// line); a deliverer taking over skips what its predecessor wrote but did not record.
    async fn last_delivered(&self) -> Option<i64> {
        let Sink::File(path) = self else { return None };
        let text = tokio::fs::read(path).await.ok()?;
        let tail = &text[text.len().saturating_sub(64 * 1024)..];
        let line = tail
            .split(|b| *b == b'\n')
            .rev()
            .find(|line| !line.is_empty())?;
        serde_json::from_slice::<serde_json::Value>(line)
            .ok()?
            .get("id")?
            .as_i64()
    }

    /// The sink's name for its delivery cursor and lease.
    pub fn id(&self) -> String {
        match self {
            Sink::File(path) => format!("file:{}", path.display()),
            Sink::Webhook { url, .. } => {
                format!("webhook:{}", crate::sanitize::redact::url(url.as_str()))
            }
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Sink::File(path) => format!("file {}", path.display()),
            Sink::Webhook { url, .. } => {
                format!("webhook {}", crate::sanitize::redact::url(url.as_str()))
            }
        }
    }
}

/// How the delivery loop paces itself.
#[derive(Debug, Clone, Copy)]
pub struct Pacing {
    /// Between outbox reads when there is nothing to deliver.
    pub idle: Duration,
    /// First retry delay after a failure; doubles up to `retry_cap`.
    pub retry_base: Duration,
    pub retry_cap: Duration,
    /// Events read per batch.
    pub batch: i64,
}

impl Default for Pacing {
    fn default() -> Self {
        Self {
            idle: Duration::from_secs(1),
            retry_base: Duration::from_secs(1),
            retry_cap: Duration::from_secs(300),
            batch: 100,
        }
    }
}

/// What a delivery pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delivered {
    pub delivered: usize,
    pub failed: bool,
}

/// Observes deliveries (the daemon counts them).
pub trait DeliveryObserver: Send + Sync {
    fn delivered(&self, _event: &OutboxEvent) {}
    fn failed(&self, _event: &OutboxEvent, _error: &DeliveryError) {}
}

impl DeliveryObserver for () {}

/// The `Idempotency-Key` of an event's delivery: the same on every attempt and replica.
pub fn idempotency_key(event: i64) -> String {
    format!("metalform-event-{event}")
}

/// Delivers the outbox to a sink.
pub struct Outbox {
    store: Store,
    sink: Sink,
    pacing: Pacing,
    observer: Arc<dyn DeliveryObserver>,
    /// Who holds the sink's delivery lease while delivering, and for how long.
    holder: String,
    ttl: Duration,
    /// The delivery lease, and the sink's last event when it was taken.
    lease: tokio::sync::Mutex<Option<(Lease, Option<i64>)>>,
}

impl Outbox {
    pub fn new(
        store: Store,
        sink: Sink,
        pacing: Pacing,
        observer: Arc<dyn DeliveryObserver>,
    ) -> Self {
        Self {
            store,
            sink,
            pacing,
            observer,
            holder: format!(
                "events@{}:{:08x}",
                std::process::id(),
                rand::random::<u32>()
            ),
            ttl: Duration::from_secs(30),
            lease: tokio::sync::Mutex::new(None),
        }
    }

    /// Deliver as `holder` (the replica), holding the sink's lease for `ttl` at a time.
    pub fn holder(mut self, holder: &str, ttl: Duration) -> Self {
        self.holder = holder.to_owned();
        self.ttl = ttl;
        self
    }

    /// Take or renew the sink's delivery lease; `None` while another replica delivers.
    async fn lease(&self) -> Result<Option<(Lease, Option<i64>)>, StoreError> {
        let ttl = chrono::Duration::from_std(self.ttl).unwrap_or(chrono::Duration::seconds(30));
        let name = format!("events:{}", self.sink.id());
        let mut current = self.lease.lock().await;
        match self.store.acquire_lease(&name, &self.holder, ttl).await {
            Ok(lease) => {
                let fresh = current
                    .as_ref()
                    .is_none_or(|(held, _)| held.fencing != lease.fencing);
                let in_sink = match current.as_ref() {
                    Some((_, last)) if !fresh => *last,
                    _ => self.sink.last_delivered().await,
                };
                *current = Some((lease, in_sink));
                Ok(current.clone())
            }
            Err(StoreError::LeaseHeld { .. }) => {
                *current = None;
                Ok(None)
            }
            Err(err) => Err(err),
        }
    }

    /// Deliver the events after the sink's cursor in order, until one fails or none is left;
    /// nothing while another replica holds the sink's delivery lease.
    pub async fn deliver_pending(&self) -> Delivered {
        let mut done = Delivered::default();
        let sink = self.sink.id();
        let mut renewed = tokio::time::Instant::now();
        let (mut lease, mut in_sink) = match self.lease().await {
            Ok(Some(held)) => held,
            Ok(None) => return done,
            Err(err) => {
                tracing::warn!(error = %err, "cannot take the event delivery lease");
                done.failed = true;
                return done;
            }
        };
        loop {
            let events = match self.store.events_for_sink(&sink, self.pacing.batch).await {
                Ok(events) => events,
                Err(err) => {
                    tracing::warn!(error = %err, "cannot read the outbox");
                    done.failed = true;
                    return done;
                }
            };
            if events.is_empty() {
                return done;
            }
            for event in &events {
                if renewed.elapsed() >= self.ttl / 3 {
                    renewed = tokio::time::Instant::now();
                    match self.lease().await {
                        Ok(Some(held)) => (lease, in_sink) = held,
                        Ok(None) => return done,
                        Err(err) => {
                            tracing::warn!(error = %err, "cannot renew the event delivery lease");
                            done.failed = true;
                            return done;
                        }
                    }
                }
                // Written by a deliverer that died before recording it: not written again.
                let already = in_sink.is_some_and(|last| event.id <= last);
                if !already && let Err(err) = self.sink.deliver(event).await {
                    tracing::warn!(event = event.id, event_type = %event.event_type, attempts = event.attempts + 1, error = %err, "event delivery failed; retrying");
                    self.observer.failed(event, &err);
                    let _ = self.store.mark_delivery_failed(event.id).await;
                    done.failed = true;
                    return done;
                }
                if let Err(err) = self
                    .store
                    .mark_delivered_to(&sink, event.id, &lease.fence())
                    .await
                {
                    // Delivered but not recorded: it goes again, with the same idempotency key
                    // (a file sink finds it there and skips it).
                    tracing::warn!(event = event.id, error = %err, "cannot record an event delivered");
                    *self.lease.lock().await = None;
                    done.failed = true;
                    return done;
                }
                if !already {
                    self.observer.delivered(event);
                    done.delivered += 1;
                }
            }
        }
    }

    /// Deliver until `stop` resolves: idle polls when the outbox is empty, capped exponential
    /// backoff after a failure.
    pub async fn run(self, stop: impl std::future::Future<Output = ()>) {
        tokio::pin!(stop);
        let mut failures: u32 = 0;
        tracing::info!(sink = %self.sink.describe(), "delivering domain events");
        loop {
            let pass = self.deliver_pending().await;
            let wait = if pass.failed {
                failures = failures.saturating_add(1);
                crate::backoff::Backoff::new(self.pacing.retry_base, self.pacing.retry_cap)
                    .ceiling(failures)
            } else {
                failures = 0;
                self.pacing.idle
            };
            tokio::select! {
                _ = &mut stop => break,
                _ = tokio::time::sleep(wait) => {}
            }
        }
        // Give the delivery lease up, so another replica delivers at once rather than after
        // the lease's TTL.
        if let Some((lease, _)) = self.lease.lock().await.take()
            && let Err(err) = self.store.release_lease(&lease).await
        {
            tracing::warn!(error = %err, "cannot release the event delivery lease");
        }
    }
}
