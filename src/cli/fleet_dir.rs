//! `--fleet` must name a fleet (DESIGN.md §1 layout: sites/, profiles/, nodes/, or manifests
//! at its top level, or one manifest file). A directory that only holds fleets further down (a
//! repository root) or no manifest at all is refused with where the fleets are, instead of
//! validating every YAML file below it or calling an empty directory a valid, empty fleet.

use std::collections::BTreeSet;
use std::path::Path;

use super::CliError;
use crate::source::{FleetSource, Snapshot};

/// The directories a fleet keeps its manifests in.
const FLEET_DIRS: [&str; 3] = ["sites", "profiles", "nodes"];

/// Read the fleet's files and check they are a fleet's.
pub(super) fn read(fleet: &Path, rev: Option<&str>) -> Result<Snapshot, CliError> {
    let snapshot = super::validate::read_snapshot(&FleetSource::new(fleet, rev))?;
    check(&snapshot, fleet, rev)?;
    Ok(snapshot)
}

/// Read, check and validate the fleet.
pub(super) fn validate(
    fleet: &Path,
    rev: Option<&str>,
) -> Result<crate::manifest::Validation, CliError> {
    Ok(crate::manifest::load(&read(fleet, rev)?))
}

/// Refuse a snapshot that is not a fleet: no manifest at all, or manifests only below
/// directories that are not the fleet's own.
pub(super) fn check(snapshot: &Snapshot, fleet: &Path, rev: Option<&str>) -> Result<(), CliError> {
    let shown = match rev {
        Some(rev) => format!("`{}` at {rev}", fleet.display()),
        None => format!("`{}`", fleet.display()),
    };
    if snapshot.files.is_empty() {
        return Err(CliError::user(format!(
            "{shown} holds no manifest (.yaml, .yml or .toml): it is not a fleet"
        ))
        .hint("pass --fleet DIR pointing at a fleet repository: sites/, profiles/ and nodes/ with YAML or TOML manifests")
        .hint("to try metalform without one, run `metalform demo`"));
    }
    let own = snapshot.files.iter().any(|f| {
        f.path
            .split_once('/')
            .is_some_and(|(first, _)| FLEET_DIRS.contains(&first))
    });
    if own {
        return Ok(());
    }
    // Directories below that look like fleets: the part of a path before `/sites/` and so on.
    let below: BTreeSet<String> = snapshot
        .files
        .iter()
        .filter_map(|f| {
            FLEET_DIRS
                .iter()
                .filter_map(|dir| f.path.find(&format!("/{dir}/")))
                .min()
                .map(|at| f.path[..at].to_owned())
        })
        .collect();
    // A flat fleet keeps its manifests at the top; a directory whose top-level YAML sits beside
    // fleets (a repository root: Cargo.toml, openapi.yaml) is not one.
    let top_level = snapshot.files.iter().any(|f| !f.path.contains('/'));
    if top_level && below.is_empty() {
        return Ok(());
    }
    let mut error = CliError::user(format!(
        "{shown} is not a fleet: it has no sites/, profiles/ or nodes/ directory ({} YAML or TOML file(s) in it and below)",
        snapshot.files.len()
    ));
    let join = |dir: &str| {
        let base = fleet.display().to_string();
        if base == "." {
            dir.to_owned()
        } else {
            format!("{}/{dir}", base.trim_end_matches('/'))
        }
    };
    // Suggest the shallowest one.
    match below
        .iter()
        .min_by_key(|d| (d.matches('/').count(), d.len()))
    {
        Some(first) => {
            let listed: Vec<String> = below.iter().take(5).map(|d| join(d)).collect();
            error = error
                .hint(format!(
                    "fleets below it: {}{}",
                    listed.join(", "),
                    if below.len() > 5 { ", …" } else { "" }
                ))
                .hint(format!("pass --fleet {}", join(first)));
        }
        None => {
            error = error.hint("pass --fleet DIR pointing at a fleet repository: sites/, profiles/ and nodes/ with YAML or TOML manifests");
        }
    }
    Err(error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Revision;
    use crate::source::SourceFile;

    fn snapshot(paths: &[&str]) -> Snapshot {
        Snapshot {
            revision: Revision::WorkingTree {
                content_hash: "sha256:00".into(),
            },
            display_root: ".".into(),
            files: paths
                .iter()
                .map(|p| SourceFile {
                    path: (*p).into(),
                    bytes: Vec::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_fleet_has_its_own_manifests() {
        for paths in [
            &["sites/dc1.yaml", "nodes/dc1.yaml"][..],
            &["fleet.yaml"],
            &["profiles/gpu.toml", "README.yaml"],
            &["bad-name.yaml", "bool-quoted.yaml"],
        ] {
            assert!(
                check(&snapshot(paths), Path::new("."), None).is_ok(),
                "{paths:?}"
            );
        }
    }

    #[test]
    fn a_repository_root_names_the_fleets_below_it() {
        let err = check(
            &snapshot(&[
                "Cargo.toml",
                "examples/invalid/bad-name.yaml",
                "fleet/nodes/dc1.yaml",
                "fleet/sites/dc1.yaml",
                "tests/golden/plan/fleet/sites/dc1.yaml",
            ]),
            Path::new("."),
            None,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "error: `.` is not a fleet: it has no sites/, profiles/ or nodes/ directory (5 YAML or TOML file(s) in it and below)\n\
             hint: fleets below it: fleet, tests/golden/plan/fleet\n\
             hint: pass --fleet fleet"
        );
        let err = check(&snapshot(&[]), Path::new("/tmp/empty"), Some("main")).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("error: `/tmp/empty` at main holds no manifest"),
            "{err}"
        );
    }
}
