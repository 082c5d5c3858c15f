//! Shared helpers of the simulator's integration tests: start a simulator on a manual clock
//! and talk to it with raw, OAuth-signed HTTP (not metalform's MAAS client: the simulator is
//! held to real MAAS, not to our client).
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use chrono::{DateTime, Duration, Utc};
use metalform::clock::{Clock, ManualClock};
use metalform::sim::{self, SimConfig, SimHandle};
use reqwest::Method;
use serde_json::Value;

pub const START: &str = "2026-03-01T12:00:00Z";

pub fn start_time() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(START)
        .unwrap()
        .with_timezone(&Utc)
}

/// A simulator driven by a manual clock, plus a signing HTTP client.
pub struct Sim {
    pub handle: SimHandle,
    pub clock: ManualClock,
    pub http: reqwest::Client,
    pub key: String,
    nonce: AtomicU64,
}

/// A raw HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.text))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn content_type(&self) -> &str {
        self.header("content-type").unwrap_or("")
    }

    /// Asserts a status, showing the body when it differs.
    pub fn expect(self, status: u16) -> Self {
        assert_eq!(self.status, status, "body: {}", self.text);
        self
    }
}

/// A small generated fleet: `n` Ready machines with BOSS disks.
pub fn fleet(n: usize) -> SimConfig {
    let mut config = SimConfig::generated(
        11,
        &sim::FleetOptions {
            machines: n,
            initial: sim::InitialState::Ready,
            no_boss_every: 0,
            unknown: 0,
        },
    );
    config.timings.jitter = 0.0;
    config
}

impl Sim {
    pub async fn start(config: SimConfig) -> Sim {
        let clock = ManualClock::new(start_time());
        let key = config.api_key.clone();
        let handle = sim::start_with_clock(
            config,
            Arc::new(clock.clone()),
            "127.0.0.1:0".parse().unwrap(),
        )
        .await
        .expect("simulator starts");
        Sim {
            handle,
            clock,
            http: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(20))
                .build()
                .unwrap(),
            key,
            nonce: AtomicU64::new(0),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.handle.base_url(), path)
    }

    pub fn api(&self, rest: &str) -> String {
        self.url(&format!("/MAAS/api/2.0/{rest}"))
    }

    /// Moves simulated MAAS time on by `secs` real seconds (the manual clock).
    pub fn advance(&self, secs: i64) {
        self.clock.advance(Duration::seconds(secs));
    }

    pub fn auth_header_with(&self, key: &str) -> String {
        let n = self.nonce.fetch_add(1, Ordering::SeqCst);
        metalform::sim::auth::sign_header(key, &format!("nonce-{n}"), self.clock.now().timestamp())
    }

    pub async fn send(
        &self,
        method: Method,
        url: &str,
        auth: Option<String>,
        form: &[(&str, &str)],
    ) -> Answer {
        let url = if (method == Method::GET || method == Method::DELETE) && !form.is_empty() {
            let query: String = url::form_urlencoded::Serializer::new(String::new())
                .extend_pairs(form)
                .finish();
            let sep = if url.contains('?') { '&' } else { '?' };
            format!("{url}{sep}{query}")
        } else {
            url.to_string()
        };
        let mut request = self.http.request(method.clone(), &url);
        if let Some(auth) = auth {
            request = request.header("Authorization", auth);
        }
        if method != Method::GET && method != Method::DELETE {
            request = request.form(form);
        }
        let response = request.send().await.expect("request reaches the simulator");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap();
        Answer {
            status,
            headers,
            text,
        }
    }

    pub async fn get(&self, rest: &str, query: &[(&str, &str)]) -> Answer {
        let auth = self.auth_header_with(&self.key);
        self.send(Method::GET, &self.api(rest), Some(auth), query)
            .await
    }

    /// `POST rest?op=OP` with form fields.
    pub async fn op(&self, rest: &str, op: &str, form: &[(&str, &str)]) -> Answer {
        let auth = self.auth_header_with(&self.key);
        let url = format!("{}?op={op}", self.api(rest));
        self.send(Method::POST, &url, Some(auth), form).await
    }

    pub async fn post(&self, rest: &str, form: &[(&str, &str)]) -> Answer {
        let auth = self.auth_header_with(&self.key);
        self.send(Method::POST, &self.api(rest), Some(auth), form)
            .await
    }

    pub async fn put(&self, rest: &str, form: &[(&str, &str)]) -> Answer {
        let auth = self.auth_header_with(&self.key);
        self.send(Method::PUT, &self.api(rest), Some(auth), form)
            .await
    }

    pub async fn delete(&self, rest: &str) -> Answer {
        let auth = self.auth_header_with(&self.key);
        self.send(Method::DELETE, &self.api(rest), Some(auth), &[])
            .await
    }

    /// Control API.
    pub async fn control(&self, method: Method, path: &str, body: Option<Value>) -> Answer {
        let mut request = self.http.request(method, self.url(path));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap();
        Answer {
            status,
            headers,
            text,
        }
    }

    pub async fn machine(&self, system_id: &str) -> Value {
        self.get(&format!("machines/{system_id}/"), &[])
            .await
            .expect(200)
            .json()
    }

    pub async fn status_name(&self, system_id: &str) -> String {
        self.machine(system_id).await["status_name"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// System ids in list order.
    pub async fn system_ids(&self) -> Vec<String> {
        self.get("machines/", &[])
            .await
            .expect(200)
            .json()
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["system_id"].as_str().unwrap().to_string())
            .collect()
    }

    pub async fn counters(&self, system_id: &str) -> Value {
        self.control(
            Method::GET,
            &format!("/sim/v1/machines/{system_id}/counters"),
            None,
        )
        .await
        .expect(200)
        .json()
    }
}

/// The real MAAS responses copied into the repository (tests/fixtures/maas, provenance in its
/// SOURCES.md), so a fresh clone needs nothing outside it.
pub fn fixtures_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/maas")
}
