//! Where metalform's MAAS client and the simulator disagreed, decided by
//! ../shared/maas/API_REFERENCE.md (and the real fixtures); each test pins the side that was
//! fixed. docs/simulator.md and docs/maas-client.md describe the resulting behaviour.

mod maas_sim_support;
mod sim_support;

use maas_sim_support::*;
use metalform::provider::maas::*;
use sim_support::Sim;

/// §2.3: PLAINTEXT compares the unescaped header value with
/// `escape(consumer_secret) + "&" + escape(token_secret)` — the client (like oauthlib, which
/// python-libmaas uses) percent-encodes the secret inside the signature and the header value
/// again. A secret with reserved characters must therefore still authenticate.
#[tokio::test]
async fn a_token_secret_with_reserved_characters_authenticates() {
    let mut config = site(1);
    config.api_key = "ck-metal:tk-metal:s3cr+t/k=y~ok".to_string();
    let sim = Sim::start(config).await;
    let maas = admin(&sim);
    assert_eq!(maas.whoami().await.unwrap().username, "admin");
    assert_eq!(
        maas.list_machines(&MachineFilter::all())
            .await
            .unwrap()
            .len(),
        1
    );
}

/// §5.12: for an Allocated machine MAAS moves the status to Deploying synchronously and
/// claims AUTO addresses post-commit, answering 503 on exhaustion — so the 503 arrives after
/// the deployment took effect. The client calls that outcome-unknown and does not resend; the
/// simulator used to validate first and change nothing, which made the client look
/// over-cautious. Now the machine is left Deploying (its deployment cannot finish and fails
/// when MAAS's deployment timeout, 2 × node_timeout, expires).
#[tokio::test]
async fn address_exhaustion_answers_503_after_the_machine_moved_to_deploying() {
    let mut config = site(5);
    // 10.176.46.11–14 are the only addresses the simulator hands out on a /28.
    config.pxe_cidr = "10.176.46.0/28".to_string();
    config.timings.node_timeout_secs = 600.0;
    let sim = Sim::start(config).await;
    let maas = admin(&sim);
    let machines = maas.list_machines(&MachineFilter::all()).await.unwrap();
    for m in &machines[..4] {
        maas.deploy(&m.system_id, &DeployParams::default())
            .await
            .unwrap();
    }
    let sid = &machines[4].system_id;
    let err = maas
        .deploy(sid, &DeployParams::default())
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
    assert_eq!(
        err.maas_message(),
        format!("{sid}: Unable to allocate static IP due to address exhaustion.")
    );
    assert_eq!(maas.metrics().operation_total("deploy"), 5, "not resent");
    // Re-reading shows why the outcome was unknown: the deployment did start.
    let machine = maas.read_machine(sid).await.unwrap();
    assert_eq!(machine.status, MachineStatus::Deploying);
    assert_eq!(machine.owner.as_deref(), Some("admin"));
    assert!(machine.ip_addresses.is_empty());
    assert_eq!(
        sim.counters(sid).await["deploy"],
        1,
        "the request took effect"
    );
    // It cannot finish: MAAS fails it at the deployment timeout (2 × node_timeout).
    sim.advance(1199);
    assert_eq!(
        maas.read_machine(sid).await.unwrap().status,
        MachineStatus::Deploying
    );
    sim.advance(2);
    let failed = maas.read_machine(sid).await.unwrap();
    assert_eq!(failed.status, MachineStatus::FailedDeployment);
    assert!(failed.status_message.is_some());
    // The others deployed normally.
    assert_eq!(
        maas.read_machine(&machines[0].system_id)
            .await
            .unwrap()
            .status,
        MachineStatus::Deployed
    );
}
