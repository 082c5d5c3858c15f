//! `create_or_find_in_maas` (seed 000 §4.3, §4.16 discovery ambiguity policy, §4.6 retries,
//! §4.10 "lookup-first, adopt existing machine if present").
//!
//! Lookup order: the machine the journal already bound; the hostname; the IPMI
//! `power_address`; the PXE MAC when the manifest names one. Without a match a machine is
//! created only when its PXE MAC is known (MAAS cannot commission an IPMI machine created
//! without MACs: it has no interface); otherwise the BMC PXE-boots the machine and MAAS
//! enlists it. A machine that enlists during this run is claimed when its BMC address is the
//! node's, or when it is the only one that appeared and MAAS recorded no BMC address for it
//! (one with another address is some other node's); several candidates fail closed; a `New`
//! machine from before this run (without a BMC address) is claimed only when the profile
//! allows `autoClaimSingleNewMachine`.

use crate::lifecycle::MaasStatus;
use std::collections::BTreeMap;

use serde_json::json;

use super::{DiscoveryFacts, StageCtx, power_credentials};
use crate::lifecycle::PolicyTimeout;
use crate::provider::bmc::{BootDevice, PowerAction};
use crate::provider::maas::{CreateMachineParams, MaasClient, Machine, MachineFilter};
use crate::stages::{StageFailure, StageOutcome};

pub(super) async fn ensure_machine_in_maas(
    ctx: &mut StageCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    if ctx.facts.system_id.is_some() {
        // Bound earlier: refresh, and fail closed when it vanished (000 §4.11). Its name and
        // status are all this needs.
        let machine = ctx.machine_summary().await?;
        return Ok(StageOutcome::Done(crate::stages::StageDone {
            message: format!(
                "{} is {} ({})",
                machine.hostname,
                machine.system_id,
                machine.status_label()
            ),
            details: json!({"system_id": machine.system_id, "status": machine.status_label()}),
            next: crate::stages::Next::Normal,
            skipped: true,
        }));
    }
    let maas = ctx.maas().await?;
    let hostname = ctx.target.hostname().to_owned();
    let bmc = ctx.target.node.bmc.ipmi_ip.to_string();
    let by_hostname = maas
        .list_machines(&MachineFilter::all().hostname(&hostname))
        .await
        .map_err(|e| StageFailure::maas(&e))?;
    if let [machine] = by_hostname.as_slice() {
        // Only this machine's BMC address matters: ask for its power parameters alone (every
        // machine's grow with the site, and a wave reads them once per node).
        let power = maas
            .power_parameters(std::slice::from_ref(&machine.system_id))
            .await
            .map_err(|e| StageFailure::maas(&e))?;
        if let Some(other) = power
            .get(&machine.system_id)
            .and_then(|p| p.power_address.as_ref())
            && other != &bmc
        {
            return Err(StageFailure::ambiguity(
                "hostname_bmc_mismatch",
                format!(
                    "MAAS has {hostname} ({}) with BMC {other}, but the manifest says {bmc}",
                    machine.system_id
                ),
            )
            .details(
                json!({"system_id": machine.system_id, "maas_bmc": other, "manifest_bmc": bmc}),
            ));
        }
        return Ok(bind(ctx, machine, "hostname"));
    }
    let addresses = maas
        .power_addresses(&[])
        .await
        .map_err(|e| StageFailure::maas(&e))?;
    let with_bmc: Vec<&String> = addresses
        .iter()
        .filter(|(_, address)| address.as_deref() == Some(bmc.as_str()))
        .map(|(system_id, _)| system_id)
        .collect();
    match with_bmc.as_slice() {
        [system_id] => {
            let machine = read(&maas, system_id).await?;
            return Ok(bind(ctx, &machine, "power_address"));
        }
        [] => {}
        several => {
            return Err(ambiguous(
                &format!("{} machines in MAAS have BMC address {bmc}", several.len()),
                several.iter().map(|s| s.to_string()).collect(),
            ));
        }
    }
    if let Some(mac) = ctx.target.node.pxe_mac {
        let by_mac = maas
            .list_machines(&MachineFilter::all().mac_address(&mac.to_string()))
            .await
            .map_err(|e| StageFailure::maas(&e))?;
        if let [machine] = by_mac.as_slice() {
            return Ok(bind(ctx, machine, "pxe_mac"));
        }
        // Not in MAAS: with its MAC, MAAS can commission a created machine.
        let mut create = CreateMachineParams::new(ctx.target.profile.image.architecture.clone());
        create.mac_addresses = vec![mac.to_string()];
        create.hostname = Some(hostname.clone());
        create.power = Some(super::maas_power(ctx).await?);
        // The lifecycle commissions explicitly (commission_node), with its own parameters.
        create.commission = Some(false);
        let machine = maas
            .create_machine(&create)
            .await
            .map_err(|e| StageFailure::maas(&e))?;
        return Ok(bind(ctx, &machine, "created"));
    }
    discover(ctx, &maas, &addresses, &bmc).await
}

async fn read(maas: &MaasClient, system_id: &str) -> Result<Machine, StageFailure> {
    maas.read_machine(system_id)
        .await
        .map_err(|e| StageFailure::maas(&e))
}

fn ambiguous(why: &str, candidates: Vec<String>) -> StageFailure {
    StageFailure::ambiguity(
        "discovery_ambiguous",
        format!("discovery is ambiguous: {why}; refusing to guess"),
    )
    .details(json!({
        "candidates": candidates,
        "hint": "identify the machine (e.g. by its PXE MAC in the manifest), delete or rename the others in MAAS, then rerun",
    }))
}

fn bind(ctx: &mut StageCtx<'_>, machine: &Machine, matched_by: &str) -> StageOutcome {
    ctx.observe(machine);
    ctx.facts.system_id = Some(machine.system_id.clone());
    ctx.facts.matched_by = Some(matched_by.to_owned());
    StageOutcome::done(
        format!(
            "{} {} ({}) by {}",
            if matches!(matched_by, "created") {
                "created"
            } else {
                "found"
            },
            machine.system_id,
            machine.status_label(),
            matched_by.replace('_', " ")
        ),
        json!({"system_id": machine.system_id, "matched_by": matched_by, "status": machine.status_label()}),
    )
}

/// PXE-boot the machine through its BMC and wait for MAAS to enlist it.
async fn discover(
    ctx: &mut StageCtx<'_>,
    maas: &MaasClient,
    addresses: &BTreeMap<String, Option<String>>,
    bmc: &str,
) -> Result<StageOutcome, StageFailure> {
    let machines = maas
        .list_machines(&MachineFilter::all())
        .await
        .map_err(|e| StageFailure::maas(&e))?;
    let new: Vec<&Machine> = machines
        .iter()
        .filter(|m| m.status == MaasStatus::New)
        .collect();
    let booted = ctx.facts.discovery.as_ref().is_some_and(|d| d.power_cycled);
    if !booted && !ctx.memory.boot_allowed() {
        return Ok(StageOutcome::wait(super::SLOT_WAIT));
    }
    let Some(discovery) = ctx.facts.discovery.clone() else {
        // Remember what was New before the PXE boot, then boot (the journal first: a restart
        // must not mistake an old machine for one this run discovered).
        ctx.facts.discovery = Some(DiscoveryFacts {
            started_at: ctx.now,
            new_before: new.iter().map(|m| m.system_id.clone()).collect(),
            power_cycled: false,
        });
        ctx.checkpoint().await?;
        return power_cycle(ctx, bmc).await;
    };
    if !discovery.power_cycled {
        return power_cycle(ctx, bmc).await;
    }
    // Timed from the PXE boot: a wait for a free slot before it is not the machine's.
    let limit = ctx.timeout_of(PolicyTimeout::Discovery);
    if (ctx.now - discovery.started_at)
        .to_std()
        .unwrap_or_default()
        > limit
    {
        return Err(StageFailure::timeout(
            PolicyTimeout::Discovery,
            limit,
            &format!("no machine with BMC {bmc} enlisted in MAAS after its PXE boot"),
        )
        .details(json!({"bmc": bmc, "new_before": discovery.new_before})));
    }
    let appeared: Vec<&Machine> = new
        .iter()
        .copied()
        .filter(|m| !discovery.new_before.contains(&m.system_id))
        .collect();
    // The strongest match, the BMC address, was checked before; what is left is a machine
    // whose enlistment recorded no BMC address. One that enlisted after the addresses were
    // read is not known to have none (it may well be another node's): it is looked at again
    // on the next poll, with its address.
    let unaddressed = |m: &&Machine| matches!(addresses.get(&m.system_id), Some(None));
    if appeared
        .iter()
        .any(|m| !addresses.contains_key(&m.system_id))
    {
        return Ok(StageOutcome::wait(format!(
            "a machine enlisted just now; reading its BMC address before claiming anything for {bmc}"
        )));
    }
    let appeared: Vec<&Machine> = appeared.into_iter().filter(unaddressed).collect();
    match appeared.as_slice() {
        [machine] => return Ok(bind(ctx, machine, "discovered")),
        [] => {}
        several => {
            return Err(ambiguous(
                &format!(
                    "{} machines enlisted during this run and none has BMC address {bmc}",
                    several.len()
                ),
                several.iter().map(|m| m.system_id.clone()).collect(),
            ));
        }
    }
    if ctx.target.profile.discovery.auto_claim_single_new_machine
        && let [only] = new.as_slice()
        && unaddressed(only)
    {
        return Ok(bind(ctx, only, "auto_claimed"));
    }
    Ok(StageOutcome::wait(format!(
        "waiting for MAAS to enlist the machine behind BMC {bmc}"
    )))
}

async fn power_cycle(ctx: &mut StageCtx<'_>, bmc: &str) -> Result<StageOutcome, StageFailure> {
    let power = power_credentials(ctx).await?;
    ctx.peers()
        .bmc
        .power(bmc, &power, PowerAction::Cycle, Some(BootDevice::Pxe))
        .await
        .map_err(|e| StageFailure::bmc(&e))?;
    if let Some(discovery) = ctx.facts.discovery.as_mut() {
        discovery.power_cycled = true;
    }
    ctx.checkpoint().await?;
    Ok(StageOutcome::wait(format!(
        "BMC {bmc} power-cycled into PXE; waiting for MAAS to enlist the machine"
    )))
}
