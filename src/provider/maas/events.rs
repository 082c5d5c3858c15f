//! The events query (API_REFERENCE §5.21; seed 000 §4.3 ClassifyDeployFailure: "inspect MAAS
//! machine details + recent MAAS events").
//!
//! Events come newest first. `created` has MAAS's own format (`Fri, 07 Dec. 2018 20:11:08`,
//! no zone), kept as text and parsed on demand so an unexpected format never fails a read.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::client::MaasClient;
use super::de::{null_default, parse_event_time};
use super::error::MaasError;
use super::transport::{Call, Params};

/// An event level. A query returns its level and above (`Audit` returns audit events only).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EventLevel {
    Audit,
    Debug,
    Info,
    Warning,
    Error,
    Critical,
    Other(String),
}

impl EventLevel {
    /// MAAS's spelling (upper case only).
    pub fn as_str(&self) -> &str {
        match self {
            EventLevel::Audit => "AUDIT",
            EventLevel::Debug => "DEBUG",
            EventLevel::Info => "INFO",
            EventLevel::Warning => "WARNING",
            EventLevel::Error => "ERROR",
            EventLevel::Critical => "CRITICAL",
            EventLevel::Other(other) => other,
        }
    }

    fn parse(text: &str) -> Self {
        match text {
            "AUDIT" => EventLevel::Audit,
            "DEBUG" => EventLevel::Debug,
            "INFO" => EventLevel::Info,
            "WARNING" => EventLevel::Warning,
            "ERROR" => EventLevel::Error,
            "CRITICAL" => EventLevel::Critical,
            other => EventLevel::Other(other.to_owned()),
        }
    }
}

impl fmt::Display for EventLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EventLevel {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(|text| EventLevel::parse(&text))
    }
}

impl Serialize for EventLevel {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// One MAAS event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub id: i64,
    /// The machine's system_id (null for events not tied to a node).
    #[serde(default)]
    pub node: Option<String>,
    #[serde(default)]
    pub hostname: Option<String>,
    #[serde(default)]
    pub username: Option<String>,
    pub level: EventLevel,
    /// MAAS's text, e.g. `Fri, 07 Dec. 2018 20:11:08`; see [`Event::created_at`].
    #[serde(default, deserialize_with = "null_default")]
    pub created: String,
    /// The event type's description: `Deploying`, `Node installation failure`…
    #[serde(rename = "type", default, deserialize_with = "null_default")]
    pub event_type: String,
    #[serde(default, deserialize_with = "null_default")]
    pub description: String,
}

impl Event {
    /// `created` as UTC (MAAS 3.6+ writes UTC; older regions wrote their local time).
    pub fn created_at(&self) -> Option<DateTime<Utc>> {
        parse_event_time(&self.created)
    }
}

/// One page of `GET events/?op=query`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventsPage {
    #[serde(default)]
    pub count: u64,
    /// Newest first.
    #[serde(default, deserialize_with = "null_default")]
    pub events: Vec<Event>,
    #[serde(default)]
    pub next_uri: Option<String>,
    #[serde(default)]
    pub prev_uri: Option<String>,
}

impl EventsPage {
    /// The highest event id on the page: pass it as `after` to get only newer events.
    pub fn newest_id(&self) -> Option<i64> {
        self.events.iter().map(|e| e.id).max()
    }
}

/// Filters of the events query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventsQuery {
    /// Machines by system_id (`id`).
    pub system_ids: Vec<String>,
    pub hostnames: Vec<String>,
    pub mac_addresses: Vec<String>,
    /// MAAS's default is `INFO`.
    pub level: Option<EventLevel>,
    /// MAAS's default is 100; more than 1000 is a 400.
    pub limit: Option<u32>,
    /// Only events with an id greater than this (not combinable with `before`).
    pub after: Option<i64>,
    pub before: Option<i64>,
}

impl EventsQuery {
    /// The newest `limit` events of one machine at `level` and above.
    pub fn machine(system_id: impl Into<String>, level: EventLevel, limit: u32) -> Self {
        Self {
            system_ids: vec![system_id.into()],
            level: Some(level),
            limit: Some(limit),
            ..Self::default()
        }
    }

    fn params(&self) -> Params {
        let mut params = Params::new();
        params
            .each("id", &self.system_ids)
            .each("hostname", &self.hostnames)
            .each("mac_address", &self.mac_addresses)
            .opt_text("level", self.level.as_ref().map(EventLevel::as_str))
            .opt_number("limit", self.limit)
            .opt_number("after", self.after)
            .opt_number("before", self.before);
        params
    }
}

impl MaasClient {
    /// `GET events/?op=query`.
    pub async fn query_events(&self, query: &EventsQuery) -> Result<EventsPage, MaasError> {
        self.transport()
            .json(
                Call::get("query_events", &["events"])
                    .op("query")
                    .params(query.params()),
            )
            .await
    }
}
