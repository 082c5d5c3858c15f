//! Every bad manifest in examples/invalid/ fails validation with exactly the diagnostics pinned
//! next to it (`<case>.expected`: the `FILE:LINE:COL: error: ...` lines), exit code 1.

use crate::manifest_support;

use manifest_support::{metalform, repo_root, stdout};

#[test]
fn every_invalid_example_reports_its_pinned_diagnostics() {
    let dir = repo_root().join("examples/invalid");
    let mut cases: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml") || name.ends_with(".toml"))
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 40,
        "at least 40 invalid examples, found {}",
        cases.len()
    );

    let mut failures = Vec::new();
    for case in &cases {
        let stem = case.rsplit_once('.').unwrap().0;
        let expected_path = dir.join(format!("{stem}.expected"));
        let expected = std::fs::read_to_string(&expected_path)
            .unwrap_or_else(|_| panic!("{case} has no {stem}.expected"));
        let expected: Vec<&str> = expected.lines().collect();
        assert!(
            !expected.is_empty(),
            "{stem}.expected pins at least one error"
        );

        let output = metalform(
            &repo_root(),
            &["validate", "--fleet", &format!("examples/invalid/{case}")],
        );
        let out = stdout(&output);
        let errors: Vec<&str> = out.lines().filter(|l| l.contains(": error: ")).collect();
        if output.status.code() != Some(1) || errors != expected {
            failures.push(format!(
                "{case}: exit {:?}\n  expected:\n    {}\n  got:\n    {}",
                output.status.code(),
                expected.join("\n    "),
                errors.join("\n    ")
            ));
        }
    }
    // Every expectation belongs to a case.
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".expected") {
            assert!(
                cases.iter().any(|c| c.rsplit_once('.').unwrap().0 == stem),
                "{name} has no case file"
            );
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn one_file_with_three_different_errors_reports_all_three() {
    let output = metalform(
        &repo_root(),
        &["validate", "--fleet", "examples/invalid/three-errors.yaml"],
    );
    let out = stdout(&output);
    let errors: Vec<&str> = out.lines().filter(|l| l.contains(": error: ")).collect();
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(errors.len(), 3, "{out}");
    assert!(errors[0].contains("unknown field `protect`"));
    assert!(errors[1].contains("`10.1.0.256` is not an IPv4 address"));
    assert!(errors[2].contains("retiredReason is missing"));
    assert!(
        out.contains("invalid — 3 errors, 0 warnings in 1 file"),
        "{out}"
    );
}

#[test]
fn inline_secrets_are_never_echoed() {
    for (case, secret) in [
        (
            "inline-secret-api-key.yaml",
            "Xq3vKc9Zt:7mWpYd2Lr:Hs8Jf4Nb6",
        ),
        (
            "inline-secret-password.toml",
            "correct-horse-battery-staple",
        ),
        ("secret-value-field.yaml", "s3cr3t-Pa55"),
    ] {
        let text =
            std::fs::read_to_string(repo_root().join("examples/invalid").join(case)).unwrap();
        assert!(text.contains(secret), "the case holds the secret it tests");
        for format in ["text", "json"] {
            let output = metalform(
                &repo_root(),
                &[
                    "validate",
                    "--fleet",
                    &format!("examples/invalid/{case}"),
                    "--format",
                    format,
                ],
            );
            assert_eq!(output.status.code(), Some(1));
            let all = format!("{}{}", stdout(&output), manifest_support::stderr(&output));
            assert!(
                !all.contains(secret),
                "{case} ({format}) printed the secret:\n{all}"
            );
        }
    }
}
