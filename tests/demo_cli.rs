//! `metalform demo`: the README's first command runs the whole slice on embedded defaults and
//! every node of the sample fleet that should be in service ends active.

use std::process::Command;

#[test]
fn demo_onboards_the_sample_fleet_end_to_end() {
    let out = Command::new(env!("CARGO_BIN_EXE_metalform"))
        .arg("demo")
        .env("NO_COLOR", "1")
        .env_remove("METALFORM_STATE")
        .env_remove("METALFORM_SECRETS")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("1. validate: 2 sites, 2 profiles, 39 nodes: valid"),
        "{stdout}"
    );
    assert!(stdout.contains("only discoverable by PXE"), "{stdout}");
    assert!(
        stdout.contains("Plan: 38 to apply, 1 unchanged, 0 blocked."),
        "{stdout}"
    );
    assert!(
        stdout.contains("Apply: 38 converged, 0 failed, 0 not run."),
        "{stdout}"
    );
    // The status table: every node in service is active; the retired one was left alone.
    let active = stdout
        .lines()
        .filter(|l| l.split_whitespace().nth(2) == Some("active"))
        .count();
    assert_eq!(active, 38, "{stdout}");
    assert!(stdout.contains("c07u45    - (retired)"), "{stdout}");
    // Progress went to stderr: a line per stage transition, and the discovered machines.
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("create_or_find_in_maas") && l.contains("by power address")),
        "{stderr}"
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("dc1/c07u46") && l.contains("created")),
        "{stderr}"
    );
    // The work directory is gone.
    let workdir = stdout
        .lines()
        .find_map(|l| l.strip_prefix("workdir "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap();
    assert!(!std::path::Path::new(workdir).exists());
}
