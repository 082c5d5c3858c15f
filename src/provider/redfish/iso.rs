//! The per-job task ISO (seed 003 "Worker Orchestration Flow" step 2, "Task ISO Lifecycle",
//! 023): a small ISO 9660 image holding recipe.json, recipe.schema.json, user-data and the
//! recipe's assets, built with `xorriso` (DESIGN.md §9).
//!
//! The image is byte-identical for the same inputs: recipe.json is written with sorted keys,
//! every file and volume date is fixed (`--modification-date`, `--set_all_file_dates`; the
//! environment's SOURCE_DATE_EPOCH alone is not enough), the preparer is fixed, Rock Ridge
//! ownership is normalised (`-r`) and xorriso orders directory entries by name. A failing
//! `xorriso` is a terminal error carrying its stderr, for the job's events.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::Value as Json;
use sha2::{Digest, Sha256};

use super::recipe::RecipeVersion;

/// The ISO volume label; the maintenance OS finds the task medium by it.
pub const VOLUME_LABEL: &str = "MFTASK";

/// Every date in the image: 2020-01-01 00:00:00.00 UTC (`YYYYMMDDhhmmsscc`).
pub const FIXED_DATE: &str = "2020010100000000";

/// What goes on a task ISO: file paths relative to the image root, sorted, with contents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskIsoContents {
    files: BTreeMap<String, Vec<u8>>,
}

/// Why a task ISO could not be built.
#[derive(Debug, thiserror::Error)]
pub enum IsoError {
    /// `xorriso` ran and failed: its exit status and standard error, verbatim (trimmed).
    #[error("xorriso failed ({status}): {stderr}")]
    ToolFailed { status: String, stderr: String },
    /// The builder program is not installed where it was configured.
    #[error("cannot run `{program}`: {message}")]
    ToolMissing { program: String, message: String },
    #[error("xorriso did not finish within {0:?}")]
    Timeout(Duration),
    /// The recipe's payload cannot be placed on the image (bad base64, unsafe file name).
    #[error("{0}")]
    Contents(String),
    #[error("{action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

impl IsoError {
    /// Retrying the same build cannot help: the job fails (seed 003 "terminal on build tool
    /// errors"). A timeout or an I/O error (disk full) may pass.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            IsoError::ToolFailed { .. } | IsoError::ToolMissing { .. } | IsoError::Contents(_)
        )
    }

    pub fn hint(&self) -> &'static str {
        match self {
            IsoError::ToolMissing { .. } => {
                "install xorriso (Debian package `xorriso`) or point the controller at it"
            }
            IsoError::ToolFailed { .. } => "the job's events carry xorriso's own message",
            IsoError::Timeout(_) => "the host is overloaded or the task directory's disk is slow",
            IsoError::Contents(_) => "fix the recipe: its user_data and assets must be base64",
            IsoError::Io { .. } => "check free space and permissions of the task ISO directory",
        }
    }
}

impl TaskIsoContents {
    /// recipe.json (keys sorted, so equal recipes give equal bytes), recipe.schema.json (the
    /// schema of the recipe's version), user-data (decoded `user_data`) and `assets/NAME` for
    /// each of the recipe's assets.
    pub fn from_recipe(recipe: &Json, version: &RecipeVersion) -> Result<Self, IsoError> {
        let mut contents = TaskIsoContents::default();
        let mut canonical = serde_json::to_vec_pretty(&sorted(recipe))
            .map_err(|e| IsoError::Contents(format!("recipe is not serialisable: {e}")))?;
        canonical.push(b'\n');
        contents.insert("recipe.json", canonical)?;
        contents.insert(
            "recipe.schema.json",
            version.schema_text.as_bytes().to_vec(),
        )?;
        if let Some(user_data) = recipe.get("user_data").and_then(Json::as_str) {
            contents.insert("user-data", decode("user_data", user_data)?)?;
        }
        if let Some(assets) = recipe.get("assets").and_then(Json::as_object) {
            for (name, value) in assets {
                let text = value.as_str().ok_or_else(|| {
                    IsoError::Contents(format!("asset `{name}` is not a base64 string"))
                })?;
                contents.insert(&format!("assets/{name}"), decode(name, text)?)?;
            }
        }
        Ok(contents)
    }

    /// Adds (or replaces) one file. Paths are relative, `/`-separated, of plain names.
    pub fn insert(&mut self, path: &str, bytes: Vec<u8>) -> Result<(), IsoError> {
        let safe = !path.is_empty()
            && path.split('/').all(|part| {
                !part.is_empty()
                    && !part.starts_with('.')
                    && part.len() <= 64
                    && part
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
            });
        if !safe {
            return Err(IsoError::Contents(format!(
                "`{path}` is not a safe file name for the task ISO"
            )));
        }
        self.files.insert(path.to_owned(), bytes);
        Ok(())
    }

    /// The files, sorted by path.
    pub fn files(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.files.iter().map(|(p, b)| (p.as_str(), b.as_slice()))
    }

    pub fn get(&self, path: &str) -> Option<&[u8]> {
        self.files.get(path).map(Vec::as_slice)
    }

    /// Total payload bytes.
    pub fn payload_bytes(&self) -> usize {
        self.files.values().map(Vec::len).sum()
    }
}

fn decode(what: &str, text: &str) -> Result<Vec<u8>, IsoError> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| IsoError::Contents(format!("`{what}` is not valid base64: {e}")))
}

/// A copy of `value` with every object's keys in sorted order.
fn sorted(value: &Json) -> Json {
    match value {
        Json::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            Json::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), sorted(&map[k])))
                    .collect(),
            )
        }
        Json::Array(items) => Json::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// A built image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltIso {
    pub path: PathBuf,
    pub size: u64,
    /// Lower-case hex.
    pub sha256: String,
    /// Wall time of the build (for `iso_build_duration_seconds`).
    pub duration: Duration,
}

/// What writes the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsoTool {
    /// Debian's `xorriso` (the seed's preference: "shelling to xorriso").
    Xorriso,
    /// metalform's own ISO 9660 + Joliet writer (`super::iso9660`): no package needed.
    Builtin,
}

/// Builds task ISOs, with `xorriso` or the built-in writer.
#[derive(Debug, Clone)]
pub struct IsoBuilder {
    /// The program (default `xorriso` from `PATH`).
    pub program: PathBuf,
    /// Upper bound of one build.
    pub timeout: Duration,
    pub tool: IsoTool,
}

impl Default for IsoBuilder {
    fn default() -> Self {
        Self {
            program: PathBuf::from("xorriso"),
            timeout: Duration::from_secs(60),
            tool: IsoTool::Xorriso,
        }
    }
}

impl IsoBuilder {
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            ..Self::default()
        }
    }

    /// The built-in writer: same contents, no external program.
    pub fn builtin() -> Self {
        Self {
            tool: IsoTool::Builtin,
            ..Self::default()
        }
    }

    /// The arguments of one build of `staging` into `output` (DESIGN.md §9).
    ///
    /// `-pacifier interval=0.1`: xorriso checks whether its writer finished only once per
    /// pacifier interval (1 s by default), so about one build in ten took a second for ~10 ms
    /// of work; at 0.1 s the slowest of 40 took 150 ms. The image bytes do not change.
    pub fn args(staging: &Path, output: &Path) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = [
            "-pacifier",
            "interval=0.1",
            "-as",
            "mkisofs",
            "-quiet",
            "-o",
        ]
        .iter()
        .map(Into::into)
        .collect();
        args.push(output.into());
        for arg in [
            "-V",
            VOLUME_LABEL,
            "-J",
            "-r",
            &format!("--modification-date={FIXED_DATE}"),
            "--set_all_file_dates",
            FIXED_DATE,
            "-preparer",
            "metalform",
            "-publisher",
            "metalform",
        ] {
            args.push(arg.into());
        }
        args.push(staging.into());
        args
    }

    /// Builds `contents` into `output` (written to a temporary name beside it, then renamed,
    /// so a reader never sees half an image) and reports its size and sha256.
    ///
    /// The whole build — staging files, xorriso, hashing, the rename — is one blocking task:
    /// with hundreds of jobs on a busy runtime, every `await` between those steps waited its
    /// turn among the other jobs' work, which stretched a ~110 ms build to a second in the tail.
    pub async fn build(
        &self,
        contents: &TaskIsoContents,
        output: &Path,
    ) -> Result<BuiltIso, IsoError> {
        let builder = self.clone();
        let contents = contents.clone();
        let output = output.to_path_buf();
        match tokio::task::spawn_blocking(move || builder.build_blocking(&contents, &output)).await
        {
            Ok(result) => result,
            Err(err) => std::panic::resume_unwind(err.into_panic()),
        }
    }

    fn build_blocking(
        &self,
        contents: &TaskIsoContents,
        output: &Path,
    ) -> Result<BuiltIso, IsoError> {
        let started = Instant::now();
        let parent = output.parent().unwrap_or(Path::new("."));
        let io = |action, path: &Path| {
            let path = path.to_path_buf();
            move |source| IsoError::Io {
                action,
                path,
                source,
            }
        };
        std::fs::create_dir_all(parent).map_err(io("cannot create", parent))?;
        let staging = tempfile::Builder::new()
            .prefix(".staging-")
            .tempdir_in(parent)
            .map_err(io("cannot create a staging directory in", parent))?;
        let partial = staging.path().join("task.iso");
        if self.tool == IsoTool::Builtin {
            let image = super::iso9660::write_image(contents.files(), VOLUME_LABEL, "metalform");
            std::fs::write(&partial, &image).map_err(io("cannot write", &partial))?;
            return finish(&partial, output, image, started);
        }
        // A root of its own: the staging directory's name never reaches the image.
        let root = staging.path().join("root");
        std::fs::create_dir_all(&root).map_err(io("cannot create", &root))?;
        for (path, bytes) in contents.files() {
            let file = root.join(path);
            if let Some(dir) = file.parent() {
                std::fs::create_dir_all(dir).map_err(io("cannot create", dir))?;
            }
            std::fs::write(&file, bytes).map_err(io("cannot write", &file))?;
        }
        // xorriso has been seen to crash (SIGSEGV) under load: a crash gets one more try; a
        // refusal (bad arguments, unreadable input) does not.
        let mut result = self.run(&root, &partial);
        if matches!(&result, Err(err) if is_crash(err)) {
            let _ = std::fs::remove_file(&partial);
            result = self.run(&root, &partial);
        }
        result?;
        let bytes = match std::fs::read(&partial) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Err(IsoError::ToolFailed {
                    status: "exit status: 0".into(),
                    stderr: "xorriso reported success but wrote no image".into(),
                });
            }
            Err(err) => return Err(io("cannot read", &partial)(err)),
        };
        finish(&partial, output, bytes, started)
    }
}

/// Move a written image to its place and report it.
fn finish(
    partial: &Path,
    output: &Path,
    bytes: Vec<u8>,
    started: Instant,
) -> Result<BuiltIso, IsoError> {
    let sha256 = hex::encode(Sha256::digest(&bytes));
    // A rename within one directory's filesystem: readers see no image or the whole one.
    std::fs::rename(partial, output).map_err(|source| IsoError::Io {
        action: "cannot move the image to",
        path: output.to_path_buf(),
        source,
    })?;
    Ok(BuiltIso {
        path: output.to_path_buf(),
        size: bytes.len() as u64,
        sha256,
        duration: started.elapsed(),
    })
}

impl IsoBuilder {
    /// One run of xorriso, killed when it outlives the timeout.
    fn run(&self, root: &Path, partial: &Path) -> Result<(), IsoError> {
        let mut child = std::process::Command::new(&self.program)
            .args(Self::args(root, partial))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|err| IsoError::ToolMissing {
                program: self.program.display().to_string(),
                message: err.to_string(),
            })?;
        // Its standard error is read beside the wait, so a chatty failure cannot fill the pipe.
        let mut stderr_pipe = child.stderr.take().expect("piped");
        let reader = std::thread::spawn(move || {
            let mut text = Vec::new();
            let _ = std::io::Read::read_to_end(&mut stderr_pipe, &mut text);
            text
        });
        let deadline = Instant::now() + self.timeout;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(IsoError::Timeout(self.timeout));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(2)),
                Err(err) => {
                    return Err(IsoError::ToolMissing {
                        program: self.program.display().to_string(),
                        message: err.to_string(),
                    });
                }
            }
        };
        let stderr = reader.join().unwrap_or_default();
        if status.success() {
            return Ok(());
        }
        Err(IsoError::ToolFailed {
            status: status.to_string(),
            stderr: tail(&String::from_utf8_lossy(&stderr), 4096),
        })
    }
}

/// xorriso died of a signal, or caught one and aborted (`UNIX-SIGNAL: SIGSEGV`).
fn is_crash(err: &IsoError) -> bool {
    match err {
        IsoError::ToolFailed { status, stderr } => {
            status.contains("signal") || stderr.contains("UNIX-SIGNAL")
        }
        _ => false,
    }
}

/// The last `max` bytes of `text` (on a character boundary), trimmed: a tool's last words.
fn tail(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::redfish::recipe;
    use serde_json::json;

    fn recipe() -> Json {
        json!({
            "target_disk": "/dev/sda",
            "task_target": "install-linux.target",
            "user_data": "I2Nsb3VkLWNvbmZpZwo=",
            "assets": {"unattend.xml": "PHhtbC8+"}
        })
    }

    #[test]
    fn contents_hold_the_recipe_schema_user_data_and_assets() {
        let version = recipe::validate(&recipe()).unwrap();
        let contents = TaskIsoContents::from_recipe(&recipe(), version).unwrap();
        let names: Vec<&str> = contents.files().map(|(p, _)| p).collect();
        assert_eq!(
            names,
            [
                "assets/unattend.xml",
                "recipe.json",
                "recipe.schema.json",
                "user-data"
            ]
        );
        assert_eq!(contents.get("user-data").unwrap(), b"#cloud-config\n");
        assert_eq!(contents.get("assets/unattend.xml").unwrap(), b"<xml/>");
        assert_eq!(
            contents.get("recipe.schema.json").unwrap(),
            version.schema_text.as_bytes()
        );
        // Keys sorted whatever order the request used.
        let text = String::from_utf8(contents.get("recipe.json").unwrap().to_vec()).unwrap();
        let order: Vec<usize> = ["assets", "target_disk", "task_target", "user_data"]
            .iter()
            .map(|k| text.find(&format!("\"{k}\"")).unwrap())
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{text}");
    }

    #[test]
    fn unsafe_names_and_bad_base64_are_refused() {
        let mut contents = TaskIsoContents::default();
        for bad in ["../etc/passwd", "/abs", "a//b", ".hidden", "sp ace", ""] {
            let err = contents.insert(bad, vec![]).unwrap_err();
            assert!(err.is_terminal(), "{bad}");
        }
        let mut r = recipe();
        r["user_data"] = json!("###");
        let version = recipe::current();
        let err = TaskIsoContents::from_recipe(&r, version).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("`user_data` is not valid base64"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_failing_tool_is_terminal_and_carries_its_stderr() {
        let dir = tempfile::tempdir().unwrap();
        // `false`-like program that writes to stderr: sh -c is not an ISO builder.
        let script = dir.path().join("fake-xorriso");
        std::fs::write(
            &script,
            "#!/bin/sh\necho 'libisofs: FAILURE : disk full' >&2\nexit 5\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let builder = IsoBuilder::new(&script);
        let out = dir.path().join("job/task.iso");
        let err = builder
            .build(&TaskIsoContents::default(), &out)
            .await
            .unwrap_err();
        assert!(err.is_terminal());
        match &err {
            IsoError::ToolFailed { status, stderr } => {
                assert_eq!(stderr, "libisofs: FAILURE : disk full");
                assert!(status.contains('5'), "{status}");
            }
            other => panic!("{other:?}"),
        }
        assert!(!out.exists(), "no half image left behind");
        let missing = IsoBuilder::new(dir.path().join("no-such-xorriso"));
        let err = missing
            .build(&TaskIsoContents::default(), &out)
            .await
            .unwrap_err();
        assert!(matches!(err, IsoError::ToolMissing { .. }), "{err:?}");
        assert!(err.is_terminal());
    }

    #[tokio::test]
    async fn a_crash_is_tried_once_more() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let count = dir.path().join("runs");
        let script = dir.path().join("crashing-xorriso");
        // Crashes on the first run, then writes an "image" to the path after -o.
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\necho x >> {runs}\nif [ $(wc -l < {runs}) -eq 1 ]; then echo 'UNIX-SIGNAL:  SIGSEGV  errno= 0' >&2; exit 1; fi\nwhile [ \"$1\" != -o ]; do shift; done\necho image > \"$2\"\n",
                runs = count.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let built = IsoBuilder::new(&script)
            .build(
                &TaskIsoContents::default(),
                &dir.path().join("job/task.iso"),
            )
            .await
            .unwrap();
        assert_eq!(built.size, 6);
        assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 2);
    }

    #[test]
    fn the_arguments_fix_every_date() {
        let args: Vec<String> = IsoBuilder::args(Path::new("/s"), Path::new("/o.iso"))
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        assert_eq!(
            args.join(" "),
            "-pacifier interval=0.1 -as mkisofs -quiet -o /o.iso -V MFTASK -J -r --modification-date=2020010100000000 --set_all_file_dates 2020010100000000 -preparer metalform -publisher metalform /s"
        );
        assert_eq!(tail("abcdef", 3), "…def");
    }
}
