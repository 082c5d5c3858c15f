//! Pre-deploy preparation (seed 000 §4.3 ConfigureStorage, ApplyRoCEPhase2,
//! EnsurePxeInterfaceAuto; §4.6: BOSS disk not found fails at once, PXE validation is retried
//! once after re-linking and fails under strict preflight; §4.10: each only while the machine
//! is editable). Unlike §4.6's "RoCE problems are not fatal", a RoCE assignment MAAS did not
//! take fails the stage (issue 15): a node without its RoCE addresses is not what was asked.

use crate::lifecycle::MaasStatus;
use serde_json::json;

use super::StageCtx;
use super::commission::{adopt_advanced, unexpected};
use crate::lifecycle::FailureClass;
use crate::provider::maas::{
    AppliedLayout, BlockDevice, CreateSubnetParams, Interface, LinkMode, LinkRequest,
    LinkSubnetParams, MaasClient, MaasError, MachineStanding, MachineSummary, StorageLayout,
    StorageLayoutParams, SubnetRef,
};
use crate::stages::{Retry, StageFailure, StageOutcome};

/// The machine as just read, when MAAS still lets us edit it; the adoption jump otherwise.
fn editable<M: MachineStanding>(
    ctx: &StageCtx<'_>,
    machine: M,
    what: &str,
    allowed: &[MaasStatus],
) -> Result<Result<M, StageOutcome>, StageFailure> {
    if let Some(adopted) = adopt_advanced(ctx, &machine) {
        return adopted.map(Err);
    }
    if allowed.iter().any(|status| machine.status() == *status) {
        Ok(Ok(machine))
    } else {
        Err(unexpected(&machine, what))
    }
}

/// The machine, refreshed, while its interfaces may still be edited (Ready or Allocated), with
/// its interfaces; `Err` carries the outcome of a machine already past that point. Its status is
/// all this decides on (the interfaces are listed apart).
async fn interfaces_of_editable(
    ctx: &mut StageCtx<'_>,
    what: &str,
) -> Result<Result<(MachineSummary, MaasClient, Vec<Interface>), StageOutcome>, StageFailure> {
    let allowed = [MaasStatus::Ready, MaasStatus::Allocated];
    let read = ctx.machine_summary().await?;
    let machine = match editable(ctx, read, what, &allowed)? {
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
    // In full: the layout in place is read from its disks.
    let read = ctx.machine().await?;
    let machine = match editable(ctx, read, "configure storage", &[MaasStatus::Ready])? {
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
    let layout = match ctx.target.profile.storage.layout {
        crate::model::StorageLayout::Flat => StorageLayout::Flat,
        crate::model::StorageLayout::Lvm => StorageLayout::Lvm,
    };
    ctx.facts.boss_disk_id = Some(disk.id);
    ctx.facts.boss_disk_path = disk.id_path.clone();
    // MAAS applied its default layout (flat, on its first disk) when commissioning ended: the
    // layout counts as in place only when it is the profile's, on the boot disk.
    let found = AppliedLayout::of(&machine);
    let boot_set = machine.boot_disk.as_ref().is_some_and(|b| b.id == disk.id);
    let details = json!({
        "boss_disk_id": disk.id, "name": disk.name, "model": disk.model,
        "layout": layout.as_param(), "found": found.name(),
    });
    if boot_set && found.is(&layout, disk.id) {
        return Ok(StageOutcome::Done(crate::stages::StageDone {
            message: format!(
                "boot disk {} ({}) with the {} layout already in place",
                disk.name,
                disk.model,
                layout.as_param()
            ),
            details,
            next: crate::stages::Next::Normal,
            skipped: true,
        }));
    }
    // MAAS builds a layout on the boot disk: set it first, then replace the whole storage
    // configuration (set_storage_layout clears what commissioning's default put there).
    maas.set_boot_disk(&sid, disk.id)
        .await
        .map_err(|e| StageFailure::maas(&e))?;
    let answered = maas
        .set_storage_layout(
            &sid,
            &StorageLayoutParams::new(layout.clone(), Some(disk.id)),
        )
        .await
        .map_err(|e| StageFailure::maas(&e))?;
    ctx.observe(&answered);
    let applied = AppliedLayout::of(&answered);
    let boot_now = answered.boot_disk.as_ref().map(|b| b.id);
    if !applied.is(&layout, disk.id) || boot_now != Some(disk.id) {
        return Err(StageFailure::new(
            FailureClass::HardwareMismatch,
            "storage_layout_not_applied",
            format!(
                "MAAS answered the {} layout request for {sid} with a {} layout on disk {} \
                 (boot disk {}), not the {} layout on {}",
                layout.as_param(),
                applied.name(),
                applied.disk().map_or("none".to_owned(), |d| d.to_string()),
                boot_now.map_or("none".to_owned(), |d| d.to_string()),
                layout.as_param(),
                disk.name
            ),
        )
        .details(json!({
            "system_id": sid, "wanted": layout.as_param(), "boss_disk_id": disk.id,
            "applied": applied.name(), "applied_disk": applied.disk(), "boot_disk": boot_now,
        }))
        .never_retry());
    }
    Ok(StageOutcome::done(
        format!(
            "boot disk {} ({}), {} layout (MAAS had {})",
            disk.name,
            disk.model,
            layout.as_param(),
            found.name()
        ),
        details,
    ))
}

/// RoCE phase 2 (000 §3.3, §4.3): a /31 subnet per assignment, on the RoCE port's own VLAN
/// (commissioning put the unlinked port on a fabric of its own), and a STATIC link of the
/// address on the port, checked in MAAS's answer. A port that is absent, a subnet or link
/// MAAS refuses, or an answer without the link fails the stage: a node deployed without its
/// RoCE addresses is not converged.
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
    let mut applied = Vec::new();
    let mut already = 0u32;
    let mut moved = Vec::new();
    for assignment in &assignments {
        let address = assignment.address.address.to_string();
        let refused = |what: &str, err: &MaasError| roce_refused(&sid, assignment, what, err);
        let Some(interface) = interfaces.iter().find(|i| i.name == assignment.interface) else {
            let names: Vec<&str> = interfaces.iter().map(|i| i.name.as_str()).collect();
            return Err(StageFailure::new(
                FailureClass::HardwareMismatch,
                "roce_interface_not_found",
                format!(
                    "{sid} has no interface {} for RoCE address {} (it has: {})",
                    assignment.interface,
                    assignment.address,
                    names.join(", ")
                ),
            )
            .details(
                json!({"system_id": sid, "interface": assignment.interface, "interfaces": names}),
            )
            .never_retry());
        };
        if roce_linked(interface, &address) {
            already += 1;
            continue;
        }
        let cidr = assignment.address.network().to_string();
        let vlan = interface.vlan.as_ref().map(|v| v.id);
        // The one subnet asked for, not the list (it grows by one per node of a wave).
        let found = maas
            .find_subnet_by_cidr(&cidr)
            .await
            .map_err(|e| StageFailure::maas(&e))?;
        let subnet = match found {
            Some(subnet) => subnet,
            None => {
                // On the port's VLAN: MAAS offers link_subnet only the subnets of it.
                let mut create = CreateSubnetParams::new(cidr.clone());
                create.vlan = vlan;
                maas.create_subnet(&create)
                    .await
                    .map_err(|e| refused(&format!("creating subnet {cidr}"), &e))?
            }
        };
        let subnet_vlan = subnet.vlan.as_ref().map(|v| v.id);
        if let (Some(on), Some(wanted)) = (vlan, subnet_vlan)
            && on != wanted
        {
            // The subnet exists on another VLAN: move the port there first, as an operator
            // would (linking across VLANs is refused unless forced, which drops its links).
            maas.set_interface_vlan(&sid, interface.id, wanted)
                .await
                .map_err(|e| refused(&format!("moving {} to VLAN {wanted}", interface.name), &e))?;
            moved.push(json!({"interface": interface.name, "from_vlan": on, "to_vlan": wanted}));
        }
        let link = LinkSubnetParams::new(LinkRequest::Static {
            subnet: SubnetRef::Id(subnet.id),
            ip_address: Some(assignment.address.address.into()),
        });
        let answered = maas
            .link_subnet(&sid, interface.id, &link)
            .await
            .map_err(|e| refused(&format!("linking {address}"), &e))?;
        if !roce_linked(&answered, &address) {
            return Err(StageFailure::new(
                FailureClass::StateAmbiguity,
                "roce_link_missing",
                format!(
                    "MAAS accepted the STATIC link of {address} on {} of {sid} but its answer \
                     does not show it",
                    interface.name
                ),
            )
            .details(json!({"system_id": sid, "interface": interface.name, "address": address,
                "links": answered.links.iter().map(|l| json!({"mode": l.mode.as_str(), "ip": l.ip_address})).collect::<Vec<_>>()})));
        }
        applied
            .push(json!({"interface": interface.name, "address": address, "subnet": subnet.cidr}));
    }
    ctx.facts.roce_applied = Some(applied.len() as u32 + already);
    Ok(StageOutcome::done(
        format!(
            "{} RoCE address(es) linked, {already} already in place",
            applied.len()
        ),
        json!({"applied": applied, "already": already, "moved": moved}),
    ))
}

/// The interface has the STATIC link of `address`.
fn roce_linked(interface: &Interface, address: &str) -> bool {
    interface
        .links
        .iter()
        .any(|l| l.mode == LinkMode::Static && l.ip_address.as_deref() == Some(address))
}

/// A MAAS refusal while applying a RoCE assignment, classified: MAAS busy is retried, a state
/// conflict is retried within the budget, anything MAAS rejected (a taken address, a subnet it
/// will not create) is the manifest's to fix.
fn roce_refused(
    sid: &str,
    assignment: &crate::model::RoceAssignment,
    what: &str,
    err: &MaasError,
) -> StageFailure {
    let mut failure = StageFailure::maas(err);
    if !err.is_retryable() && !matches!(err, MaasError::Conflict { .. }) {
        failure.class = FailureClass::InputConfigError;
        failure.code = "roce_link_refused".into();
        failure.retry = Retry::Never;
    }
    failure.message = format!(
        "RoCE {} {} of {sid}: {what} failed: {err}",
        assignment.interface, assignment.address
    );
    failure
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
