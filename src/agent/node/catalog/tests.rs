//! The exact command lines each task runs on a host, pinned: a recording runner answers the
//! probes and records every command; the host's files live under a temporary root.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

use serde_json::{Value, json};

use super::super::config::NodeConfig;
use super::super::exec::{Cmd, CmdOutput, Identity, RunError, Runner, TaskContext};
use super::super::probe::HostView;
use super::super::state::Journal;
use super::catalog;
use crate::agent::TaskType;

/// Records every command; answers probes from `answers` (by command line), changes with 0.
#[derive(Default)]
struct Recorder {
    answers: BTreeMap<String, CmdOutput>,
    failing: BTreeMap<String, CmdOutput>,
    log: Mutex<Vec<String>>,
}

impl Recorder {
    fn answer(mut self, line: &str, stdout: &str) -> Self {
        self.answers.insert(
            line.to_owned(),
            CmdOutput {
                status: Some(0),
                stdout: stdout.to_owned(),
                stderr: String::new(),
            },
        );
        self
    }

    fn fail(mut self, line: &str, status: i32, stderr: &str) -> Self {
        self.failing.insert(
            line.to_owned(),
            CmdOutput {
                status: Some(status),
                stdout: String::new(),
                stderr: stderr.to_owned(),
            },
        );
        self
    }

    fn changes(&self) -> Vec<String> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| l.strip_prefix("change: ").map(str::to_owned))
            .collect()
    }
}

impl Runner for Recorder {
    fn run(&self, cmd: &Cmd) -> Result<CmdOutput, RunError> {
        let line = cmd.line();
        let kind = if cmd.changes { "change" } else { "probe" };
        self.log.lock().unwrap().push(format!("{kind}: {line}"));
        if let Some(out) = self.failing.get(&line) {
            return Ok(out.clone());
        }
        if cmd.program == "missing-tool" {
            return Err(RunError::NotFound {
                program: cmd.program.clone(),
            });
        }
        Ok(self.answers.get(&line).cloned().unwrap_or(CmdOutput {
            status: Some(0),
            ..CmdOutput::default()
        }))
    }
}

struct Host {
    dir: tempfile::TempDir,
    config: NodeConfig,
    identity: Identity,
}

impl Host {
    fn new() -> Host {
        let dir = tempfile::tempdir().unwrap();
        let mut config = NodeConfig::default();
        config.host.root = dir.path().to_owned();
        let host = Host {
            dir,
            config,
            identity: Identity {
                hostname: "c07u43".into(),
                system_id: "x7k3pa".into(),
                deploy_user: Some("hpcadmin".into()),
            },
        };
        host.write(
            "/etc/passwd",
            "root:x:0:0:root:/root:/bin/bash\n\
             hpcadmin:x:1000:1000::/home/hpcadmin:/bin/bash\n\
             alice:x:1001:1001::/home/alice:/bin/bash\n\
             bob:x:1002:1002::/home/bob:/bin/bash\n\
             nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n",
        );
        host.write("/proc/mounts", "/dev/nvme0n1p2 / ext4 rw 0 0\n");
        host
    }

    fn write(&self, path: &str, text: &str) {
        let path = self.dir.path().join(path.trim_start_matches('/'));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn root(&self, path: &str) -> String {
        self.dir
            .path()
            .join(path.trim_start_matches('/'))
            .display()
            .to_string()
    }

    fn process(&self, pid: u32, uid: u32) {
        self.write(
            &format!("/proc/{pid}/status"),
            &format!("Uid:\t{uid}\t{uid}\t{uid}\t{uid}\n"),
        );
    }

    fn gpu(&self, address: &str, vendor: &str, class: &str) {
        self.write(&format!("/sys/bus/pci/devices/{address}/vendor"), vendor);
        self.write(&format!("/sys/bus/pci/devices/{address}/class"), class);
    }

    /// Run one task type; its result and the changes made.
    fn run(
        &self,
        task: TaskType,
        params: Value,
        runner: &Recorder,
        journal: &mut Journal,
    ) -> Result<super::Report, super::TaskFailure> {
        let view = HostView::new(self.dir.path());
        let state_dir = PathBuf::from("/var/lib/metalform-agent");
        let mut save = |_: &Journal| {};
        let mut ctx = TaskContext::new(
            &self.config,
            &self.identity,
            &view,
            &state_dir,
            runner,
            journal,
            &mut save,
        );
        let executor = catalog()
            .into_iter()
            .find(|e| e.task_type() == task)
            .expect("every task type has an executor");
        executor.run(&params, &mut ctx)
    }

    fn once(
        &self,
        task: TaskType,
        params: Value,
        runner: &Recorder,
    ) -> Result<super::Report, super::TaskFailure> {
        self.run(
            task,
            params,
            runner,
            &mut Journal::new(uuid::Uuid::nil(), task.as_str()),
        )
    }
}

#[test]
fn every_task_type_of_the_protocol_has_one_executor() {
    let mut types: Vec<TaskType> = catalog().iter().map(|e| e.task_type()).collect();
    types.sort();
    let mut all = TaskType::ALL.to_vec();
    all.sort();
    assert_eq!(types, all);
}

#[test]
fn terminal_close_ends_tenant_sessions_only() {
    let host = Host::new();
    let runner = Recorder::default().answer(
        "loginctl list-sessions --no-legend",
        "  3 1000 hpcadmin seat0 tty1\n 17 1001 alice     pts/0\n 18 0 root pts/1\n 21 1002 bob - pts/2 active no -\n",
    );
    let report = host
        .once(TaskType::TerminalClose, json!({}), &runner)
        .unwrap();
    assert_eq!(
        runner.changes(),
        [
            "loginctl terminate-session 17",
            "loginctl terminate-session 21"
        ]
    );
    assert_eq!(report.message, "closed 2 tenant session(s)");
}

#[test]
fn revoke_user_locks_busy_tenants_unless_forced() {
    let host = Host::new();
    host.process(4711, 1001);
    host.process(1, 0);
    let runner = Recorder::default();
    let report = host
        .once(
            TaskType::AllocationRevokeUser,
            json!({"force": false}),
            &runner,
        )
        .unwrap();
    assert_eq!(
        runner.changes(),
        [
            "usermod --lock --expiredate 1 alice",
            "userdel --remove bob"
        ]
    );
    assert_eq!(
        report.message,
        "removed 1 tenant account(s); locked 1 with running work (a forced revoke removes them)"
    );
    let runner = Recorder::default();
    host.once(
        TaskType::AllocationRevokeUser,
        json!({"force": true}),
        &runner,
    )
    .unwrap();
    assert_eq!(
        runner.changes(),
        [
            "pkill --signal KILL --uid alice",
            "userdel --remove alice",
            "userdel --remove bob"
        ]
    );
    let err = host
        .once(
            TaskType::AllocationRevokeUser,
            json!({"force": "yes"}),
            &Recorder::default(),
        )
        .unwrap_err();
    assert_eq!(err.code, "bad_params");
}

#[test]
fn drain_stops_units_runs_kubectl_and_waits_and_says_when_nothing_is_configured() {
    let mut host = Host::new();
    let report = host
        .once(TaskType::NodeDrain, json!({}), &Recorder::default())
        .unwrap();
    assert!(
        report
            .message
            .starts_with("nothing to drain: no workload units and no kubeconfig")
    );
    host.config.drain.units = vec!["slurmd.service".into(), "tenant-jobs.service".into()];
    host.config.drain.kubeconfig = Some("/etc/kubernetes/kubelet.conf".into());
    let runner = Recorder::default()
        .answer("systemctl is-active slurmd.service", "inactive\n")
        .answer("systemctl is-active tenant-jobs.service", "failed\n");
    host.once(TaskType::NodeDrain, json!({}), &runner).unwrap();
    assert_eq!(
        runner.changes(),
        [
            "kubectl --kubeconfig /etc/kubernetes/kubelet.conf drain c07u43 --ignore-daemonsets --delete-emptydir-data --timeout=600s",
            "systemctl stop slurmd.service",
            "systemctl stop tenant-jobs.service",
        ]
    );
    // A unit that does not stop in time fails the drain, naming it.
    host.config.drain.kubeconfig = None;
    host.config.drain.units = vec!["slurmd.service".into()];
    host.config.drain.timeout = super::super::config::Span(std::time::Duration::ZERO);
    let runner = Recorder::default().answer("systemctl is-active slurmd.service", "deactivating\n");
    let err = host
        .once(TaskType::NodeDrain, json!({}), &runner)
        .unwrap_err();
    assert_eq!(err.code, "drain_timeout");
    assert_eq!(
        err.message,
        "work still running after 0s: slurmd.service (deactivating)"
    );
}

#[test]
fn gpu_scrub_resets_each_gpu_with_its_vendors_tool() {
    let host = Host::new();
    host.gpu("0000:17:00.0", "0x10de\n", "0x030200\n");
    host.gpu("0000:65:00.0", "0x10de\n", "0x030200\n");
    let runner = Recorder::default().answer(
        "nvidia-smi --query-gpu=index --format=csv,noheader",
        "0\n1\n",
    );
    let report = host
        .once(TaskType::NodeGpuScrub, json!({}), &runner)
        .unwrap();
    assert_eq!(
        runner.changes(),
        ["nvidia-smi --gpu-reset -i 0", "nvidia-smi --gpu-reset -i 1"]
    );
    assert_eq!(report.message, "reset 2 GPU(s)");

    let amd = Host::new();
    amd.gpu("0000:05:00.0", "0x1002\n", "0x120000\n");
    let runner = Recorder::default().answer(
        "rocm-smi --showid",
        "======\nGPU[0]\t\t: Device ID: 0x74a1\nGPU[0]\t\t: Device Rev: 0x00\n======\n",
    );
    amd.once(TaskType::NodeGpuScrub, json!({}), &runner)
        .unwrap();
    assert_eq!(runner.changes(), ["rocm-smi --gpureset -d 0"]);
}

#[test]
fn gpu_scrub_without_a_gpu_or_its_tool_says_so() {
    let mut host = Host::new();
    let err = host
        .once(TaskType::NodeGpuScrub, json!({}), &Recorder::default())
        .unwrap_err();
    assert_eq!(err.code, "no_gpu_present");
    assert_eq!(
        err.message,
        "no GPU present: no NVIDIA (0x10de) or AMD (0x1002) display or accelerator device on the PCI bus"
    );
    host.config.gpu.require = false;
    let report = host
        .once(TaskType::NodeGpuScrub, json!({}), &Recorder::default())
        .unwrap();
    assert!(report.message.starts_with("no GPU present"));
    assert_eq!(report.details["gpus"], 0);

    host.gpu("0000:17:00.0", "0x10de\n", "0x030200\n");
    host.config
        .commands
        .paths
        .insert("nvidia-smi".into(), "missing-tool".into());
    let err = host
        .once(TaskType::NodeGpuScrub, json!({}), &Recorder::default())
        .unwrap_err();
    assert_eq!(err.code, "tool_missing");
    assert!(
        err.message
            .starts_with("NVIDIA GPU(s) are present but nvidia-smi is not installed"),
        "{}",
        err.message
    );
    // The driver lists fewer GPUs than the bus has: no reset of a partial set.
    host.config.commands.paths.clear();
    host.gpu("0000:65:00.0", "0x10de\n", "0x030200\n");
    let runner =
        Recorder::default().answer("nvidia-smi --query-gpu=index --format=csv,noheader", "0\n");
    let err = host
        .once(TaskType::NodeGpuScrub, json!({}), &runner)
        .unwrap_err();
    assert_eq!(err.code, "gpu_missing");
    assert!(runner.changes().is_empty());
}

#[test]
fn storage_cleanup_local_empties_only_its_scope_and_refuses_the_boot_disk_and_foreign_mounts() {
    let mut host = Host::new();
    host.config.storage.scratch = vec!["/tmp".into(), "/scratch".into()];
    host.config.storage.data_disks = vec!["/share1".into()];
    host.write("/tmp/x", "");
    host.write("/scratch/y", "");
    host.write("/share1/z", "");
    host.write(
        "/proc/mounts",
        "/dev/nvme0n1p2 / ext4 rw 0 0\n/dev/nvme0n1p1 /boot/efi vfat rw 0 0\n/dev/nvme1n1 /share1 ext4 rw 0 0\n",
    );
    let runner = Recorder::default();
    host.once(
        TaskType::NodeStorageCleanup,
        json!({"scope": "local"}),
        &runner,
    )
    .unwrap();
    assert_eq!(
        runner.changes(),
        [
            "find /tmp -xdev -mindepth 1 -delete",
            "find /scratch -xdev -mindepth 1 -delete",
            "find /share1 -xdev -mindepth 1 -delete",
        ]
    );
    // A data disk on the boot disk, one not mounted, a tenant NFS inside scratch, a system
    // directory: every refusal at once, and nothing deleted.
    host.config.storage.data_disks = vec!["/share1".into(), "/share2".into()];
    host.config.storage.scratch = vec!["/scratch".into(), "/var".into()];
    host.write(
        "/proc/mounts",
        "/dev/nvme0n1p2 / ext4 rw 0 0\n/dev/nvme0n1p3 /share1 ext4 rw 0 0\nfiler:/t1 /scratch/t1 nfs4 rw 0 0\n",
    );
    let runner = Recorder::default();
    let err = host
        .once(
            TaskType::NodeStorageCleanup,
            json!({"scope": "local"}),
            &runner,
        )
        .unwrap_err();
    assert_eq!(err.code, "refused");
    assert_eq!(
        err.message,
        "refusing to clean /scratch: /scratch/t1 (nfs4) is mounted inside it and is not in the cleanup scope; \
         refusing to clean /var: it is a system directory; \
         refusing to clean /share1: /dev/nvme0n1p3 is on the boot disk nvme0n1; \
         refusing to clean /share2: no disk is mounted there (cleaning would empty a directory of the root filesystem)"
    );
    assert!(runner.changes().is_empty());
    let err = host
        .once(
            TaskType::NodeStorageCleanup,
            json!({"scope": "everything"}),
            &Recorder::default(),
        )
        .unwrap_err();
    assert_eq!(err.code, "bad_params");
}

#[test]
fn storage_cleanup_weka_unmounts_and_removes_the_tenants_client_config() {
    let mut host = Host::new();
    host.config.weka.client_config = vec!["/etc/wekaio/tenant.conf".into()];
    host.config.weka.cache = vec!["/opt/weka/cache".into()];
    host.write("/etc/wekaio/tenant.conf", "x");
    host.write("/opt/weka/cache/blob", "x");
    host.write(
        "/proc/mounts",
        "/dev/nvme0n1p2 / ext4 rw 0 0\nweka01/fs1 /mnt/weka wekafs rw 0 0\nweka01/fs1 /mnt/weka/inner wekafs rw 0 0\n",
    );
    host.write(
        "/etc/fstab",
        "UUID=1 / ext4 defaults 0 1\nweka01/fs1 /mnt/weka wekafs defaults 0 0\n",
    );
    let runner = Recorder::default();
    host.once(
        TaskType::NodeStorageCleanup,
        json!({"scope": "weka"}),
        &runner,
    )
    .unwrap();
    assert_eq!(
        runner.changes(),
        [
            "umount /mnt/weka/inner".to_owned(),
            "umount /mnt/weka".to_owned(),
            format!(
                "sed -i -E '/^[^#]*[[:space:]]wekafs[[:space:]]/d' {}",
                host.root("/etc/fstab")
            ),
            "rm -rf -- /etc/wekaio/tenant.conf".to_owned(),
            "find /opt/weka/cache -xdev -mindepth 1 -delete".to_owned(),
        ]
    );
}

#[test]
fn validate_clean_lists_every_residue_and_passes_a_clean_host() {
    let host = Host::new();
    host.gpu("0000:17:00.0", "0x10de\n", "0x030200\n");
    host.process(4711, 1001);
    host.process(99, 1000); // the deploy user's shell is no residue
    host.write(
        "/proc/mounts",
        "/dev/nvme0n1p2 / ext4 rw 0 0\nweka01/fs1 /mnt/weka wekafs rw 0 0\n",
    );
    let runner = Recorder::default()
        .answer(
            "nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits",
            "0, 2048\n1, 3\n",
        )
        .answer(
            "nvidia-smi --query-compute-apps=pid --format=csv,noheader",
            "4711\n",
        );
    let err = host
        .once(TaskType::NodeValidateClean, json!({}), &runner)
        .unwrap_err();
    assert_eq!(err.code, "residue");
    assert_eq!(
        err.message,
        "not clean: tenant accounts alice, bob; 1 tenant process(es); tenant mounts /mnt/weka (wekafs); \
         GPU 0 has 2048 MiB in use, process 4711 runs on a GPU"
    );
    assert!(runner.changes().is_empty(), "validation only reads");

    let clean = Host::new();
    clean.write(
        "/etc/passwd",
        "root:x:0:0:root:/root:/bin/bash\nhpcadmin:x:1000:1000::/home/hpcadmin:/bin/bash\n",
    );
    let report = clean
        .once(TaskType::NodeValidateClean, json!({}), &Recorder::default())
        .unwrap();
    assert_eq!(
        report.message,
        "clean: no tenant accounts, processes or mounts (no GPU to check)"
    );
}

#[test]
fn hw_sync_reseed_needs_this_machines_credentials_then_restarts_the_sync() {
    let host = Host::new();
    let err = host
        .once(TaskType::NodeHwSyncReseed, json!({}), &Recorder::default())
        .unwrap_err();
    assert_eq!(err.code, "credentials_missing");
    host.write(
        "/etc/maas/maas-machine-creds.yml",
        "reporting:\n  maas:\n    consumer_key: ck\n    endpoint: \"http://10.0.0.1:5240/MAAS/metadata/status/other1\"\n    token_key: tk\n    token_secret: ts\n",
    );
    let err = host
        .once(TaskType::NodeHwSyncReseed, json!({}), &Recorder::default())
        .unwrap_err();
    assert_eq!(err.code, "credentials_mismatch");
    host.write(
        "/etc/maas/maas-machine-creds.yml",
        "reporting:\n  maas:\n    consumer_key: ck\n    endpoint: \"http://10.0.0.1:5240/MAAS/metadata/status/x7k3pa\"\n    token_key: tk\n    token_secret: ts\n",
    );
    let err = host
        .once(TaskType::NodeHwSyncReseed, json!({}), &Recorder::default())
        .unwrap_err();
    assert_eq!(err.code, "units_missing");
    for unit in ["service", "timer", "path"] {
        host.write(&format!("/etc/systemd/system/metalform-hw-sync.{unit}"), "");
    }
    let runner = Recorder::default();
    host.once(TaskType::NodeHwSyncReseed, json!({}), &runner)
        .unwrap();
    assert_eq!(
        runner.changes(),
        [
            format!(
                "chmod 0600 {}",
                host.root("/etc/maas/maas-machine-creds.yml")
            ),
            "systemctl daemon-reload".to_owned(),
            "systemctl enable --now metalform-hw-sync.timer metalform-hw-sync.path".to_owned(),
            "systemctl restart metalform-hw-sync.timer".to_owned(),
            "systemctl start metalform-hw-sync.service".to_owned(),
        ]
    );
}

#[test]
fn uninstall_removes_the_agent_only_after_its_result_is_stored() {
    let host = Host::new();
    let runner = Recorder::default();
    let report = host
        .once(TaskType::NodeUninstall, json!({}), &runner)
        .unwrap();
    assert!(runner.changes().is_empty(), "nothing before the report");
    let then: Vec<String> = report.then.iter().map(Cmd::line).collect();
    assert_eq!(
        then,
        [
            "systemctl disable metalform-agent.service".to_owned(),
            format!(
                "rm -f -- {}",
                host.root("/etc/systemd/system/metalform-agent.service")
            ),
            "systemctl daemon-reload".to_owned(),
            format!(
                "rm -f -- {} {}",
                host.root("/etc/metalform/agent.env"),
                host.root("/etc/metalform/ca.pem")
            ),
            "rm -rf -- /var/lib/metalform-agent".to_owned(),
        ]
    );
}

#[test]
fn a_rerun_skips_the_changes_its_journal_says_were_made() {
    let host = Host::new();
    host.gpu("0000:17:00.0", "0x10de\n", "0x030200\n");
    host.gpu("0000:65:00.0", "0x10de\n", "0x030200\n");
    let runner = Recorder::default()
        .answer(
            "nvidia-smi --query-gpu=index --format=csv,noheader",
            "0\n1\n",
        )
        .fail(
            "nvidia-smi --gpu-reset -i 1",
            255,
            "Unable to reset GPU 00000000:65:00.0: In use by another client",
        );
    let mut journal = Journal::new(uuid::Uuid::nil(), "node.gpu_scrub");
    let err = host
        .run(TaskType::NodeGpuScrub, json!({}), &runner, &mut journal)
        .unwrap_err();
    assert_eq!(
        err.message,
        "`nvidia-smi --gpu-reset -i 1` exited with 255: Unable to reset GPU 00000000:65:00.0: In use by another client"
    );
    assert_eq!(journal.steps_done, ["nvidia-smi --gpu-reset -i 0"]);
    // Handed out again: GPU 0 is not reset twice.
    let runner = Recorder::default().answer(
        "nvidia-smi --query-gpu=index --format=csv,noheader",
        "0\n1\n",
    );
    host.run(TaskType::NodeGpuScrub, json!({}), &runner, &mut journal)
        .unwrap();
    assert_eq!(runner.changes(), ["nvidia-smi --gpu-reset -i 1"]);
}
