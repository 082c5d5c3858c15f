//! Secrets against a real OpenBao dev server (scripts/services/11-openbao.sh starts it and
//! exports METALFORM_TEST_VAULT_ADDR / METALFORM_TEST_VAULT_TOKEN; KV v2 at `secret/`).
//! Fails, never skips, when the service is missing.
#![cfg(feature = "services")]

use std::collections::BTreeMap;
use std::sync::Arc;

use metalform::secrets::{self, Secret, SecretError, SecretRef, SecretStore, VaultStore};

fn env(name: &str) -> String {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is not set: run scripts/test-all, which starts OpenBao"))
}

/// The server's CA (dev mode with `-dev-tls`: OpenBao is reached over https).
fn ca() -> std::path::PathBuf {
    env("METALFORM_TEST_VAULT_CACERT").into()
}

fn vault() -> Arc<dyn SecretStore> {
    Arc::new(
        VaultStore::new(
            &env("METALFORM_TEST_VAULT_ADDR"),
            Secret::new(env("METALFORM_TEST_VAULT_TOKEN")),
            Some(&ca()),
        )
        .expect("vault client"),
    )
}

fn unique(prefix: &str) -> String {
    format!(
        "secret/metalform-test/{prefix}-{}",
        uuid::Uuid::new_v4().simple()
    )
}

fn fields(pairs: &[(&str, &str)]) -> BTreeMap<String, Secret> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Secret::new(*v)))
        .collect()
}

#[tokio::test]
async fn write_read_rotate_reread_without_restart() {
    let store = vault();
    let path = unique("api-token");
    let token = SecretRef::new(path.clone(), Some("token"));
    store
        .write(&path, &fields(&[("token", "consumer:key:secret-v1")]))
        .await
        .expect("write to OpenBao");
    assert_eq!(
        store.get(&token).await.unwrap().expose(),
        "consumer:key:secret-v1"
    );
    // Rotate through a *different* client (the admin API writing), read through the first one.
    let admin = vault();
    admin
        .write(&path, &fields(&[("token", "consumer:key:secret-v2")]))
        .await
        .unwrap();
    assert_eq!(
        store.get(&token).await.unwrap().expose(),
        "consumer:key:secret-v2"
    );
}

#[tokio::test]
async fn missing_path_and_key_name_the_path_never_the_value() {
    let store = vault();
    let path = unique("power");
    let err = store
        .get(&SecretRef::new(path.clone(), Some("pass")))
        .await
        .unwrap_err();
    assert!(matches!(err, SecretError::NotFound { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with(&format!("secret `{path}` not found in vault at ")),
        "{err}"
    );
    store
        .write(&path, &fields(&[("user", "root"), ("pass", "calvin-9")]))
        .await
        .unwrap();
    let err = store
        .get(&SecretRef::new(path.clone(), Some("password")))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("secret `{path}` has no field `password` (fields: pass, user)")
    );
    assert!(!err.to_string().contains("calvin"));
    let creds = store
        .power_credentials(&SecretRef::new(path.clone(), None))
        .await
        .unwrap();
    assert_eq!(
        (creds.user.as_str(), creds.pass.expose()),
        ("root", "calvin-9")
    );
}

#[tokio::test]
async fn wrong_token_is_denied_and_open_reads_vault_token() {
    let addr = env("METALFORM_TEST_VAULT_ADDR");
    let bad = VaultStore::new(&addr, Secret::new("not-a-token"), Some(&ca())).unwrap();
    let bad: &dyn SecretStore = &bad;
    let err = bad.read("secret/anything").await.unwrap_err();
    assert!(matches!(err, SecretError::Denied { .. }), "{err:?}");
    assert!(!err.is_transient());

    // `open(vault://HOST:PORT)` takes the token from VAULT_TOKEN (docs/contracts.md §2).
    // SAFETY: this test file sets VAULT_TOKEN only here and before reading it.
    unsafe { std::env::set_var("VAULT_TOKEN", env("METALFORM_TEST_VAULT_TOKEN")) };
    // `vault://` is https; the server's CA comes from VAULT_CACERT.
    unsafe { std::env::set_var("VAULT_CACERT", ca()) };
    let host_port = addr.strip_prefix("https://").expect("OpenBao over https");
    let store = secrets::open(&format!("vault://{host_port}")).unwrap();
    let path = unique("via-open");
    store.write(&path, &fields(&[("k", "v")])).await.unwrap();
    assert_eq!(
        store
            .get(&SecretRef::new(path, Some("k")))
            .await
            .unwrap()
            .expose(),
        "v"
    );
}

#[tokio::test]
async fn server_down_is_a_transient_error() {
    // A second dev server that we stop: reads that worked now fail as transient.
    let bao = std::env::var("METALFORM_TEST_BAO_BIN").unwrap_or_else(|_| "bao".into());
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let home = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(&bao)
        .args([
            "server",
            "-dev",
            "-dev-root-token-id=root",
            &format!("-dev-listen-address=127.0.0.1:{port}"),
        ])
        .env("HOME", home.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run `{bao}` (METALFORM_TEST_BAO_BIN): {e}"));
    let store = VaultStore::new(
        &format!("http://127.0.0.1:{port}"),
        Secret::new("root"),
        None,
    )
    .unwrap();
    let store: &dyn SecretStore = &store;
    let mut written = false;
    for _ in 0..100 {
        if store
            .write("secret/x", &fields(&[("k", "v1")]))
            .await
            .is_ok()
        {
            written = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(written, "second OpenBao dev server did not come up");
    assert_eq!(
        store
            .get(&SecretRef::new("secret/x", Some("k")))
            .await
            .unwrap()
            .expose(),
        "v1"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let err = store
        .get(&SecretRef::new("secret/x", Some("k")))
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    assert!(matches!(err, SecretError::Unavailable { .. }));
}

#[tokio::test]
async fn over_https_an_unknown_certificate_is_refused_and_plain_http_is_not_tried() {
    let addr = env("METALFORM_TEST_VAULT_ADDR");
    // Without the server's CA: the certificate is not trusted, nothing is read.
    let store =
        VaultStore::new(&addr, Secret::new(env("METALFORM_TEST_VAULT_TOKEN")), None).unwrap();
    let store: &dyn SecretStore = &store;
    let err = store.read("secret/anything").await.unwrap_err();
    assert!(matches!(err, SecretError::Unavailable { .. }), "{err:?}");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );
    // The same server as plain http: refused by the server, never a downgrade.
    let plain = addr.replacen("https://", "http://", 1);
    let store =
        VaultStore::new(&plain, Secret::new(env("METALFORM_TEST_VAULT_TOKEN")), None).unwrap();
    let store: &dyn SecretStore = &store;
    assert!(store.read("secret/anything").await.is_err());
}
