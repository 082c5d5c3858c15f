//! Every typed error of metalform's MAAS client as the simulator produces it the way MAAS does
//! (API_REFERENCE §1 "Error bodies", §2.4, §4.3): 401 for a bad key, 403 for a missing
//! permission, 404, 409 state violations, 400 form errors and plain-text 400s, and the
//! injected 503/409 with Retry-After. Each definite answer is one request, never repeated.

use crate::maas_sim_support;
use crate::sim_support;

use std::sync::Arc;

use maas_sim_support::*;
use metalform::clock::{Clock, ManualClock};
use metalform::provider::maas::*;
use metalform::secrets::Secret;
use sim_support::Sim;

/// How many requests the simulator logged for `action` (`machine.deploy`, …) with `status`.
fn logged(sim: &Sim, action: &str) -> Vec<u16> {
    sim.handle
        .ops()
        .iter()
        .filter(|op| op.action.as_deref() == Some(action))
        .map(|op| op.status)
        .collect()
}

#[tokio::test]
async fn bad_keys_are_unauthorized_and_never_echo_the_key() {
    let sim = Sim::start(site(1)).await;
    let parts: Vec<&str> = sim.key.split(':').collect();

    let unknown = client_with_key(&sim, "nosuchconsumer:nosuchtoken:nosuchsecret");
    let err = unknown
        .list_machines(&MachineFilter::all())
        .await
        .unwrap_err();
    assert!(matches!(err, MaasError::Unauthorized { .. }), "{err}");
    assert_eq!(err.maas_message(), "Authorization Error: Invalid API key.");
    assert!(!err.is_retryable());
    assert!(err.hint().starts_with("check the site's MAAS API key"));
    assert_eq!(
        unknown
            .metrics()
            .get("list_machines", RequestStatus::Http(401)),
        1
    );
    assert_eq!(unknown.metrics().total(), 1, "a 401 is not retried");

    // The right consumer with a wrong token: MAAS names the token; the client scrubs it.
    let wrong_token = client_with_key(&sim, &format!("{}:revokedtoken99:{}", parts[0], parts[2]));
    let err = wrong_token.whoami().await.unwrap_err();
    assert!(matches!(err, MaasError::Unauthorized { .. }), "{err}");
    assert!(
        err.maas_message()
            .starts_with("Authorization Error: 'Invalid access token: ")
    );
    assert!(!err.to_string().contains("revokedtoken99"), "{err}");

    let wrong_secret = client_with_key(&sim, &format!("{}:{}:notthesecret", parts[0], parts[1]));
    let err = wrong_secret.whoami().await.unwrap_err();
    assert_eq!(
        err.maas_message(),
        "Authorization Error: 'Invalid signature.'"
    );
    assert!(!err.to_string().contains("notthesecret") && !err.to_string().contains(parts[2]));

    // A client whose clock is 10 minutes behind MAAS's signs expired timestamps.
    let late_clock = ManualClock::new(now(&sim) - chrono::Duration::minutes(10));
    let sleeper = RecordingSleeper::default();
    let late = MaasClient::new(
        &sim.handle.maas_url,
        Secret::new(sim.key.clone()),
        MaasClientOptions {
            clock: Arc::new(late_clock) as Arc<dyn Clock>,
            ..options(&sim, &sleeper)
        },
    )
    .unwrap();
    let err = late.whoami().await.unwrap_err();
    assert!(matches!(err, MaasError::Unauthorized { .. }), "{err}");
    assert!(
        err.maas_message()
            .starts_with("Authorization Error: 'Expired timestamp: given "),
        "{err}"
    );
}

#[tokio::test]
async fn missing_permissions_are_forbidden() {
    let sim = Sim::start(site(2)).await;
    let maas = admin(&sim);
    let alice = user(&sim);
    let machines = maas.list_machines(&MachineFilter::all()).await.unwrap();
    let (mine, free) = (&machines[0].system_id, &machines[1].system_id);
    maas.deploy(mine, &DeployParams::default()).await.unwrap();

    // Non-admins do not see other users' machines, and get an empty 403 when they name one.
    let seen = alice.list_machines(&MachineFilter::all()).await.unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(&seen[0].system_id, free);
    let err = alice.read_machine(mine).await.unwrap_err();
    assert!(matches!(err, MaasError::Forbidden { .. }), "{err}");
    assert_eq!(err.maas_message(), "");
    assert_eq!(
        err.to_string(),
        "MAAS read_machine: forbidden (403): (no message)"
    );
    assert!(err.hint().contains("must be a MAAS admin"));

    // Admin-only operations.
    for (operation, err) in [
        (
            "commission",
            alice
                .commission(free, &CommissionParams::default())
                .await
                .unwrap_err(),
        ),
        ("get_token", alice.get_token(mine).await.unwrap_err()),
        (
            "set_storage_layout",
            alice
                .set_storage_layout(free, &StorageLayoutParams::flat(None))
                .await
                .unwrap_err(),
        ),
        (
            "update_machine",
            alice
                .update_machine(free, &UpdateMachineParams::default())
                .await
                .unwrap_err(),
        ),
    ] {
        assert!(
            matches!(err, MaasError::Forbidden { .. }),
            "{operation}: {err}"
        );
        assert_eq!(err.operation(), Some(operation));
    }
    let err = alice.accept(&[free]).await.unwrap_err();
    assert!(matches!(err, MaasError::Forbidden { .. }), "{err}");
    assert_eq!(
        err.maas_message(),
        format!(
            "You don't have the required permission to accept the following machine(s): {free}."
        )
    );
    // A machine's own token is a valid OAuth credential that the regular API refuses.
    let token = maas.get_token(mine).await.unwrap().unwrap();
    let as_machine = client_with_key(
        &sim,
        &format!(
            "{}:{}:{}",
            token.consumer_key,
            token.token_key,
            token.token_secret.expose()
        ),
    );
    let err = as_machine
        .list_machines(&MachineFilter::all())
        .await
        .unwrap_err();
    assert!(matches!(err, MaasError::Forbidden { .. }), "{err}");
    // Nothing was changed by any refused request.
    assert_eq!(sim.counters(free).await["commission"], 0);
}

#[tokio::test]
async fn unknown_objects_are_not_found() {
    let sim = Sim::start(site(1)).await;
    let maas = admin(&sim);
    let sid = nth(&maas, 0).await;
    let no_machine = "No Machine matches the given query.";
    let errors = [
        maas.read_machine("nosuch").await.unwrap_err(),
        maas.read_node("nosuch").await.unwrap_err(),
        maas.deploy("nosuch", &DeployParams::default())
            .await
            .unwrap_err(),
        maas.release("nosuch", &ReleaseParams::default())
            .await
            .unwrap_err(),
        maas.list_block_devices("nosuch").await.unwrap_err(),
        maas.list_interfaces("nosuch").await.unwrap_err(),
        maas.get_token("nosuch").await.unwrap_err(),
        maas.delete_machine("nosuch").await.unwrap_err(),
    ];
    for err in &errors {
        assert!(matches!(err, MaasError::NotFound { .. }), "{err}");
        assert_eq!(err.maas_message(), no_machine, "{err}");
        assert!(!err.is_retryable());
    }
    assert_eq!(
        maas.metrics().total(),
        1 + errors.len() as u64,
        "none retried"
    );
    let err = maas.read_interface(&sid, 424_242).await.unwrap_err();
    assert_eq!(err.maas_message(), "No Interface matches the given query.");
    assert!(err.hint().contains("deleted out of band"));
}

#[tokio::test]
async fn state_violations_are_conflicts_and_never_retried() {
    let sim = Sim::start(site(1)).await;
    let maas = admin(&sim);
    let sid = nth(&maas, 0).await;
    let cases = [
        (
            maas.release(&sid, &ReleaseParams::erasing(EraseMode::Quick))
                .await
                .map(drop),
            "",
        ),
        (maas.abort(&sid, None).await.map(drop), "abort"),
        (maas.mark_fixed(&sid, None).await.map(drop), "mark_fixed"),
        (maas.power_on(&sid, None).await.map(drop), "power_on"),
    ];
    // Releasing a Ready machine is MAAS's 200 no-op; the others are 409s.
    assert!(cases[0].0.is_ok());
    for (result, operation) in &cases[1..] {
        let err = result.as_ref().unwrap_err();
        assert!(matches!(err, MaasError::Conflict { .. }), "{err}");
        assert_eq!(err.status(), Some(409));
        assert!(!err.is_retryable() && err.retry_after().is_none());
        assert_eq!(logged(&sim, &format!("machine.{operation}")), [409]);
    }
    maas.deploy(&sid, &DeployParams::default()).await.unwrap();
    let err = maas
        .deploy(&sid, &DeployParams::default())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "MAAS deploy: state conflict (409): Can't deploy a machine that is in the 'Deploying' state"
    );
    assert!(err.hint().contains("re-read the machine and plan again"));
    assert_eq!(logged(&sim, "machine.deploy"), [200, 409]);
    assert_eq!(sim.counters(&sid).await["deploy"], 1);
}

#[tokio::test]
async fn bad_requests_carry_maas_form_errors_or_text() {
    let sim = Sim::start(site(1)).await;
    let maas = admin(&sim);
    let sid = nth(&maas, 0).await;

    // Form errors (JSON): field → messages.
    let err = maas
        .list_machines(&MachineFilter::all().mac_address("not-a-mac"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, MaasError::BadRequest { status: 400, .. }),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "MAAS list_machines: bad request (400): mac_address: Invalid parameter: invalid MAC address format"
    );
    let err = maas
        .set_storage_layout(
            &sid,
            &StorageLayoutParams {
                layout: StorageLayout::Other("zfs".into()),
                ..StorageLayoutParams::flat(None)
            },
        )
        .await
        .unwrap_err();
    // StorageLayoutForm's compose_invalid_choice_text (storage_layouts.py), not Django's text.
    assert_eq!(
        err.form_errors().unwrap()["storage_layout"],
        [
            "'zfs' is not a valid storage_layout.  It should be one of: 'bcache', 'blank', \
          'custom', 'flat', 'lvm', 'vmfs6', 'vmfs7'."
        ]
    );
    let err = maas
        .create_subnet(&CreateSubnetParams::new("10.1.2.3/24"))
        .await
        .unwrap_err();
    assert!(err.form_errors().unwrap().contains_key("cidr"), "{err}");

    // Plain-text 400s: no form errors, MAAS's text kept.
    let err = maas.accept(&["nosuch"]).await.unwrap_err();
    assert!(
        matches!(err, MaasError::BadRequest { status: 400, .. }),
        "{err}"
    );
    assert_eq!(err.form_errors(), None);
    assert_eq!(err.maas_message(), "Unknown machine(s): nosuch.");
    let err = maas
        .query_events(&EventsQuery {
            level: Some(EventLevel::Other("info".into())),
            ..EventsQuery::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.maas_message(), "Unrecognised log level: info");
    assert!(err.hint().contains("fix the values named in the message"));
    assert_eq!(maas.metrics().get("accept", RequestStatus::Http(400)), 1);
}

#[tokio::test]
async fn injected_busy_answers_are_transient_with_retry_after() {
    let sim = Sim::start(site(1)).await;
    let maas = admin(&sim);
    let sid = nth(&maas, 0).await;
    // Longer than the client waits inside one call: handed back for the stage to reschedule.
    sim.handle
        .set_faults("machine.deploy:status=503,retry_after=600")
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
                outcome_unknown: false,
                attempts: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.is_retryable());
    assert_eq!(err.retry_after(), Some(std::time::Duration::from_secs(600)));
    assert!(
        maas.sleeper.waits().is_empty(),
        "not waited for inside the call"
    );
    // MAAS's serialization conflict always asks for 5 s, with its HTML page: waited for and
    // retried until the attempts run out, never read as a state violation.
    sim.handle
        .set_faults("machine.release:status=409,retry_after=5")
        .unwrap();
    let err = maas
        .release(&sid, &ReleaseParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            MaasError::Transient {
                cause: TransientCause::Status(409),
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.retry_after(), Some(std::time::Duration::from_secs(5)));
    assert!(!err.is_outcome_unknown(), "MAAS rolled it back");
    assert_eq!(
        err.maas_message(),
        "Error: Conflict Error: Conflict error. Try your request again, as it will most likely \
         succeed."
    );
    assert!(
        maas.sleeper
            .waits()
            .iter()
            .all(|w| *w >= std::time::Duration::from_secs(5)),
        "{:?}",
        maas.sleeper.waits()
    );
    assert_eq!(maas.metrics().operation_total("release"), 5);
    // Any other Retry-After on a 409 is not something MAAS sends.
    let err = sim
        .handle
        .set_faults("machine.release:status=409,retry_after=300")
        .unwrap_err();
    assert!(err.reason.contains("always asks for 5 seconds"), "{err}");
    assert_eq!(sim.counters(&sid).await["deploy"], 0);
}
