//! Issue 15 "adopt what already runs", end to end through the binary: `metalform import-maas`
//! reads a MAAS whose machines already run, writes the NodeGroup (BMC logins other than the
//! site's default as Vault references, stored with --write-secrets), `plan` adopts the Deployed
//! machines and `apply` converges them without a redeploy — their agents enrolled through the
//! delivered follow-up. And the bad answers: a MAAS (or what stands in front of it) that
//! answers HTML, a truncated body, a redirect or another shape makes a typed error naming the
//! endpoint, and nothing is written — no manifest, no secret, no store row, no MAAS change.

use crate::onboard_support;

use std::process::Command;

use metalform::lifecycle::{JobState, NodeState};
use metalform::sim::InitialState;
use onboard_support::{Bed, Setup, SiteSetup, free_port};

fn text(out: &std::process::Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `metalform import-maas --site dc1 …` against the bed's fleet and secrets.
fn import_maas(bed: &Bed, extra: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_metalform"));
    command
        .args([
            "import-maas",
            "--site",
            "dc1",
            "--sku",
            "mi300x.192g.8gpu",
            "--gpus",
            "8",
        ])
        .args(extra)
        .arg("--fleet")
        .arg(&bed.fleet_dir)
        .arg("--secrets")
        .arg(format!("file://{}", bed.secrets_path.display()))
        .env_remove("METALFORM_SECRETS")
        .env("NO_COLOR", "1");
    command
}

/// Three machines that already run (Deployed, hardware sync on, an agent on each host waiting
/// for its enrollment), one of them with a BMC login other than the site's default; the fleet
/// names no node yet.
async fn running_fleet(seed: u64) -> Bed {
    let mut site = SiteSetup::generated("dc1", seed, 3, 0);
    for m in &mut site.config.machines {
        m.initial = InitialState::Deployed;
    }
    site.config.machines[1].power_pass = "rack-c07-bmc".into();
    let bed = Bed::start(Setup::one_site(site)).await;
    std::fs::remove_file(bed.fleet_dir.join("nodes/dc1.yaml")).unwrap();
    bed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_running_fleet_is_imported_adopted_and_enrolled_without_a_redeploy() {
    let bed = running_fleet(51).await;
    let out_file = bed.fleet_dir.join("nodes/dc1-imported.yaml");
    let out = import_maas(
        &bed,
        &["--out", out_file.to_str().unwrap(), "--write-secrets"],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let manifest = std::fs::read_to_string(&out_file).unwrap();
    for host in ["gpu00001", "gpu00002", "gpu00003"] {
        assert!(
            manifest.contains(&format!("hostname: {host}")),
            "{manifest}"
        );
    }
    assert!(manifest.contains("kind: NodeGroup"), "{manifest}");
    // The differing login: a Vault reference in the manifest, the value only in the store.
    assert!(!manifest.contains("rack-c07-bmc"), "{manifest}");
    assert!(
        manifest.contains("credentials: {vault: kv/dc1/power/imported/gpu00002}"),
        "{manifest}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("stored the BMC login at kv/dc1/power/imported/gpu00002"),
        "{stderr}"
    );
    let secrets: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&bed.secrets_path).unwrap()).unwrap();
    assert_eq!(
        secrets["kv/dc1/power/imported/gpu00002"]["pass"],
        "rack-c07-bmc"
    );
    // Refuses to overwrite.
    let again = import_maas(&bed, &["--out", out_file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!again.status.success(), "{}", text(&again));

    // plan: three adoptions, nothing destructive.
    let plan = bed.cli_plan(&["plan"]).output().unwrap();
    let plan_text = text(&plan);
    for host in ["gpu00001", "gpu00002", "gpu00003"] {
        assert!(
            plan_text.contains(&format!("dc1/{host}  adopt")),
            "{plan_text}"
        );
    }
    assert!(plan_text.contains("3 to adopt"), "{plan_text}");

    // apply: adopted as they run; each host gets its agent enrollment; no deploy, no release.
    let port = free_port();
    let applied = bed
        .cli(&["apply", "--auto-approve"], port)
        .output()
        .unwrap();
    assert!(applied.status.success(), "{}", text(&applied));
    let jobs = bed.jobs().await;
    assert_eq!(jobs.len(), 3, "{jobs:#?}");
    for job in &jobs {
        assert_eq!(job.state, JobState::Reconciled, "{job:#?}");
        assert!(job.adopted);
        let node = bed.store.node(job.node_id.unwrap()).await.unwrap();
        assert_eq!(node.status, NodeState::Active, "{}", job.hostname);
    }
    let deploys = bed.deploys("dc1");
    assert!(
        deploys.values().all(|d| *d == 0),
        "no redeploy: {deploys:?}"
    );
    let writes = bed.maas_writes("dc1");
    assert!(
        writes
            .iter()
            .all(|w| !w.contains("deploy") && !w.contains("release")),
        "{writes:#?}"
    );
    // The agent logs its answer after the store recorded the enrollment: give it a moment.
    let enrolled = || {
        bed.sim("dc1")
            .agent_log()
            .iter()
            .any(|a| a.outcome == "enrolled")
    };
    for _ in 0..100 {
        if enrolled() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(enrolled(), "{:#?}", bed.sim("dc1").agent_log());
}

/// A redeploy of an adopted machine is asked for only by its reimage generation.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_a_reimage_generation_redeploys_an_imported_machine() {
    let bed = running_fleet(52).await;
    let out_file = bed.fleet_dir.join("nodes/dc1-imported.yaml");
    let out = import_maas(&bed, &["--out", out_file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    bed.edit_fleet(
        "nodes/dc1-imported.yaml",
        "{hostname: gpu00001,",
        "{hostname: gpu00001, reimage: {generation: 1},",
    );
    let plan = bed.cli_plan(&["plan"]).output().unwrap();
    let plan_text = text(&plan);
    assert!(plan_text.contains("dc1/gpu00002  adopt"), "{plan_text}");
    assert!(
        plan_text.contains("reimage.generation 1 asks for a redeploy"),
        "{plan_text}"
    );
}

/// Each bad answer of the machine list (`answer=` faults, in front of MAAS): import-maas fails
/// naming the endpoint and what it expected, and writes no manifest and no secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn import_maas_writes_nothing_on_a_bad_answer() {
    let bed = running_fleet(53).await;
    let secrets_before = std::fs::read_to_string(&bed.secrets_path).unwrap();
    for (answer, says) in [
        ("html", "HTML"),
        ("truncated", "truncated"),
        ("redirect", "redirect"),
        ("shape", "a list of machines"),
    ] {
        bed.sim("dc1")
            .set_faults(&format!("machines.read:answer={answer}"))
            .unwrap();
        let out_file = bed.dir.path().join(format!("import-{answer}.yaml"));
        let out = import_maas(
            &bed,
            &["--out", out_file.to_str().unwrap(), "--write-secrets"],
        )
        .output()
        .unwrap();
        let all = text(&out);
        assert_eq!(out.status.code(), Some(1), "{answer}: {all}");
        assert!(
            all.contains("GET /MAAS/api/2.0/machines/"),
            "{answer}: {all}"
        );
        assert!(all.contains(says), "{answer}: {all}");
        assert!(!out_file.exists(), "{answer}: no manifest");
        assert_eq!(
            std::fs::read_to_string(&bed.secrets_path).unwrap(),
            secrets_before,
            "{answer}: no secret"
        );
    }
    // The power parameters half-read: still nothing stored.
    bed.sim("dc1")
        .set_faults("machines.power_parameters:answer=truncated")
        .unwrap();
    let out = import_maas(&bed, &["--write-secrets"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(out.stdout.is_empty(), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(&bed.secrets_path).unwrap(),
        secrets_before
    );
}

/// A truncated machine list on apply: the site is unreadable, its nodes are blocked, and
/// nothing lands in the store or in MAAS.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_half_read_site_changes_nothing() {
    let site = SiteSetup::generated("dc1", 54, 2, 0).faults("machines.read:answer=truncated");
    let bed = Bed::start(Setup::one_site(site)).await;
    let plan = bed.cli_plan(&["plan"]).output().unwrap();
    let plan_text = text(&plan);
    assert!(plan_text.contains("truncated"), "{plan_text}");
    assert!(
        plan_text.contains("GET /MAAS/api/2.0/machines/"),
        "{plan_text}"
    );
    let port = free_port();
    let applied = bed
        .cli(&["apply", "--auto-approve"], port)
        .output()
        .unwrap();
    let applied_text = text(&applied);
    assert!(applied_text.contains("could not be read"), "{applied_text}");
    assert!(bed.jobs().await.is_empty(), "no job: {applied_text}");
    assert!(
        bed.store
            .list_nodes(&Default::default())
            .await
            .unwrap()
            .is_empty(),
        "no node"
    );
    assert!(
        bed.maas_writes("dc1").is_empty(),
        "{:#?}",
        bed.maas_writes("dc1")
    );
}
