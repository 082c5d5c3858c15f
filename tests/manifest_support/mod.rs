//! Shared helpers for the manifest, validate, diff and import-csv integration tests: the
//! metalform binary, and real git repositories built with real `git` commits.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root (where fleet/, examples/ and schema/ live).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Run the metalform binary in `cwd`.
pub fn metalform(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_metalform"))
        .args(args)
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .env_remove("METALFORM_STATE")
        .output()
        .expect("the metalform binary runs")
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A git repository in a temporary directory. Commits use a fixed identity and dates, so the
/// same content always gives the same commit ids (golden output can pin them).
pub struct GitRepo {
    pub dir: tempfile::TempDir,
    commits: u32,
}

impl GitRepo {
    pub fn new() -> Self {
        let repo = GitRepo {
            dir: tempfile::tempdir().expect("a temp dir"),
            commits: 0,
        };
        repo.git(&["init", "-q", "-b", "main"]);
        repo
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Run git in the repository; panics with git's stderr when it fails.
    pub fn git(&self, args: &[&str]) -> String {
        let output = Command::new("git")
            .args(args)
            .current_dir(self.path())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_SYSTEM", "/dev/null")
            .env("GIT_AUTHOR_NAME", "Fleet Operator")
            .env("GIT_AUTHOR_EMAIL", "ops@example.invalid")
            .env("GIT_COMMITTER_NAME", "Fleet Operator")
            .env("GIT_COMMITTER_EMAIL", "ops@example.invalid")
            .env(
                "GIT_AUTHOR_DATE",
                format!("2025-01-01T00:{:02}:00Z", self.commits),
            )
            .env(
                "GIT_COMMITTER_DATE",
                format!("2025-01-01T00:{:02}:00Z", self.commits),
            )
            .output()
            .expect("git runs");
        assert!(
            output.status.success(),
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }

    /// Copy a directory tree into the repository at `to`.
    pub fn copy_dir(&self, from: &Path, to: &str) {
        copy_tree(from, &self.path().join(to));
    }

    pub fn write(&self, path: &str, text: &str) {
        let full = self.path().join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, text).unwrap();
    }

    pub fn read(&self, path: &str) -> String {
        std::fs::read_to_string(self.path().join(path)).unwrap()
    }

    /// Replace `from` with `to` in a file; the text must be there exactly once.
    pub fn edit(&self, path: &str, from: &str, to: &str) {
        let text = self.read(path);
        assert_eq!(text.matches(from).count(), 1, "`{from}` once in {path}");
        self.write(path, &text.replacen(from, to, 1));
    }

    /// Remove the line containing `needle` from a file.
    pub fn remove_line(&self, path: &str, needle: &str) {
        let text = self.read(path);
        let kept: Vec<&str> = text.lines().filter(|l| !l.contains(needle)).collect();
        assert_eq!(
            kept.len() + 1,
            text.lines().count(),
            "`{needle}` on one line of {path}"
        );
        self.write(path, &(kept.join("\n") + "\n"));
    }

    /// Stage everything and commit; returns the commit id.
    pub fn commit(&mut self, message: &str) -> String {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "-m", message]);
        self.commits += 1;
        self.git(&["rev-parse", "HEAD"])
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Resolves `$ref`s to files in schema/ on disk, as an editor does with relative references.
pub struct SchemaFromDisk;

impl jsonschema::Retrieve for SchemaFromDisk {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<serde_json::Value, Box<dyn std::error::Error + Send + Sync>> {
        let name = uri.as_str().rsplit('/').next().unwrap_or_default();
        let path = repo_root().join("schema").join(name);
        Ok(serde_json::from_str(&std::fs::read_to_string(path)?)?)
    }
}

/// schema/fleet.schema.json compiled with its siblings, as an editor compiles it; `formats`:
/// whether `format` is checked (2020-12 makes it an annotation only).
pub fn editor_validator(formats: bool) -> jsonschema::Validator {
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("schema/fleet.schema.json")).unwrap(),
    )
    .unwrap();
    jsonschema::options()
        .with_base_uri("file:///schema/fleet.schema.json")
        .with_retriever(SchemaFromDisk)
        .should_validate_formats(formats)
        .build(&schema)
        .expect("fleet.schema.json compiles with its siblings")
}
