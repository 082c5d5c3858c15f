//! The agent-enrollment store suite (docs/contracts.md §5; seed 000 §4.3 WaitForAgentEnrollment,
//! §4.6; seed 001 §3.3), run on SQLite (tests/agent_store.rs, hermetic) and on a real
//! PostgreSQL (tests/agent_store_postgres.rs, `--features services`). Each case takes the URL
//! of an empty store.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use metalform::clock::ManualClock;
use metalform::lifecycle::{
    FailureClass, JobKind, JobState, NodeState, OnboardingStage, Owner, Provider,
};
use metalform::secrets::Secret;
use metalform::store::{
    Actor, ENROLLMENT_REPLAY_WINDOW, EnrollError, EnrollmentRequest, JobFailure, JobUpdate,
    MaasStateUpdate, NewNode, NewOnboarding, NodeTransition, Store, TokenError,
};
use serde_json::json;
use uuid::Uuid;

pub fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-03-01T08:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

pub async fn open(url: &str) -> (Store, ManualClock) {
    let clock = ManualClock::new(t0());
    let store = Store::open(url, Arc::new(clock.clone()))
        .await
        .expect("open store");
    (store, clock)
}

/// An HTTP client (reqwest is built without a default TLS provider: install ring's).
pub fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// The agent channel on loopback over TLS, with a development CA in `ca_dir`.
pub async fn tls_server(store: &Store, ca_dir: &std::path::Path) -> metalform::agent::AgentServer {
    metalform::agent::AgentServer::start(
        store.clone(),
        metalform::agent::AgentServerConfig::new(
            "127.0.0.1:0".parse().unwrap(),
            None,
            metalform::listener::TlsSetting::dev_ca(ca_dir),
        ),
    )
    .await
    .expect("the agent channel starts")
}

/// A client that trusts only `ca_pem` (what a deployed host's agent does).
pub fn pinned(ca_pem: &str) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .tls_certs_only(reqwest::Certificate::from_pem_bundle(ca_pem.as_bytes()).unwrap())
        .build()
        .unwrap()
}

fn exec() -> Actor {
    Actor::system("apply")
}

/// A node being onboarded: `enrolling`, its onboarding running at wait_for_agent_enrollment
/// on machine `system_id`, and a fresh enrollment token with a 2 h TTL.
pub struct Onboarding {
    pub node: Uuid,
    pub job: Uuid,
    pub token: Secret,
}

pub async fn onboarding(store: &Store, hostname: &str, system_id: &str) -> Onboarding {
    let node = store
        .create_node(
            &NewNode {
                site: "dc1".into(),
                hostname: hostname.into(),
                provider: Provider::Maas,
                status: NodeState::Enrolling,
                sku: Some("mi300x.192g.8gpu".into()),
                gpus: Some(8),
                ipmi_ip: None,
            },
            &exec(),
        )
        .await
        .unwrap();
    let job = store
        .create_onboarding(&NewOnboarding {
            node_id: Some(node.id),
            site: "dc1".into(),
            hostname: hostname.into(),
            ..NewOnboarding::default()
        })
        .await
        .unwrap();
    let mut running = JobUpdate::new(JobState::Running);
    running.stage = Some(OnboardingStage::WaitForAgentEnrollment.as_str().into());
    running.maas_system_id = Some(system_id.into());
    store
        .advance_job(JobKind::Onboarding, job.id, &running)
        .await
        .unwrap();
    let (token, _) = store
        .issue_enrollment_token(node.id, Some(&job.id.to_string()), Duration::hours(2))
        .await
        .unwrap();
    Onboarding {
        node: node.id,
        job: job.id,
        token,
    }
}

pub fn request(token: &Secret, hostname: &str, system_id: &str) -> EnrollmentRequest {
    EnrollmentRequest {
        token: token.clone(),
        hostname: hostname.into(),
        system_id: system_id.into(),
        agent_version: "metalform-agent/1.2".into(),
        remote_addr: Some("10.176.46.20".into()),
        layers: BTreeMap::from([("site-bundle".to_string(), "ok".to_string())]),
    }
}

/// Nothing changed: same serial, no enrollment.
async fn unchanged(store: &Store, node: Uuid, serial: i64) {
    assert_eq!(
        store.serial().await.unwrap(),
        serial,
        "a refusal changes nothing"
    );
    assert_eq!(store.agent_enrollment(node).await.unwrap(), None);
}

pub async fn enrollment_is_recorded_with_a_hashed_agent_token(url: String) {
    let (store, clock) = open(&url).await;
    let o = onboarding(&store, "c07u43", "x7k3pa").await;
    let serial = store.serial().await.unwrap();
    clock.advance(Duration::minutes(12));
    let enrolled = store
        .enroll_agent(&request(&o.token, "c07u43", "x7k3pa"))
        .await
        .unwrap();
    assert!(!enrolled.replayed);
    let e = &enrolled.enrollment;
    assert_eq!(e.node_id, o.node);
    assert_eq!(e.onboarding_id, Some(o.job.to_string()));
    assert_eq!(e.onboarding_state, Some(JobState::Running));
    assert!(!e.is_late());
    assert_eq!(
        (e.hostname.as_str(), e.system_id.as_str()),
        ("c07u43", "x7k3pa")
    );
    assert_eq!(e.agent_version, "metalform-agent/1.2");
    assert_eq!(e.remote_addr.as_deref(), Some("10.176.46.20"));
    assert_eq!(e.layers["site-bundle"], "ok");
    assert_eq!(e.enrolled_at, t0() + Duration::minutes(12));
    // What the stage reads; the node is NOT active: the stage does that after its checks.
    assert_eq!(
        store.agent_enrollment(o.node).await.unwrap().as_ref(),
        Some(e)
    );
    let node = store.node(o.node).await.unwrap();
    assert_eq!(node.status, NodeState::Enrolling);
    assert_eq!(
        node.last_agent_contact_at,
        Some(t0() + Duration::minutes(12))
    );
    assert!(store.serial().await.unwrap() > serial, "planners see it");
    // The agent token works for the task API and counts as contact.
    assert_eq!(enrolled.agent_token.expose().len(), 43);
    clock.advance(Duration::minutes(1));
    let who = store
        .authenticate_agent(&enrolled.agent_token)
        .await
        .unwrap()
        .expect("current token");
    assert_eq!((who.node_id, who.enrollment_id), (o.node, e.id));
    assert_eq!(
        store.node(o.node).await.unwrap().last_agent_contact_at,
        Some(t0() + Duration::minutes(13))
    );
    assert_eq!(
        store
            .authenticate_agent(&Secret::new("not-an-agent-token"))
            .await
            .unwrap(),
        None
    );
    // Audited as the agent.
    let audit = store.audit_log("node", &o.node.to_string()).await.unwrap();
    let entry = audit
        .iter()
        .find(|a| a.action == "node.agent_enrolled")
        .expect("audit entry");
    assert_eq!(
        (entry.actor.as_str(), entry.role.as_str()),
        ("agent:c07u43", "agent")
    );
    assert_eq!(entry.details["late"], json!(false));
    assert!(!entry.details.to_string().contains(o.token.expose()));
    // Single use: the same token again (its agent token now in use) is refused.
    let again = store
        .enroll_agent(&request(&o.token, "c07u43", "x7k3pa"))
        .await
        .unwrap_err();
    assert!(
        matches!(again, EnrollError::InvalidToken(TokenError::AlreadyUsed)),
        "{again}"
    );
}

pub async fn invalid_tokens_are_refused_and_change_nothing(url: String) {
    let (store, clock) = open(&url).await;
    let o = onboarding(&store, "c07u44", "a1b2c3").await;
    let serial = store.serial().await.unwrap();
    let unknown = store
        .enroll_agent(&request(
            &Secret::new("wrong-AAAAAAAAAAAAAAAAAAAAAAAA"),
            "c07u44",
            "a1b2c3",
        ))
        .await
        .unwrap_err();
    assert_eq!(unknown.to_string(), "invalid enrollment token: unknown");
    clock.advance(Duration::hours(2) + Duration::seconds(1));
    let expired = store
        .enroll_agent(&request(&o.token, "c07u44", "a1b2c3"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &expired,
            EnrollError::InvalidToken(TokenError::Expired { .. })
        ),
        "{expired}"
    );
    assert!(
        expired
            .to_string()
            .starts_with("invalid enrollment token: expired at 2026-03-01T10:00:00")
    );
    unchanged(&store, o.node, serial).await;
}

pub async fn a_refreshed_token_is_accepted_after_its_first_ttl(url: String) {
    let (store, clock) = open(&url).await;
    let o = onboarding(&store, "c07u45", "d4e5f6").await;
    clock.advance(Duration::minutes(100));
    // 000 §4.6: "regenerate" = extend the same token, the host cannot learn a new one.
    assert_eq!(
        store
            .extend_enrollment_tokens(o.node, Duration::hours(2))
            .await
            .unwrap(),
        1
    );
    clock.advance(Duration::minutes(60));
    store
        .enroll_agent(&request(&o.token, "c07u45", "d4e5f6"))
        .await
        .expect("valid after the refresh");
}

pub async fn the_wrong_machine_cannot_use_a_token(url: String) {
    let (store, _) = open(&url).await;
    let o = onboarding(&store, "c07u46", "k9m8n7").await;
    let serial = store.serial().await.unwrap();
    let host = store
        .enroll_agent(&request(&o.token, "c07u99", "k9m8n7"))
        .await
        .unwrap_err();
    assert_eq!(
        host.to_string(),
        "the token was issued for hostname `c07u46`, but `c07u99` presented it"
    );
    let machine = store
        .enroll_agent(&request(&o.token, "c07u46", "zzzzzz"))
        .await
        .unwrap_err();
    assert_eq!(
        machine.to_string(),
        "the token was issued for MAAS system id `k9m8n7`, but `zzzzzz` presented it"
    );
    unchanged(&store, o.node, serial).await;
    // The recorded MAAS binding wins over the job's when both exist.
    store
        .upsert_maas_state(&MaasStateUpdate {
            node_id: o.node,
            site: "dc1".into(),
            maas_system_id: "k9m8n7".into(),
            status: Some("Deployed".into()),
            power_state: Some("on".into()),
            ips: vec![],
            drift: None,
        })
        .await
        .unwrap();
    // The token was not consumed by the refusals: the right machine still enrolls (hostname
    // case does not matter).
    store
        .enroll_agent(&request(&o.token, "C07U46", "k9m8n7"))
        .await
        .expect("right machine");
}

pub async fn a_node_that_is_not_waiting_refuses(url: String) {
    let (store, _) = open(&url).await;
    let o = onboarding(&store, "c07u47", "p1q2r3").await;
    let mut done = JobUpdate::new(JobState::Completed);
    done.node_transition = Some(NodeTransition::new(
        NodeState::Active,
        Owner::OnboardingWorkflow,
        exec(),
    ));
    store
        .advance_job(JobKind::Onboarding, o.job, &done)
        .await
        .unwrap();
    let serial = store.serial().await.unwrap();
    let err = store
        .enroll_agent(&request(&o.token, "c07u47", "p1q2r3"))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "node c07u47 is active: it is not waiting for an agent enrollment"
    );
    unchanged(&store, o.node, serial).await;
}

pub async fn a_late_enrollment_is_accepted_and_marked_late(url: String) {
    let (store, clock) = open(&url).await;
    let o = onboarding(&store, "c07u48", "s4t5u6").await;
    // The stage gave up after its enrollment timeout (000 §4.14), the token still valid.
    clock.advance(Duration::minutes(31));
    let mut failed = JobUpdate::new(JobState::FailedManualIntervention);
    failed.failure = Some(JobFailure {
        class: FailureClass::AgentEnrollmentFailure,
        code: "failed_enrollment".into(),
        message: "no enrollment within 30m".into(),
        details: json!({}),
    });
    store
        .advance_job(JobKind::Onboarding, o.job, &failed)
        .await
        .unwrap();
    clock.advance(Duration::minutes(10));
    let enrolled = store
        .enroll_agent(&request(&o.token, "c07u48", "s4t5u6"))
        .await
        .expect("late but valid");
    assert_eq!(
        enrolled.enrollment.onboarding_state,
        Some(JobState::FailedManualIntervention)
    );
    assert!(enrolled.enrollment.is_late());
    let audit = store.audit_log("node", &o.node.to_string()).await.unwrap();
    assert!(audit.iter().any(|a| a.action == "node.agent_enrolled"
        && a.details["late"] == json!(true)
        && a.details["onboarding_state"] == json!("failed_manual_intervention")));
    // A later plan finds it.
    let all = store.agent_enrollments(Some("dc1")).await.unwrap();
    assert_eq!(all.len(), 1);
    assert!(all[0].is_late());
}

pub async fn a_lost_answer_can_be_replayed_once_by_the_same_machine(url: String) {
    let (store, clock) = open(&url).await;
    let o = onboarding(&store, "c07u49", "v7w8x9").await;
    let first = store
        .enroll_agent(&request(&o.token, "c07u49", "v7w8x9"))
        .await
        .unwrap();
    // Another machine replaying the token is refused.
    let other = store
        .enroll_agent(&request(&o.token, "c07u49", "other1"))
        .await
        .unwrap_err();
    assert!(
        matches!(other, EnrollError::InvalidToken(TokenError::AlreadyUsed)),
        "{other}"
    );
    // The agent never got the answer and retries: a new agent token replaces the first.
    clock.advance(Duration::minutes(2));
    let second = store
        .enroll_agent(&request(&o.token, "c07u49", "v7w8x9"))
        .await
        .unwrap();
    assert!(second.replayed);
    assert_eq!(second.enrollment.id, first.enrollment.id);
    assert_ne!(second.agent_token, first.agent_token);
    assert_eq!(
        store.authenticate_agent(&first.agent_token).await.unwrap(),
        None
    );
    assert!(
        store
            .authenticate_agent(&second.agent_token)
            .await
            .unwrap()
            .is_some()
    );
    // Once the agent token is in use, the enrollment token is spent for good.
    let used = store
        .enroll_agent(&request(&o.token, "c07u49", "v7w8x9"))
        .await
        .unwrap_err();
    assert!(
        matches!(used, EnrollError::InvalidToken(TokenError::AlreadyUsed)),
        "{used}"
    );

    // And after the window, even an unused one cannot be replayed.
    let o2 = onboarding(&store, "c07u50", "y1z2a3").await;
    store
        .enroll_agent(&request(&o2.token, "c07u50", "y1z2a3"))
        .await
        .unwrap();
    clock.advance(ENROLLMENT_REPLAY_WINDOW + Duration::seconds(1));
    let stale = store
        .enroll_agent(&request(&o2.token, "c07u50", "y1z2a3"))
        .await
        .unwrap_err();
    assert!(
        matches!(stale, EnrollError::InvalidToken(TokenError::AlreadyUsed)),
        "{stale}"
    );
}

pub async fn a_reenrollment_revokes_the_previous_agent_identity(url: String) {
    let (store, clock) = open(&url).await;
    let o = onboarding(&store, "c07u51", "b4c5d6").await;
    let first = store
        .enroll_agent(&request(&o.token, "c07u51", "b4c5d6"))
        .await
        .unwrap();
    store.authenticate_agent(&first.agent_token).await.unwrap();
    // A reimage deploys a new token to the same node.
    clock.advance(Duration::hours(1));
    let (token, _) = store
        .issue_enrollment_token(o.node, None, Duration::hours(2))
        .await
        .unwrap();
    let second = store
        .enroll_agent(&request(&token, "c07u51", "b4c5d6"))
        .await
        .unwrap();
    assert_ne!(second.enrollment.id, first.enrollment.id);
    assert_eq!(second.enrollment.onboarding_state, None);
    assert_eq!(
        store.authenticate_agent(&first.agent_token).await.unwrap(),
        None
    );
    assert_eq!(
        store.agent_enrollment(o.node).await.unwrap().map(|e| e.id),
        Some(second.enrollment.id)
    );
    // The listing has the latest per node, and filters by site.
    let other = onboarding(&store, "c07u52", "e7f8g9").await;
    store
        .enroll_agent(&request(&other.token, "c07u52", "e7f8g9"))
        .await
        .unwrap();
    let all = store.agent_enrollments(None).await.unwrap();
    assert_eq!(all.len(), 2);
    assert!(all.iter().any(|e| e.id == second.enrollment.id));
    assert!(
        store
            .agent_enrollments(Some("dc2"))
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn concurrent_enrollments_with_one_token_enroll_once(url: String) {
    let (store, _) = open(&url).await;
    let o = onboarding(&store, "c07u53", "h1i2j3").await;
    // Two requests racing with one token: one enrollment (the loser is refused, or is a replay).
    let a = request(&o.token, "c07u53", "h1i2j3");
    let b = request(&o.token, "c07u53", "h1i2j3");
    let (ra, rb) = tokio::join!(store.enroll_agent(&a), store.enroll_agent(&b));
    let wins = [ra.as_ref().ok(), rb.as_ref().ok()]
        .into_iter()
        .flatten()
        .filter(|e| !e.replayed)
        .count();
    assert_eq!(wins, 1, "{ra:?} {rb:?}");
    let enrollments = store.agent_enrollments(None).await.unwrap();
    assert_eq!(enrollments.len(), 1);
}

/// What the agent channel asks every poll step: the nodes with a queued task or a dispatched
/// one whose lease expired — never a leased, finished or other node's task.
pub async fn claimable_nodes_are_the_queued_and_lease_expired_tasks(url: String) {
    let (store, clock) = open(&url).await;
    let mut nodes = Vec::new();
    for (host, system) in [
        ("a01", "s1"),
        ("a02", "s2"),
        ("a03", "s3"),
        ("a04", "s4"),
        ("a05", "s5"),
    ] {
        nodes.push(onboarding(&store, host, system).await.node);
    }
    // The last node has no task at all.
    let [queued, expired, leased, finished, _] = nodes[..] else {
        unreachable!()
    };
    assert!(store.claimable_nodes().await.unwrap().is_empty());
    for node in [queued, expired, leased, finished] {
        store
            .ensure_task(node, "node.heartbeat_check", &json!({}), None)
            .await
            .unwrap();
    }
    let lease = Duration::seconds(120);
    let short = Duration::seconds(10);
    assert!(
        store
            .claim_task(expired, "agent:e", short)
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        store
            .claim_task(leased, "agent:l", lease)
            .await
            .unwrap()
            .is_some()
    );
    let done = store
        .claim_task(finished, "agent:f", lease)
        .await
        .unwrap()
        .unwrap();
    store
        .complete_task(
            done.id,
            "agent:f",
            &metalform::store::TaskOutcome {
                succeeded: true,
                message: None,
                details: json!({}),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        store.claimable_nodes().await.unwrap(),
        [queued].into_iter().collect()
    );
    // The short lease runs out: its task can be handed out again.
    clock.advance(Duration::seconds(11));
    assert_eq!(
        store.claimable_nodes().await.unwrap(),
        [queued, expired].into_iter().collect()
    );
}

/// The agent channel's coalesced contacts: each node's last contact and each named credential's
/// use move forward to the latest of their contacts, never back, however many share a flush.
pub async fn coalesced_contacts_move_nodes_and_credentials_forward(url: String) {
    use metalform::store::AgentContact;
    let (store, clock) = open(&url).await;
    let mut enrolled = Vec::new();
    for (host, system) in [("a01", "s1"), ("a02", "s2"), ("a03", "s3")] {
        let o = onboarding(&store, host, system).await;
        let agent = store
            .enroll_agent(&request(&o.token, host, system))
            .await
            .unwrap();
        let credential = store
            .agent_credential(&agent.agent_token)
            .await
            .unwrap()
            .expect("current credential");
        assert!(!credential.used, "enrollment alone is no use of the token");
        enrolled.push((o.node, agent.agent_token, credential.token_hash));
    }
    let [(a, a_token, a_hash), (b, b_token, _), (c, c_token, c_hash)] = &enrolled[..] else {
        unreachable!()
    };
    let at = |minutes| t0() + Duration::minutes(minutes);
    clock.advance(Duration::minutes(30));
    // More than one statement's worth: unknown nodes and credentials first, which change nothing.
    let mut contacts: Vec<AgentContact> = (0..150)
        .map(|i| AgentContact {
            node_id: Uuid::new_v4(),
            credential: Some(format!("unknown-{i}")),
            at: at(40),
        })
        .collect();
    contacts.extend([
        // The later contact of a first, then its earlier one: the later stays.
        AgentContact {
            node_id: *a,
            credential: Some(a_hash.clone()),
            at: at(25),
        },
        AgentContact {
            node_id: *a,
            credential: Some(a_hash.clone()),
            at: at(20),
        },
        // Before b's enrollment: its last contact does not go back.
        AgentContact {
            node_id: *b,
            credential: None,
            at: t0() - Duration::minutes(5),
        },
        AgentContact {
            node_id: *c,
            credential: Some(c_hash.clone()),
            at: at(28),
        },
    ]);
    store.record_agent_contacts(&contacts).await.unwrap();
    let last_contact = |node: Uuid| {
        let store = store.clone();
        async move { store.node(node).await.unwrap().last_agent_contact_at }
    };
    assert_eq!(last_contact(*a).await, Some(at(25)));
    assert_eq!(last_contact(*b).await, Some(t0()));
    assert_eq!(last_contact(*c).await, Some(at(28)));
    let used = |token: Secret| {
        let store = store.clone();
        async move { store.agent_credential(&token).await.unwrap().unwrap().used }
    };
    assert!(used(a_token.clone()).await);
    assert!(
        !used(b_token.clone()).await,
        "b's contact named no credential"
    );
    assert!(used(c_token.clone()).await);
    // A later flush moves a forward again.
    store
        .record_agent_contacts(&[AgentContact {
            node_id: *a,
            credential: Some(a_hash.clone()),
            at: at(31),
        }])
        .await
        .unwrap();
    assert_eq!(last_contact(*a).await, Some(at(31)));
}

#[macro_export]
macro_rules! agent_suite_tests {
    ($make_url:path) => {
        $crate::agent_suite_tests!(@cases $make_url;
            enrollment_is_recorded_with_a_hashed_agent_token,
            invalid_tokens_are_refused_and_change_nothing,
            a_refreshed_token_is_accepted_after_its_first_ttl,
            the_wrong_machine_cannot_use_a_token,
            a_node_that_is_not_waiting_refuses,
            a_late_enrollment_is_accepted_and_marked_late,
            a_lost_answer_can_be_replayed_once_by_the_same_machine,
            a_reenrollment_revokes_the_previous_agent_identity,
            concurrent_enrollments_with_one_token_enroll_once,
            claimable_nodes_are_the_queued_and_lease_expired_tasks,
            coalesced_contacts_move_nodes_and_credentials_forward,
        );
    };
    (@cases $make_url:path; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                agent_suite::$case($make_url().await).await;
            }
        )+
    };
}
