//! The MAAS client's retry rules and request counting (issue 3 "Show"; API_REFERENCE §1 "Two
//! kinds of 409"): Retry-After honoured, backoff capped and jittered, no retry of a 409
//! without Retry-After, no blind retry of a POST after a timeout or 5xx, GETs retried on every
//! transient failure, every attempt counted. tokio's paused time makes the waits exact.

use crate::maas_support;

use metalform::lifecycle::MaasStatus;
use std::sync::Arc;
use std::time::Duration;

use maas_support::*;
use metalform::provider::maas::*;

fn gaps(requests: &[Recorded]) -> Vec<Duration> {
    requests.windows(2).map(|w| w[1].at - w[0].at).collect()
}

fn machine() -> Reply {
    Reply::json(machine_json())
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured_then_the_get_succeeds() {
    let server = FakeMaas::sequence(vec![
        Reply::text(503, "No rack controllers connected").retry_after(7),
        machine(),
    ])
    .await;
    let maas = client(&server);
    let machine = maas.read_machine("tdgqkw").await.unwrap();
    assert_eq!(machine.status, MaasStatus::Deploying);
    // 7 s as asked, plus jitter: half the first backoff (0.5 s) × sample 0.5.
    assert_eq!(gaps(&server.requests()), [Duration::from_millis(7125)]);
}

#[tokio::test(start_paused = true)]
async fn a_post_is_retried_after_409_with_retry_after_and_applied_once() {
    // MAAS rolled the transaction back and asks for a retry (LP#2034014).
    let server = FakeMaas::sequence(vec![Reply::text(409, "").retry_after(5), machine()]).await;
    let maas = client(&server);
    maas.deploy("tdgqkw", &DeployParams::default())
        .await
        .unwrap();
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests.iter().all(|r| r.op() == Some("deploy")));
    assert_eq!(gaps(&requests), [Duration::from_millis(5125)]);
    // Each attempt is signed afresh: MAAS rejects a reused nonce.
    let nonces: Vec<String> = requests
        .iter()
        .map(|r| oauth_params(r.header("authorization").unwrap())["oauth_nonce"].clone())
        .collect();
    assert_ne!(nonces[0], nonces[1]);
}

#[tokio::test(start_paused = true)]
async fn a_409_without_retry_after_is_a_state_conflict_never_retried() {
    let server = FakeMaas::always(Reply::text(
        409,
        "Machine cannot be released in its current state ('New').",
    ))
    .await;
    let maas = client(&server);
    for _ in 0..2 {
        let err = maas
            .release("tdgqkw", &ReleaseParams::default())
            .await
            .unwrap_err();
        assert!(matches!(err, MaasError::Conflict { .. }), "{err}");
    }
    // One request per call, none repeated; also true for GETs.
    assert_eq!(server.requests().len(), 2);
    let err = maas.read_machine("tdgqkw").await.unwrap_err();
    assert!(matches!(err, MaasError::Conflict { .. }));
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_post_that_timed_out_is_not_retried_and_is_outcome_unknown() {
    let server = FakeMaas::always(Reply::hang()).await;
    let maas = client(&server);
    let started = tokio::time::Instant::now();
    let err = maas
        .deploy("tdgqkw", &DeployParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            MaasError::Transient {
                cause: TransientCause::Timeout,
                outcome_unknown: true,
                attempts: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.is_retryable());
    assert_eq!(
        err.hint(),
        "MAAS may or may not have applied the request; re-read the machine before repeating it"
    );
    assert_eq!(
        server.requests().len(),
        1,
        "deploy must never be sent twice on a guess"
    );
    // The client's 10 s timeout, no backoff after it.
    assert_eq!(started.elapsed(), Duration::from_secs(10));
    assert_eq!(maas.metrics().get("deploy", RequestStatus::Timeout), 1);
}

#[tokio::test(start_paused = true)]
async fn a_post_answered_5xx_is_not_retried_and_is_outcome_unknown() {
    for reply in [
        Reply::text(500, "boom"),
        Reply::text(502, "Bad Gateway"),
        // IP exhaustion is raised after the status already moved to Deploying.
        Reply::text(
            503,
            "tdgqkw: Unable to allocate static IP due to address exhaustion.",
        ),
    ] {
        let server = FakeMaas::always(reply).await;
        let err = client(&server)
            .deploy("tdgqkw", &DeployParams::default())
            .await
            .unwrap_err();
        assert!(err.is_outcome_unknown(), "{err}");
        assert_eq!(server.requests().len(), 1, "{err}");
    }
}

#[tokio::test(start_paused = true)]
async fn gets_retry_on_every_transient_failure() {
    let server = FakeMaas::sequence(vec![
        Reply::hang(),
        Reply::text(502, "Bad Gateway"),
        Reply::text(500, "database is locked"),
        machine(),
    ])
    .await;
    let maas = client(&server);
    let started = tokio::time::Instant::now();
    maas.read_machine("tdgqkw").await.unwrap();
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    // timeout 10 s; then backoffs 0.5, 1, 2 s each jittered to 3/4 (sample 0.5).
    assert_eq!(
        gaps(&requests),
        [
            Duration::from_millis(10_375),
            Duration::from_millis(750),
            Duration::from_millis(1500),
        ]
    );
    assert_eq!(started.elapsed(), Duration::from_millis(12_625));
    let counted: Vec<_> = maas.metrics().snapshot().into_iter().collect();
    assert_eq!(
        counted,
        [
            (("read_machine", RequestStatus::Http(200)), 1),
            (("read_machine", RequestStatus::Http(500)), 1),
            (("read_machine", RequestStatus::Http(502)), 1),
            (("read_machine", RequestStatus::Timeout), 1),
        ]
    );
}

async fn waits_with_jitter(sample: f64) -> (Vec<Duration>, MaasError) {
    let server = FakeMaas::always(Reply::text(503, "")).await;
    let policy = RetryPolicy {
        max_attempts: 6,
        base_delay: Duration::from_secs(1),
        max_delay: Duration::from_secs(4),
        max_retry_after: Duration::from_secs(60),
        ..RetryPolicy::default()
    };
    let maas = client_for(
        &server.base_url(),
        MaasClientOptions {
            retry: policy,
            jitter: Arc::new(FixedJitter(sample)),
            ..test_options()
        },
    );
    let err = maas.list_machines(&MachineFilter::all()).await.unwrap_err();
    (gaps(&server.requests()), err)
}

#[tokio::test(start_paused = true)]
async fn backoff_doubles_up_to_the_cap_within_the_jitter_bounds() {
    // Backoffs 1, 2, 4, 4, 4 s (capped at 4); jitter spans [backoff/2, backoff).
    let (low, err) = waits_with_jitter(0.0).await;
    assert_eq!(
        low,
        [500, 1000, 2000, 2000, 2000].map(Duration::from_millis)
    );
    assert!(
        matches!(
            err,
            MaasError::Transient {
                cause: TransientCause::Status(503),
                attempts: 6,
                outcome_unknown: false,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "MAAS list_machines: transient failure (HTTP 503) after 6 attempts"
    );
    // Near the top of the range the waits approach, but never pass, the capped backoff
    // (tokio's timer rounds up to whole milliseconds).
    let (high, _) = waits_with_jitter(0.999).await;
    let backoffs = [1, 2, 4, 4, 4].map(Duration::from_secs);
    for (gap, backoff) in high.iter().zip(backoffs) {
        assert!(
            *gap <= backoff && *gap >= backoff.mul_f64(0.999),
            "{gap:?} vs {backoff:?}"
        );
    }
    assert_eq!(high.len(), 5);
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_beyond_the_limit_is_handed_back_not_waited_for() {
    let server = FakeMaas::always(Reply::text(503, "").retry_after(3600)).await;
    let maas = client(&server);
    let started = tokio::time::Instant::now();
    let err = maas
        .deploy("tdgqkw", &DeployParams::default())
        .await
        .unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(3600)));
    // MAAS rolled back: the caller knows the deploy did not happen.
    assert!(!err.is_outcome_unknown());
    assert_eq!(server.requests().len(), 1);
    assert_eq!(started.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn an_http_date_retry_after_is_honoured() {
    // The test clock reads 2026-01-01T00:00:00Z.
    let server = FakeMaas::sequence(vec![
        Reply::text(503, "").header("retry-after", "Thu, 01 Jan 2026 00:00:30 GMT"),
        machine(),
    ])
    .await;
    client(&server).read_machine("tdgqkw").await.unwrap();
    assert_eq!(gaps(&server.requests()), [Duration::from_millis(30_125)]);
}

#[tokio::test(start_paused = true)]
async fn a_post_is_retried_when_the_connection_was_refused() {
    // Nothing listens yet: the request cannot have been received, so a deploy may be resent.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let maas = client_for(&format!("http://{addr}/MAAS"), test_options());
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        FakeMaas::serve(listener, |_, _| machine())
    });
    let deploy = maas.deploy("tdgqkw", &DeployParams::default()).await;
    let server = late.await.unwrap();
    deploy.unwrap();
    assert_eq!(server.requests().len(), 1);
    let counted: Vec<_> = maas.metrics().snapshot().into_iter().collect();
    assert_eq!(
        counted,
        [
            (("deploy", RequestStatus::Http(200)), 1),
            (("deploy", RequestStatus::ConnectError), 1),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn refused_connections_exhaust_the_attempts_and_say_so() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let maas = client_for(&format!("http://{addr}/MAAS"), test_options());
    let err = maas
        .release("tdgqkw", &ReleaseParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            MaasError::Transient {
                cause: TransientCause::Connect,
                attempts: 5,
                outcome_unknown: false,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        maas.metrics().get("release", RequestStatus::ConnectError),
        5
    );
}

#[tokio::test(start_paused = true)]
async fn every_request_is_counted_by_operation_and_status_in_a_shared_handle() {
    let server = FakeMaas::start(|request, _| match (request.method.as_str(), request.op()) {
        ("GET", None) if request.path.ends_with("/machines/") => {
            Reply::json(format!("[{}]", machine_json()))
        }
        ("GET", None) => Reply::text(404, "No Machine matches the given query."),
        ("POST", Some("deploy")) => machine(),
        ("POST", Some("release")) => Reply::text(409, "Machine cannot be released"),
        _ => Reply::text(400, "Unrecognised signature"),
    })
    .await;
    let metrics = MaasMetrics::new();
    let options = || MaasClientOptions {
        metrics: metrics.clone(),
        ..test_options()
    };
    // Two clients (two sites, say) add to one handle.
    let site_a = client_for(&server.base_url(), options());
    let site_b = client_for(&server.base_url(), options());
    site_a.list_machines(&MachineFilter::all()).await.unwrap();
    site_b.list_machines(&MachineFilter::all()).await.unwrap();
    site_a
        .deploy("tdgqkw", &DeployParams::default())
        .await
        .unwrap();
    site_a
        .deploy("x7k2pq", &DeployParams::default())
        .await
        .unwrap();
    site_b
        .deploy("tdgqkw", &DeployParams::default())
        .await
        .unwrap();
    site_b.read_machine("gone").await.unwrap_err();
    site_b
        .release("tdgqkw", &ReleaseParams::default())
        .await
        .unwrap_err();

    let counted: Vec<_> = metrics.snapshot().into_iter().collect();
    assert_eq!(
        counted,
        [
            (("deploy", RequestStatus::Http(200)), 3),
            (("list_machines", RequestStatus::Http(200)), 2),
            (("read_machine", RequestStatus::Http(404)), 1),
            (("release", RequestStatus::Http(409)), 1),
        ]
    );
    assert_eq!(metrics.total(), 7);
    assert_eq!(site_a.metrics().operation_total("deploy"), 3);
    assert_eq!(server.requests().len(), 7);
}
