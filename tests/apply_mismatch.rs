//! Issue 19 §4: warnings are summarized at the end of `apply`, and one that means the node is
//! not what its manifest says changes the outcome. The condition is real: before metalform
//! takes the site over, an operator deployed one machine through the MAAS API without hardware
//! sync (`enable_hw_sync=false`), while the profile requires it. `apply` adopts that machine as
//! it runs (no redeploy), its agent enrolls, and the node is left with a warning that only a
//! redeploy turns hardware sync on: the apply lists it under "Warnings", does not count the
//! node converged, and exits 1 saying what differs. The other node converges as usual.

use crate::onboard_support;

use std::time::{Duration, Instant};

use metalform::lifecycle::JobState;
use metalform::provider::maas::{DeployParams, MaasClient, MaasClientOptions, MachineFilter};
use onboard_support::{Bed, Setup, SiteSetup, free_port};

fn text(out: &std::process::Output) -> String {
    format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Deploy `hostname` the way an operator did before metalform: allocate, then deploy with
/// hardware sync off and no user-data; wait until MAAS says Deployed. Its system id.
async fn deployed_without_hardware_sync(bed: &Bed, hostname: &str) -> String {
    let sim = bed.sim("dc1");
    let maas = MaasClient::new(
        &sim.maas_url,
        sim.api_key().clone(),
        MaasClientOptions::default(),
    )
    .unwrap();
    let machines = maas.list_machines(&MachineFilter::all()).await.unwrap();
    let machine = machines
        .iter()
        .find(|m| m.hostname == hostname)
        .unwrap_or_else(|| panic!("no {hostname} in MAAS"));
    let system_id = machine.system_id.clone();
    maas.allocate(&system_id).await.unwrap();
    let params = DeployParams {
        distro_series: Some("noble".into()),
        enable_hw_sync: Some(false),
        ..DeployParams::default()
    };
    maas.deploy(&system_id, &params).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let machine = maas.read_machine(&system_id).await.unwrap();
        if machine.status_label() == "Deployed" {
            assert!(!machine.hardware_sync().enabled);
            return system_id;
        }
        assert!(
            Instant::now() < deadline,
            "{system_id} is still {}",
            machine.status_label()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_adopted_without_hardware_sync_is_a_warning_and_not_converged() {
    let bed = Bed::start(Setup::one_site(SiteSetup::generated("dc1", 61, 2, 0))).await;
    let system_id = deployed_without_hardware_sync(&bed, "gpu00001").await;

    let plan = bed.cli_plan(&["plan"]).output().unwrap();
    assert!(
        text(&plan).contains("dc1/gpu00001  adopt"),
        "{}",
        text(&plan)
    );

    let port = free_port();
    let out = bed
        .cli(&["apply", "--auto-approve"], port)
        .output()
        .unwrap();
    let shown = text(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The outcome: not converged, exit 1, with what differs and what to do.
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(
        stderr.contains(
            "error: 1 node(s) are not what their manifests say: dc1/gpu00001\n\
             hint: the warnings above say what differs and what brings the node in line"
        ),
        "{shown}"
    );
    // The result table does not count it converged; the other node is.
    let row = stdout
        .lines()
        .find(|l| l.starts_with("dc1/gpu00001"))
        .unwrap_or_else(|| panic!("no result row for dc1/gpu00001:\n{shown}"));
    assert!(
        row.contains("diverged") && row.contains("not what its manifest says"),
        "{shown}"
    );
    let other = stdout
        .lines()
        .find(|l| l.starts_with("dc1/gpu00002"))
        .unwrap_or_else(|| panic!("no result row for dc1/gpu00002:\n{shown}"));
    assert!(other.contains("completed"), "{shown}");
    assert!(
        stdout.contains("\nApply: 1 converged, 1 not as declared, 0 failed, 0 not run.\n"),
        "{shown}"
    );
    // The warnings summary at the end: the one warning, marked as a difference.
    let summary = &stdout[stdout.find("\nWarnings (").expect("a warnings summary")..];
    assert_eq!(
        summary,
        format!(
            "\nWarnings (1):\n  dc1/gpu00001: {system_id} was deployed (before metalform adopted \
             it) without hardware sync; set reimage.generation to redeploy it with hardware sync \
             [not as the manifest says]\n"
        ),
        "{shown}"
    );

    // What the store says: the adoption ended (no redeploy), the node is in the inventory.
    let jobs = bed.jobs().await;
    let adopted = jobs.iter().find(|j| j.hostname == "gpu00001").unwrap();
    assert!(adopted.adopted, "{adopted:#?}");
    assert_eq!(adopted.state, JobState::Reconciled, "{adopted:#?}");
    assert_eq!(
        bed.deploys("dc1")["gpu00001"],
        1,
        "only the operator's deploy"
    );
}
