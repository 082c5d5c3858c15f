//! The daemon's fleet source (DESIGN.md §4 "empty/partial-source guard", §6): fetch the
//! configured branch into a local mirror with the `git` program (local, https or ssh), read
//! the fleet at the fetched commit with git2, validate it, and accept it only when it is whole.
//!
//! A read is never acted on unless it is accepted: a failed fetch, a branch that does not
//! exist, a fleet path missing from the commit, manifests that do not validate, or a fleet that
//! lost every node (of the fleet, or of a site that is still there) leaves the last accepted
//! revision in place, is logged and counted, and is retried at the next poll. Removing a site's
//! nodes on purpose means removing (or disabling) the site as well.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use base64::Engine;
use git2::Repository;

use super::config::{SourceConfig, Transport};
use crate::api::FleetRevision;
use crate::model::Fleet;
use crate::secrets::Secret;

/// What one poll of the source found.
#[derive(Debug)]
pub enum ReadOutcome {
    /// The branch still points at the accepted commit.
    Unchanged,
    /// A new, valid, whole fleet.
    Accepted(Arc<FleetRevision>),
    /// A new commit that must not be acted on, and why.
    Rejected { commit: String, reason: String },
    /// The source could not be read.
    Failed { reason: String },
}

impl ReadOutcome {
    /// The metric label.
    pub fn label(&self) -> &'static str {
        match self {
            ReadOutcome::Unchanged => "unchanged",
            ReadOutcome::Accepted(_) => "accepted",
            ReadOutcome::Rejected { .. } => "rejected",
            ReadOutcome::Failed { .. } => "failed",
        }
    }
}

/// Fetches and reads the configured branch.
#[derive(Debug, Clone)]
pub struct SourceReader {
    config: SourceConfig,
    mirror: PathBuf,
    /// The HTTPS token's value (`[source.token]`), read when the daemon started.
    token: Option<Secret>,
}

impl SourceReader {
    /// The mirror lives in `data_dir/fleet.git`.
    pub fn new(config: SourceConfig, data_dir: &Path, token: Option<Secret>) -> Self {
        Self {
            config,
            mirror: data_dir.join("fleet.git"),
            token,
        }
    }

    /// Fetch, then read on a blocking thread. `seen` is the commit of the last read, accepted
    /// or rejected, so an unchanged branch is not re-validated.
    pub async fn poll(
        &self,
        seen: Option<String>,
        last: Option<Arc<FleetRevision>>,
    ) -> ReadOutcome {
        if let Some(seen) = seen.as_deref()
            && self.local_branch_is_at(seen).await
        {
            return ReadOutcome::Unchanged;
        }
        if let Err(reason) = self.fetch().await {
            return ReadOutcome::Failed { reason };
        }
        let reader = self.clone();
        tokio::task::spawn_blocking(move || reader.read(seen.as_deref(), last.as_deref()))
            .await
            .unwrap_or_else(|e| ReadOutcome::Failed {
                reason: format!("source reader panicked: {e}"),
            })
    }

    /// Whether a repository on this machine still has the branch at `seen`, read in-process:
    /// an unchanged local source then costs no `git` processes (the fetch and its upload-pack)
    /// at each poll, which at a short poll interval is most of an idle daemon's CPU. Anything
    /// else (another source, no such repository or branch) is left to the fetch, which brings
    /// what changed or says what is wrong.
    async fn local_branch_is_at(&self, seen: &str) -> bool {
        let Some(path) = self.config.local_path().map(Path::to_path_buf) else {
            return false;
        };
        let branch = format!("refs/heads/{}", self.config.branch);
        let seen = seen.to_owned();
        tokio::task::spawn_blocking(move || {
            Repository::open(&path)
                .and_then(|repo| Ok(repo.find_reference(&branch)?.peel_to_commit()?.id()))
                .is_ok_and(|tip| tip.to_string() == seen)
        })
        .await
        .unwrap_or(false)
    }

    /// The ref the branch is fetched into.
    fn tracking_ref(&self) -> String {
        format!("refs/metalform/source/{}", self.config.branch)
    }

    /// Read the fetched commit from the mirror (blocking).
    fn read(&self, seen: Option<&str>, last: Option<&FleetRevision>) -> ReadOutcome {
        let failed = |e: git2::Error| ReadOutcome::Failed {
            reason: format!(
                "reading the mirror {}: {}",
                self.mirror.display(),
                e.message()
            ),
        };
        let repo = match Repository::open_bare(&self.mirror) {
            Ok(repo) => repo,
            Err(e) => return failed(e),
        };
        let commit = match repo
            .find_reference(&self.tracking_ref())
            .and_then(|r| r.peel_to_commit())
        {
            Ok(commit) => commit,
            Err(e) => return failed(e),
        };
        let commit_id = commit.id().to_string();
        if seen == Some(commit_id.as_str()) {
            return ReadOutcome::Unchanged;
        }
        let reject = |reason: String| ReadOutcome::Rejected {
            commit: commit_id.clone(),
            reason,
        };
        let display = if self.config.path.is_empty() {
            PathBuf::from(".")
        } else {
            PathBuf::from(&self.config.path)
        };
        let snapshot = match crate::source::read_commit(&repo, &commit, &self.config.path, &display)
        {
            Ok(snapshot) => snapshot,
            Err(e) => return reject(e.to_string()),
        };
        if snapshot.files.is_empty() {
            return reject(format!(
                "no manifest under `{}` at this commit: refusing to act on an empty source",
                display.display()
            ));
        }
        let validation = crate::manifest::load(&snapshot);
        let Some(fleet) = validation.fleet else {
            let first = validation
                .errors
                .first()
                .map(|d| d.headline())
                .unwrap_or_default();
            return reject(format!(
                "the fleet has {} error(s); first: {first}",
                validation.errors.len()
            ));
        };
        if let Some(last) = last
            && let Some(reason) = lost_nodes(&last.fleet, &fleet)
        {
            return reject(reason);
        }
        ReadOutcome::Accepted(Arc::new(FleetRevision {
            revision: crate::plan::revision_id(&fleet.revision),
            fleet,
            accepted_at: chrono::Utc::now(),
        }))
    }

    /// Fetch the branch into the mirror with the `git` program, which brings the operator's
    /// transports, proxies and CA bundles along. Never prompts; abandoned after
    /// `fetch_timeout`.
    async fn fetch(&self) -> Result<(), String> {
        let what = format!(
            "fetching branch `{}` of {}",
            self.config.branch, self.config.repository
        );
        if !self.mirror.join("HEAD").exists() {
            std::fs::create_dir_all(&self.mirror)
                .map_err(|e| format!("creating {}: {e}", self.mirror.display()))?;
            self.git(&["init", "--bare", "--quiet"])
                .await
                .map_err(|e| format!("{what}: creating the mirror: {e}"))?;
        }
        let refspec = format!("+refs/heads/{}:{}", self.config.branch, self.tracking_ref());
        let fetch = [
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            "--no-recurse-submodules",
            "--",
            self.config.repository.as_str(),
            refspec.as_str(),
        ];
        self.git(&fetch).await.map_err(|e| {
            if e.contains("couldn't find remote ref") {
                return format!(
                    "branch `{}` does not exist in {}",
                    self.config.branch, self.config.repository
                );
            }
            format!("{what}: {}", self.explain(e))
        })
    }

    /// git's words for the failures an operator fixes in `[source]`, said in those terms.
    fn explain(&self, stderr: String) -> String {
        if stderr.contains("could not read Username") || stderr.contains("Authentication failed") {
            return if self.token.is_some() {
                "the server refused the credentials (HTTP 401); check [source.token]".into()
            } else {
                "the server asks for credentials; set [source.token]".into()
            };
        }
        if stderr.contains("Host key verification failed") {
            return "the ssh server's host key is not the one in known_hosts (or is unknown); check source.known_hosts".into();
        }
        if stderr.contains("Permission denied (publickey") {
            return "the ssh server refused the key; check source.ssh_key and the server's deploy keys".into();
        }
        stderr
    }

    /// Run `git --git-dir MIRROR ARGS`; its stderr (the token masked) when it fails.
    async fn git(&self, args: &[&str]) -> Result<(), String> {
        let mut command = tokio::process::Command::new("git");
        command
            .arg("--git-dir")
            .arg(&self.mirror)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // A daemon has nobody to answer a prompt: fail instead of hanging.
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GCM_INTERACTIVE", "never")
            .env_remove("GIT_ASKPASS")
            .env_remove("SSH_ASKPASS")
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE");
        if self.config.transport == Transport::Ssh {
            command.env("GIT_SSH_COMMAND", ssh_command(&self.config));
        }
        if let Some(token) = &self.token {
            // Through the environment, not the command line (which `ps` shows).
            let username = self
                .config
                .token
                .as_ref()
                .map(|t| t.username.as_str())
                .unwrap_or("git");
            let basic = base64::engine::general_purpose::STANDARD
                .encode(format!("{username}:{}", token.expose()));
            command
                .env("GIT_CONFIG_COUNT", "1")
                .env("GIT_CONFIG_KEY_0", "http.extraHeader")
                .env(
                    "GIT_CONFIG_VALUE_0",
                    format!("Authorization: Basic {basic}"),
                );
        }
        let timeout = self.config.fetch_timeout;
        let output = match tokio::time::timeout(timeout, command.output()).await {
            Err(_) => {
                return Err(format!(
                    "no answer within {} (source.fetch_timeout); abandoned",
                    crate::model::duration::format(timeout)
                ));
            }
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(GIT_MISSING.into());
            }
            Ok(Err(e)) => return Err(format!("running git: {e}")),
            Ok(Ok(output)) => output,
        };
        if output.status.success() {
            return Ok(());
        }
        let mut stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
        if let Some(token) = &self.token {
            // Whole-value masking; the daemon refused a token too short for it at start.
            let mut redactor = crate::sanitize::Redactor::new();
            if redactor.add("source.token", token.expose()).is_ok() {
                stderr = redactor.redact(&stderr).into_owned();
            }
        }
        if stderr.is_empty() {
            stderr = format!("git exited with {}", output.status);
        }
        Err(stderr.lines().collect::<Vec<_>>().join("; "))
    }
}

/// Why the daemon cannot fetch at all.
pub const GIT_MISSING: &str =
    "the `git` program is not installed or not on PATH (the daemon fetches the fleet with it)";

/// Check that `git` runs, before the daemon starts.
pub async fn check_git() -> Result<(), String> {
    match tokio::process::Command::new("git")
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .await
    {
        Ok(output) if output.status.success() => Ok(()),
        Ok(output) => Err(format!("`git --version` failed: {}", output.status)),
        Err(_) => Err(GIT_MISSING.into()),
    }
}

/// `GIT_SSH_COMMAND` for the configured key and known-hosts file. Batch mode: a missing key or
/// an unknown host key fails the fetch instead of prompting.
fn ssh_command(config: &SourceConfig) -> String {
    let quote = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', "'\\''"));
    let mut command = String::from("ssh -o BatchMode=yes -o ConnectTimeout=30");
    if let Some(key) = &config.ssh_key {
        command += &format!(" -i {} -o IdentitiesOnly=yes", quote(key));
    }
    if let Some(known_hosts) = &config.known_hosts {
        command += &format!(
            " -o UserKnownHostsFile={} -o StrictHostKeyChecking=yes",
            quote(known_hosts)
        );
    }
    command
}

/// The empty/partial-source guard: a fleet that lost every node, or every node of a site it
/// still has, is not acted on.
fn lost_nodes(last: &Fleet, next: &Fleet) -> Option<String> {
    if !last.nodes.is_empty() && next.nodes.is_empty() {
        return Some(format!(
            "the new revision has no nodes (the accepted one has {}): refusing to act on an empty source",
            last.nodes.len()
        ));
    }
    let emptied: BTreeSet<&str> = next
        .sites
        .keys()
        .filter(|site| last.nodes_of_site(site).next().is_some())
        .filter(|site| next.nodes_of_site(site).next().is_none())
        .map(|site| site.as_str())
        .collect();
    if !emptied.is_empty() {
        return Some(format!(
            "site(s) {} lost every node in the new revision: refusing to act on a partial source (remove or disable the site too if that is intended)",
            emptied.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    None
}
