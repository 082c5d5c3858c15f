//! `metalform provision NODE VERB` against a simulated MAAS site (issue 18, seed 002): a verb
//! illegal in the node's provision state is refused with the current state and changes
//! nothing (no MAAS write, no audit row); a verb the manifests own says which change to make;
//! rescue reaches MAAS as `rescue_mode`, audited, and the view follows MAAS.

use crate::onboard_support;

use onboard_support::{Bed, Setup, SiteSetup};

fn run(mut command: std::process::Command) -> (i32, String, String) {
    let out = command.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn audit_actions(bed: &Bed) -> Vec<String> {
    let node = bed
        .store
        .find_node("dc1", "gpu00001")
        .await
        .unwrap()
        .unwrap();
    bed.store
        .audit_log("node", &node.id.to_string())
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.action)
        .filter(|a| a.starts_with("node.provision"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn verbs_are_checked_against_the_provision_state_then_carried_out_on_maas() {
    let bed = Bed::start(Setup::one_site(SiteSetup::generated("dc1", 41, 1, 0))).await;
    assert!(bed.executor().run(bed.onboard_all()).await.all_converged());
    let writes = bed.maas_writes("dc1");

    // Illegal in ACTIVE: a conflict naming the state; nothing reaches MAAS or the audit log.
    let (code, _, err) = run(bed.cli_plan(&["provision", "gpu00001", "provide", "--reason", "x"]));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("error: verb `provide` is not allowed in state ACTIVE"),
        "{err}"
    );
    // Owned by the manifests: which change does it.
    let (code, _, err) = run(bed.cli_plan(&["provision", "gpu00001", "delete", "--reason", "x"]));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(
            "error: `deleted` on a node metalform deploys is a change to its manifest: set `lifecycle: retired`"
        ),
        "{err}"
    );
    // A reason is required; an unknown verb is an argument error.
    let (code, _, err) = run(bed.cli_plan(&["provision", "gpu00001", "rescue"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("a reason is required"), "{err}");
    let (code, _, err) = run(bed.cli_plan(&["provision", "gpu00001", "fly", "--reason", "x"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown verb `fly`"), "{err}");
    assert_eq!(bed.maas_writes("dc1"), writes);
    assert!(audit_actions(&bed).await.is_empty());

    // Rescue: MAAS's rescue_mode, audited; the view is RESCUING toward RESCUE.
    let (code, out, err) = run(bed.cli_plan(&[
        "provision",
        "gpu00001",
        "rescue",
        "--reason",
        "fsck the root disk",
    ]));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("MAAS rescue_mode of machine")
            && out.contains(
                "(now Entering rescue mode); provision state ACTIVE -> RESCUING -> RESCUE"
            ),
        "{out}"
    );
    let new_writes: Vec<String> = bed.maas_writes("dc1")[writes.len()..].to_vec();
    assert_eq!(new_writes.len(), 1, "{new_writes:?}");
    assert!(new_writes[0].contains("rescue_mode"), "{new_writes:?}");
    assert_eq!(audit_actions(&bed).await, ["node.provision.rescue"]);

    // Unrescue while the rescue environment still boots: refused, with the state.
    let (code, _, err) = run(bed.cli_plan(&["provision", "gpu00001", "unrescue", "--reason", "x"]));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("error: verb `unrescue` is not allowed in state RESCUING, heading to RESCUE"),
        "{err}"
    );
    assert_eq!(bed.maas_writes("dc1").len(), writes.len() + 1);
}
