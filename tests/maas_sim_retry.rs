//! The MAAS client's retry rules end to end against the simulator's fault injection
//! (API_REFERENCE §1 "Two kinds of 409"; docs/maas-client.md "Retries"): a faulted GET is
//! retried to success, a POST answered 409/503 with Retry-After is retried and takes effect
//! exactly once, a POST that hangs comes back outcome-unknown and is not resent. The
//! simulator's op log and counters show what MAAS saw; the client's metrics what it sent.

use crate::maas_sim_support;
use crate::sim_support;

use metalform::lifecycle::MaasStatus;
use std::time::Duration;

use maas_sim_support::*;
use metalform::provider::maas::*;
use sim_support::Sim;

/// (status, fault rule) of every request the simulator logged for `action`.
fn logged(sim: &Sim, action: &str) -> Vec<(u16, Option<String>)> {
    sim.handle
        .ops()
        .into_iter()
        .filter(|op| op.action.as_deref() == Some(action))
        .map(|op| (op.status, op.fault))
        .collect()
}

fn fault(rule: &str) -> Option<String> {
    Some(rule.to_string())
}

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test]
async fn a_faulted_get_is_retried_to_success_honouring_retry_after() {
    let sim = Sim::start(site(3)).await;
    let maas = admin(&sim);
    sim.handle
        .set_faults("machines.read:status=503,retry_after=2,count=2")
        .unwrap();
    let machines = maas.list_machines(&MachineFilter::all()).await.unwrap();
    assert_eq!(machines.len(), 3);
    assert_eq!(
        logged(&sim, "machines.read"),
        [
            (503, fault("machines.read")),
            (503, fault("machines.read")),
            (200, None)
        ]
    );
    // Retry-After as a floor, plus half the backoff × jitter 0.5: 2 + 0.125, 2 + 0.25.
    assert_eq!(maas.sleeper.waits(), [ms(2125), ms(2250)]);
    let metrics = maas.metrics();
    assert_eq!(metrics.get("list_machines", RequestStatus::Http(503)), 2);
    assert_eq!(metrics.get("list_machines", RequestStatus::Http(200)), 1);

    // A 5xx without Retry-After: a GET retries on capped, jittered backoff.
    let sid = machines[0].system_id.clone();
    sim.handle
        .set_faults("machine.read:status=500,count=1; machine.query_power_state:status=502,count=1")
        .unwrap();
    assert_eq!(maas.read_machine(&sid).await.unwrap().system_id, sid);
    assert_eq!(maas.query_power_state(&sid).await.unwrap(), PowerState::Off);
    assert_eq!(maas.sleeper.waits()[2..], [ms(375), ms(375)]);
    assert_eq!(
        logged(&sim, "machine.read")
            .iter()
            .map(|(s, _)| *s)
            .collect::<Vec<_>>(),
        [500, 200]
    );

    // MAAS busy for longer than the attempt budget: the last answer is handed back.
    sim.handle
        .set_faults("machine.read:status=503,retry_after=1")
        .unwrap();
    let err = maas.read_machine(&sid).await.unwrap_err();
    assert!(
        matches!(
            err,
            MaasError::Transient {
                cause: TransientCause::Status(503),
                attempts: 5,
                outcome_unknown: false,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "MAAS read_machine: transient failure (HTTP 503) after 5 attempts, retry after 1s: \
         Unable to connect to rack controller 'sim7rk' (sim7rk); no connections available."
    );
}

#[tokio::test]
async fn a_post_answered_409_with_retry_after_is_retried_once_and_applied_once() {
    let sim = Sim::start(site(2)).await;
    let maas = admin(&sim);
    let sid = nth(&maas, 0).await;
    sim.handle
        .set_faults("machine.deploy:status=409,retry_after=5,count=1")
        .unwrap();
    let deploying = maas.deploy(&sid, &DeployParams::default()).await.unwrap();
    assert_eq!(deploying.status, MaasStatus::Deploying);
    assert_eq!(
        logged(&sim, "machine.deploy"),
        [(409, fault("machine.deploy")), (200, None)]
    );
    assert_eq!(maas.sleeper.waits(), [ms(5125)]);
    assert_eq!(
        sim.counters(&sid).await["deploy"],
        1,
        "deployed exactly once"
    );
    assert_eq!(maas.metrics().get("deploy", RequestStatus::Http(409)), 1);
    assert_eq!(maas.metrics().get("deploy", RequestStatus::Http(200)), 1);

    // The same for a 503 with Retry-After (no rack controller): MAAS did nothing, retry.
    let other = nth(&maas, 1).await;
    sim.handle
        .set_faults("machine.commission:status=503,retry_after=10,count=1")
        .unwrap();
    let commissioning = maas
        .commission(&other, &CommissionParams::default())
        .await
        .unwrap();
    assert_eq!(commissioning.status, MaasStatus::Commissioning);
    assert_eq!(
        logged(&sim, "machine.commission"),
        [(503, fault("machine.commission")), (200, None)]
    );
    assert_eq!(sim.counters(&other).await["commission"], 1);
}

#[tokio::test]
async fn definite_and_ambiguous_post_failures_are_not_resent() {
    let sim = Sim::start(site(1)).await;
    let maas = admin(&sim);
    let sid = nth(&maas, 0).await;

    // 409 without Retry-After: a state conflict, whatever produced it.
    sim.handle.set_faults("machine.deploy:status=409").unwrap();
    let err = maas
        .deploy(&sid, &DeployParams::default())
        .await
        .unwrap_err();
    assert!(matches!(err, MaasError::Conflict { .. }), "{err}");
    assert_eq!(logged(&sim, "machine.deploy").len(), 1);

    // 503 without Retry-After on a POST: MAAS may have failed half-way; never guessed.
    sim.handle
        .set_faults("machine.deploy:status=503,count=1")
        .unwrap();
    let err = maas
        .deploy(&sid, &DeployParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            MaasError::Transient {
                cause: TransientCause::Status(503),
                outcome_unknown: true,
                attempts: 1,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(logged(&sim, "machine.deploy").len(), 2);
    assert!(maas.sleeper.waits().is_empty());
    assert_eq!(sim.counters(&sid).await["deploy"], 0);
}

#[tokio::test]
async fn a_post_that_hangs_is_outcome_unknown_and_not_resent() {
    let sim = Sim::start(site(1)).await;
    let sleeper = RecordingSleeper::default();
    let maas = MaasClient::new(
        &sim.handle.maas_url,
        metalform::secrets::Secret::new(sim.key.clone()),
        MaasClientOptions {
            timeout: Duration::from_millis(400),
            ..options(&sim, &sleeper)
        },
    )
    .unwrap();
    let sid = nth(&maas, 0).await;
    // Only the first deploy hangs: had the client resent it, the second would have deployed.
    sim.handle
        .set_faults("machine.deploy:hang,count=1")
        .unwrap();
    let started = std::time::Instant::now();
    let err = maas
        .deploy(&sid, &DeployParams::default())
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
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "ended by the client's timeout"
    );
    assert_eq!(
        err.hint(),
        "MAAS may or may not have applied the request; re-read the machine before repeating it"
    );
    assert_eq!(maas.metrics().operation_total("deploy"), 1);
    assert_eq!(maas.metrics().get("deploy", RequestStatus::Timeout), 1);
    assert!(sleeper.waits().is_empty());
    assert_eq!(sim.counters(&sid).await["deploy"], 0, "not resent");

    // What the caller does with an unknown outcome: re-read, then decide.
    let machine = maas.read_machine(&sid).await.unwrap();
    assert_eq!(machine.status, MaasStatus::Ready);
    maas.deploy(&sid, &DeployParams::default()).await.unwrap();
    assert_eq!(sim.counters(&sid).await["deploy"], 1);

    // A GET that hangs is simply tried again.
    sim.handle.set_faults("machine.read:hang,count=1").unwrap();
    assert_eq!(
        maas.read_machine(&sid).await.unwrap().status,
        MaasStatus::Deploying
    );
    assert_eq!(
        maas.metrics().get("read_machine", RequestStatus::Timeout),
        1
    );
    assert_eq!(sleeper.waits(), [ms(375)]);
}

#[tokio::test]
async fn latency_below_the_timeout_is_just_slow() {
    let sim = Sim::start(site(2)).await;
    let maas = admin(&sim);
    sim.handle
        .set_faults("machines.read:latency=300ms")
        .unwrap();
    let started = std::time::Instant::now();
    let machines = maas.list_machines(&MachineFilter::all()).await.unwrap();
    assert_eq!(machines.len(), 2);
    assert!(started.elapsed() >= ms(300));
    assert_eq!(maas.metrics().total(), 1);
    assert_eq!(
        logged(&sim, "machines.read"),
        [(200, fault("machines.read"))]
    );
}
