//! The daemon's fleet source (DESIGN.md §4 "empty/partial-source guard", §6): fetch the
//! configured branch into a local mirror with git2, read the fleet at the fetched commit,
//! validate it, and accept it only when it is whole.
//!
//! A read is never acted on unless it is accepted: a failed fetch, a branch that does not
//! exist, a fleet path missing from the commit, manifests that do not validate, or a fleet that
//! lost every node (of the fleet, or of a site that is still there) leaves the last accepted
//! revision in place, is logged and counted, and is retried at the next poll. Removing a site's
//! nodes on purpose means removing (or disabling) the site as well.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use git2::Repository;

use super::config::SourceConfig;
use crate::api::FleetRevision;
use crate::model::Fleet;

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
}

impl SourceReader {
    /// The mirror lives in `data_dir/fleet.git`.
    pub fn new(config: SourceConfig, data_dir: &Path) -> Self {
        Self {
            config,
            mirror: data_dir.join("fleet.git"),
        }
    }

    pub fn config(&self) -> &SourceConfig {
        &self.config
    }

    /// Where `--watch` looks for changes: the repository's git directory when it is a local
    /// path (a new commit moves a ref there).
    pub fn watch_path(&self) -> Option<PathBuf> {
        let repo = self
            .config
            .repository
            .strip_prefix("file://")
            .unwrap_or(&self.config.repository);
        let repo = Repository::open(repo).ok()?;
        Some(repo.path().to_path_buf())
    }

    /// Fetch and read (blocking: run it on a blocking thread). `seen` is the commit of the
    /// last read, accepted or rejected, so an unchanged branch is not re-validated.
    pub fn poll(&self, seen: Option<&str>, last: Option<&FleetRevision>) -> ReadOutcome {
        let (repo, commit) = match self.fetch() {
            Ok(fetched) => fetched,
            Err(reason) => return ReadOutcome::Failed { reason },
        };
        let commit_id = commit.to_string();
        if seen == Some(commit_id.as_str()) {
            return ReadOutcome::Unchanged;
        }
        let reject = |reason: String| ReadOutcome::Rejected {
            commit: commit_id.clone(),
            reason,
        };
        let commit = match repo.find_commit(commit) {
            Ok(commit) => commit,
            Err(e) => {
                return ReadOutcome::Failed {
                    reason: e.message().to_owned(),
                };
            }
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

    /// Fetch the branch into the mirror; the fetched commit.
    fn fetch(&self) -> Result<(Repository, git2::Oid), String> {
        let describe = |e: git2::Error| {
            format!(
                "fetching branch `{}` of {}: {}",
                self.config.branch,
                self.config.repository,
                e.message()
            )
        };
        let repo = match Repository::open_bare(&self.mirror) {
            Ok(repo) => repo,
            Err(_) => {
                std::fs::create_dir_all(&self.mirror)
                    .map_err(|e| format!("creating {}: {e}", self.mirror.display()))?;
                Repository::init_bare(&self.mirror).map_err(describe)?
            }
        };
        let tracking = format!("refs/metalform/source/{}", self.config.branch);
        {
            let mut remote = repo
                .remote_anonymous(&self.config.repository)
                .map_err(describe)?;
            let refspec = format!("+refs/heads/{}:{tracking}", self.config.branch);
            remote
                .fetch(&[refspec.as_str()], None, None)
                .map_err(describe)?;
        }
        let commit = repo
            .find_reference(&tracking)
            .and_then(|r| r.peel_to_commit())
            .map_err(|_| {
                format!(
                    "branch `{}` does not exist in {}",
                    self.config.branch, self.config.repository
                )
            })?
            .id();
        Ok((repo, commit))
    }
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
