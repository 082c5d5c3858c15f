//! Maintenance windows (issue 18): when a site or NodeGroup lets metalform disrupt its nodes.
//! A window opens at each time its cron-like `schedule` names, in its `timeZone`, and stays
//! open for `duration`. Disruptive actions (redeploy, release, erase, power off, reboot) wait
//! for an open window; onboarding new machines does not, unless the window says so.
//!
//! Evaluation is pure: the caller passes the clock as a value (the planner takes it from the
//! observed snapshot), so plans stay deterministic.

use std::fmt;
use std::str::FromStr as _;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::duration;
use super::keyword::keyword_enum;

keyword_enum!(
    /// `onboarding`: whether onboarding new machines also waits for the window.
    WindowOnboarding {
        /// New machines are onboarded whenever they appear (default).
        Anytime => "anytime",
        /// New machines are onboarded only while the window is open too.
        InWindow => "inWindow",
    }
);

/// A five-field cron expression (minute hour day-of-month month day-of-week; names such as
/// `SAT` and `JAN`, lists, ranges and steps), parsed once.
#[derive(Clone)]
pub struct Schedule {
    text: String,
    cron: croner::Cron,
}

/// Why a schedule or time zone was refused; shown to the operator as is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    #[error(
        "`{text}` is not a cron schedule: {reason} (five fields: minute hour day-of-month month day-of-week, e.g. \"0 22 * * SAT\")"
    )]
    Schedule { text: String, reason: String },
    #[error(
        "`{0}` is not a time zone of the IANA database (e.g. Europe/Berlin, America/New_York, UTC)"
    )]
    TimeZone(String),
}

/// The five fields of a schedule, in order.
const FIELDS: [&str; 5] = ["minute", "hour", "day-of-month", "month", "day-of-week"];

impl Schedule {
    pub fn parse(text: &str) -> Result<Self, WindowError> {
        let refuse = |reason: String| WindowError::Schedule {
            text: text.to_owned(),
            reason,
        };
        // Five fields exactly: seconds and years are not part of a maintenance schedule.
        let fields = text.split_whitespace().count();
        if fields != 5 && !text.trim_start().starts_with('@') {
            return Err(refuse(format!("it has {fields} field(s)")));
        }
        let parser = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Disallowed)
            .year(croner::parser::Year::Disallowed)
            .build();
        let cron = parser.parse(text).map_err(|e| {
            // Name the field that is wrong: parse each one alone among wildcards.
            let fields: Vec<&str> = text.split_whitespace().collect();
            let culprit = FIELDS.iter().enumerate().find(|(i, _)| {
                let mut probe = ["*"; 5];
                probe[*i] = fields.get(*i).copied().unwrap_or("*");
                parser.parse(&probe.join(" ")).is_err()
            });
            match culprit {
                Some((i, name)) => refuse(format!("the {name} field `{}`: {e}", fields[i])),
                None => refuse(e.to_string()),
            }
        })?;
        Ok(Self {
            text: text.to_owned(),
            cron,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Schedule({:?})", self.text)
    }
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Serialize for Schedule {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Schedule {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(deserializer)?;
        Schedule::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// An IANA time zone (`Europe/Berlin`, `UTC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeZone(chrono_tz::Tz);

impl TimeZone {
    pub fn parse(text: &str) -> Result<Self, WindowError> {
        chrono_tz::Tz::from_str(text)
            .map(TimeZone)
            .map_err(|_| WindowError::TimeZone(text.to_owned()))
    }

    pub fn name(&self) -> &'static str {
        self.0.name()
    }

    /// Every zone name, for "did you mean" hints.
    pub fn names() -> impl Iterator<Item = &'static str> {
        chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name())
    }
}

impl Serialize for TimeZone {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for TimeZone {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(deserializer)?;
        TimeZone::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// One maintenance window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceWindow {
    /// Unique among the windows of its site or NodeGroup; plans name it.
    pub name: String,
    /// When it opens.
    pub schedule: Schedule,
    /// How long it stays open.
    #[serde(with = "duration")]
    pub duration: Duration,
    pub time_zone: TimeZone,
    pub onboarding: WindowOnboarding,
}

/// How far back a window's last opening is looked for: a schedule that fires less than once a
/// year is not a maintenance window anyone waits for.
const LOOKBACK: chrono::Duration = chrono::Duration::days(400);

impl MaintenanceWindow {
    /// When the window opened and when it closes, if it is open at `now`.
    pub fn open_at(&self, now: DateTime<Utc>) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let local = now.with_timezone(&self.time_zone.0);
        let opened = self
            .schedule
            .cron
            .find_previous_occurrence(&local, true)
            .ok()?
            .with_timezone(&Utc);
        if now - opened > LOOKBACK {
            return None;
        }
        let closes = opened + chrono::Duration::from_std(self.duration).ok()?;
        (now < closes).then_some((opened, closes))
    }

    /// The next time the window opens after `now`.
    pub fn next_opening(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = now.with_timezone(&self.time_zone.0);
        self.schedule
            .cron
            .find_next_occurrence(&local, false)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }
}

/// Where a set of windows stands at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowState {
    /// No window applies: nothing waits.
    Unrestricted,
    /// This window is open until `closes`.
    Open {
        window: String,
        closes: DateTime<Utc>,
    },
    /// All are closed; `window` opens next, at `opens` (`None`: none of them opens again).
    Closed {
        window: String,
        opens: Option<DateTime<Utc>>,
    },
}

/// The state of `windows` at `now`: open if any is (the one closing last), else the one
/// opening soonest.
pub fn window_state<'w>(
    windows: impl IntoIterator<Item = &'w MaintenanceWindow>,
    now: DateTime<Utc>,
) -> WindowState {
    let mut open: Option<(&str, DateTime<Utc>)> = None;
    let mut next: Option<(&str, Option<DateTime<Utc>>)> = None;
    for window in windows {
        if let Some((_, closes)) = window.open_at(now) {
            if open.is_none_or(|(_, c)| closes > c) {
                open = Some((&window.name, closes));
            }
            continue;
        }
        let opens = window.next_opening(now);
        let sooner = match (next, opens) {
            (None, _) => true,
            (Some((_, None)), Some(_)) => true,
            (Some((_, Some(current))), Some(candidate)) => candidate < current,
            _ => false,
        };
        if sooner {
            next = Some((&window.name, opens));
        }
    }
    match (open, next) {
        (Some((window, closes)), _) => WindowState::Open {
            window: window.to_owned(),
            closes,
        },
        (None, Some((window, opens))) => WindowState::Closed {
            window: window.to_owned(),
            opens,
        },
        (None, None) => WindowState::Unrestricted,
    }
}

/// `3h12m`, `2d4h`, `45m`, `under a minute`: how long until `then`, for plans.
pub fn until(now: DateTime<Utc>, then: DateTime<Utc>) -> String {
    let minutes = (then - now).num_minutes();
    if minutes < 1 {
        return "under a minute".to_owned();
    }
    let (days, hours, minutes) = (minutes / 1440, minutes % 1440 / 60, minutes % 60);
    let mut text = String::new();
    if days > 0 {
        text.push_str(&format!("{days}d"));
    }
    if hours > 0 {
        text.push_str(&format!("{hours}h"));
    }
    if minutes > 0 && days == 0 {
        text.push_str(&format!("{minutes}m"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn window(schedule: &str, hours: u64, tz: &str) -> MaintenanceWindow {
        MaintenanceWindow {
            name: "sat-night".into(),
            schedule: Schedule::parse(schedule).unwrap(),
            duration: Duration::from_secs(hours * 3600),
            time_zone: TimeZone::parse(tz).unwrap(),
            onboarding: WindowOnboarding::Anytime,
        }
    }

    #[test]
    fn a_window_is_open_for_its_duration_in_its_time_zone() {
        // Saturdays 22:00 Berlin (CEST in June: 20:00 UTC), four hours.
        let w = window("0 22 * * SAT", 4, "Europe/Berlin");
        let saturday = t("2026-06-06T19:59:00Z");
        assert_eq!(w.open_at(saturday), None);
        assert_eq!(w.next_opening(saturday), Some(t("2026-06-06T20:00:00Z")));
        assert_eq!(
            w.open_at(t("2026-06-06T21:30:00Z")),
            Some((t("2026-06-06T20:00:00Z"), t("2026-06-07T00:00:00Z")))
        );
        assert_eq!(w.open_at(t("2026-06-07T00:00:00Z")), None);
        // In January Berlin is UTC+1.
        assert_eq!(
            w.next_opening(t("2026-01-05T00:00:00Z")),
            Some(t("2026-01-10T21:00:00Z"))
        );
    }

    #[test]
    fn the_state_of_several_windows_and_how_long_to_wait() {
        let a = window("0 22 * * SAT", 4, "UTC");
        let mut b = window("0 3 * * *", 1, "UTC");
        b.name = "nightly".into();
        let now = t("2026-06-03T23:48:00Z");
        assert_eq!(
            window_state([&a, &b], now),
            WindowState::Closed {
                window: "nightly".into(),
                opens: Some(t("2026-06-04T03:00:00Z"))
            }
        );
        assert_eq!(until(now, t("2026-06-04T03:00:00Z")), "3h12m");
        assert_eq!(
            window_state([&a, &b], t("2026-06-04T03:10:00Z")),
            WindowState::Open {
                window: "nightly".into(),
                closes: t("2026-06-04T04:00:00Z")
            }
        );
        assert_eq!(window_state([], now), WindowState::Unrestricted);
        assert_eq!(until(now, now + chrono::Duration::days(2)), "2d");
    }

    #[test]
    fn bad_schedules_and_zones_say_what_is_wrong() {
        assert_eq!(
            Schedule::parse("0 22 * *").unwrap_err().to_string(),
            "`0 22 * *` is not a cron schedule: it has 4 field(s) (five fields: minute hour day-of-month month day-of-week, e.g. \"0 22 * * SAT\")"
        );
        assert!(
            Schedule::parse("0 25 * * SAT")
                .unwrap_err()
                .to_string()
                .starts_with("`0 25 * * SAT` is not a cron schedule: the hour field `25`: ")
        );
        assert_eq!(
            TimeZone::parse("Europe/Berlim").unwrap_err().to_string(),
            "`Europe/Berlim` is not a time zone of the IANA database (e.g. Europe/Berlin, America/New_York, UTC)"
        );
    }
}
