//! The local dev backend (docs/contracts.md §2): a JSON file `{"<path>": {"<field>": "<value>"}}`,
//! read on every access (editing the file rotates a value without a restart) and written
//! atomically with owner-only permissions.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use futures::future::BoxFuture;

use super::{Secret, SecretData, SecretError, SecretRef, SecretStore};

type Document = BTreeMap<String, BTreeMap<String, String>>;

#[derive(Debug)]
pub struct FileStore {
    path: PathBuf,
    /// Serialises read-modify-write cycles within the process.
    write_lock: Mutex<()>,
}

impl FileStore {
    pub fn new(path: impl AsRef<Path>) -> Self {
        Self {
            path: path.as_ref().to_path_buf(),
            write_lock: Mutex::new(()),
        }
    }

    fn backend(&self) -> String {
        format!("file://{}", self.path.display())
    }

    fn load(&self) -> Result<Document, SecretError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            // A store that was never written holds no secrets.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Document::new()),
            Err(e) => {
                return Err(SecretError::Backend {
                    backend: self.backend(),
                    message: format!("cannot read: {e}"),
                });
            }
        };
        // The serde error names a line and column, never the text around it.
        serde_json::from_str(&text).map_err(|e| SecretError::Backend {
            backend: self.backend(),
            message: format!(
                "not a JSON object of path -> {{field: string}} (line {}, column {})",
                e.line(),
                e.column()
            ),
        })
    }

    fn store(&self, doc: &Document) -> Result<(), SecretError> {
        let fail = |e: std::io::Error| SecretError::Backend {
            backend: self.backend(),
            message: format!("cannot write: {e}"),
        };
        let text = serde_json::to_string_pretty(doc).expect("a map of strings serialises");
        super::write_private_file(&self.path, text.as_bytes()).map_err(fail)
    }
}

impl SecretStore for FileStore {
    fn read<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<SecretData, SecretError>> {
        Box::pin(async move {
            SecretRef::split(path)?;
            let doc = self.load()?;
            let fields = doc.get(path).ok_or_else(|| SecretError::NotFound {
                path: path.to_owned(),
                backend: self.backend(),
            })?;
            Ok(SecretData {
                path: path.to_owned(),
                fields: fields
                    .iter()
                    .map(|(k, v)| (k.clone(), Secret::new(v.clone())))
                    .collect(),
            })
        })
    }

    fn write<'a>(
        &'a self,
        path: &'a str,
        fields: &'a BTreeMap<String, Secret>,
    ) -> BoxFuture<'a, Result<(), SecretError>> {
        Box::pin(async move {
            SecretRef::split(path)?;
            let _guard = self.write_lock.lock().expect("secrets file lock");
            let mut doc = self.load()?;
            doc.insert(
                path.to_owned(),
                fields
                    .iter()
                    .map(|(k, v)| (k.clone(), v.expose().to_owned()))
                    .collect(),
            );
            self.store(&doc)
        })
    }

    fn describe(&self) -> String {
        self.backend()
    }
}
