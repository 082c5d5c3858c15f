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
