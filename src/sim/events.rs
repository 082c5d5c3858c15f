//! Machine events and `GET events/?op=query` (API_REFERENCE.md §5.21).
//!
//! Events are kept in id order; a query walks them newest first. `created` uses MAAS's
//! `"%a, %d %b. %Y %H:%M:%S"` format (UTC, no zone).

use chrono::{DateTime, Utc};
use serde::Serialize;

/// Event levels; `AUDIT` is its own class (a query for it returns only audit events).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Debug = 10,
    Info = 20,
    Warning = 30,
    Error = 40,
    Critical = 50,
    Audit = 0,
}

impl Level {
    pub fn parse(text: &str) -> Option<Level> {
        Some(match text {
            "AUDIT" => Level::Audit,
            "DEBUG" => Level::Debug,
            "INFO" => Level::Info,
            "WARNING" => Level::Warning,
            "ERROR" => Level::Error,
            "CRITICAL" => Level::Critical,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Audit => "AUDIT",
            Level::Debug => "DEBUG",
            Level::Info => "INFO",
            Level::Warning => "WARNING",
            Level::Error => "ERROR",
            Level::Critical => "CRITICAL",
        }
    }

    /// Whether an event of `self` is returned by a query at `wanted`.
    pub fn selected_by(self, wanted: Level) -> bool {
        match wanted {
            Level::Audit => self == Level::Audit,
            _ => self != Level::Audit && self as u8 >= wanted as u8,
        }
    }
}

/// One event.
#[derive(Debug, Clone)]
pub struct Event {
    pub id: u64,
    pub system_id: String,
    pub hostname: String,
    pub username: String,
    pub level: Level,
    /// The event type's description (`Deploying`, `Node installation failure`, …).
    pub kind: String,
    pub description: String,
    pub created: DateTime<Utc>,
}

#[derive(Debug, Serialize)]
pub struct EventView<'a> {
    pub username: &'a str,
    pub node: &'a str,
    pub hostname: &'a str,
    pub id: u64,
    pub level: &'static str,
    pub created: String,
    pub r#type: &'a str,
    pub description: &'a str,
}

/// MAAS's `created` format.
pub fn format_created(at: DateTime<Utc>) -> String {
    at.format("%a, %d %b. %Y %H:%M:%S").to_string()
}

impl Event {
    pub fn view(&self) -> EventView<'_> {
        EventView {
            username: &self.username,
            node: &self.system_id,
            hostname: &self.hostname,
            id: self.id,
            level: self.level.as_str(),
            created: format_created(self.created),
            r#type: &self.kind,
            description: &self.description,
        }
    }

    /// `status_message` text derived from this event.
    pub fn status_message(&self) -> String {
        if self.description.is_empty() {
            self.kind.clone()
        } else {
            format!("{} - {}", self.kind, self.description)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_format_and_levels() {
        let at = DateTime::parse_from_rfc3339("2018-12-07T20:11:08Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(format_created(at), "Fri, 07 Dec. 2018 20:11:08");
        assert!(Level::Error.selected_by(Level::Info));
        assert!(!Level::Debug.selected_by(Level::Info));
        assert!(!Level::Audit.selected_by(Level::Debug));
        assert!(Level::Audit.selected_by(Level::Audit));
        assert!(!Level::Info.selected_by(Level::Audit));
    }
}
