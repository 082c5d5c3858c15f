//! What the Redfish suites share: a media server on loopback and the real peers' settings.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use metalform::clock::Clock;
use metalform::provider::redfish::media::{self, MediaService, MediaStore, UrlSigner};
use metalform::secrets::Secret;

/// The signing key of the test media servers.
pub const MEDIA_KEY: &str = "test-media-key-0123456789abcdef0";

/// Serves `media::router` over `store` on 127.0.0.1 (a free port) until the runtime ends.
pub async fn serve_media(
    store: MediaStore,
    clock: Arc<dyn Clock>,
) -> (SocketAddr, Arc<MediaService>) {
    let service = Arc::new(MediaService {
        store,
        signer: UrlSigner::new(Secret::new(MEDIA_KEY)),
        clock,
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = media::router(service.clone());
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (addr, service)
}

/// The xorriso of the services run (scripts/services/50-xorriso.sh); fails when unset.
pub fn xorriso() -> PathBuf {
    let path = std::env::var("METALFORM_XORRISO").expect(
        "METALFORM_XORRISO is not set: run scripts/test-all (it sources scripts/services/50-xorriso.sh)",
    );
    let path = PathBuf::from(path);
    assert!(
        path.exists(),
        "METALFORM_XORRISO={} does not exist",
        path.display()
    );
    path
}

/// A plain HTTP client (the crate builds reqwest without a default TLS provider).
pub fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

use std::sync::Mutex;
use std::time::Duration;

use metalform::provider::redfish::client::{Endpoint, RedfishClient};
use metalform::provider::redfish::settings::RedfishSettings;
use metalform::secrets::PowerCredentials;

/// Client settings for simulated BMCs running 100× faster than real ones.
pub fn fast_settings() -> RedfishSettings {
    RedfishSettings {
        timeout: Duration::from_secs(2),
        retries: 3,
        base_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
        reset_grace: Duration::from_secs(2),
        poll_interval: Duration::from_millis(10),
        settle_after_reset: Some(Duration::from_millis(250)),
        insecure_tls: false,
    }
}

pub fn login(user: &str, pass: &str) -> PowerCredentials {
    PowerCredentials {
        user: user.into(),
        pass: pass.into(),
    }
}

/// A client of the BMC at `url`.
pub fn client(
    url: &str,
    credentials: PowerCredentials,
    settings: RedfishSettings,
) -> RedfishClient {
    RedfishClient::new(Endpoint::new(url, credentials).unwrap(), settings)
        .with_jitter(Arc::new(metalform::provider::maas::SeededJitter::new(1)))
}

/// Images served over loopback through the real media router: `url(name)` signs a URL.
pub struct ImageServer {
    pub addr: SocketAddr,
    pub service: Arc<MediaService>,
    pub dir: tempfile::TempDir,
}

impl ImageServer {
    pub async fn start() -> ImageServer {
        let dir = tempfile::tempdir().unwrap();
        let (addr, service) = serve_media(
            MediaStore::new(dir.path()),
            Arc::new(metalform::clock::SystemClock),
        )
        .await;
        ImageServer { addr, service, dir }
    }

    /// Stores `bytes` as the task ISO of `job` and returns its signed URL (valid 1 h).
    pub fn put(&self, job: uuid::Uuid, bytes: &[u8]) -> String {
        let path = self.service.store.iso_path(job);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytes).unwrap();
        self.url(job)
    }

    pub fn url(&self, job: uuid::Uuid) -> String {
        let expires = chrono::Utc::now() + chrono::Duration::hours(1);
        format!(
            "http://{}{}",
            self.addr,
            self.service.signer.signed_path(job, expires)
        )
    }
}

/// One status webhook received: (serial, `X-Webhook-Secret` header, body).
pub type Webhook = (String, Option<String>, serde_json::Value);

/// A stand-in controller that records status webhooks.
pub struct WebhookSink {
    pub url: url::Url,
    pub received: Arc<Mutex<Vec<Webhook>>>,
}

impl WebhookSink {
    pub async fn start() -> WebhookSink {
        use axum::extract::{Path, State};
        type Seen = Arc<Mutex<Vec<Webhook>>>;
        let received: Seen = Arc::default();
        let app = axum::Router::new()
            .route(
                "/api/v1/status-webhook/{serial}",
                axum::routing::post(
                    |State(seen): State<Seen>,
                     Path(serial): Path<String>,
                     headers: axum::http::HeaderMap,
                     axum::Json(body): axum::Json<serde_json::Value>| async move {
                        let secret = headers
                            .get("X-Webhook-Secret")
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned);
                        seen.lock().unwrap().push((serial, secret, body));
                        axum::Json(serde_json::json!({"ok": true}))
                    },
                ),
            )
            .with_state(received.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        WebhookSink {
            url: url::Url::parse(&format!("http://{addr}/")).unwrap(),
            received,
        }
    }

    /// Waits up to `limit` for `n` webhooks.
    pub async fn wait_for(
        &self,
        n: usize,
        limit: Duration,
    ) -> Vec<(String, Option<String>, serde_json::Value)> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let seen = self.received.lock().unwrap().clone();
            if seen.len() >= n || tokio::time::Instant::now() >= deadline {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
