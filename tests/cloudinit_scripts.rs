//! The first-boot scripts as the payload delivers them, run with /bin/sh: each test renders a
//! payload, writes its `write_files` under a temporary root (`METALFORM_ROOT`), and runs the
//! scripts with stand-ins for the system tools (`lsblk`, `ip`, `mkfs.ext4`, …) first on PATH
//! that record every call. This shows what each layer does on a host — above all that data-disk
//! initialisation never touches the boot disk.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use base64::Engine as _;
use metalform::cloudinit::{
    self, AgentBootstrap, CloudInitInput, DeployUser, HwSyncLayer, LIB_DIR,
};
use metalform::model::{DataDisks, RoceAssignment, SiteBundle};
use metalform::secrets::Secret;

fn input() -> CloudInitInput {
    CloudInitInput {
        hostname: "c07u43".into(),
        system_id: "x7k3pa".into(),
        site_bundle: Some(SiteBundle {
            reference: "bundles/dc1-base".into(),
            version: "3".into(),
        }),
        agent: AgentBootstrap {
            enroll_url: "http://10.176.46.5:8740/agent/v1/enroll".into(),
            enroll_token: Secret::new("tok_Abcdefghijklmnopqrstuvwxyz0123456789"),
            agent_package_url: None,
            ca_bundle: None,
        },
        hw_sync: HwSyncLayer {
            maas_url: "http://10.176.46.1:5240/MAAS".into(),
            system_id: "x7k3pa".into(),
            interval: Duration::from_secs(900),
        },
        data_disks: DataDisks::Initialize,
        boot_disk_hint: None,
        roce: vec![
            RoceAssignment {
                interface: "enp28s0np0".into(),
                address: "172.30.9.1/31".parse().unwrap(),
            },
            RoceAssignment {
                interface: "enp29s0np0".into(),
                address: "10.9.0.5/24".parse().unwrap(),
            },
        ],
        deploy_user: DeployUser {
            name: "hpcadmin".into(),
            password: None,
            ssh_keys: Vec::new(),
            policy: Default::default(),
        },
    }
}

/// A host: the payload's files under `root`, fake tools in `bin`, their calls in `calls`.
struct Host {
    _dir: tempfile::TempDir,
    root: PathBuf,
    bin: PathBuf,
    calls: PathBuf,
}

impl Host {
    fn new(input: &CloudInitInput) -> Host {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let rendered = cloudinit::render(input).unwrap();
        // As MAAS stores it; the simulator's reader is the cloud-init stand-in.
        let stored = base64::engine::general_purpose::STANDARD.encode(rendered.user_data.expose());
        for (path, content) in metalform::sim::host::files_from_user_data(&stored) {
            let target = root.join(path.trim_start_matches('/'));
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::write(&target, content).unwrap();
            if path.starts_with(LIB_DIR) {
                std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
        }
        let calls = dir.path().join("calls");
        std::fs::write(&calls, "").unwrap();
        Host {
            _dir: dir,
            root,
            bin,
            calls,
        }
    }

    /// A fake command: records `name args…` (and stdin when `stdin` is set), then runs `body`.
    fn fake(&self, name: &str, body: &str) {
        let script = format!(
            "#!/bin/sh\nprintf '%s\\n' \"{name} $*\" >>\"{calls}\"\n{body}\n",
            calls = self.calls.display()
        );
        let path = self.bin.join(name);
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn run(&self, script: &str, env: &[(&str, &str)]) -> Output {
        let path = format!("{}:{}", self.bin.display(), std::env::var("PATH").unwrap());
        Command::new("/bin/sh")
            .arg(self.root.join(LIB_DIR.trim_start_matches('/')).join(script))
            .env("PATH", path)
            .env("METALFORM_ROOT", &self.root)
            .envs(env.iter().copied())
            .output()
            .expect("/bin/sh runs")
    }

    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(&self.calls)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn clear_calls(&self) {
        std::fs::write(&self.calls, "").unwrap();
    }

    fn file(&self, path: &str) -> String {
        std::fs::read_to_string(self.root.join(path.trim_start_matches('/'))).unwrap_or_default()
    }

    fn path(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }
}

fn text(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Block devices for the fake lsblk: NAME TYPE RM RO, and what is on each disk
/// (`TYPE MOUNTPOINT` lines as `lsblk -nr -o TYPE,MOUNTPOINT /dev/X` prints them).
fn fake_disks(host: &Host, disks: &[(&str, &str)], usage: &BTreeMap<&str, &str>) {
    let table: String = disks
        .iter()
        .map(|(name, rest)| format!("{name} {rest}\n"))
        .collect();
    let mut cases = String::new();
    for (disk, lines) in usage {
        cases.push_str(&format!("    /dev/{disk}) printf '{lines}' ;;\n"));
    }
    host.fake(
        "lsblk",
        &format!(
            r#"last=$(eval echo \${{$#}})
case "$*" in
  "-dnr -o NAME,TYPE,RM,RO") printf '{table}' ;;
  "-nr -o TYPE,MOUNTPOINT "*)
    case "$last" in
{cases}    *) printf 'disk \n' ;;
    esac ;;
  "-nr -o PKNAME "*) ;;
  "-nr -o NAME,TYPE "*)
    d=${{last##*/}}
    case "$d" in *[0-9]) p="${{d}}p1" ;; *) p="${{d}}1" ;; esac
    printf '%s disk\n%s part\n' "$d" "$p" ;;
esac"#
        ),
    );
    for tool in ["wipefs", "parted", "udevadm", "mkfs.ext4", "mount"] {
        host.fake(tool, "exit 0");
    }
    host.fake(
        "blkid",
        r#"last=$(eval echo \${$#}); echo "uuid-${last##*/}""#,
    );
}

/// The calls that write to a disk.
fn destructive(calls: &[String]) -> Vec<String> {
    calls
        .iter()
        .filter(|c| {
            ["wipefs", "parted", "mkfs.ext4"]
                .iter()
                .any(|t| c.starts_with(t))
        })
        .cloned()
        .collect()
}

#[test]
fn data_disks_initialises_every_free_disk_and_never_the_boot_disk() {
    let host = Host::new(&input());
    fake_disks(
        &host,
        &[
            ("sda", "disk 0 0"),     // the BOSS boot disk: / and /boot/efi on its partitions
            ("nvme0n1", "disk 0 0"), // free
            ("nvme1n1", "disk 0 0"), // free
            ("nvme2n1", "disk 0 0"), // an LVM physical volume
            ("nvme3n1", "disk 0 0"), // swap
            ("sdb", "disk 1 0"),     // a removable stick
            ("loop0", "loop 0 1"),
        ],
        &BTreeMap::from([
            ("sda", r"disk \npart /boot/efi\npart /\n"),
            ("nvme2n1", r"disk \nlvm \n"),
            ("nvme3n1", r"disk \npart [SWAP]\n"),
        ]),
    );
    let out = host.run("data-disks", &[]);
    assert!(out.status.success(), "{}", text(&out));
    let calls = host.calls();
    let writes = destructive(&calls);
    assert_eq!(
        writes,
        [
            "wipefs -a /dev/nvme0n1",
            "parted -s /dev/nvme0n1 mklabel gpt mkpart share1 ext4 0% 100%",
            "mkfs.ext4 -q -F -L share1 /dev/nvme0n1p1",
            "wipefs -a /dev/nvme1n1",
            "parted -s /dev/nvme1n1 mklabel gpt mkpart share2 ext4 0% 100%",
            "mkfs.ext4 -q -F -L share2 /dev/nvme1n1p1",
        ]
    );
    assert!(
        calls
            .iter()
            .all(|c| !c.contains("/dev/sda ") || c.starts_with("lsblk"))
    );
    assert_eq!(
        host.file("/etc/fstab"),
        "UUID=uuid-nvme0n1p1 /share1 ext4 defaults,nofail,x-systemd.device-timeout=30s 0 2\n\
         UUID=uuid-nvme1n1p1 /share2 ext4 defaults,nofail,x-systemd.device-timeout=30s 0 2\n"
    );
    assert!(calls.contains(&format!(
        "mount /dev/nvme1n1p1 {}",
        host.path("/share2").display()
    )));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("keep /dev/sda: in use"), "{stdout}");
    assert!(
        host.file("/var/lib/metalform/data-disks.done")
            .starts_with("2 data disk(s) at ")
    );

    // Runs once: a second boot changes nothing.
    host.clear_calls();
    let again = host.run("data-disks", &[]);
    assert!(again.status.success());
    assert!(destructive(&host.calls()).is_empty());
    assert!(String::from_utf8_lossy(&again.stdout).contains("already initialised"));
}

#[test]
fn data_disks_leaves_the_named_boot_disk_alone_even_with_nothing_mounted() {
    let dir = tempfile::tempdir().unwrap();
    // The by-id link MAAS reports for the BOSS disk, pointing at the kernel name.
    let link = dir.path().join("ata-Dell_BOSS-N1_S1");
    std::os::unix::fs::symlink("/dev/nvme0n1", &link).unwrap();
    let mut input = input();
    input.boot_disk_hint = Some("/dev/disk/by-id/ata-Dell_BOSS-N1_S1".into());
    let host = Host::new(&input);
    // The rendered env names /dev/disk/by-id/…; point it at the test's link.
    std::fs::write(
        host.path("/etc/metalform/data-disks.env"),
        format!("BOOT_DISK=\"{}\"\n", link.display()),
    )
    .unwrap();
    assert!(
        cloudinit::render(&input)
            .unwrap()
            .user_data
            .expose()
            .contains("BOOT_DISK=\"/dev/disk/by-id/ata-Dell_BOSS-N1_S1\"")
    );
    fake_disks(
        &host,
        &[("nvme0n1", "disk 0 0"), ("nvme1n1", "disk 0 0")],
        &BTreeMap::new(),
    );
    let out = host.run("data-disks", &[]);
    assert!(out.status.success(), "{}", text(&out));
    let writes = destructive(&host.calls());
    assert!(writes.iter().all(|c| !c.contains("nvme0n1")), "{writes:?}");
    assert_eq!(writes.len(), 3, "only nvme1n1: {writes:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("keep /dev/nvme0n1: the boot disk"));
}

#[test]
fn data_disks_refuses_when_the_root_disk_cannot_be_told_apart() {
    let host = Host::new(&input());
    fake_disks(
        &host,
        &[("nvme0n1", "disk 0 0"), ("nvme1n1", "disk 0 0")],
        &BTreeMap::new(),
    );
    let out = host.run("data-disks", &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("refusing to touch any disk"));
    assert!(destructive(&host.calls()).is_empty());
    assert_eq!(host.file("/var/lib/metalform/data-disks.done"), "");
}

#[test]
fn an_interrupted_data_disk_run_does_not_reuse_a_share_name() {
    let host = Host::new(&input());
    std::fs::create_dir_all(host.path("/etc")).unwrap();
    std::fs::write(
        host.path("/etc/fstab"),
        "UUID=old /share1 ext4 defaults,nofail 0 2\n",
    )
    .unwrap();
    fake_disks(
        &host,
        &[
            ("sda", "disk 0 0"),
            ("nvme0n1", "disk 0 0"),
            ("nvme1n1", "disk 0 0"),
        ],
        // nvme0n1 was done before the interruption: it is mounted now.
        &BTreeMap::from([
            ("sda", r"disk \npart /\n"),
            ("nvme0n1", r"disk \npart /share1\n"),
        ]),
    );
    let out = host.run("data-disks", &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        destructive(&host.calls()),
        [
            "wipefs -a /dev/nvme1n1",
            "parted -s /dev/nvme1n1 mklabel gpt mkpart share2 ext4 0% 100%",
            "mkfs.ext4 -q -F -L share2 /dev/nvme1n1p1",
        ]
    );
}

#[test]
fn roce_routing_sets_one_table_per_link_and_reports_a_missing_interface() {
    let host = Host::new(&input());
    host.fake(
        "ip",
        r#"case "$*" in "link show dev enp28s0np0") exit 0 ;; "link show dev "*) exit 1 ;; "rule del "*) exit 2 ;; esac; exit 0"#,
    );
    host.fake("sysctl", "exit 0");
    let out = host.run("roce-routing", &[]);
    // enp29s0np0 does not exist here: reported, the other link still configured.
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("roce: interface enp29s0np0 not found"));
    assert_eq!(
        host.calls(),
        [
            "ip link show dev enp28s0np0",
            "sysctl -q -w net/ipv4/conf/enp28s0np0/arp_announce=2 net/ipv4/conf/enp28s0np0/arp_ignore=1 net/ipv4/conf/enp28s0np0/rp_filter=2",
            "ip link set dev enp28s0np0 up",
            "ip addr replace 172.30.9.1/31 dev enp28s0np0",
            "ip route replace 172.30.9.0/31 dev enp28s0np0 src 172.30.9.1 table 101",
            "ip route replace default via 172.30.9.0 dev enp28s0np0 table 101",
            "ip rule del from 172.30.9.1/32 table 101 priority 1001",
            "ip rule add from 172.30.9.1/32 table 101 priority 1001",
            "ip link show dev enp29s0np0",
        ]
    );
    // With both links present: the /24 gets its connected route only (no guessed gateway).
    host.clear_calls();
    host.fake("ip", r#"case "$*" in "rule del "*) exit 2 ;; esac; exit 0"#);
    let out = host.run("roce-routing", &[]);
    assert!(out.status.success(), "{}", text(&out));
    let calls = host.calls();
    assert!(calls.contains(
        &"ip route replace 10.9.0.0/24 dev enp29s0np0 src 10.9.0.5 table 102".to_string()
    ));
    assert!(calls.contains(&"ip rule add from 10.9.0.5/32 table 102 priority 1002".to_string()));
    assert!(
        !calls
            .iter()
            .any(|c| c.contains("default") && c.contains("enp29s0np0"))
    );
}

#[test]
fn run_layer_records_each_layers_outcome() {
    let host = Host::new(&input());
    let runner = host.path("/usr/local/lib/metalform/run-layer");
    let run = |args: &[&str]| {
        Command::new("/bin/sh")
            .arg(&runner)
            .args(args)
            .env("METALFORM_ROOT", &host.root)
            .output()
            .unwrap()
    };
    let ok = run(&["site-bundle", "3", "sh", "-c", "echo bundle ran"]);
    assert!(ok.status.success());
    let marker = host.file("/var/lib/metalform/layers/site-bundle");
    assert!(
        marker.starts_with("layer=site-bundle\nversion=3\nstatus=ok\nexit=0\n"),
        "{marker}"
    );
    assert_eq!(
        host.file("/var/log/metalform/layer-site-bundle.log"),
        "bundle ran\n"
    );
    let failed = run(&["data-disks", "1", "sh", "-c", "echo boom >&2; exit 7"]);
    assert_eq!(failed.status.code(), Some(7));
    assert!(
        host.file("/var/lib/metalform/layers/data-disks")
            .contains("status=failed\nexit=7\n")
    );
    assert!(
        String::from_utf8_lossy(&failed.stdout)
            .contains("metalform layer data-disks 1: failed (exit 7")
    );
}

#[test]
fn site_bundle_runs_the_referenced_version_and_fails_clearly_without_it() {
    let host = Host::new(&input());
    let missing = host.run("site-bundle", &[]);
    assert_eq!(missing.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("site bundle bundles/dc1-base@3: "));
    let entry = host.path("/opt/metalform/site-bundles/bundles/dc1-base/3/bootstrap");
    std::fs::create_dir_all(entry.parent().unwrap()).unwrap();
    std::fs::write(
        &entry,
        "#!/bin/sh\necho \"bundle $METALFORM_SITE_BUNDLE_REF $METALFORM_SITE_BUNDLE_VERSION\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o755)).unwrap();
    let ran = host.run("site-bundle", &[]);
    assert!(ran.status.success(), "{}", text(&ran));
    assert!(String::from_utf8_lossy(&ran.stdout).contains("bundle bundles/dc1-base 3"));

    // A URL reference is fetched as REF/VERSION/bootstrap.
    let mut by_url = input();
    by_url.site_bundle = Some(SiteBundle {
        reference: "https://bundles.example/dc1-base".into(),
        version: "4".into(),
    });
    let host = Host::new(&by_url);
    host.fake(
        "curl",
        r#"while [ $# -gt 1 ]; do [ "$1" = -o ] && out=$2; shift; done; printf '#!/bin/sh\necho fetched bundle\n' >"$out""#,
    );
    let ran = host.run("site-bundle", &[]);
    assert!(ran.status.success(), "{}", text(&ran));
    assert!(String::from_utf8_lossy(&ran.stdout).contains("fetched bundle"));
    assert!(
        host.calls()[0].ends_with(" https://bundles.example/dc1-base/4/bootstrap"),
        "{:?}",
        host.calls()
    );
}

#[test]
fn hw_sync_waits_for_its_credentials_then_reports_to_maas() {
    let host = Host::new(&input());
    let waiting = host.run("hw-sync", &[]);
    assert!(waiting.status.success());
    assert!(
        String::from_utf8_lossy(&waiting.stdout)
            .contains("hardware sync waits for /etc/maas/maas-machine-creds.yml")
    );
    assert!(host.calls().is_empty());
    // After deploy metalform writes the credentials; maas-run-scripts is fetched from MAAS.
    std::fs::create_dir_all(host.path("/etc/maas")).unwrap();
    std::fs::write(
        host.path("/etc/maas/maas-machine-creds.yml"),
        "reporting: {}\n",
    )
    .unwrap();
    host.fake(
        "curl",
        &format!(
            r#"while [ $# -gt 1 ]; do [ "$1" = -o ] && out=$2; shift; done; printf '#!/bin/sh\necho "maas-run-scripts $*" >>"{}"\n' >"$out""#,
            host.calls.display()
        ),
    );
    let synced = host.run("hw-sync", &[]);
    assert!(synced.status.success(), "{}", text(&synced));
    let calls = host.calls();
    assert!(
        calls[0].starts_with("curl ")
            && calls[0].ends_with(" http://10.176.46.1:5240/MAAS/maas-run-scripts"),
        "{calls:?}"
    );
    assert_eq!(
        calls[1],
        format!(
            "maas-run-scripts report-results --config {}",
            host.path("/etc/maas/maas-machine-creds.yml").display()
        )
    );
}

#[test]
fn every_script_is_valid_posix_sh() {
    for (name, script) in cloudinit::SCRIPTS {
        let dir = tempfile::tempdir().unwrap();
        let path: &Path = &dir.path().join(name);
        std::fs::write(path, script).unwrap();
        let out = Command::new("/bin/sh")
            .arg("-n")
            .arg(path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {}", text(&out));
        assert!(script.starts_with("#!/bin/sh\n"), "{name}");
    }
}
