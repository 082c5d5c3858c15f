//! Pre-deploy preparation (seed 000 §4.3 ConfigureStorage, ApplyRoCEPhase2,
//! EnsurePxeInterfaceAuto; §4.6: BOSS disk not found fails at once, RoCE problems are not fatal,
//! PXE validation is retried once after re-linking and fails under strict preflight; §4.10:
//! each only while the machine is editable).

use crate::lifecycle::MaasStatus;
use serde_json::json;

use super::StageCtx;
use super::commission::{adopt_advanced, unexpected};
use crate::lifecycle::FailureClass;
use crate::provider::maas::{
    BlockDevice, CreateSubnetParams, Interface, LinkMode, LinkRequest, LinkSubnetParams,
    MaasClient, Machine, StorageLayout, StorageLayoutParams, SubnetRef,
};
use crate::stages::{StageFailure, StageOutcome};

/// The machine, refreshed, when MAAS still lets us edit it; the adoption jump otherwise.
async fn editable(
    ctx: &mut StageCtx<'_>,
    what: &str,
    allowed: &[MaasStatus],
) -> Result<Result<Machine, StageOutcome>, StageFailure> {
    let machine = ctx.machine().await?;
    if let Some(adopted) = adopt_advanced(ctx, &machine) {
        return adopted.map(Err);
    }
    if allowed.iter().any(|status| machine.status == *status) {
        Ok(Ok(machine))
    } else {
        Err(unexpected(&machine, what))
    }
}

/// The machine, while its interfaces may still be edited (Ready or Allocated), with its
/// interfaces; `Err` carries the outcome of a machine already past that point.
async fn interfaces_of_editable(
    ctx: &mut StageCtx<'_>,
    what: &str,
) -> Result<Result<(Machine, MaasClient, Vec<Interface>), StageOutcome>, StageFailure> {
    let allowed = [MaasStatus::Ready, MaasStatus::Allocated];
    let machine = match editable(ctx, what, &allowed).await? {
        Ok(machine) => machine,
        Err(jump) => return Ok(Err(jump)),
    };
    let maas = ctx.maas().await?;
    let interfaces = maas
        .list_interfaces(&machine.system_id)
        .await
        .map_err(|e| StageFailure::maas(&e))?;
    Ok(Ok((machine, maas, interfaces)))
}

/// Whether a block device is the profile's boot disk (by model, name or id_path).
fn is_boot_disk(ctx: &StageCtx<'_>, device: &BlockDevice) -> bool {
    let pattern = &ctx.target.profile.storage.boot_disk;
    device.device_type != "virtual"
        && (pattern.is_match(&device.model)
            || pattern.is_match(&device.name)
            || device
                .id_path
                .as_deref()
                .is_some_and(|p| pattern.is_match(p)))
}

pub(super) async fn ensure_storage_configured(
    ctx: &mut StageCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    let machine = match editable(ctx, "configure storage", &[MaasStatus::Ready]).await? {
        Ok(machine) => machine,
        Err(jump) => return Ok(jump),
    };
    let maas = ctx.maas().await?;
    let sid = machine.system_id.clone();
    let devices = maas
        .list_block_devices(&sid)
        .await
        .map_err(|e| StageFailure::maas(&e))?;
    let mut candidates: Vec<&BlockDevice> =
        devices.iter().filter(|d| is_boot_disk(ctx, d)).collect();
    candidates.sort_by_key(|d| d.id);
    let Some(disk) = candidates.first() else {
        let seen: Vec<String> = devices
            .iter()
            .map(|d| format!("{} ({})", d.name, d.model))
            .collect();
        return Err(StageFailure::new(
            FailureClass::HardwareMismatch,
            "boot_disk_not_found",
            format!(
                "no block device of {sid} matches {} (found: {})",
                ctx.target.profile.storage.boot_disk.pattern(),
                if seen.is_empty() { "none".to_owned() } else { seen.join(", ") }
            ),
        )
        .details(json!({"system_id": sid, "devices": seen, "pattern": ctx.target.profile.storage.boot_disk.pattern()}))
        .never_retry());
    };
    let root_in_place = disk.partitions.iter().any(|p| {
        p.filesystem
            .as_ref()
            .is_some_and(|f| f.mount_point.as_deref() == Some("/"))
    });
    let boot_set = machine.boot_disk.as_ref().is_some_and(|b| b.id == disk.id);
    ctx.facts.boss_disk_id = Some(disk.id);
    ctx.facts.boss_disk_path = disk.id_path.clone();
    let details = json!({"boss_disk_id": disk.id, "name": disk.name, "model": disk.model});
    if boot_set && root_in_place {
        return Ok(StageOutcome::Done(crate::stages::StageDone {
            message: format!(
                "boot disk {} ({}) and layout already in place",
                disk.name, disk.model
            ),
            details,
            next: crate::stages::Next::Normal,
            skipped: true,
        }));
    }
    maas.set_boot_disk(&sid, disk.id)
        .await
        .map_err(|e| StageFailure::maas(&e))?;
    let layout = match ctx.target.profile.storage.layout {
        crate::model::StorageLayout::Flat => StorageLayout::Flat,
        crate::model::StorageLayout::Lvm => StorageLayout::Lvm,
    };
    maas.set_storage_layout(
        &sid,
        &StorageLayoutParams {
            layout: layout.clone(),
            root_device: Some(disk.id),
            boot_size: None,
            root_size: None,
        },
    )
    .await
    .map_err(|e| StageFailure::maas(&e))?;
    Ok(StageOutcome::done(
        format!(
            "boot disk {} ({}), {} layout",
            disk.name,
            disk.model,
            layout.as_param()
        ),
        details,
    ))
}

/// RoCE phase 2 (000 §3.3, §4.3): a /31 subnet per assignment and a STATIC link on the named
/// interface. Not fatal: an absent interface or a refused link is a warning on the job.
pub(super) async fn ensure_roce_phase2_applied(
    ctx: &mut StageCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    let assignments = ctx.target.node.roce.clone();
    if !ctx.target.profile.roce.enabled {
        return Ok(StageOutcome::skipped(
            "RoCE phase 2 disabled by the profile",
        ));
    }
    if assignments.is_empty() {
        return Ok(StageOutcome::skipped("no RoCE assignments for this node"));
    }
    let (machine, maas, interfaces) =
        match interfaces_of_editable(ctx, "link RoCE interfaces").await? {
            Ok(found) => found,
            Err(jump) => return Ok(jump),
        };
    let sid = machine.system_id.clone();
    let mut subnets = maas
        .list_subnets()
        .await
        .map_err(|e| StageFailure::maas(&e))?;
    let mut applied = 0u32;
    let mut already = 0u32;
    let mut warnings = Vec::new();
    for assignment in &assignments {
        let address = assignment.address.address.to_string();
        let Some(interface) = interfaces.iter().find(|i| i.name == assignment.interface) else {
            warnings.push(format!(
                "RoCE interface {} not found on {sid}; {} not applied",
                assignment.interface, assignment.address
            ));
            continue;
        };
        let linked = interface.links.iter().any(|l| {
            l.mode == LinkMode::Static && l.ip_address.as_deref() == Some(address.as_str())
        });
        if linked {
            already += 1;
            continue;
        }
        let cidr = assignment.address.network().to_string();
        let subnet = match subnets.iter().find(|s| s.cidr == cidr) {
            Some(subnet) => subnet.id,
            None => match maas
                .create_subnet(&CreateSubnetParams::new(cidr.clone()))
                .await
            {
                Ok(subnet) => {
                    let id = subnet.id;
                    subnets.push(subnet);
                    id
                }
                Err(err) if err.is_retryable() => return Err(StageFailure::maas(&err)),
                Err(err) => {
                    warnings.push(format!("subnet {cidr} could not be created: {err}"));
                    continue;
                }
            },
        };
        let link = LinkSubnetParams::new(LinkRequest::Static {
            subnet: SubnetRef::Id(subnet),
            ip_address: Some(assignment.address.address.into()),
        });
        match maas.link_subnet(&sid, interface.id, &link).await {
            Ok(_) => applied += 1,
            Err(err) if err.is_retryable() => return Err(StageFailure::maas(&err)),
            Err(err) => warnings.push(format!(
                "RoCE link {} {} refused: {err}",
                assignment.interface, assignment.address
            )),
        }
    }
    for warning in &warnings {
        ctx.facts.warn(warning.clone());
    }
    ctx.facts.roce_applied = Some(applied + already);
    Ok(StageOutcome::done(
        format!(
            "{applied} RoCE address(es) linked, {already} already in place{}",
            if warnings.is_empty() {
                String::new()
            } else {
                format!(", {} warning(s)", warnings.len())
            }
        ),
        json!({"applied": applied, "already": already, "warnings": warnings}),
    ))
}

/// The node's PXE interface has an AUTO or DHCP link to a subnet (000 §4.3
/// EnsurePxeInterfaceAuto), re-linked as AUTO when not.
pub(super) async fn ensure_pxe_interface_auto(
    ctx: &mut StageCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    let (machine, maas, interfaces) =
        match interfaces_of_editable(ctx, "check the PXE interface").await? {
            Ok(found) => found,
            Err(jump) => return Ok(jump),
        };
    let sid = machine.system_id.clone();
    let name = ctx.target.profile.network.node_pxe_iface.clone();
    let Some(interface) = interfaces.iter().find(|i| i.name == name) else {
        let names: Vec<&str> = interfaces.iter().map(|i| i.name.as_str()).collect();
        return Err(StageFailure::new(
            FailureClass::HardwareMismatch,
            "pxe_interface_not_found",
            format!(
                "{sid} has no interface {name} (the profile's node PXE interface); it has: {}",
                names.join(", ")
            ),
        )
        .details(json!({"system_id": sid, "interface": name, "interfaces": names}))
        .never_retry());
    };
    if valid_pxe_link(interface) {
        return Ok(StageOutcome::skipped(format!(
            "{name} already has an AUTO/DHCP link"
        )));
    }
    let strict = ctx.target.profile.preflight.strict_pxe;
    // The subnet to link: one the interface is already attached to, else one on its VLAN.
    let mut subnet = interface
        .links
        .iter()
        .find_map(|l| l.subnet.as_ref().map(|s| s.id));
    if subnet.is_none()
        && let Some(vlan) = &interface.vlan
    {
        let subnets = maas
            .list_subnets()
            .await
            .map_err(|e| StageFailure::maas(&e))?;
        subnet = subnets
            .iter()
            .find(|s| s.vlan.as_ref().is_some_and(|v| v.id == vlan.id))
            .map(|s| s.id);
    }
    let Some(subnet) = subnet else {
        let message = format!(
            "{name} of {sid} has no subnet to link AUTO (no VLAN with a subnet): wrong PXE wiring?"
        );
        if strict {
            return Err(StageFailure::new(
                FailureClass::HardwareMismatch,
                "pxe_interface_unlinked",
                message,
            )
            .details(json!({"system_id": sid, "interface": name})));
        }
        ctx.facts.warn(message.clone());
        return Ok(StageOutcome::done(
            format!("{message} (strict PXE preflight is off; continuing)"),
            json!({"interface": name, "linked": false}),
        ));
    };
    for link in &interface.links {
        maas.unlink_subnet(&sid, interface.id, link.id)
            .await
            .map_err(|e| StageFailure::maas(&e))?;
    }
    let relinked = maas
        .link_subnet(
            &sid,
            interface.id,
            &LinkSubnetParams::new(LinkRequest::Auto {
                subnet: SubnetRef::Id(subnet),
            }),
        )
        .await
        .map_err(|e| StageFailure::maas(&e))?;
    if !valid_pxe_link(&relinked) && strict {
        // 000 §4.6: retried once after re-linking, then fail under strict preflight.
        return Err(StageFailure::new(
            FailureClass::HardwareMismatch,
            "pxe_interface_unlinked",
            format!("{name} of {sid} still has no AUTO/DHCP link after re-linking"),
        ));
    }
    Ok(StageOutcome::done(
        format!("{name} re-linked AUTO to subnet {subnet}"),
        json!({"interface": name, "subnet": subnet, "relinked": true}),
    ))
}

fn valid_pxe_link(interface: &Interface) -> bool {
    interface
        .links
        .iter()
        .any(|l| matches!(l.mode, LinkMode::Auto | LinkMode::Dhcp) && l.subnet.is_some())
}
