//! `metalform apply --json` as a process against a simulated MAAS site (issue 19): stdout is
//! one JSON object per line — the plan, a stage event per transition, a result per node and a
//! closing summary — and nothing else; without a plan file it needs --auto-approve.

use crate::onboard_support;

use onboard_support::{Bed, Setup, SiteSetup, free_port};
use serde_json::{Value, json};

fn lines(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_json_streams_plan_stages_results_and_summary() {
    let bed = Bed::start(Setup::one_site(SiteSetup::generated("dc1", 5, 2, 0))).await;
    let port = free_port();

    // Nobody can be asked: a usage error, nothing done.
    let refused = bed.cli(&["apply", "--json"], port).output().unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&refused.stdout), "");
    assert_eq!(
        String::from_utf8_lossy(&refused.stderr),
        "error: --json cannot ask for confirmation: stdout carries the event stream\n\
         hint: apply a reviewed plan file (`metalform plan --out PLANFILE`), or add --auto-approve\n"
    );
    assert!(bed.jobs().await.is_empty());

    let out = bed
        .cli(&["apply", "--json", "--auto-approve"], port)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let events = lines(&out);
    let plan = &events[0];
    assert_eq!(plan["event"], "plan", "{plan}");
    assert_eq!(plan["summary"]["onboard"], 2, "{plan}");
    assert!(plan["plan_id"].as_str().unwrap().starts_with("sha256:"));
    // Stage events in between, for both nodes, each with a known status; none on stderr.
    let stages: Vec<&Value> = events.iter().filter(|e| e["event"] == "stage").collect();
    for node in ["dc1/gpu00001", "dc1/gpu00002"] {
        let of_node: Vec<&&Value> = stages.iter().filter(|e| e["node"] == node).collect();
        assert_eq!(of_node.first().unwrap()["status"], "begin", "{of_node:?}");
        assert_eq!(
            of_node.last().unwrap()["status"],
            "converged",
            "{of_node:?}"
        );
        assert!(
            of_node
                .iter()
                .any(|e| e["stage"] == "deploy_via_maas" && e["status"] == "succeeded"),
            "{of_node:?}"
        );
    }
    let known = [
        "begin",
        "started",
        "waiting",
        "succeeded",
        "skipped",
        "retrying",
        "failed",
        "converged",
        "left",
    ];
    for stage in &stages {
        assert!(
            known.contains(&stage["status"].as_str().unwrap()),
            "{stage}"
        );
        assert!(stage["elapsed_ms"].is_u64(), "{stage}");
    }
    assert!(
        !stderr.contains("deploy_via_maas"),
        "progress stays off stderr: {stderr}"
    );
    // Then a result per node and the summary, last.
    let n = events.len();
    let results = &events[n - 3..n - 1];
    for (result, node) in results.iter().zip(["dc1/gpu00001", "dc1/gpu00002"]) {
        assert_eq!(result["event"], "result");
        assert_eq!(result["node"], node);
        assert_eq!(result["result"], "converged");
        assert_eq!(result["job_state"], "completed");
        assert_eq!(result["detail"], Value::Null);
    }
    let mut summary = events[n - 1].clone();
    assert!(summary["maas_requests"].as_u64().unwrap() > 0, "{summary}");
    summary.as_object_mut().unwrap().remove("maas_requests");
    assert_eq!(
        summary,
        json!({"event": "summary", "converged": 2, "diverged": 0, "failed": 0, "not_run": 0, "warnings": 0})
    );

    // Converged: the plan and an empty summary.
    let again = bed
        .cli(&["apply", "--json", "--auto-approve"], port)
        .output()
        .unwrap();
    assert!(again.status.success());
    let events = lines(&again);
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0]["event"], "plan");
    assert_eq!(events[0]["summary"]["changes"], 0);
    assert_eq!(
        events[1],
        json!({"event": "summary", "converged": 0, "diverged": 0, "failed": 0, "not_run": 0, "warnings": 0, "maas_requests": 0})
    );
}
