//! The hardened listener (src/listener; issue 12 item 3, issue 16 item 6) against the attacks
//! it exists for, over real sockets: oversized and trickled bodies, slow and silent request
//! heads, idle keep-alive, connection floods from one peer and from many, a shutdown with
//! thousands of idle connections open, and TLS with the development CA a client pins.
//! Each test is named after what it fends off.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use metalform::listener::{self, Limits, Server, TlsSetting};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

fn limits() -> Limits {
    Limits {
        max_connections: 5_000,
        max_connections_per_peer: 5_000,
        max_body_bytes: 64 * 1024,
        max_header_bytes: 16 * 1024,
        header_timeout: Duration::from_millis(600),
        body_timeout: Duration::from_millis(600),
        idle_timeout: Duration::from_millis(900),
        handshake_timeout: Duration::from_millis(600),
        shutdown_grace: Duration::from_secs(3),
    }
}

/// A small app: `/hello`, `/echo` (reads its body with a 1 KiB limit), `/slow` (answers after
/// 200 ms); `calls` counts the requests that reached a route.
fn app(calls: Arc<AtomicUsize>) -> Router {
    let echo_calls = calls.clone();
    let hello_calls = calls.clone();
    Router::new()
        .route(
            "/hello",
            get(move || {
                hello_calls.fetch_add(1, Ordering::SeqCst);
                async { "hello" }
            }),
        )
        .route(
            "/echo",
            post(move |headers: HeaderMap, body: Body| {
                echo_calls.fetch_add(1, Ordering::SeqCst);
                async move {
                    match listener::read_body(&headers, body, 1024).await {
                        Ok(bytes) => (StatusCode::OK, bytes).into_response(),
                        Err(e) => e.response(),
                    }
                }
            }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                "done"
            }),
        )
}

async fn serve(limits: Limits, tls: TlsSetting) -> (Server, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let bound = listener::bind("test", "127.0.0.1:0".parse().unwrap(), &tls, limits)
        .await
        .unwrap();
    (bound.serve(app(calls.clone())), calls)
}

/// Connect from a chosen loopback source address (each 127.0.0.x is its own peer).
async fn connect_from(source: &str, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    socket.connect(to).await.unwrap()
}

/// Whether the server closed the connection within `within` (EOF or reset).
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

/// One raw request; the whole answer (until the server closes or 2 s pass).
async fn raw(addr: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

fn json_body(answer: &str) -> serde_json::Value {
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str(body).unwrap_or_else(|_| panic!("a JSON body in {answer:?}"))
}

#[tokio::test]
async fn a_declared_10_mb_body_gets_a_typed_413_before_any_route_runs() {
    let (server, calls) = serve(limits(), TlsSetting::Off).await;
    let answer = raw(
        server.local_addr(),
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10485760\r\n\r\n{",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("content-type: application/json")
    );
    assert!(answer.to_ascii_lowercase().contains("connection: close"));
    assert_eq!(
        json_body(&answer),
        serde_json::json!({"error": "payload_too_large",
            "message": "the request body is over 65536 bytes, the most this server takes"})
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0, "no route saw the request");
    assert_eq!(server.stats().snapshot().body_too_large, 1);
    server.shutdown().await;
}

#[tokio::test]
async fn a_chunked_body_over_the_routes_limit_is_a_typed_413() {
    let (server, _) = serve(limits(), TlsSetting::Off).await;
    let chunk = "x".repeat(2000);
    let request = format!(
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{chunk}\r\n0\r\n\r\n",
        chunk.len()
    );
    let answer = raw(server.local_addr(), request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert_eq!(
        json_body(&answer),
        serde_json::json!({"error": "payload_too_large", "message": "the request body is over 1024 bytes"})
    );
    // Within the limit it is read whole.
    let answer = raw(
        server.local_addr(),
        b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("hello"), "{answer}");
    server.shutdown().await;
}

#[tokio::test]
async fn a_trickled_body_is_cut_at_the_body_deadline() {
    let (server, _) = serve(limits(), TlsSetting::Off).await;
    let mut stream = TcpStream::connect(server.local_addr()).await.unwrap();
    stream
        .write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nab")
        .await
        .unwrap();
    let started = Instant::now();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut out)).await;
    let answer = String::from_utf8_lossy(&out);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert_eq!(json_body(&answer)["error"], "request_timeout");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    server.shutdown().await;
}

#[tokio::test]
async fn slow_loris_request_heads_are_closed_at_the_header_deadline() {
    let (server, calls) = serve(limits(), TlsSetting::Off).await;
    let mut slow = TcpStream::connect(server.local_addr()).await.unwrap();
    let started = Instant::now();
    // One header byte at a time, slower than the deadline allows.
    let writer = async {
        for byte in b"GET /hello HTTP/1.1\r\nHost: x\r\nX-Slow: " {
            if slow.write_all(&[*byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
    assert!(closed_within(&mut slow, Duration::from_secs(2)).await);
    assert!(started.elapsed() < Duration::from_secs(3));
    // A connection that sends nothing at all is a slow one too.
    let mut silent = TcpStream::connect(server.local_addr()).await.unwrap();
    assert!(closed_within(&mut silent, Duration::from_secs(2)).await);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert!(server.stats().snapshot().closed_slow >= 2);
    server.shutdown().await;
}

#[tokio::test]
async fn idle_keep_alive_connections_are_closed_but_busy_ones_are_not() {
    let (server, _) = serve(limits(), TlsSetting::Off).await;
    let mut stream = TcpStream::connect(server.local_addr()).await.unwrap();
    // Requests closer together than the idle limit keep the connection.
    for _ in 0..4 {
        stream
            .write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 1024];
        let n = stream.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // A request longer than the head deadline is not cut (the route owns it).
    stream
        .write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = stream.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let idle_from = Instant::now();
    assert!(closed_within(&mut stream, Duration::from_secs(3)).await);
    assert!(idle_from.elapsed() >= Duration::from_millis(800));
    assert_eq!(server.stats().snapshot().closed_idle, 1);
    server.shutdown().await;
}

#[tokio::test]
async fn a_flood_from_one_peer_is_held_to_its_share_and_other_peers_still_get_in() {
    let limits = Limits {
        max_connections_per_peer: 8,
        header_timeout: Duration::from_secs(30),
        ..limits()
    };
    let (server, _) = serve(limits, TlsSetting::Off).await;
    let addr = server.local_addr();
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(connect_from("127.0.0.1", addr).await);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut ninth = connect_from("127.0.0.1", addr).await;
    assert!(closed_within(&mut ninth, Duration::from_secs(1)).await);
    assert_eq!(server.stats().snapshot().refused_peer, 1);
    // Another address is another peer.
    let mut other = connect_from("127.0.0.2", addr).await;
    other
        .write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    other.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    drop(held);
    server.shutdown().await;
}

#[tokio::test]
async fn connections_over_the_global_limit_are_closed_at_once() {
    let limits = Limits {
        max_connections: 20,
        header_timeout: Duration::from_secs(30),
        ..limits()
    };
    let (server, _) = serve(limits, TlsSetting::Off).await;
    let addr = server.local_addr();
    let mut held = Vec::new();
    for i in 0..20 {
        held.push(connect_from(&format!("127.0.1.{}", i + 1), addr).await);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(server.stats().snapshot().open, 20);
    let mut over = connect_from("127.0.2.1", addr).await;
    assert!(closed_within(&mut over, Duration::from_secs(1)).await);
    assert_eq!(server.stats().snapshot().refused_global, 1);
    // A place freed is a place taken.
    held.pop();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut next = connect_from("127.0.2.2", addr).await;
    next.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    next.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    server.shutdown().await;
}

#[tokio::test]
async fn shutdown_with_3000_idle_connections_open_takes_well_under_10_seconds() {
    let limits = Limits {
        header_timeout: Duration::from_secs(60),
        idle_timeout: Duration::from_secs(60),
        ..limits()
    };
    let (server, _) = serve(limits, TlsSetting::Off).await;
    let addr = server.local_addr();
    let mut held = Vec::new();
    for i in 0..3000u32 {
        let source = format!("127.3.{}.{}", i / 200, i % 200 + 1);
        let mut stream = connect_from(&source, addr).await;
        if i % 2 == 0 {
            // Half have served a request and sit idle in keep-alive.
            stream
                .write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
            let mut buf = [0u8; 256];
            let _ = stream.read(&mut buf).await.unwrap();
        }
        held.push(stream);
    }
    // One request in flight finishes during the shutdown.
    let mut busy = TcpStream::connect(addr).await.unwrap();
    busy.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(server.stats().snapshot().open, 3001);
    let started = Instant::now();
    server.shutdown().await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "shutdown took {took:?}");
    let mut out = String::new();
    let _ = busy.read_to_string(&mut out).await;
    assert!(
        out.starts_with("HTTP/1.1 200"),
        "in-flight request answered: {out:?}"
    );
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "no longer accepting"
    );
}

fn pinned_client(ca_pem: &str) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap()])
        .build()
        .unwrap()
}

#[tokio::test]
async fn tls_with_the_development_ca_is_pinned_by_clients_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let tls = TlsSetting::DevCa {
        dir: dir.path().join("tls"),
        names: vec!["metalform.test".into()],
    };
    let bound = listener::bind("test", "127.0.0.1:0".parse().unwrap(), &tls, limits())
        .await
        .unwrap();
    assert_eq!(bound.scheme(), "https");
    let ca = bound.client_ca().unwrap().to_owned();
    let server = bound.serve(app(Arc::new(AtomicUsize::new(0))));
    let url = format!("https://127.0.0.1:{}/hello", server.local_addr().port());
    let answer = pinned_client(&ca).get(&url).send().await.unwrap();
    assert_eq!(answer.text().await.unwrap(), "hello");
    // The key stays private to the server's user.
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(dir.path().join("tls/ca-key.pem"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    // A client that trusts another CA is refused by its own TLS.
    let other = tempfile::tempdir().unwrap();
    let other_ca = listener::DevCa::open_or_create(other.path()).unwrap();
    let refused = pinned_client(&other_ca.cert_pem).get(&url).send().await;
    assert!(refused.is_err());
    // Plain HTTP to a TLS listener gets no answer.
    let plain = reqwest::get(url.replace("https", "http")).await;
    assert!(plain.is_err());
    server.shutdown().await;

    // Restarted: the same CA (hosts pinned it at deploy), a fresh server certificate.
    let bound = listener::bind("test", "127.0.0.1:0".parse().unwrap(), &tls, limits())
        .await
        .unwrap();
    assert_eq!(bound.client_ca().unwrap(), ca);
    let server = bound.serve(app(Arc::new(AtomicUsize::new(0))));
    let url = format!("https://localhost:{}/hello", server.local_addr().port());
    assert_eq!(
        pinned_client(&ca)
            .get(&url)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "hello"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_half_made_development_ca_is_refused_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.pem"), "not a certificate").unwrap();
    let err = match listener::bind(
        "test",
        "127.0.0.1:0".parse().unwrap(),
        &TlsSetting::DevCa {
            dir: dir.path().to_owned(),
            names: vec![],
        },
        limits(),
    )
    .await
    {
        Ok(_) => panic!("a CA without its key must be refused"),
        Err(e) => e,
    };
    assert!(
        err.to_string().contains(
            "only one of ca.pem and ca-key.pem exists; refusing to make a new CA over it"
        ),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ca.pem")).unwrap(),
        "not a certificate"
    );
}
