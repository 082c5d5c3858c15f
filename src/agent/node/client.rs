//! The agent's side of the wire (docs/agent-protocol.md): enrollment, the task long-poll, lease
//! renewal and result reports over HTTPS, pinned to the CA the host was given. Every answer is
//! sorted into what the agent does next: go on, stop and wait for an operator, or retry later.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use crate::agent::ErrorBody;
use crate::agent::enroll::EnrollResponse;
use crate::agent::tasks::{LeaseAnswer, PollAnswer, ResultAnswer, ResultBody};

/// How a call went.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer<T> {
    /// 200 with its body.
    Ok(T),
    /// 204: nothing (a poll that waited out).
    Empty,
    /// A 4xx the agent must not repeat unchanged: the status and the server's error.
    Refused { status: u16, error: ErrorBody },
    /// The server is down, busy or unreachable: retry with back-off.
    Transient(String),
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("the CA bundle {path}: {message}")]
    Ca { path: String, message: String },
    #[error("cannot build the HTTP client: {0}")]
    Build(String),
}

pub struct Client {
    http: reqwest::Client,
    /// The last clock skew warned about (seconds), so a skewed host is told once, not per call.
    warned_skew: std::sync::atomic::AtomicI64,
}

/// How far the host's clock may be from the control plane's before the agent says so. The
/// protocol never uses the host's clock; people reading logs side by side do.
const SKEW_WARNING: i64 = 300;

impl Client {
    /// A client trusting only `ca_pem` when given, else the system roots.
    pub fn new(ca_pem: Option<(&str, String)>) -> Result<Client, ClientError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(10))
            .pool_max_idle_per_host(2)
            .http1_only()
            .user_agent(concat!("metalform-agent/", env!("CARGO_PKG_VERSION")));
        if let Some((path, pem)) = ca_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem.as_bytes()).map_err(|e| {
                ClientError::Ca {
                    path: path.to_owned(),
                    message: e.to_string(),
                }
            })?;
            if certs.is_empty() {
                return Err(ClientError::Ca {
                    path: path.to_owned(),
                    message: "no certificate in it".into(),
                });
            }
            builder = builder.tls_certs_only(certs);
        }
        Ok(Client {
            http: builder
                .build()
                .map_err(|e| ClientError::Build(e.to_string()))?,
            warned_skew: std::sync::atomic::AtomicI64::new(0),
        })
    }

    async fn send<T: DeserializeOwned>(&self, request: reqwest::RequestBuilder) -> Answer<T> {
        let response = match request.send().await {
            Ok(response) => response,
            Err(err) => return Answer::Transient(describe(&err)),
        };
        self.check_skew(&response);
        let status = response.status().as_u16();
        match status {
            204 => Answer::Empty,
            200 => match response.json::<T>().await {
                Ok(body) => Answer::Ok(body),
                Err(err) => Answer::Transient(format!("an unreadable 200 answer: {err}")),
            },
            s if s >= 500 || s == 408 || s == 429 => {
                Answer::Transient(format!("HTTP {s}: {}", error_of(response).await.message))
            }
            s => Answer::Refused {
                status: s,
                error: error_of(response).await,
            },
        }
    }

    /// Warn when the host's clock is far from the server's (its `Date` header).
    fn check_skew(&self, response: &reqwest::Response) {
        let Some(server) = response
            .headers()
            .get(reqwest::header::DATE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| chrono::DateTime::parse_from_rfc2822(v).ok())
        else {
            return;
        };
        let skew = (chrono::Utc::now() - server.with_timezone(&chrono::Utc)).num_seconds();
        let warned = self.warned_skew.load(std::sync::atomic::Ordering::Relaxed);
        if skew.abs() > SKEW_WARNING && (skew - warned).abs() > SKEW_WARNING {
            self.warned_skew
                .store(skew, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(
                skew_seconds = skew,
                "this host's clock differs from the control plane's; leases do not depend on it, but compare logs with care (fix NTP)"
            );
        }
    }

    pub async fn enroll<B: Serialize>(&self, url: &str, body: &B) -> Answer<EnrollResponse> {
        self.send(
            self.http
                .post(url)
                .json(body)
                .timeout(Duration::from_secs(30)),
        )
        .await
    }

    /// A task poll waiting up to `wait`; `close` asks the server to close the connection after
    /// the answer (a heartbeat of an idle agent holds nothing open until the next one).
    pub async fn poll(
        &self,
        tasks_url: &str,
        token: &str,
        wait: Duration,
        close: bool,
    ) -> Answer<PollAnswer> {
        let url = format!(
            "{}/wait?wait={}",
            tasks_url.trim_end_matches('/'),
            wait.as_secs()
        );
        let mut request = self
            .http
            .get(url)
            .bearer_auth(token)
            .timeout(wait + Duration::from_secs(20));
        if close {
            request = request.header(reqwest::header::CONNECTION, "close");
        }
        self.send(request).await
    }

    pub async fn renew(&self, tasks_url: &str, token: &str, task: Uuid) -> Answer<LeaseAnswer> {
        let url = format!("{}/{task}/lease", tasks_url.trim_end_matches('/'));
        self.send(
            self.http
                .post(url)
                .bearer_auth(token)
                .timeout(Duration::from_secs(30)),
        )
        .await
    }

    pub async fn report(
        &self,
        tasks_url: &str,
        token: &str,
        task: Uuid,
        body: &ResultBody,
    ) -> Answer<ResultAnswer> {
        let url = format!("{}/{task}/result", tasks_url.trim_end_matches('/'));
        self.send(
            self.http
                .post(url)
                .bearer_auth(token)
                .json(body)
                .timeout(Duration::from_secs(30)),
        )
        .await
    }
}

async fn error_of(response: reqwest::Response) -> ErrorBody {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    serde_json::from_str(&text).unwrap_or(ErrorBody {
        error: format!("http_{status}"),
        message: text.chars().take(200).collect(),
    })
}

/// A transport error in a sentence (with its cause: a TLS failure says which).
fn describe(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
