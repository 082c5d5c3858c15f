//! What the agent reads of its host, from files under a root (`/` on a node; a prepared
//! directory in tests): accounts (`/etc/passwd`), processes (`/proc/<pid>/status`), mounts
//! (`/proc/mounts`), GPUs on the PCI bus (`/sys/bus/pci/devices/*/{vendor,class}`). Reading is
//! never a change, so it happens in dry runs too.

use std::path::{Path, PathBuf};

/// The host's files, seen from `root`.
#[derive(Debug, Clone)]
pub struct HostView {
    root: PathBuf,
}

/// An account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub uid: u32,
    pub home: String,
}

/// A mounted filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub source: String,
    pub target: String,
    pub fstype: String,
}

/// A GPU vendor the agent knows how to scrub.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Vendor {
    Nvidia,
    Amd,
}

impl Vendor {
    pub fn name(self) -> &'static str {
        match self {
            Vendor::Nvidia => "NVIDIA",
            Vendor::Amd => "AMD",
        }
    }
}

/// A GPU on the PCI bus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciGpu {
    pub address: String,
    pub vendor: Vendor,
}

impl HostView {
    pub fn new(root: impl Into<PathBuf>) -> HostView {
        HostView { root: root.into() }
    }

    /// `path` (absolute on the host) under the root.
    pub fn path(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    pub fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.path(path)).ok()
    }

    pub fn exists(&self, path: &str) -> bool {
        self.path(path).exists()
    }

    /// `/etc/passwd`.
    pub fn accounts(&self) -> Vec<Account> {
        self.read("/etc/passwd")
            .unwrap_or_default()
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split(':').collect();
                if fields.len() < 7 || line.starts_with('#') {
                    return None;
                }
                Some(Account {
                    name: fields[0].to_owned(),
                    uid: fields[2].parse().ok()?,
                    home: fields[5].to_owned(),
                })
            })
            .collect()
    }

    /// Processes and their real user id, from `/proc/<pid>/status`.
    pub fn processes(&self) -> Vec<(u32, u32)> {
        let Ok(entries) = std::fs::read_dir(self.path("/proc")) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
                continue;
            };
            let uid = status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|uid| uid.parse::<u32>().ok());
            if let Some(uid) = uid {
                found.push((pid, uid));
            }
        }
        found.sort_unstable();
        found
    }

    /// `/proc/mounts` (octal escapes in paths decoded).
    pub fn mounts(&self) -> Vec<Mount> {
        self.read("/proc/mounts")
            .unwrap_or_default()
            .lines()
            .filter_map(|line| {
                let mut fields = line.split_whitespace();
                Some(Mount {
                    source: unescape(fields.next()?),
                    target: unescape(fields.next()?),
                    fstype: fields.next()?.to_owned(),
                })
            })
            .collect()
    }

    /// GPUs by PCI vendor id (NVIDIA 0x10de, AMD 0x1002) and class (display controllers 0x03xx
    /// and processing accelerators 0x12xx: an MI300X is the latter).
    pub fn pci_gpus(&self) -> Vec<PciGpu> {
        let Ok(entries) = std::fs::read_dir(self.path("/sys/bus/pci/devices")) else {
            return Vec::new();
        };
        let mut gpus: Vec<PciGpu> = entries
            .flatten()
            .filter_map(|entry| {
                let read = |name: &str| {
                    std::fs::read_to_string(entry.path().join(name))
                        .ok()
                        .map(|s| s.trim().to_ascii_lowercase())
                };
                let vendor = match read("vendor")?.as_str() {
                    "0x10de" => Vendor::Nvidia,
                    "0x1002" => Vendor::Amd,
                    _ => return None,
                };
                let class = read("class")?;
                let class = class.trim_start_matches("0x");
                if !(class.starts_with("03") || class.starts_with("12")) {
                    return None;
                }
                Some(PciGpu {
                    address: entry.file_name().to_string_lossy().into_owned(),
                    vendor,
                })
            })
            .collect();
        gpus.sort_by(|a, b| a.address.cmp(&b.address));
        gpus
    }
}

/// `/proc/mounts` writes space, tab, newline and backslash as `\040` etc.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let value =
                (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(value);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The whole disk a block device is on: `/dev/nvme0n1p2` → `nvme0n1`, `/dev/sda1` → `sda`.
pub fn disk_of(device: &str) -> Option<String> {
    let name = Path::new(device).file_name()?.to_str()?;
    if !device.starts_with("/dev/") {
        return None;
    }
    let base = if name.starts_with("nvme") || name.starts_with("mmcblk") {
        match name.rfind('p') {
            Some(i) if i + 1 < name.len() && name[i + 1..].chars().all(|c| c.is_ascii_digit()) => {
                &name[..i]
            }
            _ => name,
        }
    } else {
        name.trim_end_matches(|c: char| c.is_ascii_digit())
    };
    Some(base.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> (tempfile::TempDir, HostView) {
        let dir = tempfile::tempdir().unwrap();
        let view = HostView::new(dir.path());
        (dir, view)
    }

    fn write(view: &HostView, path: &str, text: &str) {
        let path = view.path(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn accounts_processes_and_mounts_are_read_from_the_root() {
        let (_dir, view) = host();
        write(
            &view,
            "/etc/passwd",
            "root:x:0:0:root:/root:/bin/bash\n# comment\nalice:x:1001:1001::/home/alice:/bin/bash\nbroken\n",
        );
        write(
            &view,
            "/proc/4711/status",
            "Name:\tpython\nUid:\t1001\t1001\t1001\t1001\n",
        );
        write(&view, "/proc/1/status", "Name:\tinit\nUid:\t0\t0\t0\t0\n");
        write(&view, "/proc/self/status", "Uid:\t0\n");
        write(
            &view,
            "/proc/mounts",
            "/dev/nvme0n1p2 / ext4 rw 0 0\nweka01/fs1 /mnt/weka\\040data wekafs rw 0 0\n",
        );
        assert_eq!(
            view.accounts(),
            vec![
                Account {
                    name: "root".into(),
                    uid: 0,
                    home: "/root".into()
                },
                Account {
                    name: "alice".into(),
                    uid: 1001,
                    home: "/home/alice".into()
                },
            ]
        );
        assert_eq!(view.processes(), vec![(1, 0), (4711, 1001)]);
        assert_eq!(view.mounts()[1].target, "/mnt/weka data");
        assert_eq!(view.mounts()[1].fstype, "wekafs");
    }

    #[test]
    fn gpus_are_found_by_vendor_and_class() {
        let (_dir, view) = host();
        for (address, vendor, class) in [
            ("0000:01:00.0", "0x10de", "0x030200"),
            ("0000:02:00.0", "0x1002", "0x120000"),
            ("0000:03:00.0", "0x1002", "0x040300"), // AMD audio: not a GPU
            ("0000:04:00.0", "0x8086", "0x030000"), // Intel display: not scrubbed
        ] {
            write(
                &view,
                &format!("/sys/bus/pci/devices/{address}/vendor"),
                &format!("{vendor}\n"),
            );
            write(
                &view,
                &format!("/sys/bus/pci/devices/{address}/class"),
                &format!("{class}\n"),
            );
        }
        assert_eq!(
            view.pci_gpus(),
            vec![
                PciGpu {
                    address: "0000:01:00.0".into(),
                    vendor: Vendor::Nvidia
                },
                PciGpu {
                    address: "0000:02:00.0".into(),
                    vendor: Vendor::Amd
                },
            ]
        );
    }

    #[test]
    fn the_disk_of_a_partition() {
        assert_eq!(disk_of("/dev/nvme0n1p2").as_deref(), Some("nvme0n1"));
        assert_eq!(disk_of("/dev/nvme0n1").as_deref(), Some("nvme0n1"));
        assert_eq!(disk_of("/dev/sda1").as_deref(), Some("sda"));
        assert_eq!(disk_of("/dev/mmcblk0p1").as_deref(), Some("mmcblk0"));
        assert_eq!(disk_of("tmpfs"), None);
    }
}
