//! The agent's state directory (default `/var/lib/metalform-agent`, 0700): its credentials
//! (`credentials.json`, 0600 — the agent token is shown once, at enrollment), one journal per
//! task it took (`tasks/<id>.json`: the changes made, the result, whether the control plane
//! has it), and a lock (`agent.lock`) that keeps a second agent off the same state — two agents
//! of one node would run two tasks at once.
//!
//! Every write goes to a temporary file first, then is synced and renamed: a crash leaves the
//! old file or the new one, never half of one.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::agent::tasks::ResultBody;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("the state directory {dir}: {message}")]
    Dir { dir: PathBuf, message: String },
    #[error(
        "another agent runs with the state directory {dir}: two agents of one node would run two tasks at once"
    )]
    Locked { dir: PathBuf },
    #[error("{path} is damaged: {message}")]
    Damaged { path: PathBuf, message: String },
}

/// What enrollment gave this agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    pub node_id: Uuid,
    pub agent_token: String,
    pub tasks_url: String,
    pub enroll_url: String,
    pub heartbeat_interval_seconds: u64,
    /// When, by this host's clock (for people).
    pub enrolled_at: String,
}

/// One task as this agent saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Journal {
    pub task_id: Uuid,
    pub task_type: String,
    /// How many times it was handed to this agent.
    pub dispatches: u32,
    /// The changes already made (command lines), in order.
    pub steps_done: Vec<String>,
    /// The result, once the task ran to its end.
    pub result: Option<ResultBody>,
    /// What became of the report: `stored`, `lease_lost` (dropped), `gone` (the task no
    /// longer exists); `None` while it is still to be sent.
    pub reported: Option<String>,
    /// Changes to make once the result is stored (`node.uninstall`): program and arguments.
    #[serde(default)]
    pub after_report: Vec<Vec<String>>,
}

impl Journal {
    pub fn new(task_id: Uuid, task_type: &str) -> Journal {
        Journal {
            task_id,
            task_type: task_type.to_owned(),
            dispatches: 0,
            steps_done: Vec::new(),
            result: None,
            reported: None,
            after_report: Vec::new(),
        }
    }
}

/// The locked state directory.
#[derive(Debug)]
pub struct StateDir {
    dir: PathBuf,
    _lock: File,
}

/// Journals kept (newest by modification time).
const KEEP_JOURNALS: usize = 64;

impl StateDir {
    /// Open (making it, 0700) and lock `dir`.
    pub fn open(dir: &Path) -> Result<StateDir, StateError> {
        let err = |message: String| StateError::Dir {
            dir: dir.to_owned(),
            message,
        };
        std::fs::create_dir_all(dir.join("tasks")).map_err(|e| err(e.to_string()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| err(e.to_string()))?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(dir.join("agent.lock"))
            .map_err(|e| err(e.to_string()))?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(StateError::Locked {
                dir: dir.to_owned(),
            });
        }
        Ok(StateDir {
            dir: dir.to_owned(),
            _lock: lock,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn credentials_path(&self) -> PathBuf {
        self.dir.join("credentials.json")
    }

    pub fn credentials(&self) -> Result<Option<Credentials>, StateError> {
        read_json(&self.credentials_path())
    }

    pub fn save_credentials(&self, credentials: &Credentials) -> Result<(), StateError> {
        write_json(&self.credentials_path(), credentials)
    }

    /// Forget the credentials (an explicit re-enrollment).
    pub fn forget_credentials(&self) -> Result<bool, StateError> {
        match std::fs::remove_file(self.credentials_path()) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(StateError::Dir {
                dir: self.dir.clone(),
                message: e.to_string(),
            }),
        }
    }

    fn journal_path(&self, task: Uuid) -> PathBuf {
        self.dir.join("tasks").join(format!("{task}.json"))
    }

    pub fn journal(&self, task: Uuid) -> Result<Option<Journal>, StateError> {
        read_json(&self.journal_path(task))
    }

    pub fn save_journal(&self, journal: &Journal) -> Result<(), StateError> {
        write_json(&self.journal_path(journal.task_id), journal)
    }

    /// A writer of this directory's journals for the thread a task runs on.
    pub fn journal_writer(&self) -> JournalWriter {
        JournalWriter {
            dir: self.dir.join("tasks"),
        }
    }

    /// Journals with a result the control plane does not have yet (a crash or an outage
    /// between the end of a task and its report), oldest first.
    pub fn unreported(&self) -> Result<Vec<Journal>, StateError> {
        let mut found: Vec<(std::time::SystemTime, Journal)> = Vec::new();
        for (modified, path) in self.journal_files() {
            if let Some(journal) = read_json::<Journal>(&path)?
                && journal.result.is_some()
                && journal.reported.is_none()
            {
                found.push((modified, journal));
            }
        }
        found.sort_by_key(|(modified, _)| *modified);
        Ok(found.into_iter().map(|(_, j)| j).collect())
    }

    /// Keep the newest journals only.
    pub fn prune(&self) {
        let mut files = self.journal_files();
        files.sort_by_key(|(modified, _)| std::cmp::Reverse(*modified));
        for (_, path) in files.into_iter().skip(KEEP_JOURNALS) {
            let _ = std::fs::remove_file(path);
        }
    }

    fn journal_files(&self) -> Vec<(std::time::SystemTime, PathBuf)> {
        let Ok(entries) = std::fs::read_dir(self.dir.join("tasks")) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
            .collect()
    }
}

/// Writes task journals (the task's thread holds one while the state directory stays with
/// the agent's loop).
#[derive(Debug, Clone)]
pub struct JournalWriter {
    dir: PathBuf,
}

impl JournalWriter {
    pub fn save(&self, journal: &Journal) {
        let path = self.dir.join(format!("{}.json", journal.task_id));
        if let Err(err) = write_json(&path, journal) {
            tracing::error!(task = %journal.task_id, error = %err, "task journal not written");
        }
    }
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>, StateError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StateError::Damaged {
                path: path.to_owned(),
                message: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StateError::Damaged {
            path: path.to_owned(),
            message: e.to_string(),
        }),
    }
}

/// Write `value` to `path` (0600) through a synced temporary file and a rename.
fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), StateError> {
    let err = |message: String| StateError::Dir {
        dir: path.parent().unwrap_or(Path::new("/")).to_owned(),
        message: format!("writing {}: {message}", path.display()),
    };
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| err(e.to_string()))?;
    let tmp = path.with_extension("json.tmp");
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| err(e.to_string()))?;
    file.write_all(&bytes).map_err(|e| err(e.to_string()))?;
    file.sync_all().map_err(|e| err(e.to_string()))?;
    std::fs::rename(&tmp, path).map_err(|e| err(e.to_string()))?;
    if let Some(parent) = path.parent()
        && let Ok(dir) = File::open(parent)
    {
        let _ = dir.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_owner_only_and_a_second_agent_is_locked_out() {
        let dir = tempfile::tempdir().unwrap();
        let state_dir = dir.path().join("state");
        let state = StateDir::open(&state_dir).unwrap();
        let credentials = Credentials {
            node_id: Uuid::from_u128(7),
            agent_token: "secret-token".into(),
            tasks_url: "https://x/agent/v1/nodes/7/tasks".into(),
            enroll_url: "https://x/agent/v1/enroll".into(),
            heartbeat_interval_seconds: 30,
            enrolled_at: "2026-03-01T08:00:00Z".into(),
        };
        state.save_credentials(&credentials).unwrap();
        assert_eq!(state.credentials().unwrap(), Some(credentials));
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&state_dir.join("credentials.json")), 0o600);
        assert_eq!(mode(&state_dir), 0o700);
        assert!(matches!(
            StateDir::open(&state_dir),
            Err(StateError::Locked { .. })
        ));
        drop(state);
        // Another test of this process forking a child at this moment shares the locked
        // descriptor until the child's exec closes it: the lock is free once that is done.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let again = loop {
            match StateDir::open(&state_dir) {
                Err(StateError::Locked { .. }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                other => break other.unwrap(),
            }
        };
        assert!(again.forget_credentials().unwrap());
        assert_eq!(again.credentials().unwrap(), None);
    }

    #[test]
    fn journals_with_an_unsent_result_are_found_again() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        let mut done = Journal::new(Uuid::from_u128(1), "node.drain");
        done.result = Some(ResultBody {
            status: crate::agent::tasks::ResultStatus::Succeeded,
            message: Some("ok".into()),
            details: serde_json::json!({}),
        });
        state.save_journal(&done).unwrap();
        let mut sent = done.clone();
        sent.task_id = Uuid::from_u128(2);
        sent.reported = Some("stored".into());
        state.save_journal(&sent).unwrap();
        state
            .save_journal(&Journal::new(Uuid::from_u128(3), "node.gpu_scrub"))
            .unwrap();
        assert_eq!(state.unreported().unwrap(), vec![done]);
    }
}
