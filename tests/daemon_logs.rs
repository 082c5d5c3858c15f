//! The daemon's JSON log lines (issue 19): a real `metalform daemon` process converges two
//! nodes and stops on SIGTERM; every line of its stderr is one JSON object in which no key
//! appears twice, at any depth (log pipelines keep one of two equal keys, silently).

use crate::daemon_support;
use crate::onboard_support;

use std::collections::BTreeSet;
use std::fmt;
use std::time::{Duration, Instant};

use daemon_support::{DaemonBed, one_site, signal};
use onboard_support::hostname_of;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

/// A JSON value read with a check that no object repeats a key.
struct Unique;

impl<'de> de::Deserialize<'de> for Unique {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueVisitor)
    }
}

struct UniqueVisitor;

impl<'de> Visitor<'de> for UniqueVisitor {
    type Value = Unique;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Unique, A::Error> {
        let mut seen = BTreeSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format!("duplicate key `{key}`")));
            }
            map.next_value::<Unique>()?;
        }
        Ok(Unique)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Unique, A::Error> {
        while seq.next_element::<Unique>()?.is_some() {}
        Ok(Unique)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_str<E>(self, _: &str) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_unit<E>(self) -> Result<Unique, E> {
        Ok(Unique)
    }
}

#[test]
fn the_checker_finds_a_repeated_key() {
    assert!(serde_json::from_str::<Unique>(r#"{"a": {"b": 1, "c": [{"d": 2}]}}"#).is_ok());
    let err = serde_json::from_str::<Unique>(r#"{"fields": {"message": "stage", "message": "x"}}"#)
        .err()
        .unwrap();
    assert!(err.to_string().contains("duplicate key `message`"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_log_line_is_json_without_a_repeated_key() {
    let setup = one_site(83, vec![0, 1]);
    let config = setup.sites[0].config.clone();
    let d = DaemonBed::start(setup, "").await;
    let log = d.bed.dir.path().join("daemon.log");
    let mut child = d.spawn(&log);
    let hosts: Vec<String> = (0..2).map(|i| hostname_of(&config, i)).collect();
    d.converged_hosts("dc1", &hosts, Duration::from_secs(90))
        .await;
    signal(&child, "TERM");
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the daemon did not stop");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let mut stages = 0;
    for line in text.lines() {
        if let Err(err) = serde_json::from_str::<Unique>(line) {
            panic!("{err}: {line}");
        }
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        if value["fields"]["message"] == "stage" {
            assert!(value["fields"]["detail"].is_string(), "{line}");
            stages += 1;
        }
    }
    assert!(stages > 10, "stage lines are logged: {text}");
}
