//! The enrollment endpoint over HTTP (docs/contracts.md §5, docs/agent-protocol.md): the 200
//! answer, the typed JSON errors (401, 409, 400, 413, 405, 503), the server's start-up checks
//! and its shutdown. A real `AgentServer` on loopback over TLS (a development CA the client
//! pins) and a SQLite store.

use crate::agent_suite;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use metalform::agent::{
    AgentError, AgentServer, AgentServerConfig, EnrollResponse, ErrorBody, MAX_BODY_BYTES,
};
use metalform::listener::TlsSetting;
use metalform::store::Store;
use serde_json::{Value, json};

/// One development CA for every server of this file (made once, read by each).
fn ca_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir").keep().join("ca");
        metalform::listener::DevCa::open_or_create(&dir).expect("a CA");
        dir
    })
}

fn http() -> reqwest::Client {
    agent_suite::pinned(&std::fs::read_to_string(ca_dir().join("ca.pem")).unwrap())
}

async fn start(
    store: Store,
    listen: SocketAddr,
    url: Option<url::Url>,
) -> Result<AgentServer, AgentError> {
    let tls = TlsSetting::DevCa {
        dir: ca_dir().to_owned(),
        names: vec![],
    };
    AgentServer::start(store, AgentServerConfig::new(listen, url, tls)).await
}

async fn server() -> (Store, AgentServer) {
    let dir = tempfile::tempdir().expect("tempdir").keep();
    let (store, _) =
        agent_suite::open(&format!("sqlite://{}", dir.join("state.db").display())).await;
    let server = start(store.clone(), SocketAddr::from(([127, 0, 0, 1], 0)), None)
        .await
        .expect("server starts");
    (store, server)
}

async fn post(url: &str, body: &Value) -> (u16, Value) {
    let response = http().post(url).json(body).send().await.unwrap();
    let status = response.status().as_u16();
    assert_eq!(
        response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/json"),
        "every answer is JSON"
    );
    (status, response.json().await.unwrap())
}

/// POST `chunks` chunks of `size` spaces with `Transfer-Encoding: chunked`; the status code.
async fn raw_chunked_post(addr: SocketAddr, chunks: usize, size: usize) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /agent/v1/enroll HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    for _ in 0..chunks {
        let chunk = format!("{size:x}\r\n{}\r\n", " ".repeat(size));
        // The server may answer and close before everything is sent.
        if stream.write_all(chunk.as_bytes()).await.is_err() {
            break;
        }
    }
    let _ = stream.write_all(b"0\r\n\r\n").await;
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {text:?}"))
}

fn error(code: &str, message: &str) -> Value {
    json!({"error": code, "message": message})
}

#[tokio::test]
async fn enrollment_answers_with_an_agent_token_and_the_task_url() {
    let (store, server) = server().await;
    let o = agent_suite::onboarding(&store, "c07u43", "x7k3pa").await;
    let url = server.enroll_url();
    assert_eq!(
        url,
        format!("https://{}/agent/v1/enroll", server.local_addr())
    );
    let body = json!({"token": o.token.expose(), "hostname": "c07u43", "system_id": "x7k3pa",
        "agent_version": "metalform-agent/1.2", "something_newer": [1, 2]});
    let (status, answer) = post(&url, &body).await;
    assert_eq!(status, 200, "{answer}");
    let answer: EnrollResponse = serde_json::from_value(answer).unwrap();
    assert_eq!(answer.node_id, o.node.to_string());
    assert_eq!(
        answer.tasks_url,
        format!(
            "https://{}/agent/v1/nodes/{}/tasks",
            server.local_addr(),
            o.node
        )
    );
    assert_eq!(answer.heartbeat_interval_seconds, 30);
    let who = store
        .authenticate_agent(&metalform::secrets::Secret::new(answer.agent_token))
        .await
        .unwrap()
        .expect("the answered token is the stored one");
    assert_eq!(who.node_id, o.node);
    let enrollment = store.agent_enrollment(o.node).await.unwrap().unwrap();
    assert_eq!(enrollment.remote_addr.as_deref(), Some("127.0.0.1"));
    // The token was single use (and its agent token is now in use): 401.
    assert_eq!(
        post(&url, &body).await,
        (
            401,
            error("invalid_token", "invalid enrollment token: already used")
        )
    );
    server.shutdown().await;
}

#[tokio::test]
async fn refusals_are_typed_json_errors() {
    let (store, server) = server().await;
    let url = server.enroll_url();
    let o = agent_suite::onboarding(&store, "c07u44", "a1b2c3").await;
    let body = |token: &str, host: &str, sid: &str| json!({"token": token, "hostname": host, "system_id": sid, "agent_version": "v1"});
    assert_eq!(
        post(
            &url,
            &body("unknown-token-aaaaaaaaaaaa", "c07u44", "a1b2c3")
        )
        .await,
        (
            401,
            error("invalid_token", "invalid enrollment token: unknown")
        )
    );
    assert_eq!(
        post(&url, &body(o.token.expose(), "c07u45", "a1b2c3")).await,
        (
            409,
            error(
                "conflict",
                "the token was issued for another machine (its hostname does not match)"
            )
        )
    );
    let (status, answer) = post(&url, &json!({"hostname": "c07u44"})).await;
    assert_eq!((status, &answer["error"]), (400, &json!("bad_request")));
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .starts_with("the body is not an enrollment request: missing field `token`"),
        "{answer}"
    );
    assert_eq!(
        post(&url, &body(o.token.expose(), "", "a1b2c3")).await,
        (
            400,
            error(
                "bad_request",
                "`hostname` must be 1 to 253 characters (got 0)"
            )
        )
    );
    let (status, answer) = post(
        &url,
        &json!({"token": 7, "hostname": "h", "system_id": "s", "agent_version": "v"}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("invalid type: integer `7`, expected a string"),
        "{answer}"
    );
    let response = http()
        .post(&url)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    // None of it consumed the token.
    assert_eq!(
        post(&url, &body(o.token.expose(), "c07u44", "a1b2c3"))
            .await
            .0,
        200
    );
    server.shutdown().await;
}

#[tokio::test]
async fn oversized_requests_are_refused_before_they_are_read() {
    let (_store, server) = server().await;
    let url = server.enroll_url();
    let big = json!({"token": "t".repeat(MAX_BODY_BYTES), "hostname": "h", "system_id": "s", "agent_version": "v"});
    let (status, answer) = post(&url, &big).await;
    assert_eq!(
        (status, answer),
        (
            413,
            error(
                "payload_too_large",
                "an enrollment request is at most 16384 bytes"
            )
        )
    );
    // Without a Content-Length (chunked), the limit applies while reading (raw bytes: a server
    // with TLS turned off explicitly).
    let plain = AgentServer::start(
        _store.clone(),
        AgentServerConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), None, TlsSetting::Off),
    )
    .await
    .unwrap();
    assert_eq!(raw_chunked_post(plain.local_addr(), 40, 1024).await, 413);
    assert_eq!(raw_chunked_post(plain.local_addr(), 1, 10).await, 400);
    plain.shutdown().await;
    // A field over its own limit inside a small body is a 400.
    let (status, answer) = post(
        &url,
        &json!({"token": "t".repeat(600), "hostname": "h", "system_id": "s", "agent_version": "v"}),
    )
    .await;
    assert_eq!(
        (status, answer),
        (
            400,
            error(
                "bad_request",
                "`token` must be 1 to 512 characters (got 600)"
            )
        )
    );
    server.shutdown().await;
}

#[tokio::test]
async fn only_post_is_served() {
    let (_store, server) = server().await;
    let response = http().get(server.enroll_url()).send().await.unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(response.headers()["allow"], "POST");
    let body: ErrorBody = response.json().await.unwrap();
    assert_eq!(body.error, "method_not_allowed");
    server.shutdown().await;
}

#[tokio::test]
async fn a_store_that_is_down_is_a_transient_503() {
    let (store, server) = server().await;
    let o = agent_suite::onboarding(&store, "c07u46", "k9m8n7").await;
    store.close().await;
    let (status, answer) = post(
        &server.enroll_url(),
        &json!({"token": o.token.expose(), "hostname": "c07u46", "system_id": "k9m8n7", "agent_version": "v"}),
    )
    .await;
    assert_eq!(
        (status, answer),
        (
            503,
            error(
                "unavailable",
                "the state store is busy or unreachable; retry"
            )
        )
    );
    server.shutdown().await;
}

#[tokio::test]
async fn start_up_checks_and_shutdown() {
    let (store, server) = server().await;
    // Every interface and no public URL: the hosts' URL cannot be guessed.
    let err = start(store.clone(), SocketAddr::from(([0, 0, 0, 0], 0)), None)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "agents cannot reach 0.0.0.0:0: it listens on every interface, so the URL deployed hosts use must be given"
    );
    assert_eq!(
        err.hint(),
        "give the URL the deployed hosts reach, e.g. https://<address>:<port>/"
    );
    let public = url::Url::parse("https://10.176.46.5:8741/metalform").unwrap();
    let behind_proxy = start(
        store.clone(),
        SocketAddr::from(([0, 0, 0, 0], 0)),
        Some(public),
    )
    .await
    .unwrap();
    assert_eq!(
        behind_proxy.enroll_url(),
        "https://10.176.46.5:8741/metalform/agent/v1/enroll"
    );
    behind_proxy.shutdown().await;
    for (url, reason) in [
        (
            "ftp://10.0.0.1/",
            "invalid agent URL `ftp://10.0.0.1/`: the scheme must be https (or http with TLS turned off)",
        ),
        (
            "http://10.0.0.1/",
            "invalid agent URL `http://10.0.0.1/`: the agent listener speaks TLS, so its URL is https://",
        ),
    ] {
        let err = start(
            store.clone(),
            SocketAddr::from(([127, 0, 0, 1], 0)),
            Some(url::Url::parse(url).unwrap()),
        )
        .await
        .unwrap_err();
        assert_eq!(err.to_string(), reason);
    }
    // The port is taken while the first server runs.
    let taken = start(store.clone(), server.local_addr(), None)
        .await
        .unwrap_err();
    assert!(
        taken.to_string().starts_with(&format!(
            "cannot listen for agents on {}",
            server.local_addr()
        )),
        "{taken}"
    );
    let url = server.enroll_url();
    server.shutdown().await;
    let after = http().post(&url).json(&json!({})).send().await;
    assert!(
        after.unwrap_err().is_connect(),
        "nothing listens after shutdown"
    );
}
