//! Block devices and storage layouts as the API changes them (API_REFERENCE.md §5.17–§5.18;
//! MAAS api/machines.py `set_storage_layout`, api/blockdevices.py `set_boot_disk`).

use super::layouts::{FlatSizes, layout_size};
use super::model::Caller;
use super::reply::MaasError;
use super::status::Status;
use super::transport::Params;
use super::world::{Perm, World};

impl World {
    /// `POST machines/{id}/?op=set_storage_layout`.
    pub fn set_storage_layout(
        &mut self,
        caller: &Caller,
        system_id: &str,
        p: &Params,
    ) -> Result<(), MaasError> {
        let id = self.node_for(caller, system_id, Perm::Admin)?;
        if self.machines[&id].status != Status::Ready {
            return Err(MaasError::Conflict(
                "Cannot change the storage layout on a machine that is not Ready.".to_string(),
            ));
        }
        let layout = match p.get("storage_layout") {
            None | Some("") => {
                return Err(MaasError::field(
                    "storage_layout",
                    "This field is required.",
                ));
            }
            Some(l) => l,
        };
        if !matches!(
            layout,
            "flat" | "lvm" | "bcache" | "vmfs6" | "vmfs7" | "custom" | "blank"
        ) {
            return Err(MaasError::field(
                "storage_layout",
                format!("Select a valid choice. {layout} is not one of the available choices."),
            ));
        }
        let m = &self.machines[&id];
        if m.disks.is_empty() {
            return Err(MaasError::BadRequest(
                "Machine is missing a boot disk; no storage layout can be applied.".to_string(),
            ));
        }
        let root = match p.get("root_device") {
            None | Some("") => None,
            Some(value) => Some(
                value
                    .parse::<u64>()
                    .ok()
                    .filter(|v| m.disks.iter().any(|d| d.id == *v))
                    .ok_or_else(|| {
                        MaasError::field(
                            "root_device",
                            format!("Select a valid choice. {value} is not one of the available choices."),
                        )
                    })?,
            ),
        };
        let sizes = FlatSizes {
            boot: layout_size(p, "boot_size")?,
            root: layout_size(p, "root_size")?,
        };
        match layout {
            "flat" => self.apply_flat_layout(id, root, sizes),
            "blank" => {
                if let Some(m) = self.machines.get_mut(&id) {
                    for d in &mut m.disks {
                        d.partitions.clear();
                    }
                }
                Ok(())
            }
            other => Err(MaasError::BadRequest(format!(
                "Failed to configure storage layout '{other}': the simulator implements only the flat and blank layouts."
            ))),
        }
    }
    /// `POST nodes/{id}/blockdevices/{bd}/?op=set_boot_disk`.
    pub fn set_boot_disk(
        &mut self,
        caller: &Caller,
        system_id: &str,
        device: &str,
    ) -> Result<(), MaasError> {
        let id = self.node_for(caller, system_id, Perm::Admin)?;
        let disk = self.find_disk(id, device)?;
        if self.machines[&id].status != Status::Ready {
            return Err(MaasError::Conflict(
                "Cannot set as boot disk because the machine is not Ready.".to_string(),
            ));
        }
        if let Some(m) = self.machines.get_mut(&id) {
            m.boot_disk_id = Some(disk);
        }
        Ok(())
    }
    /// A block device by id or name.
    pub fn find_disk(&self, id: u64, device: &str) -> Result<u64, MaasError> {
        self.machines[&id]
            .disks
            .iter()
            .find(|d| d.id.to_string() == device || d.name == device)
            .map(|d| d.id)
            .ok_or_else(|| {
                MaasError::NotFound("No BlockDevice matches the given query.".to_string())
            })
    }
}
