//! Hostile fleets (issue 16 point 3, docs/security.md "Hostile fleets"): a fleet directory or
//! git tree is input from whoever can commit to it. Each test is named after the attack; each
//! runs the real binary under a watchdog, so an attack that hangs (a FIFO) or exhausts memory
//! (a link to /dev/zero) fails the test instead of stalling the suite.

use crate::manifest_support;

use std::io::Read as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use manifest_support::{GitRepo, repo_root};

/// What a watched run ended with.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Run metalform in `cwd` with `env`; killed (and the test failed) after 30 s.
fn run(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_metalform"))
        .args(args)
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .env_remove("METALFORM_STATE")
        .env_remove("METALFORM_MAX_FILE_SIZE")
        .env_remove("METALFORM_MAX_FLEET_SIZE")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the metalform binary runs");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("metalform {args:?} still ran after 30 s: the read hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .ok();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .ok();
    Run {
        code: status.code(),
        stdout,
        stderr,
    }
}

/// A copy of the sample fleet in a temporary directory.
fn sample_fleet() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy(&repo_root().join("fleet"), dir.path());
    dir
}

fn copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            copy(&entry.path(), &to.join(entry.file_name()));
        } else {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

fn validate(fleet: &Path) -> Run {
    run(fleet, &["validate", "--fleet", "."], &[])
}

#[test]
fn symlink_to_dev_zero_is_refused_by_name_before_reading() {
    let fleet = sample_fleet();
    std::os::unix::fs::symlink("/dev/zero", fleet.path().join("nodes/zero.yaml")).unwrap();
    let out = validate(fleet.path());
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "error: `nodes/zero.yaml`: a symbolic link to `/dev/zero`, outside the fleet directory; not read"
        ),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("hint: manifests are regular files"));
}

#[test]
fn fifo_in_the_fleet_is_refused_without_blocking() {
    let fleet = sample_fleet();
    let fifo = fleet.path().join("nodes/pipe.yaml");
    let status = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success());
    let out = validate(fleet.path());
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("`nodes/pipe.yaml`: a FIFO (named pipe), not a regular file; not read"),
        "{}",
        out.stderr
    );
    // A link to a FIFO inside the fleet is no way round it.
    std::fs::rename(&fifo, fleet.path().join("pipe")).unwrap();
    std::os::unix::fs::symlink("../pipe", &fifo).unwrap();
    let out = validate(fleet.path());
    assert!(
        out.stderr
            .contains("a FIFO (named pipe), not a regular file"),
        "{}",
        out.stderr
    );
}

#[test]
fn symlink_out_of_the_fleet_is_refused_and_one_inside_is_followed() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.yaml"), "not: yours\n").unwrap();
    let fleet = sample_fleet();
    std::os::unix::fs::symlink(
        outside.path().join("secret.yaml"),
        fleet.path().join("nodes/x.yaml"),
    )
    .unwrap();
    let out = validate(fleet.path());
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("`nodes/x.yaml`: a symbolic link to `")
            && out
                .stderr
                .contains("secret.yaml`, outside the fleet directory"),
        "{}",
        out.stderr
    );
    // A directory linked from outside is refused too: the fleet would walk it.
    std::fs::remove_file(fleet.path().join("nodes/x.yaml")).unwrap();
    std::os::unix::fs::symlink(outside.path(), fleet.path().join("more")).unwrap();
    let out = validate(fleet.path());
    assert!(
        out.stderr.contains("`more`: a symbolic link to `"),
        "{}",
        out.stderr
    );
    // A README linked from elsewhere is never looked at; a link inside the fleet is followed.
    std::fs::remove_file(fleet.path().join("more")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", fleet.path().join("README.md")).unwrap();
    let moved = fleet.path().join("nodes/dc1/rack-c07.yaml");
    let kept = fleet.path().join("kept-rack.yml.txt");
    std::fs::rename(&moved, &kept).unwrap();
    std::os::unix::fs::symlink("../../kept-rack.yml.txt", &moved).unwrap();
    let out = validate(fleet.path());
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
}

#[test]
fn oversized_manifest_is_refused_before_it_is_read() {
    let fleet = sample_fleet();
    // 50 MB of YAML used to take ~2 GiB and 10 s: now the size alone refuses it.
    let file = std::fs::File::create(fleet.path().join("nodes/huge.yaml")).unwrap();
    file.set_len(50 << 20).unwrap();
    let out = validate(fleet.path());
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains(
            "error: `nodes/huge.yaml` is 50 MiB, more than the 4 MiB a manifest file may be; not read"
        ),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("METALFORM_MAX_FILE_SIZE"));
    // The limits are configurable, both ways.
    std::fs::remove_file(fleet.path().join("nodes/huge.yaml")).unwrap();
    let out = run(
        fleet.path(),
        &["validate", "--fleet", "."],
        &[("METALFORM_MAX_FILE_SIZE", "1KiB")],
    );
    assert!(
        out.stderr
            .contains("more than the 1 KiB a manifest file may be"),
        "{}",
        out.stderr
    );
    let out = run(
        fleet.path(),
        &["validate", "--fleet", "."],
        &[("METALFORM_MAX_FLEET_SIZE", "2KiB")],
    );
    assert!(
        out.stderr
            .contains("the fleet's manifests add up to more than 2 KiB at `"),
        "{}",
        out.stderr
    );
    let out = run(
        fleet.path(),
        &["validate", "--fleet", "."],
        &[("METALFORM_MAX_FILE_SIZE", "lots")],
    );
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr
            .contains("METALFORM_MAX_FILE_SIZE=`lots` is not a size"),
        "{}",
        out.stderr
    );
}

#[test]
fn sequence_nested_50000_deep_is_an_error_in_validate_plan_and_diff() {
    let mut repo = GitRepo::new();
    repo.copy_dir(&repo_root().join("fleet"), "fleet");
    let base = repo.commit("fleet");
    repo.write("fleet/nodes/deep.yaml", &("- ".repeat(50_000) + "x\n"));
    repo.commit("deep");
    let expected = "fleet/nodes/deep.yaml:1:";
    let out = run(repo.path(), &["validate", "--fleet", "fleet"], &[]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stdout.contains(expected)
            && out.stdout.contains("collections nested more than 64 deep"),
        "{}",
        out.stdout
    );
    let out = run(
        repo.path(),
        &[
            "plan",
            "--fleet",
            "fleet",
            "--secrets",
            "file:///nonexistent",
        ],
        &[],
    );
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("collections nested more than 64 deep"),
        "{}",
        out.stderr
    );
    let out = run(
        repo.path(),
        &[
            "diff", "--fleet", "fleet", "--base", &base, "--head", "HEAD",
        ],
        &[],
    );
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("collections nested more than 64 deep"),
        "{}{}",
        out.stdout,
        out.stderr
    );
}

#[test]
fn symlink_committed_to_git_is_not_followed_at_a_revision() {
    let mut repo = GitRepo::new();
    repo.copy_dir(&repo_root().join("fleet"), "fleet");
    std::os::unix::fs::symlink("/dev/zero", repo.path().join("fleet/nodes/zero.yaml")).unwrap();
    repo.commit("a link");
    let out = run(
        repo.path(),
        &["validate", "--fleet", "fleet", "--rev", "HEAD"],
        &[],
    );
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "`fleet/nodes/zero.yaml`: a symbolic link in the git tree (links are not followed in a revision); not read"
        ),
        "{}",
        out.stderr
    );
    // The blob size is checked before the blob is loaded.
    std::fs::remove_file(repo.path().join("fleet/nodes/zero.yaml")).unwrap();
    repo.write("fleet/nodes/big.yaml", &"#".repeat(3 << 10));
    repo.commit("big");
    let out = run(
        repo.path(),
        &["validate", "--fleet", "fleet", "--rev", "HEAD"],
        &[("METALFORM_MAX_FILE_SIZE", "2KiB")],
    );
    assert!(
        out.stderr.contains(
            "`fleet/nodes/big.yaml` is 3 KiB, more than the 2 KiB a manifest file may be"
        ),
        "{}",
        out.stderr
    );
}
