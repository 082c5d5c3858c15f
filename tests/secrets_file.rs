//! The dev secrets backend (file://) and the store-independent parts of secrets: write, read,
//! rotate and re-read without reopening, missing path/field errors naming the path only,
//! redaction, URL parsing.

use std::collections::BTreeMap;

use metalform::secrets::{self, Secret, SecretError, SecretRef};

fn fields(pairs: &[(&str, &str)]) -> BTreeMap<String, Secret> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Secret::new(*v)))
        .collect()
}

#[tokio::test]
async fn write_read_rotate_and_missing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secrets/dev.json");
    let store = secrets::open(&format!("file://{}", path.display())).unwrap();
    let token = SecretRef::new("kv/maas-sites/dc1/api-token", Some("token"));

    let err = store.get(&token).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "secret `kv/maas-sites/dc1/api-token` not found in file://{}",
            path.display()
        )
    );
    assert!(!err.is_transient());

    store
        .write(&token.path, &fields(&[("token", "ck:tk:ts-1")]))
        .await
        .unwrap();
    assert_eq!(store.get(&token).await.unwrap().expose(), "ck:tk:ts-1");
    // Rotation: the same store object reads the new value (read at use time).
    store
        .write(&token.path, &fields(&[("token", "ck:tk:ts-2")]))
        .await
        .unwrap();
    assert_eq!(store.get(&token).await.unwrap().expose(), "ck:tk:ts-2");
    // An operator editing the file by hand is picked up too.
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("ts-2", "ts-3");
    std::fs::write(&path, text).unwrap();
    assert_eq!(store.get(&token).await.unwrap().expose(), "ck:tk:ts-3");

    let wrong_key = SecretRef::new("kv/maas-sites/dc1/api-token", Some("secret"));
    let err = store.get(&wrong_key).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "secret `kv/maas-sites/dc1/api-token` has no field `secret` (fields: token)"
    );
    assert!(!err.to_string().contains("ck:tk"));
    assert!(err.hint().is_some());

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}

#[tokio::test]
async fn power_credentials_and_whole_secret_references() {
    let dir = tempfile::tempdir().unwrap();
    let store = secrets::open(&format!("file://{}", dir.path().join("s.json").display())).unwrap();
    store
        .write(
            "kv/maas-sites/dc1/power/default",
            &fields(&[("user", "root"), ("pass", "calvin")]),
        )
        .await
        .unwrap();
    let reference = SecretRef::new("kv/maas-sites/dc1/power/default", None);
    let creds = store.power_credentials(&reference).await.unwrap();
    assert_eq!(creds.user, "root");
    assert_eq!(creds.pass.expose(), "calvin");
    assert!(!format!("{creds:?}").contains("calvin"));
    // Without `key`, a multi-field secret is ambiguous.
    let err = store.get(&reference).await.unwrap_err();
    assert!(matches!(err, SecretError::InvalidReference { .. }), "{err}");
    let data = store.read(&reference.path).await.unwrap();
    assert_eq!(
        format!("{data:?}"),
        r#"SecretData { path: "kv/maas-sites/dc1/power/default", fields: ["pass", "user"] }"#
    );
}

#[tokio::test]
async fn malformed_file_and_urls_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.json");
    std::fs::write(&path, "{\"kv/a/b\": {\"pass\": \"hunter2\"").unwrap();
    let store = secrets::open(&format!("file://{}", path.display())).unwrap();
    let err = store.read("kv/a/b").await.unwrap_err();
    assert!(err.to_string().contains("not a JSON object"), "{err}");
    assert!(!err.to_string().contains("hunter2"));
    assert!(matches!(
        store.read("nomount").await,
        Err(SecretError::InvalidReference { .. })
    ));
    let err = secrets::open("s3://bucket").unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid secrets URL `s3://bucket`: expected vault://HOST:PORT (https), vault+http://HOST:PORT (plain http) or file://PATH"
    );
    assert!(secrets::open("file://").is_err());
}

#[tokio::test]
async fn unreachable_vault_is_transient() {
    // Nothing listens on port 1: the server is down.
    let store = secrets::VaultStore::new("http://127.0.0.1:1", Secret::new("root"), None).unwrap();
    let store: &dyn secrets::SecretStore = &store;
    let err = store
        .get(&SecretRef::new("secret/x", Some("y")))
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("secret backend vault at http://127.0.0.1:1 unavailable"),
        "{err}"
    );
    assert!(!err.to_string().contains("root"));
}
