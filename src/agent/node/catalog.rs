//! The task catalog (seed 000 §5.2–§5.6, §6.3, §9.1, §11; docs/agent.md "Tasks"): what each task
//! type of docs/agent-protocol.md does on a host, as real commands through one
//! [`TaskExecutor`] interface. The exact command lines are pinned by the tests below.
//!
//! Tenants are accounts with a uid in `[users] tenant_uid_min..=tenant_uid_max`, except the
//! `keep` list and the site's deploy user. What storage cleanup may touch is only what
//! `[storage]` and `[weka]` name: never the boot disk, never a mount it was not told about.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::exec::{Cmd, Report, TaskContext, TaskExecutor, TaskFailure};
use super::probe::{Account, Mount, Vendor, disk_of};
use crate::agent::TaskType;

/// Every task type this agent runs, one executor each.
pub fn catalog() -> Vec<Box<dyn TaskExecutor>> {
    vec![
        Box::new(HeartbeatCheck),
        Box::new(TerminalClose),
        Box::new(RevokeUsers),
        Box::new(Drain),
        Box::new(GpuScrub),
        Box::new(StorageCleanup),
        Box::new(ValidateClean),
        Box::new(HwSyncReseed),
        Box::new(Uninstall),
    ]
}

/// The tenant accounts of the host.
fn tenants(ctx: &TaskContext<'_>) -> Vec<Account> {
    let users = &ctx.config.users;
    ctx.host
        .accounts()
        .into_iter()
        .filter(|a| (users.tenant_uid_min..=users.tenant_uid_max).contains(&a.uid))
        .filter(|a| !users.keep.contains(&a.name))
        .filter(|a| ctx.identity.deploy_user.as_deref() != Some(a.name.as_str()))
        .collect()
}

fn is_tenant_uid(ctx: &TaskContext<'_>, uid: u32, kept: &BTreeSet<u32>) -> bool {
    let users = &ctx.config.users;
    (users.tenant_uid_min..=users.tenant_uid_max).contains(&uid) && !kept.contains(&uid)
}

/// Uids of accounts in the tenant range that are kept (the deploy user, `keep`).
fn kept_uids(ctx: &TaskContext<'_>) -> BTreeSet<u32> {
    let tenant: BTreeSet<u32> = tenants(ctx).iter().map(|a| a.uid).collect();
    ctx.host
        .accounts()
        .into_iter()
        .map(|a| a.uid)
        .filter(|uid| !tenant.contains(uid))
        .collect()
}

fn pids_of(ctx: &TaskContext<'_>, uid: u32) -> Vec<u32> {
    ctx.host
        .processes()
        .into_iter()
        .filter(|(_, u)| *u == uid)
        .map(|(pid, _)| pid)
        .collect()
}

fn bad_params(message: impl Into<String>) -> TaskFailure {
    TaskFailure::new("bad_params", message)
}

fn changed(ctx: &TaskContext<'_>) -> Value {
    json!(ctx.ran)
}

/// `node.heartbeat_check`: answer at once (seed 000 §6.3).
struct HeartbeatCheck;

impl TaskExecutor for HeartbeatCheck {
    fn task_type(&self) -> TaskType {
        TaskType::NodeHeartbeatCheck
    }

    fn run(&self, _: &Value, ctx: &mut TaskContext<'_>) -> Result<Report, TaskFailure> {
        Ok(Report::new(
            "the agent is alive",
            json!({"agent_version": env!("CARGO_PKG_VERSION"), "hostname": ctx.identity.hostname}),
        ))
    }
}

/// `terminal.close`: end the login sessions of tenant users (seed 000 §5.2 DrainNode).
struct TerminalClose;

impl TaskExecutor for TerminalClose {
    fn task_type(&self) -> TaskType {
        TaskType::TerminalClose
    }

    fn run(&self, _: &Value, ctx: &mut TaskContext<'_>) -> Result<Report, TaskFailure> {
        let tenants: BTreeSet<String> = tenants(ctx).into_iter().map(|a| a.name).collect();
        let listed = ctx.probe(Cmd::probe(
            &ctx.tool("loginctl"),
            &["list-sessions", "--no-legend"],
        ))?;
        if !listed.ok() {
            return Err(TaskFailure::new(
                "command_failed",
                format!("`loginctl list-sessions` failed: {}", listed.tail()),
            ));
        }
        let mut closed = Vec::new();
        for line in listed.stdout.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [session, _uid, user, ..] = fields.as_slice() else {
                continue;
            };
            if tenants.contains(*user) {
                ctx.change(Cmd::change(
                    &ctx.tool("loginctl"),
                    &["terminate-session", session],
                ))?;
                closed.push(json!({"session": session, "user": user}));
            }
        }
        let message = if closed.is_empty() {
            "no tenant sessions were open".to_owned()
        } else {
            format!("closed {} tenant session(s)", closed.len())
        };
        Ok(Report::new(
            message,
            json!({"closed": closed, "commands": changed(ctx)}),
        ))
    }
}

/// `allocation.revoke_user`: remove tenant accounts (seed 000 §5.2). Without `force`, an
/// account with running processes is locked and left for the forced revoke (its allocation is
/// live); with `force` its processes are killed first.
struct RevokeUsers;

impl TaskExecutor for RevokeUsers {
    fn task_type(&self) -> TaskType {
        TaskType::AllocationRevokeUser
    }

    fn run(&self, params: &Value, ctx: &mut TaskContext<'_>) -> Result<Report, TaskFailure> {
        let force = match params.get("force") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(force)) => *force,
            Some(other) => {
                return Err(bad_params(format!(
                    "`force` must be true or false, not {other}"
                )));
            }
        };
        let (mut removed, mut locked) = (Vec::new(), Vec::new());
        for account in tenants(ctx) {
            let pids = pids_of(ctx, account.uid);
            if !pids.is_empty() && !force {
                ctx.change(Cmd::change(
                    &ctx.tool("usermod"),
                    &["--lock", "--expiredate", "1", &account.name],
                ))?;
                locked.push(json!({"user": account.name, "processes": pids.len()}));
                continue;
            }
            if !pids.is_empty() {
                // 1: nothing matched (the processes ended on their own meanwhile).
                ctx.change_allowing(
                    Cmd::change(
                        &ctx.tool("pkill"),
                        &["--signal", "KILL", "--uid", &account.name],
                    ),
                    &[0, 1],
                )?;
            }
            ctx.change(Cmd::change(
                &ctx.tool("userdel"),
                &["--remove", &account.name],
            ))?;
            removed.push(account.name);
        }
        let message = match (removed.len(), locked.len()) {
            (0, 0) => "no tenant accounts on the host".to_owned(),
            (r, 0) => format!("removed {r} tenant account(s)"),
            (r, l) => format!(
                "removed {r} tenant account(s); locked {l} with running work (a forced revoke removes them)"
            ),
        };
        Ok(Report::new(
            message,
            json!({"removed": removed, "locked": locked, "force": force, "commands": changed(ctx)}),
        ))
    }
}

/// `node.drain`: stop taking work and wait for running work to stop (seed 000 §5.2–§5.4):
/// `kubectl drain` with a kubeconfig, `systemctl stop` for each workload unit.
struct Drain;

impl TaskExecutor for Drain {
    fn task_type(&self) -> TaskType {
        TaskType::NodeDrain
    }

    fn run(&self, _: &Value, ctx: &mut TaskContext<'_>) -> Result<Report, TaskFailure> {
        let drain = ctx.config.drain.clone();
        if drain.units.is_empty() && drain.kubeconfig.is_none() {
            return Ok(Report::new(
                "nothing to drain: no workload units and no kubeconfig are configured ([drain] in /etc/metalform/agent.toml)",
                json!({"configured": false}),
            ));
        }
        let timeout = drain.timeout.0;
        if let Some(kubeconfig) = &drain.kubeconfig {
            let node = drain
                .node_name
                .clone()
                .unwrap_or_else(|| ctx.identity.hostname.clone());
            ctx.change(Cmd::change(
                &ctx.tool("kubectl"),
                &[
                    "--kubeconfig",
                    &kubeconfig.display().to_string(),
                    "drain",
                    &node,
                    "--ignore-daemonsets",
                    "--delete-emptydir-data",
                    &format!("--timeout={}s", timeout.as_secs()),
                ],
            ))?;
        }
        for unit in &drain.units {
            ctx.change(Cmd::change(&ctx.tool("systemctl"), &["stop", unit]))?;
        }
        // Stopped means inactive (or failed): wait for every unit to get there.
        let deadline = Instant::now() + timeout;
        loop {
            let mut running = Vec::new();
            for unit in &drain.units {
                let state = ctx.probe(Cmd::probe(&ctx.tool("systemctl"), &["is-active", unit]))?;
                let state = state.stdout.trim().to_owned();
                if !matches!(state.as_str(), "inactive" | "failed" | "unknown" | "") {
                    running.push(format!("{unit} ({state})"));
                }
            }
            if running.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                return Err(TaskFailure::new(
                    "drain_timeout",
                    format!(
                        "work still running after {}: {}",
                        crate::model::duration::format(timeout),
                        running.join(", ")
                    ),
                )
                .with(json!({"running": running})));
            }
            std::thread::sleep(Duration::from_secs(2));
        }
        Ok(Report::new(
            format!(
                "drained: {} unit(s) stopped{}",
                drain.units.len(),
                if drain.kubeconfig.is_some() {
                    ", Kubernetes node drained"
                } else {
                    ""
                }
            ),
            json!({"units": drain.units, "kubernetes": drain.kubeconfig.is_some(), "commands": changed(ctx)}),
        ))
    }
}

/// The GPUs of one vendor as its tool numbers them.
fn gpu_indices(ctx: &mut TaskContext<'_>, vendor: Vendor) -> Result<Vec<String>, TaskFailure> {
    let (tool, args): (&str, &[&str]) = match vendor {
        Vendor::Nvidia => (
            "nvidia-smi",
            &["--query-gpu=index", "--format=csv,noheader"],
        ),
        Vendor::Amd => ("rocm-smi", &["--showid"]),
    };
    let out = ctx.probe(Cmd::probe(&ctx.tool(tool), args)).map_err(|e| {
        let mut failure = TaskFailure::from(e);
        if failure.code == "tool_missing" {
            failure.message = format!(
                "{} GPU(s) are present but {tool} is not installed: {}",
                vendor.name(),
                failure.message
            );
        }
        failure
    })?;
    if !out.ok() {
        return Err(TaskFailure::new(
            "command_failed",
            format!("`{tool}` could not list the GPUs: {}", out.tail()),
        ));
    }
    let mut indices: Vec<String> = match vendor {
        Vendor::Nvidia => out
            .stdout
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_digit()))
            .map(str::to_owned)
            .collect(),
        // `GPU[3]		: Device ID: 0x74a1`
        Vendor::Amd => out
            .stdout
            .lines()
            .filter_map(|l| l.trim().strip_prefix("GPU["))
            .filter_map(|l| l.split_once(']').map(|(i, _)| i.to_owned()))
            .filter(|i| !i.is_empty() && i.chars().all(|c| c.is_ascii_digit()))
            .collect(),
    };
    indices.dedup();
    Ok(indices)
}

/// `node.gpu_scrub`: reset every GPU's memory and state (seed 000 §5.2 ScrubGPU):
/// `nvidia-smi --gpu-reset -i N` or `rocm-smi --gpureset -d N` (the seed's `--resetgpu` is not
/// the tool's flag).
struct GpuScrub;

impl TaskExecutor for GpuScrub {
    fn task_type(&self) -> TaskType {
        TaskType::NodeGpuScrub
    }

    fn run(&self, _: &Value, ctx: &mut TaskContext<'_>) -> Result<Report, TaskFailure> {
        let gpus = ctx.host.pci_gpus();
        if gpus.is_empty() {
            let message = "no GPU present: no NVIDIA (0x10de) or AMD (0x1002) display or accelerator device on the PCI bus";
            if ctx.config.gpu.require {
                return Err(TaskFailure::new("no_gpu_present", message)
                    .with(json!({"gpus": 0, "hint": "a GPU may have fallen off the bus; set [gpu] require = false for hosts without GPUs"})));
            }
            return Ok(Report::new(message, json!({"gpus": 0})));
        }
        let vendors: BTreeSet<Vendor> = gpus.iter().map(|g| g.vendor).collect();
        let mut reset = Vec::new();
        for vendor in vendors {
            let on_bus = gpus.iter().filter(|g| g.vendor == vendor).count();
            let indices = gpu_indices(ctx, vendor)?;
            if indices.len() != on_bus {
                return Err(TaskFailure::new(
                    "gpu_missing",
                    format!(
                        "{on_bus} {} GPU(s) on the PCI bus but the driver lists {}: reset refused (check the driver)",
                        vendor.name(),
                        indices.len()
                    ),
                ));
            }
            for index in indices {
                match vendor {
                    Vendor::Nvidia => ctx.change(Cmd::change(
                        &ctx.tool("nvidia-smi"),
                        &["--gpu-reset", "-i", &index],
                    ))?,
                    Vendor::Amd => ctx.change(Cmd::change(
                        &ctx.tool("rocm-smi"),
                        &["--gpureset", "-d", &index],
                    ))?,
                };
                reset.push(json!({"vendor": vendor.name(), "index": index}));
            }
        }
        Ok(Report::new(
            format!("reset {} GPU(s)", reset.len()),
            json!({"gpus": reset, "commands": changed(ctx)}),
        ))
    }
}

/// Paths storage cleanup refuses whatever the configuration says.
const NEVER_CLEANED: &[&str] = &[
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/opt", "/proc", "/root",
    "/run", "/sbin", "/srv", "/sys", "/usr", "/var",
];

/// The disks the host boots from: those holding `/`, `/boot` and `/boot/efi`.
fn boot_disks(mounts: &[Mount]) -> BTreeSet<String> {
    ["/", "/boot", "/boot/efi"]
        .iter()
        .filter_map(|t| mounts.iter().rfind(|m| m.target == *t))
        .filter_map(|m| disk_of(&m.source))
        .collect()
}

/// Why `path` must not be cleaned, if it must not.
fn refusal(path: &Path, data_disk: bool, in_scope: &[&Path], mounts: &[Mount]) -> Option<String> {
    let shown = path.display();
    if NEVER_CLEANED.iter().any(|p| Path::new(p) == path) {
        return Some(format!(
            "refusing to clean {shown}: it is a system directory"
        ));
    }
    if data_disk {
        let Some(mount) = mounts.iter().rfind(|m| Path::new(&m.target) == path) else {
            return Some(format!(
                "refusing to clean {shown}: no disk is mounted there (cleaning would empty a directory of the root filesystem)"
            ));
        };
        if let Some(disk) = disk_of(&mount.source)
            && boot_disks(mounts).contains(&disk)
        {
            return Some(format!(
                "refusing to clean {shown}: {} is on the boot disk {disk}",
                mount.source
            ));
        }
    }
    // Mounts inside the path that are not themselves in scope (a tenant's NFS, a bind mount).
    if let Some(inside) = mounts.iter().find(|m| {
        let target = Path::new(&m.target);
        target != path && target.starts_with(path) && !in_scope.contains(&target)
    }) {
        return Some(format!(
            "refusing to clean {shown}: {} ({}) is mounted inside it and is not in the cleanup scope",
            inside.target, inside.fstype
        ));
    }
    None
}

/// `node.storage_cleanup` (seed 000 §5.2 CleanupStorage, §5.5, §11): `scope: local` empties the
/// configured scratch directories and data disks, `weka` unmounts the tenant's wekafs mounts
/// and removes its Weka client files, `all` does both.
struct StorageCleanup;

impl StorageCleanup {
    fn local(ctx: &mut TaskContext<'_>) -> Result<Value, TaskFailure> {
        let storage = ctx.config.storage.clone();
        let mounts = ctx.host.mounts();
        let in_scope = storage.scope();
        let targets: Vec<(&Path, bool)> = storage
            .scratch
            .iter()
            .map(|p| (p.as_path(), false))
            .chain(storage.data_disks.iter().map(|p| (p.as_path(), true)))
            .collect();
        // Every refusal before any deletion: a half-done cleanup helps nobody.
        let refused: Vec<String> = targets
            .iter()
            .filter_map(|(path, disk)| refusal(path, *disk, &in_scope, &mounts))
            .collect();
        if !refused.is_empty() {
            return Err(
                TaskFailure::new("refused", refused.join("; ")).with(json!({"refused": refused}))
            );
        }
        let mut cleaned = Vec::new();
        for (path, _) in targets {
            if !ctx.host.exists(&path.display().to_string()) {
                continue;
            }
            let shown = path.display().to_string();
            ctx.change(Cmd::change(
                &ctx.tool("find"),
                &[&shown, "-xdev", "-mindepth", "1", "-delete"],
            ))?;
            cleaned.push(shown);
        }
        Ok(json!(cleaned))
    }

    fn weka(ctx: &mut TaskContext<'_>) -> Result<Value, TaskFailure> {
        let weka = ctx.config.weka.clone();
        let mounts: Vec<Mount> = ctx
            .host
            .mounts()
            .into_iter()
            .filter(|m| m.fstype == "wekafs")
            .collect();
        let mut unmounted = Vec::new();
        // Deepest first: a mount inside another comes off before it.
        let mut targets: Vec<String> = mounts.iter().map(|m| m.target.clone()).collect();
        targets.sort_by_key(|t| std::cmp::Reverse(t.len()));
        targets.dedup();
        for target in targets {
            ctx.change(Cmd::change(&ctx.tool("umount"), &[&target]))?;
            unmounted.push(target);
        }
        let fstab = ctx.host.read("/etc/fstab").unwrap_or_default();
        let in_fstab = fstab.lines().any(|l| {
            let l = l.trim_start();
            !l.starts_with('#') && l.split_whitespace().nth(2) == Some("wekafs")
        });
        if in_fstab {
            let fstab_path = ctx.host.path("/etc/fstab").display().to_string();
            ctx.change(Cmd::change(
                &ctx.tool("sed"),
                &[
                    "-i",
                    "-E",
                    "/^[^#]*[[:space:]]wekafs[[:space:]]/d",
                    &fstab_path,
                ],
            ))?;
        }
        let mut removed = Vec::new();
        for path in &weka.client_config {
            let shown = path.display().to_string();
            if ctx.host.exists(&shown) {
                ctx.change(Cmd::change(&ctx.tool("rm"), &["-rf", "--", &shown]))?;
                removed.push(shown);
            }
        }
        for path in &weka.cache {
            let shown = path.display().to_string();
            if ctx.host.exists(&shown) {
                ctx.change(Cmd::change(
                    &ctx.tool("find"),
                    &[&shown, "-xdev", "-mindepth", "1", "-delete"],
                ))?;
                removed.push(format!("{shown}/*"));
            }
        }
        Ok(json!({"unmounted": unmounted, "fstab_entries_removed": in_fstab, "removed": removed}))
    }
}

impl TaskExecutor for StorageCleanup {
    fn task_type(&self) -> TaskType {
        TaskType::NodeStorageCleanup
    }

    fn run(&self, params: &Value, ctx: &mut TaskContext<'_>) -> Result<Report, TaskFailure> {
        let scope = params
            .get("scope")
            .and_then(Value::as_str)
            .unwrap_or("local");
        let (local, weka) = match scope {
            "local" => (Some(Self::local(ctx)?), None),
            "weka" => (None, Some(Self::weka(ctx)?)),
            "all" => (Some(Self::local(ctx)?), Some(Self::weka(ctx)?)),
            // `none` never becomes a task; anything else is a control-plane bug.
            other => {
                return Err(bad_params(format!(
                    "`scope` must be local, weka or all, not {other:?}"
                )));
            }
        };
        Ok(Report::new(
            format!("storage cleaned ({scope})"),
            json!({"scope": scope, "local": local, "weka": weka, "commands": changed(ctx)}),
        ))
    }
}

/// `node.validate_clean` (seed 000 §5.2 ValidateCleanNode): no tenant accounts, processes,
/// mounts or GPU memory left. Reads only.
struct ValidateClean;

impl ValidateClean {
    /// GPU memory in use above the allowance: `(gpu, used)`.
    fn gpu_residue(ctx: &mut TaskContext<'_>, vendor: Vendor) -> Result<Vec<String>, TaskFailure> {
        let max = ctx.config.gpu.memory_used_max;
        let mut residue = Vec::new();
        match vendor {
            Vendor::Nvidia => {
                let out = ctx.probe(Cmd::probe(
                    &ctx.tool("nvidia-smi"),
                    &[
                        "--query-gpu=index,memory.used",
                        "--format=csv,noheader,nounits",
                    ],
                ))?;
                for line in out.stdout.lines() {
                    if let Some((index, used)) = line.split_once(',')
                        && let Ok(used) = used.trim().parse::<u64>()
                        && used > max
                    {
                        residue.push(format!("GPU {} has {used} MiB in use", index.trim()));
                    }
                }
                let apps = ctx.probe(Cmd::probe(
                    &ctx.tool("nvidia-smi"),
                    &["--query-compute-apps=pid", "--format=csv,noheader"],
                ))?;
                for pid in apps.stdout.lines().map(str::trim).filter(|l| !l.is_empty()) {
                    residue.push(format!("process {pid} runs on a GPU"));
                }
            }
            Vendor::Amd => {
                let out = ctx.probe(Cmd::probe(&ctx.tool("rocm-smi"), &["--showmemuse"]))?;
                // `GPU[0]		: GPU Memory Allocated (VRAM%): 3`
                for line in out.stdout.lines() {
                    let Some(rest) = line.trim().strip_prefix("GPU[") else {
                        continue;
                    };
                    let Some((index, rest)) = rest.split_once(']') else {
                        continue;
                    };
                    if !rest.contains("VRAM%") && !rest.contains("memory use") {
                        continue;
                    }
                    if let Some(used) = rest
                        .rsplit(':')
                        .next()
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        && used > max.min(100)
                    {
                        residue.push(format!("GPU {index} has {used}% of its memory in use"));
                    }
                }
            }
        }
        Ok(residue)
    }
}

impl TaskExecutor for ValidateClean {
    fn task_type(&self) -> TaskType {
        TaskType::NodeValidateClean
    }

    fn run(&self, _: &Value, ctx: &mut TaskContext<'_>) -> Result<Report, TaskFailure> {
        let users: Vec<String> = tenants(ctx).into_iter().map(|a| a.name).collect();
        let kept = kept_uids(ctx);
        let processes: Vec<Value> = ctx
            .host
            .processes()
            .into_iter()
            .filter(|(_, uid)| is_tenant_uid(ctx, *uid, &kept))
            .map(|(pid, uid)| json!({"pid": pid, "uid": uid}))
            .collect();
        let scoped = ctx.config.storage.scope();
        let mounts: Vec<String> = ctx
            .host
            .mounts()
            .into_iter()
            .filter(|m| {
                let target = Path::new(&m.target);
                m.fstype == "wekafs" || scoped.iter().any(|s| target != *s && target.starts_with(s))
            })
            .map(|m| format!("{} ({})", m.target, m.fstype))
            .collect();
        let vendors: BTreeSet<Vendor> = ctx.host.pci_gpus().iter().map(|g| g.vendor).collect();
        let mut gpu = Vec::new();
        for vendor in &vendors {
            gpu.extend(Self::gpu_residue(ctx, *vendor)?);
        }
        let details = json!({
            "users": users, "processes": processes, "mounts": mounts, "gpu": gpu,
            "gpus_checked": vendors.iter().map(|v| v.name()).collect::<Vec<_>>(),
        });
        let mut found = Vec::new();
        if !users.is_empty() {
            found.push(format!("tenant accounts {}", users.join(", ")));
        }
        if !processes.is_empty() {
            found.push(format!("{} tenant process(es)", processes.len()));
        }
        if !mounts.is_empty() {
            found.push(format!("tenant mounts {}", mounts.join(", ")));
        }
        if !gpu.is_empty() {
            found.push(gpu.join(", "));
        }
        if found.is_empty() {
            Ok(Report::new(
                if vendors.is_empty() {
                    "clean: no tenant accounts, processes or mounts (no GPU to check)"
                } else {
                    "clean: no tenant accounts, processes, mounts or GPU memory"
                },
                details,
            ))
        } else {
            Err(
                TaskFailure::new("residue", format!("not clean: {}", found.join("; ")))
                    .with(details),
            )
        }
    }
}

/// `node.hw_sync_reseed` (seed 000 §9.1 steps 4–6; MAAS API reference §5.22): the machine
/// token's credentials file must be there and name this machine; the hardware-sync units of
/// cloud-init layer c are enabled and restarted, and a sync runs now so MAAS sees a fresh
/// `last_sync`. The token itself is written by metalform (EnsureHardwareSyncConfigured); the
/// agent never carries it.
struct HwSyncReseed;

const MAAS_CREDS: &str = "/etc/maas/maas-machine-creds.yml";

impl TaskExecutor for HwSyncReseed {
    fn task_type(&self) -> TaskType {
        TaskType::NodeHwSyncReseed
    }

    fn run(&self, _: &Value, ctx: &mut TaskContext<'_>) -> Result<Report, TaskFailure> {
        let Some(creds) = ctx.host.read(MAAS_CREDS) else {
            return Err(TaskFailure::new(
                "credentials_missing",
                format!(
                    "no MAAS hardware-sync credentials at {MAAS_CREDS}: metalform writes them after deploy (its hardware-sync stage); run that stage again"
                ),
            ));
        };
        let missing: Vec<&str> = ["consumer_key", "token_key", "token_secret", "endpoint"]
            .into_iter()
            .filter(|k| {
                !creds
                    .lines()
                    .any(|l| l.trim_start().starts_with(&format!("{k}:")))
            })
            .collect();
        if !missing.is_empty() {
            return Err(TaskFailure::new(
                "credentials_invalid",
                format!("{MAAS_CREDS} lacks {}", missing.join(", ")),
            ));
        }
        let system_id = &ctx.identity.system_id;
        let endpoint_ok = system_id.is_empty()
            || creds.lines().any(|l| {
                l.trim_start().starts_with("endpoint:")
                    && l.trim_end()
                        .trim_end_matches('"')
                        .ends_with(&format!("/metadata/status/{system_id}"))
            });
        if !endpoint_ok {
            return Err(TaskFailure::new(
                "credentials_mismatch",
                format!(
                    "{MAAS_CREDS} reports for another machine, not {system_id}: metalform's hardware-sync stage must write it again"
                ),
            ));
        }
        for unit in [
            "metalform-hw-sync.service",
            "metalform-hw-sync.timer",
            "metalform-hw-sync.path",
        ] {
            if !ctx.host.exists(&format!("/etc/systemd/system/{unit}")) {
                return Err(TaskFailure::new(
                    "units_missing",
                    format!(
                        "/etc/systemd/system/{unit} is missing: the host was not deployed with metalform's hardware-sync layer"
                    ),
                ));
            }
        }
        let creds_path = ctx.host.path(MAAS_CREDS).display().to_string();
        let systemctl = ctx.tool("systemctl");
        ctx.change(Cmd::change(&ctx.tool("chmod"), &["0600", &creds_path]))?;
        ctx.change(Cmd::change(&systemctl, &["daemon-reload"]))?;
        ctx.change(Cmd::change(
            &systemctl,
            &[
                "enable",
                "--now",
                "metalform-hw-sync.timer",
                "metalform-hw-sync.path",
            ],
        ))?;
        ctx.change(Cmd::change(
            &systemctl,
            &["restart", "metalform-hw-sync.timer"],
        ))?;
        // Report now: MAAS sets last_sync when the machine posts its results.
        ctx.change(Cmd::change(
            &systemctl,
            &["start", "metalform-hw-sync.service"],
        ))?;
        Ok(Report::new(
            "hardware sync reseeded: credentials present, timer and path units enabled, a sync reported now",
            json!({"commands": changed(ctx)}),
        ))
    }
}

/// `node.uninstall` (seed 000 §5.4 RemoveGPUaaSNodeRecord): once its result is stored the agent
/// disables and removes its unit, its environment file, its state and its executable, and
/// exits for good.
struct Uninstall;

impl TaskExecutor for Uninstall {
    fn task_type(&self) -> TaskType {
        TaskType::NodeUninstall
    }

    fn run(&self, _: &Value, ctx: &mut TaskContext<'_>) -> Result<Report, TaskFailure> {
        let systemctl = ctx.tool("systemctl");
        let rm = ctx.tool("rm");
        let path = |p: &str| ctx.host.path(p).display().to_string();
        let mut then = vec![
            Cmd::change(&systemctl, &["disable", "metalform-agent.service"]),
            Cmd::change(&rm, &["-f", "--", &path(crate::cloudinit::AGENT_UNIT_PATH)]),
            Cmd::change(&systemctl, &["daemon-reload"]),
            Cmd::change(
                &rm,
                &[
                    "-f",
                    "--",
                    &path(crate::cloudinit::AGENT_ENV_PATH),
                    &path(crate::cloudinit::AGENT_CA_PATH),
                ],
            ),
            Cmd::change(&rm, &["-rf", "--", &ctx.state_dir.display().to_string()]),
        ];
        // The installed agent removes its executable; `metalform agent` (the full binary) does not
        // remove metalform.
        if let Ok(exe) = std::env::current_exe()
            && exe.file_name().is_some_and(|n| n == "metalform-agent")
        {
            then.push(Cmd::change(&rm, &["-f", "--", &exe.display().to_string()]));
        }
        let mut report = Report::new(
            "uninstalling: the agent removes its unit, configuration, state and executable and stops",
            json!({"will_run": then.iter().map(Cmd::line).collect::<Vec<_>>()}),
        );
        report.then = then;
        Ok(report)
    }
}

#[cfg(test)]
mod tests;
