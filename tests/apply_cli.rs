//! `metalform apply [PLANFILE]` as a process against simulated MAAS sites: without a plan file
//! it observes, plans, shows the plan and asks (refusing without a terminal); with one it runs
//! exactly that plan after checking it is fresh, and refuses a stale one without changing
//! anything. After an apply, a fresh plan is empty (DESIGN.md §4).

use crate::onboard_support;

use metalform::lifecycle::{JobState, NodeState};
use metalform::plan;
use onboard_support::{Bed, Setup, SiteSetup, free_port};

fn text(out: &std::process::Output) -> String {
    format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The short plan id of the text rendering's first line (`Plan sha256:0123456789ab of …`).
fn shown_plan_id(stdout: &str) -> String {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("Plan sha256:"))
        .and_then(|l| l.split_whitespace().next())
        .map(|hex| format!("sha256:{hex}"))
        .unwrap_or_else(|| panic!("no plan id in\n{stdout}"))
}

/// `metalform plan --detailed-exitcode` after an apply: nothing left to do (exit 0).
fn assert_plan_is_empty(bed: &Bed, settled: usize) {
    let out = bed
        .cli_plan(&["plan", "--detailed-exitcode"])
        .output()
        .unwrap();
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(
        shown.contains(&format!("Plan: no changes; {settled} unchanged.")),
        "{shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_plans_asks_converges_and_then_the_plan_is_empty() {
    let bed = Bed::start(Setup::one_site(SiteSetup::generated("dc1", 5, 3, 1))).await;
    let port = free_port();
    let serial = bed.store.serial().await.unwrap();

    // Without a terminal and without --auto-approve: the plan is shown, nothing happens.
    let refused = bed.cli(&["apply"], port).output().unwrap();
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    let stdout = String::from_utf8_lossy(&refused.stdout);
    assert!(
        stdout.contains("    + dc1/gpu00001  onboard  MAAS lists it Ready ("),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "    + dc1/new00004  onboard  not in MAAS yet: onboard (find or enlist it by its BMC 10.176.16.13)"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("Plan: 4 to onboard; 0 unchanged."),
        "{stdout}"
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.ends_with("error: refusing to apply without confirmation: stdin is not a terminal\nhint: review the plan above and pass --auto-approve, or save it with `metalform plan --out PLANFILE` and apply that file\n"),
        "{stderr}"
    );
    assert!(
        bed.jobs().await.is_empty(),
        "a refused apply changes nothing"
    );
    assert_eq!(bed.store.serial().await.unwrap(), serial);
    assert_eq!(bed.maas_writes("dc1"), Vec::<String>::new());

    let out = bed
        .cli(&["apply", "--auto-approve"], port)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("Apply: 4 converged, 0 failed, 0 not run."),
        "{stdout}"
    );
    // A line per stage transition on stderr.
    assert!(
        stderr.lines().any(|l| l.contains("dc1/new00004")
            && l.contains("create_or_find_in_maas")
            && l.contains("found")),
        "{stderr}"
    );
    let plan_id = shown_plan_id(&stdout);
    for job in bed.jobs().await {
        assert_eq!(job.state, JobState::Completed);
        // The jobs were created under the plan that was shown.
        assert_eq!(
            job.plan_id.as_deref().map(plan::short_id),
            Some(plan_id.clone())
        );
        assert_eq!(
            bed.store.node(job.node_id.unwrap()).await.unwrap().status,
            NodeState::Active
        );
    }

    assert_plan_is_empty(&bed, 4);
    let again = bed
        .cli(&["apply", "--auto-approve"], port)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert!(again.status.success(), "{}", text(&again));
    assert!(
        stdout.ends_with("Plan: no changes; 4 unchanged.\nNo changes.\n"),
        "{stdout}"
    );
    assert!(bed.deploys("dc1").values().all(|d| *d == 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_planfile_runs_exactly_that_plan_and_only_once() {
    let bed = Bed::start(Setup::one_site(SiteSetup::generated("dc1", 6, 3, 0))).await;
    let port = free_port();
    let file = bed.dir.path().join("plan.json");
    let out = bed
        .cli_plan(&["plan", "--out", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let saved = plan::load(&file).unwrap();
    assert_eq!(saved.summary.onboard, 3);

    // A reviewed plan file needs no confirmation.
    let out = bed
        .cli(&["apply", file.to_str().unwrap()], port)
        .output()
        .unwrap();
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains(&format!(
            "plan.json: the plan {} is signed by this store and fresh (fleet, MAAS, inventory, jobs and store unchanged)",
            plan::short_id(&saved.id)
        )),
        "{shown}"
    );
    assert!(
        shown.contains("Apply: 3 converged, 0 failed, 0 not run."),
        "{shown}"
    );
    let jobs = bed.jobs().await;
    assert_eq!(jobs.len(), 3);
    for job in &jobs {
        assert_eq!(job.state, JobState::Completed);
        assert_eq!(job.plan_id.as_deref(), Some(saved.id.as_str()));
    }
    assert_plan_is_empty(&bed, 3);

    // The same file again: the world it described is gone.
    let serial = bed.store.serial().await.unwrap();
    let again = bed
        .cli(&["apply", file.to_str().unwrap()], port)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert_eq!(
        String::from_utf8_lossy(&again.stderr),
        format!(
            "error: the plan {} is stale: the inventory changed; the jobs changed; MAAS of site dc1 changed; plan {} ran since (this plan followed no earlier plan); the store changed (serial {} → {serial})\nhint: make a new plan (`metalform plan --out PLANFILE`), review it, and apply that file\n",
            plan::short_id(&saved.id),
            plan::short_id(&saved.id),
            saved.store_serial
        )
    );
    assert_eq!(bed.jobs().await, jobs, "a refused plan changes nothing");
    assert_eq!(bed.store.serial().await.unwrap(), serial);
    assert!(bed.deploys("dc1").values().all(|d| *d == 1));
}

/// Apply a stale plan file: refused with exactly what moved, and nothing changed — no job, no
/// store write, no MAAS write.
async fn refused_as_stale(bed: &Bed, file: &std::path::Path, moved: &str) {
    let serial = bed.store.serial().await.unwrap();
    let writes = (bed.maas_writes("dc1").len(), bed.maas_writes("dc2").len());
    let jobs = bed.jobs().await;
    let out = bed
        .cli(
            &["apply", file.to_str().unwrap(), "--auto-approve"],
            free_port(),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let saved = plan::load(file).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "error: the plan {} is stale: {moved}\nhint: make a new plan (`metalform plan --out PLANFILE`), review it, and apply that file\n",
            plan::short_id(&saved.id)
        )
    );
    assert_eq!(out.stdout, b"", "nothing shown, nothing run");
    assert_eq!(bed.jobs().await, jobs);
    assert_eq!(bed.store.serial().await.unwrap(), serial);
    assert_eq!(
        (bed.maas_writes("dc1").len(), bed.maas_writes("dc2").len()),
        writes
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_plan_file_is_refused_and_changes_nothing() {
    let setup = Setup {
        sites: vec![
            SiteSetup::generated("dc1", 61, 2, 0),
            SiteSetup::generated("dc2", 62, 2, 0),
        ],
        profile_spec: String::new(),
        site_spec: String::new(),
        max_parallel: 10,
    };
    let bed = Bed::start(setup).await;

    // The manifests changed after the plan was made.
    let file = bed.plan_to("fleet.json");
    let before = plan::load(&file).unwrap().fleet_revision;
    bed.edit_fleet("profiles/dc1.yaml", "tokenTtl: 2h", "tokenTtl: 3h");
    let source = metalform::source::FleetSource::new(&bed.fleet_dir, None);
    let now = plan::revision_id(
        &metalform::manifest::load_fleet(&source)
            .unwrap()
            .fleet
            .revision,
    );
    refused_as_stale(
        &bed,
        &file,
        &format!(
            "the fleet moved from {} to {}",
            plan::describe_revision(&before),
            plan::describe_revision(&now)
        ),
    )
    .await;
    bed.edit_fleet("profiles/dc1.yaml", "tokenTtl: 3h", "tokenTtl: 2h");

    // Another apply (of dc2 only) ran since: the store, its jobs and inventory moved.
    let file = bed.plan_to("store.json");
    let planned_serial = plan::load(&file).unwrap().store_serial;
    let out = bed
        .cli(&["apply", "--site", "dc2", "--auto-approve"], free_port())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let jobs = bed.jobs().await;
    assert!(jobs.iter().all(|j| j.site == "dc2"), "{jobs:#?}");
    let serial = bed.store.serial().await.unwrap();
    refused_as_stale(
        &bed,
        &file,
        &format!(
            "the inventory changed; the jobs changed; MAAS of site dc2 changed; plan {} ran since (this plan followed no earlier plan); the store changed (serial {planned_serial} → {serial})",
            plan::short_id(jobs[0].plan_id.as_deref().unwrap())
        ),
    )
    .await;

    // A fresh plan of the same world is accepted.
    let file = bed.plan_to("fresh.json");
    let out = bed
        .cli(&["apply", file.to_str().unwrap()], free_port())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Apply: 2 converged, 0 failed, 0 not run."),
        "{}",
        text(&out)
    );

    // A machine was deleted in MAAS by hand: even a plan without changes is stale then.
    let file = bed.plan_to("maas.json");
    assert!(!plan::load(&file).unwrap().has_changes());
    let gone = bed
        .sim("dc1")
        .with_world(|w| w.machines.values().next().unwrap().system_id.clone());
    bed.sim("dc1").out_of_band(&gone, "delete").unwrap();
    refused_as_stale(&bed, &file, "MAAS of site dc1 changed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_file_is_checked_before_anything_else() {
    let bed = Bed::start(Setup::one_site(SiteSetup::generated("dc1", 7, 1, 0))).await;
    let file = bed.plan_to("plan.json");

    // --site with a plan file: the plan names its sites.
    let out = bed
        .cli(
            &["apply", file.to_str().unwrap(), "--site", "dc1"],
            free_port(),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: --site cannot be combined with a plan file: the plan names its sites\nhint: apply the plan file as it is, or make one with `metalform plan --site S --out PLANFILE`\n"
    );

    // A plan file edited by hand (still a well-formed plan).
    let text_of = std::fs::read_to_string(&file).unwrap();
    assert!(text_of.contains("MAAS lists it Ready"));
    std::fs::write(
        &file,
        text_of.replacen("MAAS lists it Ready", "MAAS lists it READY", 1),
    )
    .unwrap();
    let out = bed
        .cli(&["apply", file.to_str().unwrap()], free_port())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the plan's content does not match its id")
            && stderr.ends_with(
                "hint: plan again with `metalform plan --out PLANFILE`; plan files are not edited by hand\n"
            ),
        "{stderr}"
    );
    assert!(bed.jobs().await.is_empty());
    assert_eq!(bed.maas_writes("dc1"), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destructive_item_is_refused_without_allow_destructive() {
    let mut site = SiteSetup::generated("dc1", 8, 2, 0);
    // Someone else holds gpu00001's machine (a Deployed one would be adopted, issue 15).
    site.config.machines[0].initial = metalform::sim::InitialState::Allocated;
    let bed = Bed::start(Setup::one_site(site)).await;
    let sid = bed
        .sim("dc1")
        .with_world(|w| w.find_machine("gpu00001").unwrap().system_id.clone());
    let serial = bed.store.serial().await.unwrap();

    let check_refused = |out: &std::process::Output, plan_id: &str| {
        assert_eq!(out.status.code(), Some(1), "{}", text(out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        let expected = format!(
            "error: the plan {plan_id} has 1 destructive item(s): dc1/gpu00001 (MAAS lists it Allocated ({sid}, owner "
        );
        assert!(stderr.contains(&expected), "{stderr}");
        assert!(
            stderr.ends_with(
                ") and metalform did not deploy it: onboarding releases and redeploys it, destroying what runs there)\nhint: review each destructive item; to go ahead, apply again with --allow-destructive\n"
            ),
            "{stderr}"
        );
    };

    // Planned now: shown, then refused before asking.
    let out = bed
        .cli(&["apply", "--auto-approve"], free_port())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("  -/+ dc1/gpu00001  onboard"), "{stdout}");
    assert!(
        stdout.contains("1 item is destructive: apply needs --allow-destructive."),
        "{stdout}"
    );
    check_refused(&out, &shown_plan_id(&stdout));

    // From a plan file: the same.
    let file = bed.plan_to("plan.json");
    let saved = plan::load(&file).unwrap();
    let out = bed
        .cli(&["apply", file.to_str().unwrap()], free_port())
        .output()
        .unwrap();
    check_refused(&out, &plan::short_id(&saved.id));

    // Nothing changed.
    assert!(bed.jobs().await.is_empty());
    assert_eq!(bed.store.serial().await.unwrap(), serial);
    assert_eq!(bed.maas_writes("dc1"), Vec::<String>::new());

    // Allowed: the machine is read again, released, and onboarded like any other.
    let out = bed
        .cli(
            &["apply", file.to_str().unwrap(), "--allow-destructive"],
            free_port(),
        )
        .output()
        .unwrap();
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains("Apply: 2 converged, 0 failed, 0 not run."),
        "{shown}"
    );
    assert!(
        shown.contains(&format!(
            "{sid} was Allocated, owner admin: released to take it over, as plan {} allowed",
            plan::short_id(&saved.id)
        )),
        "{shown}"
    );
    let counters = bed.sim("dc1").counters()[&sid].clone();
    assert_eq!((counters.release, counters.deploy), (1, 1));
    let job = bed.job_of("dc1", "gpu00001").await;
    assert_eq!(job.state, JobState::Completed);
    let facts = metalform::stages::onboard::Facts::from_details(&job.stage_details);
    let take_over = facts.take_over.unwrap();
    assert_eq!(take_over.system_id, sid);
    assert_eq!(take_over.plan_id, saved.id);
    assert!(take_over.released_at.is_some());
    // The other node's onboarding had no such permission.
    let other = bed.job_of("dc1", "gpu00002").await;
    assert_eq!(
        metalform::stages::onboard::Facts::from_details(&other.stage_details).take_over,
        None
    );
    assert_plan_is_empty(&bed, 2);
}
