//! `metalform drift run|list|status|resolve` (docs/drift.md) against a bed of active nodes and
//! the simulator: a pass from the command line quarantines a broken node, the list and the
//! summary show it, resolve refuses and then reactivates it, bad input is refused with a hint.

use crate::drift_support;
use crate::onboard_support;

use std::process::Output;

use metalform::lifecycle::NodeState;

use drift_support::*;
use onboard_support::Bed;

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn drift_cmd(bed: &Bed, args: &[&str]) -> Output {
    let mut all = vec!["drift"];
    all.extend_from_slice(args);
    bed.cli_store(&all).output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn drift_commands_end_to_end() {
    let bed = active_site(3, 1).await;
    let nodes = nodes(&bed).await;
    let (broken, broken_sid) = nodes[1].clone();
    out_of_band(&bed, &broken_sid, "mark_broken").await;

    // The onboarding recorded each node's MAAS state as it completed.
    let (out, _) = text(&drift_cmd(&bed, &["status"]));
    assert!(
        out.starts_with("3 watched nodes: 3 ok, 0 drifted, 0 unreconciled (last reconciled "),
        "{out}"
    );

    // A bad policy file is refused before anything is read.
    let policy = bed.dir.path().join("policy.toml");
    std::fs::write(&policy, "quarantine_all = true\n").unwrap();
    let fleet = bed.fleet_dir.to_str().unwrap().to_owned();
    let secrets = format!("file://{}", bed.secrets_path.display());
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "--fleet", &fleet, "--secrets", &secrets];
        args.extend_from_slice(extra);
        drift_cmd(&bed, &args)
    };
    let output = run(&["--policy", policy.to_str().unwrap()]);
    let (_, err) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with(&format!(
            "error: {}: unknown field `quarantine_all`",
            policy.display()
        )),
        "{err}"
    );
    assert!(err.contains("hint: keys: heartbeat_threshold"), "{err}");
    assert_eq!(
        bed.store.node(broken.id).await.unwrap().status,
        NodeState::Active
    );

    // One pass from the command line.
    std::fs::write(&policy, "heartbeat_threshold = \"1h\"\n").unwrap();
    let output = run(&["--policy", policy.to_str().unwrap()]);
    let (out, err) = text(&output);
    assert!(output.status.success(), "{out}\n{err}");
    assert!(out.starts_with("site dc1 at "), "{out}");
    let line = out
        .lines()
        .find(|l| l.starts_with(&broken.hostname))
        .unwrap();
    assert!(
        line.contains("active") && line.contains("hardware_failure") && line.contains("critical"),
        "{line}"
    );
    assert!(
        out.contains(&format!("taken   {} quarantine\n", broken.hostname)),
        "{out}"
    );
    assert!(
        out.contains("1 unmanaged MAAS machine(s) (no node): "),
        "{out}"
    );
    assert_eq!(
        bed.store.node(broken.id).await.unwrap().status,
        NodeState::Quarantined
    );

    // The list and the summary.
    let (out, _) = text(&drift_cmd(&bed, &["list"]));
    let mut lines = out.lines();
    assert!(
        lines.next().unwrap().starts_with("SITE  HOSTNAME  STATE"),
        "{out}"
    );
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    let (sid, id) = (format!("({broken_sid})"), broken.id.to_string());
    assert_eq!(
        row,
        vec![
            "dc1",
            broken.hostname.as_str(),
            "quarantined",
            "hardware_failure",
            "critical",
            "Broken",
            sid.as_str(),
            "open",
            id.as_str()
        ]
    );
    assert!(out.contains("\n1 node with open drift\n"), "{out}");
    assert!(
        out.contains("3 watched nodes: 2 ok, 1 drifted, 0 unreconciled (last reconciled "),
        "{out}"
    );
    assert!(
        out.ends_with("open drift by rule: hardware_failure 1\n"),
        "{out}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&drift_cmd(&bed, &["list", "--format", "json"]).stdout).unwrap();
    assert_eq!(json["drift"][0]["rule"], "hardware_failure");
    assert_eq!(json["drift"][0]["drift_details"]["maas_status"], "Broken");
    assert_eq!(json["summary"]["drifted"], 1);

    // Resolve: a reason is required; reactivation needs a Deployed machine; unknown nodes.
    let output = drift_cmd(&bed, &["resolve", &broken.hostname]);
    let (_, err) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert_eq!(
        err,
        "error: a drift resolution needs a reason (it goes to the audit log)\nhint: pass --reason TEXT\n"
    );
    let output = drift_cmd(
        &bed,
        &[
            "resolve",
            &broken.hostname,
            "--action",
            "reactivate",
            "--reason",
            "fixed?",
        ],
    );
    let (_, err) = text(&output);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        err.starts_with(&format!(
            "error: cannot reactivate node {}: MAAS last showed Broken for {broken_sid} (at ",
            broken.hostname
        )),
        "{err}"
    );
    let output = drift_cmd(&bed, &["resolve", "nosuchhost", "--reason", "x"]);
    let (_, err) = text(&output);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        err.starts_with("error: no node `nosuchhost` in the inventory"),
        "{err}"
    );
    assert_eq!(
        bed.store.node(broken.id).await.unwrap().status,
        NodeState::Quarantined,
        "a refused resolve changes nothing"
    );
    assert!(
        audits(&bed.store, broken.id, "node.drift_reactivated")
            .await
            .is_empty()
    );

    // Fixed in MAAS, reconciled, then reactivated by the operator.
    let site = &bed.fleet.sites[&metalform::model::SiteName::new("dc1")];
    let env = drift_env(&bed, bed.store.clone(), Default::default());
    env.maas
        .client(site, bed.secrets.as_ref())
        .await
        .unwrap()
        .mark_fixed(&broken_sid, None)
        .await
        .unwrap();
    assert!(run(&[]).status.success());
    let output = drift_cmd(
        &bed,
        &[
            "resolve",
            &broken.hostname,
            "--action",
            "reactivate",
            "--reason",
            "DIMM replaced",
            "--as",
            "alice",
        ],
    );
    let (out, err) = text(&output);
    assert!(output.status.success(), "{err}");
    assert_eq!(
        out,
        format!(
            "dc1/{} ({}): reactivated; node quarantined -> active\n",
            broken.hostname, broken.id
        )
    );
    let audit = audits(&bed.store, broken.id, "node.drift_reactivated").await;
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0].actor, "alice");
    assert_eq!(audit[0].reason.as_deref(), Some("DIMM replaced"));
    let (out, _) = text(&drift_cmd(&bed, &["list", "--all"]));
    assert!(
        out.contains("\n0 nodes with open drift, 1 resolved\n"),
        "{out}"
    );
    let (out, _) = text(&drift_cmd(&bed, &["status", "--format", "json"]));
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["summary"]["ok"], 3);
    assert_eq!(json["summary"]["sites"]["dc1"]["drifted"], 0);
}
