//! `metalform demo`: the README's first command runs the whole slice on embedded defaults —
//! validate, plan, apply the plan, status, plan again — and every node of the sample fleet
//! that should be in service ends active.

use std::process::{Command, Output};

fn demo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_metalform"))
        .arg("demo")
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("METALFORM_STATE")
        .env_remove("METALFORM_SECRETS")
        .output()
        .unwrap()
}

fn workdir_of(stdout: &str) -> std::path::PathBuf {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("workdir "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .into()
}

#[test]
fn demo_onboards_the_sample_fleet_end_to_end() {
    let out = demo(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("1. validate: 2 sites, 2 profiles, 42 nodes: valid"),
        "{stdout}"
    );
    assert!(stdout.contains("only discoverable by PXE"), "{stdout}");
    // The real planner's plan: known machines matched, unknown ones to discover, the retired
    // node left alone.
    for line in [
        "    + dc1/c07u46  onboard    not in MAAS yet: onboard (find or enlist it by its BMC 10.176.16.146)",
        "    * dc1/c07u45  noop       lifecycle retired (",
        "   3 simulated Redfish BMCs (dell, hpe, lenovo); their maintenance OS reports to http://127.0.0.1:",
        "    + dc1/rf01    provision  not provisioned yet: provision server RF-0001 over Redfish virtual media (http://127.0.0.1:",
        "Plan: 38 to onboard, 3 to provision; 1 unchanged.",
        "dc1/rf02    queued ",
        "Apply: 38 converged, 0 failed, 0 not run.",
        "5. plan again: Plan: no changes; 42 unchanged.",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in\n{stdout}");
    }
    // The Redfish servers were provisioned to the end (cleanup included) before the new plan.
    for serial in ["RF-0001", "RF-0002", "RF-0003"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.contains(serial) && l.split_whitespace().nth(3) == Some("complete")),
            "{serial} not complete in\n{stdout}"
        );
    }
    // The status table: every node in service is active; the retired one was left alone.
    let active = stdout
        .lines()
        .filter(|l| l.split_whitespace().nth(2) == Some("active"))
        .count();
    assert_eq!(active, 38, "{stdout}");
    assert!(stdout.contains("c07u45    - (retired)"), "{stdout}");
    // Progress went to stderr: a line per stage transition, and the discovered machines.
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("create_or_find_in_maas") && l.contains("by power address")),
        "{stderr}"
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("dc1/c07u46") && l.contains("created")),
        "{stderr}"
    );
    // The work directory is gone.
    assert!(!workdir_of(&stdout).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_jobs_run_under_the_plan_it_showed() {
    let out = demo(&["--keep", "--seed", "3"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let workdir = workdir_of(&stdout);
    let shown = stdout
        .lines()
        .find_map(|l| l.strip_prefix("Plan sha256:"))
        .and_then(|l| l.split_whitespace().next())
        .map(|hex| format!("sha256:{hex}"))
        .unwrap();
    let store = metalform::store::Store::open(
        &format!("sqlite://{}", workdir.join("state.db").display()),
        std::sync::Arc::new(metalform::clock::SystemClock),
    )
    .await
    .unwrap();
    let mut jobs = store
        .list_jobs(
            metalform::lifecycle::JobKind::Onboarding,
            &metalform::store::JobFilter::default(),
        )
        .await
        .unwrap();
    let provisionings = store
        .list_jobs(
            metalform::lifecycle::JobKind::Provisioning,
            &metalform::store::JobFilter::default(),
        )
        .await
        .unwrap();
    store.close().await;
    std::fs::remove_dir_all(&workdir).unwrap();
    assert_eq!((jobs.len(), provisionings.len()), (38, 3));
    jobs.extend(provisionings);
    for job in &jobs {
        let plan_id = job.plan_id.as_deref().unwrap();
        assert_eq!(metalform::plan::short_id(plan_id), shown, "{job:#?}");
    }
}
