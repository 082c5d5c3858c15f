//! The daemon's fleet source in a repository on the same machine: a poll that finds the branch
//! where it was reads it in-process and runs no `git` fetch (the mirror is not touched); a new
//! commit, or a branch that is not there, goes through the fetch as before.

use crate::daemon_support::{commit, git};

use std::time::Duration;

use metalform::daemon::config::{SourceConfig, Transport};
use metalform::daemon::{ReadOutcome, SourceReader};

fn local(repository: &std::path::Path, branch: &str) -> SourceConfig {
    SourceConfig {
        repository: repository.display().to_string(),
        transport: Transport::Local,
        branch: branch.into(),
        path: String::new(),
        poll_interval: Duration::from_secs(60),
        fetch_timeout: Duration::from_secs(10),
        ssh_key: None,
        known_hosts: None,
        token: None,
    }
}

/// The commit a read settled on (a repository without manifests is rejected, which is enough
/// to follow commits here).
fn rejected_commit(outcome: ReadOutcome) -> String {
    match outcome {
        ReadOutcome::Rejected { commit, reason } => {
            assert_eq!(
                reason,
                "no manifest under `.` at this commit: refusing to act on an empty source"
            );
            commit
        }
        other => panic!("expected a rejected read, got {other:?}"),
    }
}

#[tokio::test]
async fn an_unchanged_local_branch_is_read_without_a_fetch() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("fleet");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("README"), "fleet\n").unwrap();
    commit(&repo, "first");
    let data = dir.path().join("daemon");
    let mirror = data.join("fleet.git");
    let reader = SourceReader::new(local(&repo, "main"), &data, None);

    let first = rejected_commit(reader.poll(None, None).await);
    assert!(mirror.join("HEAD").exists(), "the first read fetches");
    // The mirror removed: a fetch would make it again. The branch has not moved, so none runs.
    std::fs::remove_dir_all(&mirror).unwrap();
    assert!(matches!(
        reader.poll(Some(first.clone()), None).await,
        ReadOutcome::Unchanged
    ));
    assert!(!mirror.exists(), "an unchanged local branch was fetched");

    // A new commit is fetched and read.
    std::fs::write(repo.join("README"), "fleet, again\n").unwrap();
    commit(&repo, "second");
    let second = rejected_commit(reader.poll(Some(first.clone()), None).await);
    assert_ne!(second, first);
    assert!(mirror.join("HEAD").exists());
    assert!(matches!(
        reader.poll(Some(second.clone()), None).await,
        ReadOutcome::Unchanged
    ));

    // A branch that is not there is the fetch's to report, as for any source.
    let reader = SourceReader::new(local(&repo, "production"), &data, None);
    match reader.poll(Some(second), None).await {
        ReadOutcome::Failed { reason } => assert_eq!(
            reason,
            format!("branch `production` does not exist in {}", repo.display())
        ),
        other => panic!("expected a failed read, got {other:?}"),
    }
}
