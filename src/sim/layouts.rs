//! Storage layouts (API_REFERENCE.md §5.17; MAAS src/maasserver/storage_layouts.py).

use super::reply::MaasError;
use super::storage::{EFI_SIZE, Partition};
use super::transport::Params;
use super::world::World;

/// `boot_size` / `root_size` of a storage layout (§5.17).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FlatSizes {
    /// A separate `/boot` partition on the boot disk (none when absent or zero).
    pub boot: Option<LayoutSize>,
    /// The root partition (default: the rest of its disk).
    pub root: Option<LayoutSize>,
}

/// A layout size: bytes, or a percentage of the disk the partition goes on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LayoutSize {
    Bytes(u64),
    Percent(f64),
}

impl LayoutSize {
    pub fn of(self, disk_size: u64) -> u64 {
        match self {
            LayoutSize::Bytes(bytes) => bytes,
            LayoutSize::Percent(percent) => (disk_size as f64 * percent / 100.0) as u64,
        }
    }
}

/// MAAS's size syntax: bytes, a K/M/G/T/P suffix (decimal multiples, optional `B`), or `NN%`.
pub(super) fn layout_size(p: &Params, field: &str) -> Result<Option<LayoutSize>, MaasError> {
    let Some(text) = p.get(field).map(str::trim).filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let invalid = || {
        MaasError::field(
            field,
            format!("'{text}' is not a size: bytes, a K/M/G/T/P suffix, or a percentage."),
        )
    };
    if let Some(percent) = text.strip_suffix('%') {
        let value: f64 = percent.trim().parse().map_err(|_| invalid())?;
        if !(value > 0.0 && value <= 100.0) {
            return Err(invalid());
        }
        return Ok(Some(LayoutSize::Percent(value)));
    }
    let digits = text.trim_end_matches(['B', 'b']);
    let (number, multiplier) = match digits.chars().last() {
        Some(c) if c.is_ascii_digit() => (digits, 1u64),
        Some(c) => {
            let power = match c.to_ascii_uppercase() {
                'K' => 1,
                'M' => 2,
                'G' => 3,
                'T' => 4,
                'P' => 5,
                _ => return Err(invalid()),
            };
            (&digits[..digits.len() - 1], 1000u64.pow(power))
        }
        None => return Err(invalid()),
    };
    let value: u64 = number.trim().parse().map_err(|_| invalid())?;
    value
        .checked_mul(multiplier)
        .map(|bytes| Some(LayoutSize::Bytes(bytes)))
        .ok_or_else(invalid)
}

impl World {
    /// Flat layout: EFI (and `/boot` with a `boot_size`) on the boot disk, root ext4 on
    /// `root` (or the boot disk), `root_size` or the rest of that disk. Sizes that do not fit
    /// are MAAS's `Failed to configure storage layout 'flat': …`.
    pub(super) fn apply_flat_layout(
        &mut self,
        id: u64,
        root: Option<u64>,
        sizes: FlatSizes,
    ) -> Result<(), MaasError> {
        let uuids: Vec<String> = (0..6).map(|_| self.uuid()).collect();
        let (efi_id, boot_id, root_id) = (self.id(), self.id(), self.id());
        let m = self
            .machines
            .get_mut(&id)
            .ok_or_else(MaasError::no_machine)?;
        let boot = m
            .boot_disk_id
            .or(m.disks.first().map(|d| d.id))
            .ok_or_else(|| {
                MaasError::BadRequest(
                    "Machine is missing a boot disk; no storage layout can be applied.".to_string(),
                )
            })?;
        let root = root.unwrap_or(boot);
        let overhead = 8 * 1024 * 1024;
        let mut layout: Vec<(u64, Vec<Partition>)> = Vec::new();
        for disk in &m.disks {
            let mut partitions = Vec::new();
            if disk.id == boot {
                partitions.push(Partition {
                    id: efi_id,
                    uuid: uuids[0].clone(),
                    size: EFI_SIZE,
                    bootable: true,
                    fstype: "fat32",
                    label: "efi",
                    mount_point: "/boot/efi",
                    fs_uuid: uuids[1].clone(),
                });
                if let Some(size) = sizes.boot.map(|s| s.of(disk.size)).filter(|s| *s > 0) {
                    partitions.push(Partition {
                        id: boot_id,
                        uuid: uuids[2].clone(),
                        size,
                        bootable: true,
                        fstype: "ext4",
                        label: "boot",
                        mount_point: "/boot",
                        fs_uuid: uuids[3].clone(),
                    });
                }
            }
            if disk.id == root {
                let used: u64 = partitions.iter().map(|p| p.size).sum();
                let available = disk.size.saturating_sub(used + overhead);
                let size = sizes.root.map_or(available, |s| s.of(disk.size));
                partitions.push(Partition {
                    id: root_id,
                    uuid: uuids[4].clone(),
                    size,
                    bootable: false,
                    fstype: "ext4",
                    label: "root",
                    mount_point: "/",
                    fs_uuid: uuids[5].clone(),
                });
            }
            let needed: u64 = partitions.iter().map(|p| p.size).sum::<u64>()
                + if partitions.is_empty() { 0 } else { overhead };
            if needed > disk.size {
                return Err(MaasError::BadRequest(format!(
                    "Failed to configure storage layout 'flat': the partitions need {needed} bytes, \
                     {} has {}.",
                    disk.name, disk.size
                )));
            }
            layout.push((disk.id, partitions));
        }
        for (disk, (disk_id, partitions)) in m.disks.iter_mut().zip(layout) {
            debug_assert_eq!(disk.id, disk_id);
            disk.partitions = partitions;
        }
        Ok(())
    }
}
