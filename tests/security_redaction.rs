//! Credentials in URLs and secrets in messages (issue 16 point 2, docs/security.md "What is
//! redacted where"): one redaction path (`metalform::sanitize::redact`) for logs, plan and diff
//! output, errors and events. Each test is named after the leak it closes.

use crate::manifest_support;
use crate::onboard_support;

use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use manifest_support::{metalform, repo_root, stderr, stdout};
use metalform::clock::SystemClock;
use metalform::events::{Outbox, Pacing, Sink};
use metalform::provider::maas::{MaasClient, MaasClientOptions};
use metalform::sanitize::redact::RedactingWriter;
use metalform::secrets::Secret;
use metalform::store::{DomainEvent, Store};
use onboard_support::{Bed, Setup, SiteSetup};

/// A log sink the test can read: every write lands in a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test]
async fn webhook_token_in_the_url_never_reaches_a_log_line_or_an_error() {
    const TOKEN: &str = "whk-4f8a1c9e2b7d";
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        &format!("sqlite://{}", dir.path().join("state.db").display()),
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    store
        .publish(&DomainEvent {
            event_type: "node.onboarding.started".into(),
            subject_id: "node-1".into(),
            payload: serde_json::json!({}),
        })
        .await
        .unwrap();
    // Nobody listens there: every delivery fails and is logged.
    let port = onboard_support::free_port();
    let url = format!("http://hook:{TOKEN}@127.0.0.1:{port}/in?team=ops&token={TOKEN}");
    let sink = Sink::webhook(url.parse().unwrap(), Duration::from_secs(1));
    assert!(!sink.describe().contains(TOKEN), "{}", sink.describe());

    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || RedactingWriter(writer.clone()))
        .with_max_level(tracing::Level::DEBUG)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let outbox = Outbox::new(
        store.clone(),
        sink,
        Pacing {
            idle: Duration::from_millis(10),
            retry_base: Duration::from_millis(10),
            retry_cap: Duration::from_millis(20),
            batch: 10,
        },
        Arc::new(()),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(async move {
        outbox
            .run(async {
                let _ = stopped.await;
            })
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = stop.send(());
    run.await.unwrap();

    let text = logs.text();
    assert!(text.contains("delivering domain events"), "{text}");
    assert!(text.contains("event delivery failed"), "{text}");
    assert!(!text.contains(TOKEN), "the token reached the log:\n{text}");
    assert!(text.contains("token=***"), "{text}");

    // Anything that still writes a raw URL to the log goes through the same path.
    let mut line = RedactingWriter(Vec::new());
    writeln!(line, "GET {url} failed").unwrap();
    let written = String::from_utf8(line.0).unwrap();
    assert!(!written.contains(TOKEN), "{written}");
}

#[test]
fn maas_url_with_user_and_password_is_refused_without_echoing_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let site = std::fs::read_to_string(repo_root().join("examples/invalid/invalid-bmc-ip.yaml"))
        .unwrap()
        .replace("10.1.0.300", "10.1.0.3")
        .replace(
            "https://10.0.0.1:5443/MAAS",
            "https://admin:hunter2-pw@10.0.0.1:5443/MAAS?token=hunter2-pw",
        );
    std::fs::write(dir.path().join("fleet.yaml"), site).unwrap();
    for format in ["text", "json"] {
        let out = metalform(
            dir.path(),
            &["validate", "--fleet", ".", "--format", format],
        );
        assert_eq!(out.status.code(), Some(1));
        let text = stdout(&out) + &stderr(&out);
        assert!(!text.contains("hunter2"), "{text}");
        assert!(
            text.contains("`https://***@10.0.0.1:5443/MAAS?token=***` carries a user or password"),
            "{text}"
        );
    }
}

#[test]
fn maas_url_credentials_are_masked_in_diff_plan_and_api_json() {
    // Validation refuses them; the model's own renderings mask them anyway, so an old
    // revision or a hand-made value cannot bring them out.
    let fleet = metalform::manifest::load_fleet(&metalform::source::FleetSource::Directory(
        repo_root().join("fleet"),
    ))
    .unwrap()
    .fleet;
    let mut after = fleet.clone();
    let site = after.sites.values_mut().next().unwrap();
    site.maas.url = "https://admin:hunter2-pw@maas.example:5443/MAAS"
        .parse()
        .unwrap();
    let json = serde_json::to_string(&site).unwrap();
    assert!(!json.contains("hunter2"), "{json}");
    assert!(
        json.contains("https://***@maas.example:5443/MAAS"),
        "{json}"
    );
    let diff = metalform::model::diff::diff(&fleet, &after);
    let json = serde_json::to_string(&diff.changes).unwrap();
    assert!(!json.contains("hunter2"), "{json}");
    assert!(json.contains("***@maas.example"), "{json}");
}

#[test]
fn a_one_letter_maas_key_part_is_refused_instead_of_garbling_every_message() {
    let err = MaasClient::new(
        "https://127.0.0.1:5443/MAAS",
        Secret::new("consumer:tokenkey-long:s"),
        MaasClientOptions::default(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "MAAS client configuration: the MAAS API key's token_secret is 1 character(s) long: too short to be masked safely in messages (at least 8)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bmc_username_never_appears_in_stage_output() {
    const BMC_USER: &str = "bmc-operator-7f3a";
    let bed = Bed::start(Setup::one_site(SiteSetup::generated("dc1", 3, 1, 0))).await;
    bed.put_secret(
        "kv/dc1/power/default",
        serde_json::json!({"user": BMC_USER, "pass": "calvin-calvin"}),
    );
    let report = bed.executor().run(bed.onboard_all()).await;
    assert_eq!(report.converged(), 1, "{report:?}");
    let lines = bed.progress_lines();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("BMC login read from kv/dc1/power/default")),
        "{lines:#?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains(BMC_USER)),
        "the BMC user name is in the stage output: {lines:#?}"
    );
}
