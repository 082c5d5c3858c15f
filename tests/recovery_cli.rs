//! The operator recovery commands of seed 000 §4.9 as processes: each does what the seed
//! says, and each is audited with actor, role, reason, prior state and expected target.

use crate::onboard_support;

use std::time::Duration;

use metalform::lifecycle::{FailureClass, JobKind, JobState, NodeState};
use metalform::sim::AgentBehaviour;
use metalform::sim::status::Status;
use metalform::store::{AuditRecord, Job};
use onboard_support::{Bed, Setup, SiteSetup, free_port};

fn text(out: &std::process::Output) -> String {
    format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

async fn one_job(bed: &Bed) -> Job {
    let jobs = bed.jobs().await;
    assert_eq!(jobs.len(), 1, "{jobs:#?}");
    jobs.into_iter().next().unwrap()
}

fn audited<'a>(audit: &'a [AuditRecord], action: &str) -> &'a AuditRecord {
    audit
        .iter()
        .find(|a| a.action == action)
        .unwrap_or_else(|| panic!("no {action} in {audit:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_fixing_a_missing_power_secret_and_mark_manual_in_between() {
    let bed = Bed::start(Setup::one_site(SiteSetup::generated("dc1", 31, 1, 0))).await;
    bed.edit_fleet(
        "sites/dc1.yaml",
        "    defaultCredentials: {vault: kv/dc1/power/default}\n",
        "    defaultCredentials: {vault: kv/dc1/power/default}\n    overrides:\n      - match: {hostname: gpu00001}\n        credentials: {vault: kv/dc1/power/special}\n",
    );
    let port = free_port();
    let out = bed
        .cli(&["apply", "--auto-approve"], port)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let job = one_job(&bed).await;
    assert_eq!(job.state, JobState::FailedRetryable);
    assert_eq!(job.stage, "resolve_power_credentials");
    assert_eq!(job.failure_class, Some(FailureClass::InputConfigError));
    assert_eq!(job.error_code.as_deref(), Some("secret_unusable"));

    // Every action needs a reason.
    let out = bed
        .cli(&["onboardings", "retry", "gpu00001"], port)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: retry_stage needs --reason: every recovery action is audited\nhint: say why, e.g. --reason \"BOSS card replaced (ticket HW-2291)\"\n"
    );

    let out = bed
        .cli(
            &[
                "onboardings",
                "mark-manual",
                "gpu00001",
                "--reason",
                "checking the override",
                "--as",
                "alice",
            ],
            port,
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        one_job(&bed).await.state,
        JobState::FailedManualIntervention
    );

    bed.put_secret(
        "kv/dc1/power/special",
        serde_json::json!({"user": "admin", "pass": "old-firmware"}),
    );
    let out = bed
        .cli(
            &[
                "onboardings",
                "retry",
                "gpu00001",
                "--reason",
                "override secret written",
                "--as",
                "alice",
            ],
            port,
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let job = one_job(&bed).await;
    assert_eq!(job.state, JobState::Completed);

    let audit = bed.audit_of(job.id).await;
    let manual = audited(&audit, "onboarding.mark_manual_intervention_required");
    assert_eq!(
        (
            manual.actor.as_str(),
            manual.role.as_str(),
            manual.reason.as_deref()
        ),
        ("alice", "admin", Some("checking the override"))
    );
    assert_eq!(
        manual.prior_state.as_deref(),
        Some("failed_retryable at resolve_power_credentials#1")
    );
    assert_eq!(
        manual.expected_target.as_deref(),
        Some("failed_manual_intervention")
    );
    let retry = audited(&audit, "onboarding.retry_stage");
    assert_eq!(retry.reason.as_deref(), Some("override secret written"));
    assert_eq!(
        retry.prior_state.as_deref(),
        Some("failed_manual_intervention at resolve_power_credentials#1")
    );
    assert_eq!(retry.expected_target.as_deref(), Some("running"));
    assert_eq!(retry.correlation_ids["job_id"], job.id.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_maas_key_blocks_the_site_and_resume_follows_a_fixed_deploy_secret() {
    // The deploy user gets the site's password: it is read when the payload is rendered.
    let bed = Bed::start(
        Setup::one_site(SiteSetup::generated("dc1", 32, 2, 0))
            .profile("  deployUser: {sudo: password, password: site}\n"),
    )
    .await;
    let port = free_port();

    // A MAAS API key that cannot be used: the site cannot be observed, so nothing is planned
    // for its nodes — never treated as an empty site — and nothing is run.
    let key = bed.sim("dc1").api_key().expose().to_owned();
    bed.put_secret("kv/dc1/api-token", serde_json::json!({"tokn": key}));
    let out = bed
        .cli(&["apply", "--auto-approve"], port)
        .output()
        .unwrap();
    let shown = text(&out);
    // Nothing applied while the nodes wait for an operator: not a success.
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("error: the fleet is not converged: 2 node(s) need an operator: "),
        "{shown}"
    );
    assert!(
        shown.contains("warning: site dc1 could not be read: "),
        "{shown}"
    );
    assert!(shown.contains("has no field `token`"), "{shown}");
    assert!(
        shown.contains("    ! dc1/gpu00001  blocked  MAAS of site dc1 could not be read"),
        "{shown}"
    );
    assert!(
        shown.contains("Plan: no changes; 2 blocked; 0 unchanged.\nNothing to apply: 2 item(s) blocked (see the plan above).\n"),
        "{shown}"
    );
    assert!(!shown.contains(&key), "no secret in the output");
    assert!(bed.jobs().await.is_empty());
    bed.put_secret("kv/dc1/api-token", serde_json::json!({"token": key}));

    // The deploy password (read when the payload is rendered) has the wrong field: the jobs
    // stop at render_cloud_init, retryable.
    bed.put_secret(
        "kv/dc1/deploy",
        serde_json::json!({"passwd": "deploy-pass"}),
    );
    let out = bed
        .cli(&["apply", "--auto-approve"], port)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let jobs = bed.jobs().await;
    assert_eq!(jobs.len(), 2);
    for job in &jobs {
        assert_eq!(job.state, JobState::FailedRetryable, "{job:#?}");
        assert_eq!(job.stage, "render_cloud_init");
        assert_eq!(job.failure_class, Some(FailureClass::InputConfigError));
        assert_eq!(job.error_code.as_deref(), Some("secret_unusable"));
        assert!(
            job.error_message
                .as_deref()
                .unwrap()
                .contains("has no field `password`"),
            "{job:#?}"
        );
    }
    bed.put_secret(
        "kv/dc1/deploy",
        serde_json::json!({"password": "deploy-pass"}),
    );
    for host in ["gpu00001", "gpu00002"] {
        let out = bed
            .cli(
                &[
                    "onboardings",
                    "resume",
                    host,
                    "--reason",
                    "deploy secret fixed",
                ],
                port,
            )
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains("completed"));
    }
    for job in bed.jobs().await {
        assert_eq!(job.state, JobState::Completed);
        let audit = bed.audit_of(job.id).await;
        let resume = audited(&audit, "onboarding.resume");
        assert_eq!(resume.reason.as_deref(), Some("deploy secret fixed"));
        assert_eq!(
            resume.prior_state.as_deref(),
            Some("failed_retryable at render_cloud_init#1")
        );
    }
    assert!(bed.deploys("dc1").values().all(|d| *d == 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rerun_adopts_what_exists_after_the_profile_is_fixed() {
    let mut site = SiteSetup::generated("dc1", 33, 1, 0);
    site.config.machines[0]
        .disks
        .retain(|d| !d.model.contains("BOSS"));
    let bed = Bed::start(Setup::one_site(site)).await;
    let port = free_port();
    let out = bed
        .cli(&["apply", "--auto-approve"], port)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let job = one_job(&bed).await;
    assert_eq!(
        (job.state, job.error_code.as_deref()),
        (
            JobState::FailedManualIntervention,
            Some("boot_disk_not_found")
        )
    );

    // What the operator sees first.
    let out = bed
        .cli_store(&["onboardings", "list", "--open"])
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        listing.starts_with("SITE  HOSTNAME  STATE                       STAGE                FAILURE            JOB\n"),
        "{listing}"
    );
    assert!(
        listing.contains(
            "dc1   gpu00001  failed_manual_intervention  configure_storage#1  hardware_mismatch"
        ),
        "{listing}"
    );
    assert!(listing.ends_with("\n1 onboarding(s)\n"), "{listing}");
    let out = bed
        .cli_store(&["onboardings", "show", "gpu00001"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    for line in [
        "state          failed_manual_intervention\n",
        "stage          configure_storage (attempt 1)\n",
        "failure class  hardware_mismatch\n",
        "error          boot_disk_not_found: no block device of ",
        "last maas      Ready (power off)",
        "next action    the hardware does not match the profile (configure_storage): fix the machine or the profile (e.g. storage.bootDisk.match), then rerun\n",
        "configure_storage#1  failed  no block device",
    ] {
        assert!(shown.contains(line), "missing {line:?} in\n{shown}");
    }
    let out = bed
        .cli_store(&["onboardings", "show", "gpu00001", "--format", "json"])
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["job"]["failure_class"], "hardware_mismatch");
    assert!(doc["events"].as_array().unwrap().len() >= 12);

    // The operator decides the first NVMe disk is the boot disk of this machine.
    bed.edit_fleet(
        "profiles/dc1.yaml",
        "storage: {dataDisks: skip}",
        "storage: {dataDisks: skip, bootDisk: {match: \"^nvme0n1$\"}}",
    );
    let out = bed
        .cli(
            &[
                "onboardings",
                "rerun",
                &job.id.to_string(),
                "--reason",
                "boot disk is nvme0n1 here",
            ],
            port,
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let job = one_job(&bed).await;
    assert_eq!(job.state, JobState::Completed);
    // The rerun started from the top and adopted the bound machine and its Ready state.
    let events = bed
        .store
        .job_events(JobKind::Onboarding, job.id, 500)
        .await
        .unwrap();
    let after_rerun: Vec<_> = events
        .iter()
        .skip_while(|e| {
            !(e.stage == "load_site_config"
                && e.attempt == 1
                && e.message.as_deref() == Some("after an operator's recovery action"))
        })
        .collect();
    let status_of = |stage: &str| {
        after_rerun
            .iter()
            .filter(|e| e.stage == stage && e.status != "started")
            .map(|e| e.status.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(status_of("create_or_find_in_maas"), ["skipped"]);
    assert_eq!(status_of("commission_node"), ["skipped"]);
    // MAAS applied its default flat layout on nvme0n1, its first disk, when commissioning
    // ended: the profile's layout is already in place.
    assert_eq!(status_of("configure_storage"), ["skipped"]);
    let sid = job.maas_system_id.clone().unwrap();
    let counters = bed.sim("dc1").counters()[&sid].clone();
    assert_eq!((counters.commission, counters.deploy), (0, 1));
    let audit = bed.audit_of(job.id).await;
    assert_eq!(
        audited(&audit, "onboarding.rerun").prior_state.as_deref(),
        Some("failed_manual_intervention at configure_storage#1")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_clean_resets_progress_and_starts_again() {
    let site = SiteSetup::generated("dc1", 34, 1, 0).faults("datasource_failure:machines=gpu00001");
    let bed = Bed::start(
        Setup::one_site(site)
            .profile("  deploy: {retryOnDatasourceFailure: true, maxRetryAttempts: 0}\n"),
    )
    .await;
    let port = free_port();
    let out = bed
        .cli(&["apply", "--auto-approve"], port)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let job = one_job(&bed).await;
    assert_eq!(
        job.error_code.as_deref(),
        Some("datasource_failure_repeated")
    );
    assert_eq!(job.state, JobState::FailedManualIntervention);

    let out = bed
        .cli(
            &[
                "onboardings",
                "restart-clean",
                "gpu00001",
                "--reason",
                "installer mirror fixed",
            ],
            port,
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let job = one_job(&bed).await;
    assert_eq!(job.state, JobState::Completed);
    let events = bed
        .store
        .job_events(JobKind::Onboarding, job.id, 500)
        .await
        .unwrap();
    assert!(
        events.iter().any(|e| e.status == "compensated"
            && e.message
                .as_deref()
                .is_some_and(|m| m.contains("enrollment token(s) expired"))),
        "{events:#?}"
    );
    assert_eq!(
        bed.deploys("dc1")["gpu00001"],
        2,
        "a failed deploy, then the clean one"
    );
    let audit = bed.audit_of(job.id).await;
    let restart = audited(&audit, "onboarding.restart_clean");
    assert_eq!(restart.expected_target.as_deref(), Some("compensating"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_releases_a_deploying_machine_but_leaves_a_deployed_host_alone() {
    let mut site = SiteSetup::generated("dc1", 35, 2, 0).faults("hwsync_never:machines=gpu00002");
    site.config.time_scale = 100.0;
    // gpu00001 commissions first, so it is still deploying when gpu00002 has failed.
    site.config.machines[0].initial = metalform::sim::InitialState::New;
    let bed = Bed::start(Setup::one_site(site).profile("  timeouts: {hwSyncHealth: 1s}\n")).await;
    let port = free_port();
    let mut apply = bed
        .cli(&["apply", "--auto-approve"], port)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Kill the apply while gpu00001 deploys, after gpu00002 failed its hardware sync.
    let mut ready = false;
    for _ in 0..2000 {
        let jobs = bed.jobs().await;
        let at = |host: &str| {
            jobs.iter()
                .find(|j| j.hostname == host)
                .map(|j| (j.state, j.stage.clone()))
        };
        if at("gpu00001") == Some((JobState::Running, "wait_for_deployed".into()))
            && at("gpu00002").is_some_and(|(s, _)| s == JobState::FailedManualIntervention)
        {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    apply.kill().unwrap();
    apply.wait().unwrap();
    assert!(ready, "{:#?}", bed.jobs().await);

    for host in ["gpu00001", "gpu00002"] {
        let out = bed
            .cli(
                &[
                    "onboardings",
                    "cancel",
                    host,
                    "--reason",
                    "rack is being recabled",
                ],
                port,
            )
            .output()
            .unwrap();
        assert!(out.status.success(), "{host}: {}", text(&out));
    }
    let sim = bed.sim("dc1");
    let counters = sim.counters();
    for job in bed.jobs().await {
        assert_eq!(job.state, JobState::Cancelled, "{job:#?}");
        let machine = sim
            .with_world(|w| w.find_machine(&job.hostname).cloned())
            .unwrap();
        let released = counters[&machine.system_id].release;
        let events = bed
            .store
            .job_events(JobKind::Onboarding, job.id, 500)
            .await
            .unwrap();
        let compensated = events.iter().find(|e| e.status == "compensated").unwrap();
        let expiry = bed
            .store
            .enrollment_token_expiry(job.node_id.unwrap())
            .await
            .unwrap();
        assert!(
            expiry.is_none_or(|t| t <= chrono::Utc::now()),
            "tokens no longer valid"
        );
        let audit = bed.audit_of(job.id).await;
        assert_eq!(
            audited(&audit, "onboarding.cancel").reason.as_deref(),
            Some("rack is being recabled")
        );
        match job.hostname.as_str() {
            // Deploying: released back to Ready (000 §4.6 DeployViaMaas/WaitForDeployed).
            "gpu00001" => {
                assert_eq!(released, 1);
                assert!(
                    compensated
                        .message
                        .as_deref()
                        .unwrap()
                        .contains("released back to Ready")
                );
                assert!(matches!(machine.status, Status::Releasing | Status::Ready));
            }
            // Post-deploy: the OS runs; MAAS is left alone.
            _ => {
                assert_eq!(released, 0);
                assert_eq!(machine.status, Status::Deployed);
            }
        }
        let node = bed.store.node(job.node_id.unwrap()).await.unwrap();
        assert_eq!(node.status, NodeState::Enrolling, "never made active");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adopt_accepts_a_late_enrollment() {
    let mut site = SiteSetup::generated("dc1", 36, 1, 0);
    site.config.machines[0].agent = AgentBehaviour::Late { delay_secs: 3000.0 };
    let bed = Bed::start(Setup::one_site(site).profile("  timeouts: {enrollment: 400ms}\n")).await;
    let port = free_port();
    let out = bed
        .cli(&["apply", "--auto-approve"], port)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let job = one_job(&bed).await;
    assert_eq!(job.error_code.as_deref(), Some("failed_enrollment"));
    assert_eq!(job.state, JobState::FailedManualIntervention);
    let node = job.node_id.unwrap();

    // The agent enrolls after the job gave up, with the token its host carries, while an
    // enrollment endpoint serves the same URL (later, the daemon).
    let server = bed.agent_channel_like_apply(port).await;
    let mut enrolled = false;
    for _ in 0..1500 {
        if let Some(enrollment) = bed.store.agent_enrollment(node).await.unwrap() {
            assert!(enrollment.is_late(), "{enrollment:#?}");
            enrolled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.shutdown().await;
    assert!(
        enrolled,
        "the late agent enrolled: {:#?}",
        bed.sim("dc1").agent_log()
    );
    assert_eq!(
        bed.store.node(node).await.unwrap().status,
        NodeState::Enrolling
    );

    let out = bed
        .cli(
            &[
                "onboardings",
                "adopt",
                "gpu00001",
                "--reason",
                "agent came up late",
            ],
            port,
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let job = one_job(&bed).await;
    assert_eq!(job.state, JobState::Reconciled);
    assert_eq!(
        bed.store.node(node).await.unwrap().status,
        NodeState::Active
    );
    let audit = bed.audit_of(job.id).await;
    let adopt = audited(&audit, "onboarding.adopt_observed_state");
    assert_eq!(adopt.expected_target.as_deref(), Some("running"));
    assert_eq!(bed.deploys("dc1")["gpu00001"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_adopts_late_enrollments_the_plan_finds_with_or_without_a_job() {
    let mut site = SiteSetup::generated("dc1", 37, 2, 0);
    for machine in &mut site.config.machines {
        machine.agent = AgentBehaviour::Late { delay_secs: 3000.0 };
    }
    let bed = Bed::start(Setup::one_site(site).profile("  timeouts: {enrollment: 400ms}\n")).await;
    let port = free_port();
    let out = bed
        .cli(&["apply", "--auto-approve"], port)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let failed = bed.jobs().await;
    assert!(
        failed
            .iter()
            .all(|j| j.error_code.as_deref() == Some("failed_enrollment")),
        "{failed:#?}"
    );

    // Both agents enroll late, while an endpoint serves the URL their hosts carry.
    let server = bed.agent_channel_like_apply(port).await;
    for _ in 0..1500 {
        let mut enrolled = 0;
        for job in &failed {
            if bed
                .store
                .agent_enrollment(job.node_id.unwrap())
                .await
                .unwrap()
                .is_some()
            {
                enrolled += 1;
            }
        }
        if enrolled == failed.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.shutdown().await;

    // gpu00002's onboarding is cancelled after that: MAAS and the host are left as they are.
    let out = bed
        .cli(
            &[
                "onboardings",
                "cancel",
                "gpu00002",
                "--reason",
                "looking at it by hand",
            ],
            port,
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));

    // The plan adopts both: gpu00001's failed job, and a new job for gpu00002.
    let out = bed
        .cli_plan(&["plan", "--detailed-exitcode"])
        .output()
        .unwrap();
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(2), "{shown}");
    assert!(
        shown.contains("   <= dc1/gpu00001  adopt    onboarding ")
            && shown.contains("its agent has enrolled since: adopt it"),
        "{shown}"
    );
    assert!(
        shown.contains("   <= dc1/gpu00002  adopt    Deployed in MAAS (")
            && shown.contains("and its agent enrolled: adopt it"),
        "{shown}"
    );
    assert!(shown.contains("Plan: 2 to adopt; 0 unchanged."), "{shown}");

    let out = bed
        .cli(&["apply", "--auto-approve"], port)
        .output()
        .unwrap();
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains("Apply: 2 converged, 0 failed, 0 not run."),
        "{shown}"
    );
    let plan_id = shown
        .lines()
        .find_map(|l| l.strip_prefix("Plan sha256:"))
        .and_then(|l| l.split_whitespace().next())
        .map(|hex| format!("sha256:{hex}"))
        .unwrap();
    let jobs = bed.jobs().await;
    assert_eq!(jobs.len(), 3, "{jobs:#?}");
    let reconciled: Vec<&Job> = jobs
        .iter()
        .filter(|j| j.state == JobState::Reconciled)
        .collect();
    assert_eq!(reconciled.len(), 2, "{jobs:#?}");
    for job in reconciled {
        assert!(job.adopted);
        assert_eq!(
            bed.store.node(job.node_id.unwrap()).await.unwrap().status,
            NodeState::Active
        );
        let audit = bed.audit_of(job.id).await;
        let adopt = audited(&audit, "onboarding.adopt_observed_state");
        let reason = adopt.reason.as_deref().unwrap();
        assert!(
            reason.starts_with(&format!("plan {plan_id}: ")),
            "the audit names the plan and why: {reason}"
        );
        match job.hostname.as_str() {
            // The failed job itself was adopted.
            "gpu00001" => {
                assert_eq!(
                    job.id,
                    failed.iter().find(|j| j.hostname == "gpu00001").unwrap().id
                );
                assert_eq!(
                    adopt.prior_state.as_deref(),
                    Some("failed_manual_intervention at wait_for_agent_enrollment#1")
                );
            }
            // A new job, created under the plan.
            _ => {
                assert_eq!(
                    job.plan_id.as_deref().map(metalform::plan::short_id),
                    Some(plan_id.clone())
                );
            }
        }
    }
    assert!(
        bed.deploys("dc1").values().all(|d| *d == 1),
        "nothing redeployed"
    );
    let out = bed
        .cli_plan(&["plan", "--detailed-exitcode"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}
