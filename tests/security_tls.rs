//! TLS everywhere (issue 16 point 5, docs/security.md "Transport"): MAAS over https with a CA
//! bundle, plain http to MAAS only when the operator writes so (or MAAS is on this host), Vault
//! over https unless the URL says `vault+http`. PostgreSQL over TLS is in the services suite
//! (`store_postgres_tls`), against a real server.

mod manifest_support;
mod sim_support;
mod tls_support;

use std::time::Duration;

use manifest_support::{metalform, repo_root, stdout};
use metalform::provider::maas::{MaasClient, MaasClientOptions, RetryPolicy};
use metalform::secrets::Secret;

#[test]
fn plain_http_to_a_maas_off_this_host_is_refused_unless_the_operator_allows_it() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(repo_root().join("examples/invalid/invalid-bmc-ip.yaml"))
        .unwrap()
        .replace("10.1.0.300", "10.1.0.3");
    let write = |url: &str, extra: &str| {
        std::fs::write(
            dir.path().join("fleet.yaml"),
            base.replace(
                "url: \"https://10.0.0.1:5443/MAAS\"",
                &format!("url: \"{url}\"{extra}"),
            ),
        )
        .unwrap();
        metalform(dir.path(), &["validate", "--fleet", "."])
    };
    let out = write("http://10.0.0.1:5240/MAAS", "");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains(
            "error: spec.maas.url: `http://10.0.0.1:5240/MAAS` is plain http: the site's API key would cross the network in the clear"
        ),
        "{}",
        stdout(&out)
    );
    assert!(stdout(&out).contains("maas.allowInsecureHttp: true"));
    // Said so: accepted. On this host: accepted.
    let out = write("http://10.0.0.1:5240/MAAS", ", allowInsecureHttp: true");
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let out = write("http://127.0.0.1:5240/MAAS", "");
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let out = write("https://10.0.0.1:5443/MAAS", "");
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

fn options(ca_file: Option<std::path::PathBuf>) -> MaasClientOptions {
    MaasClientOptions {
        timeout: Duration::from_secs(10),
        retry: RetryPolicy::never(),
        ca_file,
        ..MaasClientOptions::default()
    }
}

#[tokio::test]
async fn maas_over_https_is_verified_against_the_ca_bundle() {
    let sim = sim_support::Sim::start(sim_support::fleet(1)).await;
    let ca = tls_support::make_ca();
    let front = tls_support::tls_front(&ca, sim.handle.addr).await;
    let url = format!("https://127.0.0.1:{}/MAAS", front.port());
    let key = sim.handle.api_key().clone();

    // With the CA bundle: a real TLS session, and MAAS answers.
    let client = MaasClient::new(&url, key.clone(), options(Some(ca.ca_pem.clone()))).unwrap();
    let version = client.version().await.expect("MAAS over https");
    assert!(!version.version.is_empty());

    // Without it the server's certificate is refused: nothing is sent to a MAAS that cannot
    // prove who it is.
    let client = MaasClient::new(&url, key.clone(), options(None)).unwrap();
    let err = client.whoami().await.unwrap_err().to_string();
    assert!(
        err.to_lowercase().contains("certificate") || err.contains("UnknownIssuer"),
        "{err}"
    );

    // A bundle that is not PEM is a configuration error naming the file.
    let bogus = ca.dir.path().join("bogus.pem");
    std::fs::write(&bogus, "not a certificate").unwrap();
    let err = MaasClient::new(&url, key, options(Some(bogus.clone())))
        .unwrap_err()
        .to_string();
    assert!(err.contains(&bogus.display().to_string()), "{err}");
}

#[test]
fn vault_urls_mean_https_unless_they_say_http() {
    // SAFETY: this test binary's tests do not read VAULT_TOKEN concurrently elsewhere.
    unsafe { std::env::set_var("VAULT_TOKEN", "root") };
    let describe = |url: &str| metalform::secrets::open(url).unwrap().describe();
    assert_eq!(
        describe("vault://127.0.0.1:8200"),
        "vault at https://127.0.0.1:8200"
    );
    assert_eq!(
        describe("vault+https://127.0.0.1:8200"),
        "vault at https://127.0.0.1:8200"
    );
    assert_eq!(
        describe("vault+http://127.0.0.1:8200"),
        "vault at http://127.0.0.1:8200"
    );
    let missing = metalform::secrets::VaultStore::new(
        "https://127.0.0.1:8200",
        Secret::new("root"),
        Some(std::path::Path::new("/nonexistent/ca.pem")),
    )
    .unwrap_err()
    .to_string();
    assert!(missing.contains("/nonexistent/ca.pem"), "{missing}");
}
