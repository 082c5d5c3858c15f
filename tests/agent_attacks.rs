//! The agent channel against bad input (issue 12 "Bad input", issue 16 item 6): forged,
//! expired, replayed and other-node tokens; results and renewals for tasks the caller does not
//! hold; oversized, malformed and unauthenticated bodies (never read before the token is
//! checked); slow-loris clients; an agent whose clock is hours off. Each gets the typed answer
//! of docs/agent-protocol.md and changes no state. A real `AgentServer` (its hardened listener)
//! over SQLite; the last test runs a real `metalform agent` process.

use crate::agent_node_support;
use crate::agent_suite;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Duration as Span;
use metalform::agent::{AgentServer, AgentServerConfig, ChannelOptions, TaskTiming};
use metalform::clock::{ManualClock, TokioClock};
use metalform::listener::{Limits, TlsSetting};
use metalform::store::{Store, TaskStatus};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use uuid::Uuid;

struct Bed {
    _dir: tempfile::TempDir,
    store: Store,
    clock: ManualClock,
    server: AgentServer,
    http: reqwest::Client,
    a: Enrolled,
    b: Enrolled,
}

struct Enrolled {
    node: Uuid,
    token: String,
    tasks: String,
}

fn limits() -> Limits {
    Limits {
        header_timeout: Duration::from_millis(800),
        body_timeout: Duration::from_millis(800),
        ..Limits::agent()
    }
}

/// Two enrolled nodes, c07u43 (a) and c07u44 (b); `tls` for the listener (raw-socket tests
/// turn it off explicitly).
async fn bed(tls: bool) -> Bed {
    let dir = tempfile::tempdir().unwrap();
    let (store, clock) = agent_suite::open(&format!(
        "sqlite://{}",
        dir.path().join("state.db").display()
    ))
    .await;
    let setting = if tls {
        TlsSetting::DevCa {
            dir: dir.path().join("ca"),
            names: vec![],
        }
    } else {
        TlsSetting::Off
    };
    let mut config = AgentServerConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), None, setting);
    config.limits = limits();
    config.channel = ChannelOptions {
        timing: TaskTiming {
            lease: Duration::from_secs(120),
            poll_step: Duration::from_millis(20),
        },
        contact_flush: Duration::from_secs(3600),
    };
    let server = AgentServer::start(store.clone(), config).await.unwrap();
    let http = match server.client_ca() {
        Some(ca) => agent_suite::pinned(ca),
        None => agent_suite::http(),
    };
    let mut enrolled = Vec::new();
    for (host, sid) in [("c07u43", "x7k3pa"), ("c07u44", "x7k3pb")] {
        let o = agent_suite::onboarding(&store, host, sid).await;
        let (status, answer) = post_json(
            &http,
            &server.enroll_url(),
            None,
            &json!({"token": o.token.expose(), "hostname": host, "system_id": sid, "agent_version": "v"}),
        )
        .await;
        assert_eq!(status, 200, "{answer}");
        enrolled.push(Enrolled {
            node: o.node,
            token: answer["agent_token"].as_str().unwrap().to_owned(),
            tasks: answer["tasks_url"].as_str().unwrap().to_owned(),
        });
    }
    let b = enrolled.pop().unwrap();
    let a = enrolled.pop().unwrap();
    Bed {
        _dir: dir,
        store,
        clock,
        server,
        http,
        a,
        b,
    }
}

async fn post_json(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    body: &Value,
) -> (u16, Value) {
    let mut request = http.post(url).json(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    answer(request).await
}

async fn answer(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Everything a refused call must leave as it was.
#[derive(Debug, PartialEq)]
struct Snapshot {
    serial: i64,
    tasks: Vec<(Uuid, TaskStatus, Option<String>, i64)>,
    contacts: Vec<Option<chrono::DateTime<chrono::Utc>>>,
    enrollments: Vec<Option<i64>>,
}

impl Bed {
    async fn snapshot(&self) -> Snapshot {
        self.server.channel().flush_contacts().await.unwrap();
        let mut tasks = Vec::new();
        let mut contacts = Vec::new();
        let mut enrollments = Vec::new();
        for node in [self.a.node, self.b.node] {
            for t in self.store.tasks_for_node(node).await.unwrap() {
                tasks.push((t.id, t.status, t.lease_holder, t.dispatch_count));
            }
            contacts.push(self.store.node(node).await.unwrap().last_agent_contact_at);
            enrollments.push(
                self.store
                    .agent_enrollment(node)
                    .await
                    .unwrap()
                    .map(|e| e.id),
            );
        }
        Snapshot {
            serial: self.store.serial().await.unwrap(),
            tasks,
            contacts,
            enrollments,
        }
    }

    async fn poll(&self, who: &Enrolled, token: &str) -> (u16, Value) {
        self.poll_waiting(who, token, 0).await
    }

    /// A poll that waits up to `wait` s (it sees a task queued a moment ago).
    async fn poll_waiting(&self, who: &Enrolled, token: &str, wait: u64) -> (u16, Value) {
        answer(
            self.http
                .get(format!("{}/wait?wait={wait}", who.tasks))
                .bearer_auth(token),
        )
        .await
    }

    async fn report(
        &self,
        path_of: &Enrolled,
        token: &str,
        task: Uuid,
        body: &Value,
    ) -> (u16, Value) {
        post_json(
            &self.http,
            &format!("{}/{task}/result", path_of.tasks),
            Some(token),
            body,
        )
        .await
    }

    async fn renew(&self, path_of: &Enrolled, token: &str, task: Uuid) -> (u16, Value) {
        answer(
            self.http
                .post(format!("{}/{task}/lease", path_of.tasks))
                .bearer_auth(token),
        )
        .await
    }

    async fn task(&self, node: Uuid, kind: &str) -> Uuid {
        self.store
            .ensure_task(node, kind, &json!({}), None)
            .await
            .unwrap()
            .0
            .id
    }
}

/// A body of chunks with no length announced (sent chunked).
struct Chunked(std::collections::VecDeque<bytes::Bytes>);

impl http_body::Body for Chunked {
    type Data = bytes::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, std::io::Error>>> {
        std::task::Poll::Ready(self.0.pop_front().map(|b| Ok(http_body::Frame::data(b))))
    }
}

fn error(code: &str, message: &str) -> Value {
    json!({"error": code, "message": message})
}

#[tokio::test]
async fn forged_expired_replayed_and_other_node_tokens_get_typed_answers_and_change_nothing() {
    let bed = bed(true).await;
    let task = bed.task(bed.a.node, "node.drain").await;
    bed.clock.advance(Span::minutes(1));
    let before = bed.snapshot().await;
    let forged = "Zm9yZ2VkLXRva2VuLXRoYXQtbG9va3MtcmVhbA";
    let invalid = error(
        "invalid_token",
        "unknown or revoked agent token: enroll again",
    );
    assert_eq!(bed.poll(&bed.a, forged).await, (401, invalid.clone()));
    assert_eq!(
        bed.report(&bed.a, forged, task, &json!({"status": "succeeded"}))
            .await,
        (401, invalid.clone())
    );
    assert_eq!(bed.renew(&bed.a, forged, task).await, (401, invalid));
    // Another node's (valid) token on this node's URLs.
    let forbidden = error(
        "forbidden",
        &format!(
            "the agent token belongs to another node, not {}",
            bed.a.node
        ),
    );
    assert_eq!(
        bed.poll(&bed.a, &bed.b.token).await,
        (403, forbidden.clone())
    );
    assert_eq!(
        bed.report(&bed.a, &bed.b.token, task, &json!({"status": "succeeded"}))
            .await,
        (403, forbidden.clone())
    );
    assert_eq!(
        bed.renew(&bed.a, &bed.b.token, task).await,
        (403, forbidden)
    );
    // No bearer at all.
    let (status, body) = answer(bed.http.get(format!("{}/wait?wait=0", bed.a.tasks))).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("unauthorized"))
    );
    assert_eq!(
        bed.snapshot().await,
        before,
        "refused calls are no contact and no change"
    );

    // Enrollment: forged, replayed, expired, another machine's.
    let enroll = |token: &str, host: &str, sid: &str| json!({"token": token, "hostname": host, "system_id": sid, "agent_version": "v"});
    let url = bed.server.enroll_url();
    assert_eq!(
        post_json(&bed.http, &url, None, &enroll(forged, "c07u43", "x7k3pa")).await,
        (
            401,
            error("invalid_token", "invalid enrollment token: unknown")
        )
    );
    // c07u43's token was used by the enrollment and its agent token since (a poll): a replay
    // is refused.
    let fresh = agent_suite::onboarding(&bed.store, "c07u45", "x7k3pc").await;
    let c = post_json(
        &bed.http,
        &url,
        None,
        &enroll(fresh.token.expose(), "c07u45", "x7k3pc"),
    )
    .await;
    assert_eq!(c.0, 200);
    let c_token = c.1["agent_token"].as_str().unwrap().to_owned();
    let c_tasks = c.1["tasks_url"].as_str().unwrap().to_owned();
    let polled = answer(
        bed.http
            .get(format!("{c_tasks}/wait?wait=0"))
            .bearer_auth(&c_token),
    )
    .await;
    assert_eq!(polled.0, 204);
    let other = agent_suite::onboarding(&bed.store, "c07u46", "x7k3pd").await;
    let before = bed.snapshot().await;
    assert_eq!(
        post_json(
            &bed.http,
            &url,
            None,
            &enroll(fresh.token.expose(), "c07u45", "x7k3pc")
        )
        .await,
        (
            401,
            error("invalid_token", "invalid enrollment token: already used")
        )
    );
    assert_eq!(
        post_json(
            &bed.http,
            &url,
            None,
            &enroll(other.token.expose(), "c07u99", "x7k3pd")
        )
        .await,
        (
            409,
            error(
                "conflict",
                // Names no node: the caller is not authenticated yet.
                "the token was issued for another machine (its hostname does not match)"
            )
        )
    );
    bed.clock.advance(Span::hours(3));
    let (status, body) = post_json(
        &bed.http,
        &url,
        None,
        &enroll(other.token.expose(), "c07u46", "x7k3pd"),
    )
    .await;
    assert_eq!(status, 401);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("invalid enrollment token: expired at 2026-03-01T"),
        "{body}"
    );
    let after = bed.snapshot().await;
    assert_eq!(after.serial, before.serial);
    assert_eq!(after.tasks, before.tasks);
    assert_eq!(
        bed.store.agent_enrollment(other.node).await.unwrap(),
        None,
        "no enrollment from a refused token"
    );
}

#[tokio::test]
async fn results_and_renewals_for_tasks_not_leased_to_the_caller_are_refused_and_change_nothing() {
    let bed = bed(true).await;
    let queued = bed.task(bed.a.node, "node.gpu_scrub").await;
    let before = bed.snapshot().await;
    let lease_lost = |(status, body): (u16, Value)| {
        assert_eq!(
            (status, body["error"].as_str()),
            (409, Some("lease_lost")),
            "{body}"
        );
    };
    // Not handed out yet: nobody holds it.
    lease_lost(
        bed.report(
            &bed.a,
            &bed.a.token,
            queued,
            &json!({"status": "succeeded"}),
        )
        .await,
    );
    lease_lost(bed.renew(&bed.a, &bed.a.token, queued).await);
    // Another node's task through that node's own URL and token: not this node's task.
    let of_b = bed.task(bed.b.node, "node.drain").await;
    let not_found = error(
        "not_found",
        &format!("node {} has no task {of_b}", bed.a.node),
    );
    assert_eq!(
        bed.report(&bed.a, &bed.a.token, of_b, &json!({"status": "failed"}))
            .await,
        (404, not_found.clone())
    );
    assert_eq!(
        bed.renew(&bed.a, &bed.a.token, of_b).await,
        (404, not_found)
    );
    assert_eq!(bed.snapshot().await.tasks, {
        let mut tasks = before.tasks.clone();
        tasks.push((of_b, TaskStatus::Queued, None, 0));
        tasks
    });

    // Handed out, its lease run out, handed out again: the first holder's result and renewal
    // are refused (here the same agent re-enrolled would be another holder; a stale lease of
    // the same holder is refused as well).
    let (status, body) = bed.poll_waiting(&bed.a, &bed.a.token, 2).await;
    assert_eq!(
        (status, body["task"]["id"].as_str()),
        (200, Some(queued.to_string().as_str()))
    );
    assert_eq!(body["task"]["lease_seconds"], 120);
    let (status, body) = bed.renew(&bed.a, &bed.a.token, queued).await;
    assert_eq!(
        (status, body["lease_seconds"].as_u64()),
        (200, Some(120)),
        "{body}"
    );
    bed.clock.advance(Span::minutes(3));
    lease_lost(bed.renew(&bed.a, &bed.a.token, queued).await);
    let task = bed.store.task(queued).await.unwrap();
    assert_eq!(
        (task.status, task.dispatch_count),
        (TaskStatus::Dispatched, 1)
    );
}

/// Send `head` on a fresh plain connection; the answer's first line and the time it took.
async fn raw(addr: SocketAddr, head: &str) -> (String, Duration) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut out = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut out))
        .await
        .expect("an answer without the body")
        .unwrap();
    let text = String::from_utf8_lossy(&out[..n]).into_owned();
    (text, started.elapsed())
}

#[tokio::test]
async fn a_task_result_body_is_not_read_before_its_token_is_checked() {
    // Raw HTTP: the listener's TLS is turned off explicitly for this test.
    let bed = bed(false).await;
    let task = bed.task(bed.a.node, "node.drain").await;
    let before = bed.snapshot().await;
    let addr = bed.server.local_addr();
    let path = format!("/agent/v1/nodes/{}/tasks/{task}/result", bed.a.node);
    // A 60 KB body announced, none sent, a forged token: 401 at once.
    let (answer, took) = raw(
        addr,
        &format!("POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer forged\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(answer.contains("\"error\":\"invalid_token\""), "{answer}");
    assert!(took < Duration::from_millis(500), "{took:?}");
    // A chunked body that trickles, no token at all: 401 without waiting for it.
    let (answer, took) = raw(
        addr,
        &format!("POST {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(took < Duration::from_millis(500), "{took:?}");
    // 10 MB announced: the typed 413 before anything else (no token needed to be refused).
    let (answer, _) = raw(
        addr,
        &format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 10485760\r\n\r\n"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        answer.contains("\"error\":\"payload_too_large\""),
        "{answer}"
    );
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("content-type: application/json")
    );
    // One byte over the limit, with the right token: refused as well, before it is read.
    let (answer, _) = raw(
        addr,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Length: 65537\r\n\r\n",
            bed.a.token
        ),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        answer.contains("the request body is over 65536 bytes, the most this server takes"),
        "{answer}"
    );
    assert_eq!(bed.snapshot().await, before);
    assert_eq!(bed.server.stats().snapshot().body_too_large, 2);
}

#[tokio::test]
async fn oversized_malformed_and_trickled_bodies_get_typed_errors_and_change_nothing() {
    let bed = bed(true).await;
    let task = bed.task(bed.a.node, "node.validate_clean").await;
    let (status, _) = bed.poll_waiting(&bed.a, &bed.a.token, 2).await;
    assert_eq!(status, 200);
    let before = bed.snapshot().await;
    let url = format!("{}/{task}/result", bed.a.tasks);
    let send = |body: reqwest::Body| {
        bed.http
            .post(&url)
            .bearer_auth(&bed.a.token)
            .header("content-type", "application/json")
            .body(body)
    };
    // 70 KB streamed without a length: cut at the limit, typed.
    let chunks = Chunked(
        (0..70)
            .map(|_| bytes::Bytes::from(vec![b' '; 1024]))
            .collect(),
    );
    let (status, body) = answer(send(reqwest::Body::wrap(chunks))).await;
    assert_eq!(
        (status, body),
        (
            413,
            error("payload_too_large", "a task result is at most 65536 bytes")
        )
    );
    let (status, body) = answer(send("{\"status\": ".into())).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("bad_request")));
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("the body is not a task result: EOF"),
        "{body}"
    );
    let (status, body) = answer(send("{\"status\": \"probably\"}".into())).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("bad_request")),
        "{body}"
    );
    let long = json!({"status": "failed", "message": "x".repeat(5000)});
    let (status, body) = answer(send(long.to_string().into())).await;
    assert_eq!(
        (status, body),
        (
            400,
            error("bad_request", "`message` is at most 4096 characters")
        )
    );
    assert_eq!(bed.snapshot().await, before);
    // Enrollment bodies have their own 16 KiB limit.
    let big = json!({"token": "t".repeat(20_000), "hostname": "h", "system_id": "s", "agent_version": "v"});
    let (status, body) = post_json(&bed.http, &bed.server.enroll_url(), None, &big).await;
    assert_eq!(
        (status, body),
        (
            413,
            error(
                "payload_too_large",
                "an enrollment request is at most 16384 bytes"
            )
        )
    );
    assert_eq!(bed.snapshot().await.serial, before.serial);
}

#[tokio::test]
async fn slow_loris_clients_of_the_agent_channel_are_cut_and_are_no_contact() {
    let bed = bed(false).await;
    let before = bed.snapshot().await;
    let addr = bed.server.local_addr();
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "GET /agent/v1/nodes/{}/tasks/wait?wait=0 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n",
        bed.a.node, bed.a.token
    );
    let started = Instant::now();
    let mut closed = false;
    for byte in head.as_bytes() {
        if slow.write_all(&[*byte]).await.is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
        if started.elapsed() > Duration::from_secs(3) {
            break;
        }
    }
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(3), slow.read(&mut buf)).await;
    assert!(
        closed || matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "the slow head was cut"
    );
    assert!(started.elapsed() < Duration::from_secs(4));
    assert!(bed.server.stats().snapshot().closed_slow >= 1);
    assert_eq!(
        bed.snapshot().await,
        before,
        "a head never finished is no contact"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_whose_clock_is_hours_off_keeps_its_lease_by_renewing_and_its_result_is_stored() {
    for offset in [Span::hours(6), Span::hours(-6)] {
        let dir = tempfile::tempdir().unwrap();
        // The control plane's clock runs `offset` from this host's (the agent's).
        let store = Store::open(
            &format!("sqlite://{}", dir.path().join("state.db").display()),
            Arc::new(TokioClock::starting_at(chrono::Utc::now() + offset)),
        )
        .await
        .unwrap();
        let mut config = AgentServerConfig::new(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            None,
            TlsSetting::DevCa {
                dir: dir.path().join("ca"),
                names: vec![],
            },
        );
        // A lease shorter than the task: it lives only by renewals.
        config.channel.timing = TaskTiming {
            lease: Duration::from_secs(2),
            poll_step: Duration::from_millis(50),
        };
        let server = AgentServer::start(store.clone(), config).await.unwrap();
        let o = agent_suite::onboarding(&store, "c07u43", "x7k3pa").await;
        let files = std::collections::BTreeMap::from([
            (
                "/etc/metalform/agent.env".to_owned(),
                format!(
                    "METALFORM_ENROLL_URL=\"{}\"\nMETALFORM_ENROLL_TOKEN=\"{}\"\nMETALFORM_NODE=\"c07u43\"\nMETALFORM_SYSTEM_ID=\"x7k3pa\"\nMETALFORM_DEPLOY_USER=\"hpcadmin\"\n",
                    server.enroll_url(),
                    o.token.expose()
                ),
            ),
            (
                "/etc/metalform/ca.pem".to_owned(),
                server.client_ca().unwrap().to_owned(),
            ),
        ]);
        let mut agent = agent_node_support::AgentHost::new(&dir.path().join("agent"), &files);
        agent.without_tenants();
        agent.make_slow_for("find /scratch1 -xdev -mindepth 1 -delete", 5);
        agent.start(None);
        let deadline = Instant::now() + Duration::from_secs(30);
        while store.agent_enrollment(o.node).await.unwrap().is_none() {
            assert!(Instant::now() < deadline, "{}", agent.log_text());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (task, _) = store
            .ensure_task(
                o.node,
                "node.storage_cleanup",
                &json!({"scope": "local"}),
                None,
            )
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            let t = store.task(task.id).await.unwrap();
            if t.status == TaskStatus::Succeeded {
                // Held for 5 s on a 2 s lease: never handed out again.
                assert_eq!(t.dispatch_count, 1, "{offset}: {}", agent.log_text());
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{offset}: {t:#?}\n{}",
                agent.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(
            agent.done(),
            [
                "find /scratch1 -xdev -mindepth 1 -delete",
                "find /scratch2 -xdev -mindepth 1 -delete"
            ]
        );
        assert_eq!(agent.stop(), Some(0));
        server.shutdown().await;
    }
}
