//! Reading a fleet at a git revision (`--rev REV`): blobs straight from the object database of
//! the repository that holds the fleet path — a subdirectory here, as fleet/ is in metalform's
//! own repository — without a checkout. Real repositories, real commits.

use crate::manifest_support;

use manifest_support::{GitRepo, metalform, repo_root, stderr, stdout};
use metalform::model::Revision;
use metalform::source::{self, FleetSource, SourceError};

fn repo_with_fleet_in_subdir() -> (GitRepo, String) {
    let mut repo = GitRepo::new();
    repo.write("README.md", "fleet repository\n");
    repo.commit("empty start");
    repo.copy_dir(&repo_root().join("fleet"), "infra/fleet");
    let id = repo.commit("add the fleet");
    (repo, id)
}

#[test]
fn a_revision_is_read_from_the_object_database_not_the_work_tree() {
    let (repo, commit) = repo_with_fleet_in_subdir();
    // Uncommitted edits: a broken file and a changed one. --rev must not see them, and must
    // not touch them.
    repo.write("infra/fleet/nodes/dc1/broken.yaml", "kind: [\n");
    repo.edit(
        "infra/fleet/sites/dc1.yaml",
        "pxeVlanVid: 46",
        "pxeVlanVid: 47",
    );
    let status_before = repo.git(&["status", "--porcelain"]);

    let output = metalform(
        repo.path(),
        &[
            "validate",
            "--fleet",
            "infra/fleet",
            "--rev",
            "HEAD",
            "--format",
            "json",
        ],
    );
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
    let json: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(
        json["revision"],
        serde_json::json!({"kind": "commit", "id": commit})
    );
    assert_eq!(json["counts"]["nodes"], 39);

    // Without --rev the work tree is read, broken file included.
    let output = metalform(repo.path(), &["validate", "--fleet", "infra/fleet"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stdout(&output).contains("infra/fleet/nodes/dc1/broken.yaml:2:1: error: YAML syntax:"),
        "{}",
        stdout(&output)
    );

    assert_eq!(
        repo.git(&["status", "--porcelain"]),
        status_before,
        "the work tree is untouched"
    );
    assert!(
        repo.read("infra/fleet/sites/dc1.yaml")
            .contains("pxeVlanVid: 47")
    );
}

#[test]
fn the_same_files_come_out_of_git_and_out_of_the_directory() {
    let (repo, commit) = repo_with_fleet_in_subdir();
    let fleet = repo.path().join("infra/fleet");
    let from_dir = source::read(&FleetSource::Directory(fleet.clone())).unwrap();
    let from_git = source::read(&FleetSource::GitRevision {
        fleet: fleet.clone(),
        rev: "main".into(),
    })
    .unwrap();
    assert_eq!(from_git.revision, Revision::Commit { id: commit });
    assert_eq!(from_dir.files, from_git.files);
    assert_eq!(from_git.files.len(), 10);
    assert_eq!(from_dir.display_root, from_git.display_root);

    // A relative path from a subdirectory of the repository names the same fleet.
    let from_subdir = metalform(
        &repo.path().join("infra"),
        &["validate", "--fleet", "fleet", "--rev", "HEAD"],
    );
    assert_eq!(
        from_subdir.status.code(),
        Some(0),
        "{}",
        stderr(&from_subdir)
    );
    assert!(
        stdout(&from_subdir).contains("fleet `fleet` at commit "),
        "{}",
        stdout(&from_subdir)
    );
}

#[test]
fn dot_directories_are_skipped_in_both_sources() {
    let (mut repo, _) = repo_with_fleet_in_subdir();
    repo.write("infra/fleet/.metalform/cache.yaml", "not: a manifest\n");
    repo.write("infra/fleet/.hidden.yaml", "not: a manifest\n");
    repo.write("infra/fleet/notes.md", "# not a manifest\n");
    repo.commit("noise");
    let fleet = repo.path().join("infra/fleet");
    for source in [
        FleetSource::Directory(fleet.clone()),
        FleetSource::GitRevision {
            fleet: fleet.clone(),
            rev: "HEAD".into(),
        },
    ] {
        let snapshot = source::read(&source).unwrap();
        assert!(
            snapshot.files.iter().all(|f| !f.path.contains(".metalform")
                && !f.path.starts_with('.')
                && f.path.ends_with("ml")),
            "{source:?}"
        );
        assert_eq!(snapshot.files.len(), 10);
    }
}

#[test]
fn a_fleet_deleted_from_the_work_tree_can_still_be_read_at_an_older_revision() {
    let (repo, commit) = repo_with_fleet_in_subdir();
    std::fs::remove_dir_all(repo.path().join("infra")).unwrap();
    let snapshot = source::read(&FleetSource::GitRevision {
        fleet: repo.path().join("infra/fleet"),
        rev: commit.clone(),
    })
    .unwrap();
    assert_eq!(snapshot.files.len(), 10);
}

#[test]
fn an_unknown_revision_is_a_clear_error_with_a_hint() {
    let (repo, _) = repo_with_fleet_in_subdir();
    let output = metalform(
        repo.path(),
        &[
            "validate",
            "--fleet",
            "infra/fleet",
            "--rev",
            "release-2031",
        ],
    );
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    let canonical = repo.path().canonicalize().unwrap();
    assert_eq!(
        err,
        format!(
            "error: unknown revision `release-2031` in the repository at `{}`\nhint: use a commit id, branch or tag that exists (see `git log --oneline`); fetch remote branches first (`git fetch origin`)\n",
            canonical.display()
        )
    );
    assert_eq!(stdout(&output), "");
}

#[test]
fn a_fleet_path_missing_at_the_revision_is_reported() {
    let (repo, _) = repo_with_fleet_in_subdir();
    let output = metalform(
        repo.path(),
        &["validate", "--fleet", "infra/fleet", "--rev", "HEAD~1"],
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output)
            .starts_with("error: `infra/fleet` does not exist in revision `HEAD~1`\nhint: "),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_revision_outside_any_repository_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("fleet")).unwrap();
    let err = source::read(&FleetSource::GitRevision {
        fleet: dir.path().join("fleet"),
        rev: "HEAD".into(),
    })
    .unwrap_err();
    assert!(
        matches!(err, SourceError::NotInRepository { .. }),
        "{err:?}"
    );
    assert!(err.hint().unwrap().contains("without --rev"));
}
