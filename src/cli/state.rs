//! Which state store a command works on (DESIGN.md §3 `--state`; docs/state-store.md):
//! `--state URL` or `METALFORM_STATE`, else a SQLite file per fleet in the XDG state directory
//! (`$XDG_STATE_HOME/metalform/fleets/<name>-<hash>/state.db`, by default under
//! `~/.local/state`), never inside the fleet's git tree. A store that an older metalform made in
//! the fleet's `.metalform/` is still used where it exists, with a note saying where to move it.
//!
//! Commands that only read (status, lists, observe, plan) never create a store: where none
//! exists yet they read an empty one that is thrown away, and say so.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::{CliError, GlobalArgs};
use crate::clock::SystemClock;
use crate::store::{Store, StoreLocation};

/// Whether the command writes to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Creates the store (and migrates it) when it does not exist yet.
    ReadWrite,
    /// Reads an existing store; where there is none, an empty one that is not kept.
    ReadOnly,
}

/// The XDG state directory of metalform: `$XDG_STATE_HOME/metalform` when that is an absolute
/// path, else `$HOME/.local/state/metalform`.
pub fn state_home() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|home| home.join(".local").join("state"))
        })?;
    Some(base.join("metalform"))
}

/// The store file of a fleet: one directory per fleet, named after the fleet directory and a
/// hash of its absolute path (two checkouts of one repository keep separate stores).
pub fn default_path(state_home: &Path, fleet_dir: &Path) -> PathBuf {
    let name: String = fleet_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "fleet".into())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let hash = hex::encode(Sha256::digest(fleet_dir.to_string_lossy().as_bytes()));
    state_home
        .join("fleets")
        .join(format!("{name}-{}", &hash[..12]))
        .join("state.db")
}

/// Where older metalform versions kept the store: inside the fleet directory.
pub fn legacy_path(fleet_dir: &Path) -> PathBuf {
    fleet_dir.join(".metalform").join("state.db")
}

/// The store URL a command uses, and the SQLite file behind it when there is one.
pub(super) fn resolve(
    global: &GlobalArgs,
    fleet: &Path,
) -> Result<(String, Option<PathBuf>), CliError> {
    if let Some(url) = &global.state {
        let file = match StoreLocation::parse(url) {
            Ok(StoreLocation::Sqlite(path)) => Some(path),
            _ => None,
        };
        return Ok((url.clone(), file));
    }
    let dir = fleet_root(fleet);
    if !dir.is_dir() {
        return Err(CliError::user(format!(
            "fleet directory `{}` does not exist",
            fleet.display()
        ))
        .hint("pass --fleet DIR (the fleet repository) or --state URL"));
    }
    let legacy = legacy_path(dir);
    if legacy.is_file() {
        let moved = state_home().map(|home| default_path(&home, &absolute(dir)));
        eprintln!(
            "note: using the state store inside the fleet directory ({}), where older metalform versions made it",
            legacy.display()
        );
        if let Some(moved) = moved {
            eprintln!(
                "note: new stores live outside the git tree; to move it: mkdir -p {} && mv {}* {}",
                moved
                    .parent()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                legacy.display(),
                moved
                    .parent()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
            );
        }
        return Ok((format!("sqlite://{}", legacy.display()), Some(legacy)));
    }
    let home = state_home().ok_or_else(|| {
        CliError::user("no directory for the state store: neither XDG_STATE_HOME nor HOME is set")
            .hint("set XDG_STATE_HOME (or HOME), or pass --state sqlite://PATH or postgres://…")
    })?;
    let path = default_path(&home, &absolute(dir));
    Ok((format!("sqlite://{}", path.display()), Some(path)))
}

/// The URL of a store that [`open`] would open as it is, found without a word on stderr:
/// `None` where it would say something (a legacy store, no store yet, an error), so that the
/// caller leaves that to `open`, in its order.
pub(super) fn existing_url(global: &GlobalArgs, fleet: &Path) -> Option<String> {
    if let Some(url) = &global.state {
        return match StoreLocation::parse(url) {
            Ok(StoreLocation::Sqlite(path)) => path.is_file().then(|| url.clone()),
            Ok(_) => Some(url.clone()),
            Err(_) => None,
        };
    }
    let dir = fleet_root(fleet);
    if !dir.is_dir() || legacy_path(dir).is_file() {
        return None;
    }
    let path = default_path(&state_home()?, &absolute(dir));
    path.is_file()
        .then(|| format!("sqlite://{}", path.display()))
}

/// The fleet's directory: a single manifest file's fleet is its directory.
fn fleet_root(fleet: &Path) -> &Path {
    if fleet.is_file() {
        fleet.parent().unwrap_or(Path::new("."))
    } else {
        fleet
    }
}

fn absolute(dir: &Path) -> PathBuf {
    std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf())
}

/// An open state store; for a read-only command without a store, the empty one's directory
/// (removed when this is dropped, after the store was closed).
pub struct Opened {
    pub store: Store,
    _scratch: Option<tempfile::TempDir>,
}

impl Opened {
    pub async fn close(self) {
        self.store.close().await;
    }
}

/// The state store of `fleet` (see the module doc).
pub async fn open(global: &GlobalArgs, fleet: &Path, access: Access) -> Result<Opened, CliError> {
    open_holding_leases(global, fleet, access, None).await
}

/// [`open`] for a command that holds leases of `lease_ttl` (an executor): no transaction of
/// its is left idle longer than a lease of its would last (`Store::open_for_replica`).
pub async fn open_holding_leases(
    global: &GlobalArgs,
    fleet: &Path,
    access: Access,
    lease_ttl: Option<std::time::Duration>,
) -> Result<Opened, CliError> {
    let (url, file) = resolve(global, fleet)?;
    if access == Access::ReadOnly
        && let Some(file) = file.filter(|f| !f.exists())
    {
        eprintln!(
            "note: no state store at {} yet (nothing was applied with it): reading an empty one",
            file.display()
        );
        let scratch = tempfile::tempdir()
            .map_err(|e| CliError::unexpected(format!("cannot make a temporary directory: {e}")))?;
        let url = format!("sqlite://{}", scratch.path().join("empty.db").display());
        let store = Store::open(&url, Arc::new(SystemClock))
            .await
            .map_err(super::world::store_error)?;
        return Ok(Opened {
            store,
            _scratch: Some(scratch),
        });
    }
    let store = match lease_ttl {
        Some(ttl) => Store::open_for_replica(&url, Arc::new(SystemClock), ttl).await,
        None => Store::open(&url, Arc::new(SystemClock)).await,
    }
    .map_err(super::world::store_error)?;
    Ok(Opened {
        store,
        _scratch: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_store_is_per_fleet_and_outside_it() {
        let home = Path::new("/home/ops/.local/state/metalform");
        let a = default_path(home, Path::new("/srv/fleets/prod fleet"));
        let b = default_path(home, Path::new("/tmp/prod fleet"));
        assert!(
            a.to_string_lossy()
                .starts_with("/home/ops/.local/state/metalform/fleets/prod_fleet-"),
            "{}",
            a.display()
        );
        assert!(a.ends_with("state.db"));
        assert_ne!(a, b, "two checkouts, two stores");
        assert_eq!(a, default_path(home, Path::new("/srv/fleets/prod fleet")));
    }
}
