//! metalform's MAAS client against the embedded simulator, one operation family at a time
//! (issue 3 "Show": client tests against the simulator for every operation). Both sides are
//! held to ../shared/maas/API_REFERENCE.md; here they meet over real HTTP.

use crate::maas_sim_support;
use crate::sim_support;

use maas_sim_support::*;
use metalform::lifecycle::MaasStatus;
use metalform::provider::maas::*;
use metalform::secrets::Secret;
use sim_support::Sim;

#[tokio::test]
async fn version_and_whoami() {
    let sim = Sim::start(site(1)).await;
    let maas = admin(&sim);
    let version = maas.version().await.unwrap();
    assert_eq!(version.version, "3.6.1");
    assert_eq!(version.subversion, "");
    assert_eq!(version.major_minor(), Some((3, 6)));
    assert_eq!(version.supports_hardware_sync(), Some(true));
    assert!(version.has_capability("authenticate-api"));

    let me = maas.whoami().await.unwrap();
    assert_eq!(me.username, "admin");
    assert!(me.is_superuser);
    assert_eq!(me.resource_uri, "/MAAS/api/2.0/users/admin/");
    let alice = user(&sim).whoami().await.unwrap();
    assert_eq!((alice.username.as_str(), alice.is_superuser), (USER, false));
    assert_eq!(maas.metrics().get("whoami", RequestStatus::Http(200)), 1);
}

#[tokio::test]
async fn list_and_read_machines_with_every_filter() {
    let sim = Sim::start(site(4)).await;
    let maas = admin(&sim);
    let all = maas.list_machines(&MachineFilter::all()).await.unwrap();
    let hostnames: Vec<&str> = all.iter().map(|m| m.hostname.as_str()).collect();
    assert_eq!(hostnames, ["gpu00001", "gpu00002", "gpu00003", "gpu00004"]);
    assert!(all.iter().all(|m| m.status == MaasStatus::Ready));
    assert!(all.iter().all(|m| m.status_name == "Ready"));

    let by_host = maas
        .list_machines(
            &MachineFilter::all()
                .hostname("gpu00002")
                .hostname("gpu00004"),
        )
        .await
        .unwrap();
    let names: Vec<&str> = by_host.iter().map(|m| m.hostname.as_str()).collect();
    assert_eq!(names, ["gpu00002", "gpu00004"]);

    let by_id = maas
        .list_machines(&MachineFilter::all().system_id(&all[2].system_id))
        .await
        .unwrap();
    assert_eq!(by_id.len(), 1);
    assert_eq!(by_id[0].hostname, "gpu00003");
    // Unknown system ids simply match nothing.
    let none = maas
        .list_machines(&MachineFilter::all().system_id("nosuch"))
        .await
        .unwrap();
    assert!(none.is_empty());

    // The RoCE port's MAC, upper case with dashes: the client normalises it to MAAS's form.
    let mac = all[0]
        .interface_named("enp28s0np0")
        .unwrap()
        .mac_address
        .clone()
        .unwrap();
    let by_mac = maas
        .list_machines(&MachineFilter::all().mac_address(&mac.to_uppercase().replace(':', "-")))
        .await
        .unwrap();
    assert_eq!(by_mac.len(), 1);
    assert_eq!(by_mac[0].system_id, all[0].system_id);

    let one = maas.read_machine(&all[1].system_id).await.unwrap();
    assert_eq!(one, all[1], "list and detail share the field set");
    assert_eq!(one.fqdn, "gpu00002.maas");
    assert_eq!(one.architecture, "amd64/generic");
    assert_eq!(one.power_type, "ipmi");
    assert_eq!(one.node_type, Some(NodeType::Machine));
    assert_eq!(one.zone.as_ref().unwrap().name, "default");
    assert_eq!(one.domain.as_ref().unwrap().name, "maas");
    assert_eq!(
        one.resource_uri,
        format!("/MAAS/api/2.0/machines/{}/", one.system_id)
    );
    assert_eq!(one.hardware_info["system_product"], "PowerEdge XE9680");
    assert_eq!(one.interface_set.len(), 3);
    assert_eq!(one.physicalblockdevice_set.len(), 5);

    let node = maas.read_node(&all[1].system_id).await.unwrap();
    assert_eq!(node.node_type, NodeType::Machine);
    assert_eq!(node.node_type_name, "Machine");
    assert_eq!(node.status, Some(MaasStatus::Ready.into()));
    assert_eq!(node.hostname, "gpu00002");
}

#[tokio::test]
async fn create_with_ipmi_power_architecture_and_macs_then_update_accept_delete() {
    let mut config = site(1);
    // Two BMCs MAAS does not know yet: the operator registers them by hand.
    for spec in metalform::sim::SimConfig::generated(
        99,
        &metalform::sim::FleetOptions {
            machines: 0,
            initial: metalform::sim::InitialState::Unknown,
            no_boss_every: 0,
            unknown: 2,
        },
    )
    .machines
    {
        config.machines.push(spec);
    }
    let hardware = config.machines[1..].to_vec();
    let sim = Sim::start(config).await;
    let maas = admin(&sim);

    let ipmi = |hw: &metalform::sim::MachineSpec| {
        let mut power =
            IpmiPower::new(hw.bmc_ip.clone().unwrap(), "root", Secret::new("calvin-pw"));
        power.power_driver = Some("LAN_2_0".into());
        power.power_boot_type = Some("efi".into());
        power.cipher_suite_id = Some("17".into());
        power.privilege_level = Some("ADMIN".into());
        PowerParameters::Ipmi(power)
    };

    // CreateOrFindInMaas: architecture + PXE MAC + IPMI, commissioning left to the lifecycle.
    let mut create = CreateMachineParams::new("amd64/generic");
    create.hostname = Some("c07u43".into());
    create.mac_addresses = vec![hardware[0].interfaces[0].mac.clone()];
    create.power = Some(ipmi(&hardware[0]));
    create.commission = Some(false);
    let created = maas.create_machine(&create).await.unwrap();
    assert_eq!(created.hostname, "c07u43");
    assert_eq!(created.status, MaasStatus::New);
    assert_eq!(created.architecture, "amd64/generic");
    assert_eq!(created.power_type, "ipmi");
    assert_eq!(
        created.mac_addresses().collect::<Vec<_>>(),
        [hardware[0].interfaces[0].mac.as_str()],
        "the MAC is kept because the architecture was sent with it"
    );
    let stored = sim.handle.with_world(|w| {
        w.machine(&created.system_id)
            .unwrap()
            .power_parameters
            .clone()
    });
    assert_eq!(stored["power_address"], hardware[0].bmc_ip.clone().unwrap());
    assert_eq!(stored["power_user"], "root");
    assert_eq!(stored["power_pass"], "calvin-pw");
    assert_eq!(stored["power_driver"], "LAN_2_0");
    assert_eq!(stored["power_boot_type"], "efi");
    assert_eq!(stored["cipher_suite_id"], "17");
    assert_eq!(stored["privilege_level"], "ADMIN");

    // MAAS's default (commission=true) starts commissioning at once.
    let mut second = CreateMachineParams::new("amd64");
    second.mac_addresses = hardware[1]
        .interfaces
        .iter()
        .map(|n| n.mac.to_uppercase())
        .collect();
    second.power = Some(ipmi(&hardware[1]));
    let commissioning = maas.create_machine(&second).await.unwrap();
    assert_eq!(commissioning.status, MaasStatus::Commissioning);
    assert_eq!(commissioning.architecture, "amd64/generic");
    assert_eq!(commissioning.interface_set.len(), 3);
    assert_eq!(commissioning.owner.as_deref(), Some("admin"));

    // A MAC already in use is MAAS's form error, not a second machine.
    let err = maas.create_machine(&create).await.unwrap_err();
    assert_eq!(err.status(), Some(400));
    assert_eq!(
        err.form_errors().expect("form errors")["mac_addresses"],
        [format!(
            "MAC address {} already in use on c07u43.",
            hardware[0].interfaces[0].mac
        )]
    );

    // update: hostname and power parameters; omitted fields unchanged.
    let mut update = UpdateMachineParams {
        hostname: Some("c07u44".into()),
        ..UpdateMachineParams::default()
    };
    let mut power = IpmiPower::new(
        hardware[0].bmc_ip.clone().unwrap(),
        "maas",
        Secret::new("rotated-pw"),
    );
    power.privilege_level = Some("OPERATOR".into());
    update.power = Some(PowerParameters::Ipmi(power));
    let updated = maas
        .update_machine(&created.system_id, &update)
        .await
        .unwrap();
    assert_eq!(updated.hostname, "c07u44");
    assert_eq!(updated.status, MaasStatus::New);
    let stored = sim.handle.with_world(|w| {
        w.machine(&created.system_id)
            .unwrap()
            .power_parameters
            .clone()
    });
    assert_eq!(stored["power_user"], "maas");
    assert_eq!(stored["power_pass"], "rotated-pw");
    assert_eq!(stored["privilege_level"], "OPERATOR");
    assert_eq!(stored["power_driver"], "LAN_2_0", "merged, not replaced");
    let renamed_only = maas
        .update_machine(
            &created.system_id,
            &UpdateMachineParams {
                description: Some("rack 7 unit 44".into()),
                ..UpdateMachineParams::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(renamed_only.hostname, "c07u44");
    assert_eq!(renamed_only.description, "rack 7 unit 44");

    // accept: New machines start commissioning; Commissioning ones are skipped.
    let accepted = maas
        .accept(&[&created.system_id, &commissioning.system_id])
        .await
        .unwrap();
    let ids: Vec<&str> = accepted.iter().map(|m| m.system_id.as_str()).collect();
    assert_eq!(ids, [created.system_id.as_str()]);
    assert_eq!(accepted[0].status, MaasStatus::Commissioning);
    assert!(maas.accept(&[]).await.unwrap().is_empty());

    maas.delete_machine(&created.system_id).await.unwrap();
    let err = maas.read_machine(&created.system_id).await.unwrap_err();
    assert!(matches!(err, MaasError::NotFound { .. }), "{err}");
    let counters = sim.counters(&created.system_id).await;
    assert_eq!(counters["create"], 1);
    assert_eq!(counters["delete"], 1);
    assert_eq!(counters["commission"], 1, "the accept");
}

/// A Ready machine's disks: (BOSS boot disk id, first NVMe id).
async fn disks(maas: &MaasClient, system_id: &str) -> (i64, i64) {
    let devices = maas.list_block_devices(system_id).await.unwrap();
    let boss = devices.iter().find(|d| d.model.contains("BOSS")).unwrap();
    let nvme = devices.iter().find(|d| d.name == "nvme0n1").unwrap();
    (boss.id, nvme.id)
}

fn partitions(machine: &Machine, device: i64) -> Vec<(String, String)> {
    machine
        .physicalblockdevice_set
        .iter()
        .find(|d| d.id == device)
        .unwrap()
        .partitions
        .iter()
        .map(|p| {
            let fs = p.filesystem.as_ref().unwrap();
            (
                fs.fstype.clone(),
                fs.mount_point.clone().unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test]
async fn block_devices_boot_disk_and_flat_layout_on_a_chosen_root_device() {
    let sim = Sim::start(site(1)).await;
    let maas = admin(&sim);
    let sid = nth(&maas, 0).await;
    let devices = maas.list_block_devices(&sid).await.unwrap();
    let names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["sda", "nvme0n1", "nvme1n1", "nvme2n1", "nvme3n1"]);
    let (boss, nvme) = disks(&maas, &sid).await;
    let read = maas.read_block_device(&sid, boss).await.unwrap();
    assert_eq!(read.model, "Dell BOSS-N1");
    assert_eq!(read.device_type, "physical");
    assert_eq!(read.path, "/dev/disk/by-dname/sda");
    assert!(read.id_path.as_deref().unwrap().contains("BOSS"));
    assert_eq!(read.system_id.as_deref(), Some(sid.as_str()));

    // ConfigureStorage: the BOSS disk boots, the root filesystem goes on an NVMe disk.
    maas.set_boot_disk(&sid, nvme).await.unwrap();
    assert_eq!(
        maas.read_machine(&sid).await.unwrap().boot_disk.unwrap().id,
        nvme
    );
    maas.set_boot_disk(&sid, boss).await.unwrap();
    let machine = maas
        .set_storage_layout(&sid, &StorageLayoutParams::flat(Some(nvme)))
        .await
        .unwrap();
    assert_eq!(machine.boot_disk.as_ref().unwrap().id, boss);
    assert_eq!(
        partitions(&machine, boss),
        [("fat32".into(), "/boot/efi".into())]
    );
    assert_eq!(partitions(&machine, nvme), [("ext4".into(), "/".into())]);
    let on_boot_disk = maas
        .set_storage_layout(&sid, &StorageLayoutParams::flat(None))
        .await
        .unwrap();
    assert_eq!(
        partitions(&on_boot_disk, boss),
        [
            ("fat32".into(), "/boot/efi".into()),
            ("ext4".into(), "/".into())
        ],
        "without root_device the root goes on the boot disk"
    );
    assert!(partitions(&on_boot_disk, nvme).is_empty());
    let read = maas.read_block_device(&sid, boss).await.unwrap();
    assert_eq!(read.partition_table_type.as_deref(), Some("GPT"));
    assert_eq!(read.partitions.len(), 2);

    // Errors as MAAS gives them.
    let err = maas
        .set_storage_layout(&sid, &StorageLayoutParams::flat(Some(999_999)))
        .await
        .unwrap_err();
    // compose_invalid_choice_text over the physical block device ids (storage_layouts.py).
    let mut ids: Vec<String> = machine
        .physicalblockdevice_set
        .iter()
        .map(|d| format!("'{}'", d.id))
        .collect();
    ids.sort();
    assert_eq!(
        err.form_errors().unwrap()["root_device"],
        [format!(
            "'999999' is not a valid root_device.  It should be one of: {}.",
            ids.join(", ")
        )]
    );
    let err = maas.read_block_device(&sid, 999_999).await.unwrap_err();
    assert!(matches!(err, MaasError::NotFound { .. }), "{err}");
    assert_eq!(
        err.maas_message(),
        "No BlockDevice matches the given query."
    );
    maas.deploy(&sid, &DeployParams::default()).await.unwrap();
    let err = maas
        .set_storage_layout(&sid, &StorageLayoutParams::flat(None))
        .await
        .unwrap_err();
    assert!(matches!(err, MaasError::Conflict { .. }), "{err}");
    assert_eq!(
        err.maas_message(),
        "Cannot change the storage layout on a machine that is not Ready."
    );
    let err = maas.set_boot_disk(&sid, boss).await.unwrap_err();
    assert_eq!(
        err.maas_message(),
        "Cannot set as boot disk because the machine is not Ready."
    );
}

#[tokio::test]
async fn subnets_list_read_and_create_slash_31s() {
    let sim = Sim::start(site(1)).await;
    let maas = admin(&sim);
    let subnets = maas.list_subnets().await.unwrap();
    assert_eq!(subnets.len(), 1);
    assert_eq!(subnets[0].cidr, "10.176.46.0/24");
    assert_eq!(subnets[0].gateway_ip.as_deref(), Some("10.176.46.1"));

    let mut params = CreateSubnetParams::new("172.30.9.60/31");
    params.name = Some("roce-c07u43-p0".into());
    params.description = Some("RoCE point-to-point".into());
    params.dns_servers = vec!["10.0.0.53".into(), "10.0.1.53".into()];
    params.managed = Some(false);
    params.allow_dns = Some(false);
    params.active_discovery = Some(false);
    let created = maas.create_subnet(&params).await.unwrap();
    assert_eq!(created.cidr, "172.30.9.60/31");
    assert_eq!(created.name, "roce-c07u43-p0");
    assert_eq!(created.description, "RoCE point-to-point");
    assert_eq!(created.dns_servers, ["10.0.0.53", "10.0.1.53"]);
    assert_eq!(created.managed, Some(false));
    assert_eq!(created.allow_dns, Some(false));
    assert_eq!(created.gateway_ip, None);
    assert_eq!(maas.read_subnet(created.id).await.unwrap(), created);
    assert_eq!(maas.list_subnets().await.unwrap().len(), 2);

    let err = maas
        .create_subnet(&CreateSubnetParams::new("172.30.9.60/31"))
        .await
        .unwrap_err();
    assert_eq!(
        err.form_errors().unwrap()["cidr"],
        ["Subnet with this Cidr already exists."]
    );
    let err = maas.read_subnet(4242).await.unwrap_err();
    assert!(matches!(err, MaasError::NotFound { .. }), "{err}");
    assert_eq!(err.maas_message(), "No Subnet matches the given query.");
    let err = user(&sim)
        .create_subnet(&CreateSubnetParams::new("172.30.9.62/31"))
        .await
        .unwrap_err();
    assert!(matches!(err, MaasError::Forbidden { .. }), "{err}");
    assert_eq!(
        err.maas_message(),
        "This method is reserved for admin users."
    );
}

#[tokio::test]
async fn interfaces_and_links_in_every_mode() {
    let sim = Sim::start(site(1)).await;
    let maas = admin(&sim);
    let sid = nth(&maas, 0).await;
    let interfaces = maas.list_interfaces(&sid).await.unwrap();
    let names: Vec<&str> = interfaces.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["eno8303", "enp28s0np0", "enp41s0np0"]);
    let pxe = maas.read_interface(&sid, interfaces[0].id).await.unwrap();
    assert_eq!(pxe, interfaces[0]);
    assert!(
        pxe.has_link(&LinkMode::Auto, Some(1)),
        "commissioning linked it AUTO"
    );
    assert_eq!(pxe.vlan.as_ref().unwrap().vid, 0);
    let (p0, p1) = (interfaces[1].id, interfaces[2].id);
    // Commissioning found the RoCE ports unlinked: each is alone on a new fabric's untagged
    // VLAN (metadataserver/builtin_scripts/network.py guess_vlan_for_interface).
    let vlan0 = interfaces[1].vlan.clone().expect("a VLAN of its own");
    let vlan1 = interfaces[2].vlan.clone().expect("a VLAN of its own");
    assert!(interfaces[1].links.is_empty() && interfaces[2].links.is_empty());
    assert_eq!((vlan0.vid, vlan1.vid), (0, 0));
    let fabrics = [
        pxe.vlan.as_ref().unwrap().fabric_id,
        vlan0.fabric_id,
        vlan1.fabric_id,
    ];
    assert!(fabrics[0] != fabrics[1] && fabrics[1] != fabrics[2] && fabrics[0] != fabrics[2]);

    let subnet = maas
        .create_subnet(&CreateSubnetParams {
            vlan: Some(vlan0.id),
            ..CreateSubnetParams::new("172.30.9.60/31")
        })
        .await
        .unwrap();
    assert_eq!(subnet.vlan.as_ref().unwrap().id, vlan0.id);
    // p1 is on another VLAN: the subnet is not among its choices (by id: "None found").
    let err = maas
        .link_subnet(
            &sid,
            p1,
            &LinkSubnetParams::new(LinkRequest::Static {
                subnet: SubnetRef::Id(subnet.id),
                ip_address: None,
            }),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.form_errors().unwrap()["subnet"],
        [format!("None found with id={}.", subnet.id)]
    );
    // An operator moves it onto the subnet's VLAN first.
    let moved = maas.set_interface_vlan(&sid, p1, vlan0.id).await.unwrap();
    assert_eq!(moved.vlan.as_ref().unwrap().id, vlan0.id);
    assert!(
        maas.list_fabrics()
            .await
            .unwrap()
            .iter()
            .all(|f| Some(f.id) != vlan1.fabric_id),
        "the fabric left empty is deleted"
    );
    // STATIC with the address the plan wants, on a /31 (both addresses usable).
    let linked = maas
        .link_subnet(
            &sid,
            p0,
            &LinkSubnetParams::new(LinkRequest::Static {
                subnet: SubnetRef::Cidr("172.30.9.60/31".into()),
                ip_address: Some("172.30.9.61".parse().unwrap()),
            }),
        )
        .await
        .unwrap();
    assert_eq!(linked.links.len(), 1);
    let link = &linked.links[0];
    assert_eq!(link.mode, LinkMode::Static);
    assert_eq!(link.ip_address.as_deref(), Some("172.30.9.61"));
    assert_eq!(link.subnet.as_ref().unwrap().id, subnet.id);
    assert!(
        linked.vlan.is_some(),
        "linking puts the interface on the subnet's VLAN"
    );
    // STATIC without an address: MAAS picks the free one.
    let picked = maas
        .link_subnet(
            &sid,
            p1,
            &LinkSubnetParams::new(LinkRequest::Static {
                subnet: SubnetRef::Id(subnet.id),
                ip_address: None,
            }),
        )
        .await
        .unwrap();
    assert_eq!(picked.links[0].ip_address.as_deref(), Some("172.30.9.60"));
    // The /31 is full now: an explicit address in use is StaticIPAddressUnavailable, a 404
    // text (models/interface.py) the client calls AddressUnavailable.
    let err = maas
        .link_subnet(
            &sid,
            p1,
            &LinkSubnetParams::new(LinkRequest::Static {
                subnet: SubnetRef::Id(subnet.id),
                ip_address: Some("172.30.9.61".parse().unwrap()),
            }),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, MaasError::AddressUnavailable { status: 404, .. }),
        "{err:?}"
    );
    assert_eq!(err.maas_message(), "IP address is already in use.");
    let err = maas
        .link_subnet(
            &sid,
            p1,
            &LinkSubnetParams::new(LinkRequest::Static {
                subnet: SubnetRef::Id(subnet.id),
                ip_address: Some("10.9.9.9".parse().unwrap()),
            }),
        )
        .await
        .unwrap_err();
    assert!(
        err.form_errors().unwrap().contains_key("ip_address"),
        "{err}"
    );

    // unlink: the link goes; a connected interface stays "link up".
    let unlinked = maas
        .unlink_subnet(&sid, p1, picked.links[0].id)
        .await
        .unwrap();
    assert!(!unlinked.has_link(&LinkMode::Static, None));
    let modes: Vec<LinkMode> = unlinked.links.iter().map(|l| l.mode.clone()).collect();
    assert_eq!(modes, [LinkMode::LinkUp]);
    let err = maas.unlink_subnet(&sid, p1, 987_654).await.unwrap_err();
    assert!(err.form_errors().unwrap().contains_key("id"), "{err}");

    // DHCP, once.
    let dhcp = maas
        .link_subnet(
            &sid,
            p1,
            &LinkSubnetParams::new(LinkRequest::Dhcp {
                subnet: Some(SubnetRef::Id(subnet.id)),
            }),
        )
        .await
        .unwrap();
    assert!(dhcp.has_link(&LinkMode::Dhcp, Some(subnet.id)));
    assert_eq!(dhcp.links.len(), 1, "the LINK_UP placeholder is replaced");
    let err = maas
        .link_subnet(
            &sid,
            p1,
            &LinkSubnetParams::new(LinkRequest::Dhcp { subnet: None }),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.form_errors().unwrap()["mode"],
        ["Interface is already set to DHCP."]
    );

    // LINK_UP needs force while other links exist, and then replaces them.
    let link_up = LinkSubnetParams::new(LinkRequest::LinkUp { subnet: None });
    let err = maas.link_subnet(&sid, p1, &link_up).await.unwrap_err();
    assert!(
        err.form_errors().unwrap()["mode"][0].starts_with("Cannot configure interface to link up")
    );
    let forced = maas
        .link_subnet(
            &sid,
            p1,
            &LinkSubnetParams {
                force: Some(true),
                ..link_up
            },
        )
        .await
        .unwrap();
    let modes: Vec<LinkMode> = forced.links.iter().map(|l| l.mode.clone()).collect();
    assert_eq!(modes, [LinkMode::LinkUp]);

    // AUTO on the PXE subnet (EnsurePxeInterfaceAuto is idempotent: it already has one).
    let auto = maas
        .link_subnet(
            &sid,
            p1,
            &LinkSubnetParams {
                default_gateway: Some(false),
                force: Some(true),
                ..LinkSubnetParams::new(LinkRequest::Auto {
                    subnet: SubnetRef::Id(1),
                })
            },
        )
        .await
        .unwrap();
    assert!(auto.has_link(&LinkMode::Auto, Some(1)));
    // A forced link replaces every other link (forms/interface_link.py clear_all_links).
    assert_eq!(auto.links.len(), 1, "{:?}", auto.links);

    // Only while New, Ready, Allocated or Broken.
    maas.deploy(&sid, &DeployParams::default()).await.unwrap();
    let err = maas
        .link_subnet(
            &sid,
            p0,
            &LinkSubnetParams::new(LinkRequest::Dhcp { subnet: None }),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, MaasError::Conflict { .. }), "{err}");
    assert_eq!(
        err.maas_message(),
        "Cannot link subnet interface because the machine is not New, Ready, Allocated, or Broken."
    );
    let err = maas.unlink_subnet(&sid, p0, link.id).await.unwrap_err();
    assert_eq!(
        err.maas_message(),
        "Cannot unlink subnet interface because the machine is not New, Ready, Allocated, or Broken."
    );
    let err = maas.read_interface(&sid, 987_654).await.unwrap_err();
    assert!(matches!(err, MaasError::NotFound { .. }), "{err}");
}

/// The (interface name, link modes) of a machine.
fn link_modes(machine: &Machine) -> Vec<(String, Vec<LinkMode>)> {
    machine
        .interface_set
        .iter()
        .map(|i| {
            (
                i.name.clone(),
                i.links.iter().map(|l| l.mode.clone()).collect(),
            )
        })
        .collect()
}

#[tokio::test]
async fn commission_flags_reach_maas_as_true_and_false() {
    let sim = Sim::start(site(1)).await;
    let maas = admin(&sim);
    let sid = nth(&maas, 0).await;
    let (boss, _) = disks(&maas, &sid).await;
    let lvm = maas
        .set_storage_layout(&sid, &StorageLayoutParams::new(StorageLayout::Lvm, None))
        .await
        .unwrap();
    assert_eq!(
        AppliedLayout::of(&lvm),
        AppliedLayout::Lvm {
            disk: boss,
            vg: "vgroot".into()
        }
    );
    let roce = maas.read_machine(&sid).await.unwrap().interface_set[1].id;
    // Forced: the PXE subnet is on another VLAN than the RoCE port's.
    maas.link_subnet(
        &sid,
        roce,
        &LinkSubnetParams {
            force: Some(true),
            ..LinkSubnetParams::new(LinkRequest::Dhcp {
                subnet: Some(SubnetRef::Id(1)),
            })
        },
    )
    .await
    .unwrap();

    // Skip storage and networking, no tests: the configuration survives, Testing is skipped.
    let keep = CommissionParams {
        enable_ssh: Some(true),
        skip_bmc_config: Some(true),
        skip_networking: Some(true),
        skip_storage: Some(true),
        commissioning_scripts: vec![],
        testing_scripts: vec!["none".into()],
    };
    let started = maas.commission(&sid, &keep).await.unwrap();
    assert_eq!(started.status, MaasStatus::Commissioning);
    assert_eq!(started.owner.as_deref(), Some("admin"));
    sim.advance(241);
    let ready = maas.read_machine(&sid).await.unwrap();
    assert_eq!(
        ready.status,
        MaasStatus::Ready,
        "no Testing with testing_scripts=none"
    );
    assert_eq!(
        AppliedLayout::of(&ready).name(),
        "lvm",
        "skip_storage kept the layout"
    );
    assert_eq!(
        link_modes(&ready)[1].1,
        [LinkMode::Dhcp],
        "skip_networking kept the link"
    );

    // Explicit `false` (never "0", which MAAS reads as true) clears both and runs the tests.
    let clear = CommissionParams {
        enable_ssh: Some(false),
        skip_bmc_config: Some(false),
        skip_networking: Some(false),
        skip_storage: Some(false),
        ..CommissionParams::default()
    };
    maas.commission(&sid, &clear).await.unwrap();
    let testing = wait_for(&sim, &maas, &sid, MaasStatus::Testing, 60, 600).await;
    assert_eq!(testing.commissioning_status, Some(2));
    let ready = wait_for(&sim, &maas, &sid, MaasStatus::Ready, 30, 600).await;
    assert_eq!(ready.testing_status, Some(2));
    let boss = ready.boot_disk.as_ref().unwrap().id;
    assert_eq!(
        AppliedLayout::of(&ready),
        AppliedLayout::Flat { disk: boss },
        "storage re-discovered and MAAS's default layout applied"
    );
    assert_eq!(
        link_modes(&ready),
        [
            ("eno8303".to_string(), vec![LinkMode::Auto]),
            ("enp28s0np0".to_string(), vec![]),
            ("enp41s0np0".to_string(), vec![]),
        ],
        "networking re-discovered: only the PXE NIC is linked"
    );
    assert_eq!(sim.counters(&sid).await["commission"], 2);

    // Not from Deployed: MAAS's form error.
    maas.deploy(&sid, &DeployParams::default()).await.unwrap();
    let err = maas
        .commission(&sid, &CommissionParams::default())
        .await
        .unwrap_err();
    assert_eq!(
        err.form_errors().unwrap()["__all__"],
        ["Commission is not available because of the current state of the node."]
    );
}

#[tokio::test]
async fn abort_from_each_abortable_status() {
    let sim = Sim::start(site(1)).await;
    let maas = admin(&sim);
    let sid = nth(&maas, 0).await;

    let err = maas.abort(&sid, None).await.unwrap_err();
    assert!(matches!(err, MaasError::Conflict { .. }), "{err}");
    assert_eq!(
        err.maas_message(),
        format!("Cannot abort in current state: node {sid} is in state Ready.")
    );

    // Commissioning → New.
    maas.commission(&sid, &CommissionParams::default())
        .await
        .unwrap();
    maas.abort(&sid, Some("wrong rack")).await.unwrap();
    let m = maas.read_machine(&sid).await.unwrap();
    assert_eq!(m.status, MaasStatus::New);
    assert_eq!(m.owner, None);
    // Testing (started by commissioning) → Ready.
    maas.commission(&sid, &CommissionParams::default())
        .await
        .unwrap();
    wait_for(&sim, &maas, &sid, MaasStatus::Testing, 60, 600).await;
    maas.abort(&sid, None).await.unwrap();
    assert_eq!(
        maas.read_machine(&sid).await.unwrap().status,
        MaasStatus::Ready
    );
    // Deploying → Allocated.
    maas.deploy(&sid, &DeployParams::default()).await.unwrap();
    maas.abort(&sid, None).await.unwrap();
    let m = maas.read_machine(&sid).await.unwrap();
    assert_eq!(m.status, MaasStatus::Allocated);
    assert_eq!(m.owner.as_deref(), Some("admin"));
    // Disk erasing → Failed disk erasing.
    maas.deploy(&sid, &DeployParams::default()).await.unwrap();
    wait_for(&sim, &maas, &sid, MaasStatus::Deployed, 120, 1200).await;
    maas.release(&sid, &ReleaseParams::erasing(EraseMode::Full))
        .await
        .unwrap();
    maas.abort(&sid, None).await.unwrap();
    assert_eq!(
        maas.read_machine(&sid).await.unwrap().status,
        MaasStatus::FailedDiskErasing
    );
    assert_eq!(sim.counters(&sid).await["abort"], 4);
}

/// A cloud-config that writes one file; the client base64-encodes it on the wire.
const USER_DATA: &str =
    "#cloud-config\nwrite_files:\n  - path: /etc/motd\n    content: |\n      metalform was here\n";

#[tokio::test]
async fn deploy_with_user_data_distro_and_hardware_sync_then_release() {
    let sim = Sim::start(site(1)).await;
    let maas = admin(&sim);
    let sid = nth(&maas, 0).await;
    assert_eq!(
        maas.get_token(&sid).await.unwrap(),
        None,
        "no token while Ready"
    );

    let params = DeployParams {
        user_data: Some(Secret::new(USER_DATA)),
        distro_series: Some("ubuntu/jammy".into()),
        enable_hw_sync: Some(true),
        comment: Some("onboarding".into()),
        ..DeployParams::default()
    };
    let deploying = maas.deploy(&sid, &params).await.unwrap();
    assert_eq!(deploying.status, MaasStatus::Deploying);
    assert_eq!(deploying.owner.as_deref(), Some("admin"));
    assert_eq!(deploying.osystem, "ubuntu");
    assert_eq!(deploying.distro_series, "jammy");
    assert_eq!(deploying.enable_hw_sync, Some(true));
    assert_eq!(
        deploying.hardware_sync().health(now(&sim)),
        SyncHealth::NeverSynced
    );
    // MAAS stores the base64 text verbatim and serves it decoded.
    let stored = sim
        .handle
        .with_world(|w| w.machine(&sid).unwrap().user_data.clone())
        .unwrap();
    assert_eq!(
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &stored).unwrap(),
        USER_DATA.as_bytes()
    );
    let token = maas
        .get_token(&sid)
        .await
        .unwrap()
        .expect("a token once owned");
    assert!(!token.token_key.is_empty() && !token.consumer_key.is_empty());
    assert!(!format!("{token:?}").contains(token.token_secret.expose()));

    let deployed = wait_for(&sim, &maas, &sid, MaasStatus::Deployed, 60, 1200).await;
    assert_eq!(deployed.status_message.as_deref(), Some("Deployed"));
    assert_eq!(deployed.power_state, PowerState::On);
    assert!(deployed.ip_addresses[0].starts_with("10.176.46."));
    let files = sim
        .handle
        .with_world(|w| w.machine(&sid).unwrap().host_files.clone());
    assert_eq!(
        files["/etc/motd"], "metalform was here\n",
        "the host got the user_data"
    );

    // Hardware sync: MAAS's fields, and the health the client computes from them.
    let sync = deployed.hardware_sync();
    assert!(sync.enabled);
    assert_eq!(sync.sync_interval, Some(900));
    let last = sync.last_sync.expect("synced at the end of deployment");
    assert_eq!(sync.next_sync, Some(last + chrono::Duration::seconds(900)));
    assert_eq!(
        sync.health(now(&sim)),
        SyncHealth::Healthy {
            deadline: last + chrono::Duration::seconds(1350)
        }
    );
    // MAAS's vendor-data installs the sync timer and credentials (vendor_data.py
    // generate_hardware_sync_systemd_configuration), but cloud-init lets user-data keys
    // replace vendor-data's: this user_data's own write_files dropped them, so after MAAS's
    // own end-of-deployment stamp nothing reports again and the sync goes stale.
    assert!(!files.contains_key("/lib/systemd/system/maas_hardware_sync.timer"));
    assert!(!files.contains_key("/etc/maas/maas-machine-creds.yml"));
    sim.advance(3 * 900);
    let later = maas.read_machine(&sid).await.unwrap().hardware_sync();
    assert_eq!(
        later.last_sync,
        Some(last),
        "nothing syncs without MAAS's vendor-data"
    );
    assert!(!later.is_healthy(now(&sim)));

    // A second deploy of a Deployed machine is MAAS's state conflict.
    let err = maas.deploy(&sid, &params).await.unwrap_err();
    assert!(matches!(err, MaasError::Conflict { .. }), "{err}");
    assert_eq!(
        err.maas_message(),
        "Can't deploy a machine that is in the 'Deployed' state"
    );

    let releasing = maas
        .release(&sid, &ReleaseParams::erasing(EraseMode::None))
        .await
        .unwrap();
    assert_eq!(releasing.status, MaasStatus::Releasing);
    assert_eq!(releasing.osystem, "");
    assert_eq!(
        releasing.hardware_sync().health(now(&sim)),
        SyncHealth::Disabled
    );
    let ready = wait_for(&sim, &maas, &sid, MaasStatus::Ready, 5, 60).await;
    assert_eq!(ready.owner, None);
    assert!(ready.ip_addresses.is_empty());
    assert_eq!(maas.get_token(&sid).await.unwrap(), None);
    // Ready: a release is a 200 no-op.
    assert_eq!(
        maas.release(&sid, &ReleaseParams::default())
            .await
            .unwrap()
            .status,
        MaasStatus::Ready
    );
    let counters = sim.counters(&sid).await;
    assert_eq!(
        (counters["deploy"].as_u64(), counters["release"].as_u64()),
        (Some(1), Some(1))
    );

    // A bad distro_series is MAAS's form error, and nothing changes.
    let err = maas
        .deploy(
            &sid,
            &DeployParams {
                distro_series: Some("centos/7".into()),
                ..DeployParams::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        err.form_errors().unwrap().contains_key("distro_series"),
        "{err}"
    );
    assert_eq!(
        maas.read_machine(&sid).await.unwrap().status,
        MaasStatus::Ready
    );
}

/// With user_data that leaves `write_files` and `runcmd` alone, MAAS's vendor-data sets up
/// the hardware-sync timer with the machine's credentials and the deployed OS keeps reporting.
#[tokio::test]
async fn vendor_data_sets_up_hardware_sync_unless_user_data_replaces_it() {
    let sim = Sim::start(site(1)).await;
    let maas = admin(&sim);
    let sid = nth(&maas, 0).await;
    let params = DeployParams {
        user_data: Some(Secret::new("#cloud-config\npackages: [jq]\n")),
        enable_hw_sync: Some(true),
        ..DeployParams::default()
    };
    maas.deploy(&sid, &params).await.unwrap();
    let deployed = wait_for(&sim, &maas, &sid, MaasStatus::Deployed, 60, 1200).await;
    let last = deployed.last_sync.unwrap();
    let files = sim
        .handle
        .with_world(|w| w.machine(&sid).unwrap().host_files.clone());
    assert!(files.contains_key("/lib/systemd/system/maas_hardware_sync.timer"));
    let token = maas.get_token(&sid).await.unwrap().unwrap();
    assert!(files["/etc/maas/maas-machine-creds.yml"].contains(&token.token_key));
    sim.advance(3 * 900);
    let later = maas.read_machine(&sid).await.unwrap().hardware_sync();
    assert!(
        later.last_sync.unwrap() > last,
        "the deployed OS keeps syncing"
    );
    assert!(later.is_healthy(now(&sim)));
}

async fn status_of(maas: &MaasClient, system_id: &str) -> MachineStatus {
    maas.read_machine(system_id).await.unwrap().status
}

#[tokio::test]
async fn release_erase_modes_and_force() {
    use metalform::sim::machine::Erase;
    let sim = Sim::start(site(4)).await;
    let maas = admin(&sim);
    let machines = maas.list_machines(&MachineFilter::all()).await.unwrap();
    for m in &machines {
        maas.deploy(&m.system_id, &DeployParams::default())
            .await
            .unwrap();
    }
    sim.advance(601);
    let cases = [
        (
            ReleaseParams::erasing(EraseMode::Quick),
            Some(Erase::Quick),
            MaasStatus::DiskErasing,
        ),
        (
            ReleaseParams::erasing(EraseMode::Secure),
            Some(Erase::Secure),
            MaasStatus::DiskErasing,
        ),
        (
            ReleaseParams::erasing(EraseMode::Full),
            Some(Erase::Full),
            MaasStatus::DiskErasing,
        ),
        (
            ReleaseParams {
                force: Some(true),
                comment: Some("decommission".into()),
                ..ReleaseParams::erasing(EraseMode::None)
            },
            None,
            MaasStatus::Releasing,
        ),
    ];
    for ((params, erase, status), m) in cases.iter().zip(&machines) {
        let released = maas.release(&m.system_id, params).await.unwrap();
        assert_eq!(released.status, *status, "{params:?}");
        let mode = sim
            .handle
            .with_world(|w| w.machine(&m.system_id).unwrap().erase);
        assert_eq!(mode, *erase, "{params:?}");
        let counters = sim.counters(&m.system_id).await;
        assert_eq!(counters["erase"], u64::from(erase.is_some()));
    }
    // MAAS's wipe-disks (release_scripts/maas_wipe.py) goes disk by disk: a quick wipe is
    // wipefs and 2 MiB zeroed at each end, a secure erase is the drive's own, a full wipe
    // zeroes every byte (NVMe by write-zeroes, much faster than dd). The erase ends when the
    // last disk is done, so the time grows with the disks and their size; a plain release is
    // a power-off (~10 s).
    let disks = maas
        .list_block_devices(&machines[0].system_id)
        .await
        .unwrap();
    let n = disks.len() as i64;
    let full: f64 = disks
        .iter()
        .map(|d| {
            let mb_per_sec = if d.name.starts_with("nvme") {
                4000.0
            } else {
                400.0
            };
            d.size as f64 / 1e6 / mb_per_sec
        })
        .sum();
    let ids: Vec<&str> = machines.iter().map(|m| m.system_id.as_str()).collect();
    let expectations = [
        (ids[3], 10),
        (ids[0], 12 * n),
        (ids[1], 120 * n),
        (ids[2], full.ceil() as i64),
    ];
    let mut elapsed = 0;
    for (id, secs) in expectations {
        assert!(secs > elapsed + 2, "{expectations:?}");
        sim.advance(secs - 2 - elapsed);
        assert_ne!(
            status_of(&maas, id).await,
            MaasStatus::Ready,
            "{id} after {}s",
            secs - 2
        );
        sim.advance(4);
        elapsed = secs + 2;
        assert_eq!(
            status_of(&maas, id).await,
            MaasStatus::Ready,
            "{id} after {}s",
            secs + 2
        );
    }

    // Not from New: MAAS's state conflict.
    maas.commission(&machines[0].system_id, &CommissionParams::default())
        .await
        .unwrap();
    maas.abort(&machines[0].system_id, None).await.unwrap();
    let err = maas
        .release(&machines[0].system_id, &ReleaseParams::default())
        .await
        .unwrap_err();
    assert!(matches!(err, MaasError::Conflict { .. }), "{err}");
    assert_eq!(
        err.maas_message(),
        "Machine cannot be released in its current state ('New')."
    );
}

#[tokio::test]
async fn mark_broken_needs_ownership_and_mark_fixed_returns_to_deployed() {
    let sim = Sim::start(site(1)).await;
    let maas = admin(&sim);
    let sid = nth(&maas, 0).await;
    // An unowned machine cannot be marked broken, even by an admin (MAAS's 403, empty).
    let err = maas.mark_broken(&sid, Some("smoke")).await.unwrap_err();
    assert!(matches!(err, MaasError::Forbidden { .. }), "{err}");
    assert_eq!(err.maas_message(), "");
    let err = maas.mark_fixed(&sid, None).await.unwrap_err();
    assert!(matches!(err, MaasError::Conflict { .. }), "{err}");
    assert_eq!(
        err.maas_message(),
        "Can't mark a non-broken node as 'Ready'."
    );

    maas.deploy(&sid, &DeployParams::default()).await.unwrap();
    wait_for(&sim, &maas, &sid, MaasStatus::Deployed, 120, 1200).await;
    let broken = maas
        .mark_broken(&sid, Some("GPU 3 fell off the bus"))
        .await
        .unwrap();
    assert_eq!(broken.status, MaasStatus::Broken);
    assert_eq!(
        broken.error_description.as_deref(),
        Some("GPU 3 fell off the bus")
    );
    let fixed = maas.mark_fixed(&sid, Some("reseated")).await.unwrap();
    assert_eq!(fixed.status, MaasStatus::Deployed);
    assert_eq!(fixed.error_description, None);
    // Non-admins may not mark machines fixed.
    maas.mark_broken(&sid, None).await.unwrap();
    let err = user(&sim).mark_fixed(&sid, None).await.unwrap_err();
    assert!(matches!(err, MaasError::Forbidden { .. }), "{err}");
}

#[tokio::test]
async fn power_on_off_and_query() {
    let sim = Sim::start(site(1)).await;
    let maas = admin(&sim);
    let sid = nth(&maas, 0).await;
    assert_eq!(maas.query_power_state(&sid).await.unwrap(), PowerState::Off);
    let err = maas.power_on(&sid, None).await.unwrap_err();
    assert!(matches!(err, MaasError::Conflict { .. }), "{err}");
    assert_eq!(
        err.maas_message(),
        "Can't start node: it hasn't been allocated."
    );

    maas.deploy(&sid, &DeployParams::default()).await.unwrap();
    wait_for(&sim, &maas, &sid, MaasStatus::Deployed, 120, 1200).await;
    let off = maas
        .power_off(&sid, StopMode::Soft, Some("maintenance"))
        .await
        .unwrap()
        .expect("an IPMI machine answers with the machine");
    assert_eq!(off.power_state, PowerState::Off);
    assert_eq!(maas.query_power_state(&sid).await.unwrap(), PowerState::Off);
    let on = maas.power_on(&sid, Some("back")).await.unwrap();
    assert_eq!(on.power_state, PowerState::On);
    assert_eq!(on.status, MaasStatus::Deployed);
    assert_eq!(maas.query_power_state(&sid).await.unwrap(), PowerState::On);
    let counters = sim.counters(&sid).await;
    assert_eq!(
        (
            counters["power_on"].as_u64(),
            counters["power_off"].as_u64()
        ),
        (Some(1), Some(1))
    );

    // A machine MAAS cannot power (manual) answers `null`.
    let mut manual = CreateMachineParams::new("amd64/generic");
    manual.mac_addresses = vec!["52:54:00:aa:bb:01".into()];
    manual.power = Some(PowerParameters::Manual);
    manual.commission = Some(false);
    let created = maas.create_machine(&manual).await.unwrap();
    assert_eq!(created.power_type, "manual");
    assert_eq!(
        maas.power_off(&created.system_id, StopMode::Hard, None)
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn events_of_a_machine_newest_first_with_levels_limits_and_paging() {
    let sim = Sim::start(site(2)).await;
    let maas = admin(&sim);
    let sid = nth(&maas, 0).await;
    maas.deploy(&sid, &DeployParams::default()).await.unwrap();
    wait_for(&sim, &maas, &sid, MaasStatus::Deployed, 120, 1200).await;

    let page = maas
        .query_events(&EventsQuery::machine(&sid, EventLevel::Info, 100))
        .await
        .unwrap();
    assert_eq!(page.count as usize, page.events.len());
    let ids: Vec<i64> = page.events.iter().map(|e| e.id).collect();
    let mut sorted = ids.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(ids, sorted, "newest first");
    let newest = &page.events[0];
    assert_eq!(newest.event_type, "Deployed");
    assert_eq!(newest.level, EventLevel::Info);
    assert_eq!(newest.node.as_deref(), Some(sid.as_str()));
    assert_eq!(newest.hostname.as_deref(), Some("gpu00001"));
    // MAAS's own `created` text, UTC: deployment ended 600 s after it started.
    assert_eq!(
        newest.created_at(),
        Some(sim_support::start_time() + chrono::Duration::seconds(600))
    );
    let types: Vec<&str> = page.events.iter().map(|e| e.event_type.as_str()).collect();
    assert!(
        types.contains(&"Deploying") && types.contains(&"Installing OS"),
        "{types:?}"
    );
    assert!(page.events.iter().all(|e| e.level >= EventLevel::Info));
    assert!(
        !types.contains(&"Node powered on"),
        "DEBUG is below the default level"
    );

    let debug = maas
        .query_events(&EventsQuery::machine(&sid, EventLevel::Debug, 1000))
        .await
        .unwrap();
    assert!(
        debug
            .events
            .iter()
            .any(|e| e.event_type == "Node powered on")
    );
    assert!(debug.events.len() > page.events.len());

    let two = maas
        .query_events(&EventsQuery::machine(&sid, EventLevel::Info, 2))
        .await
        .unwrap();
    assert_eq!(two.events, page.events[..2]);
    assert!(two.prev_uri.is_some(), "older events exist");
    let older = maas
        .query_events(&EventsQuery {
            before: Some(two.events[1].id),
            ..EventsQuery::machine(&sid, EventLevel::Info, 2)
        })
        .await
        .unwrap();
    assert_eq!(older.events, page.events[2..4]);
    // Nothing newer than the newest; another machine's events are not mixed in.
    let newer = maas
        .query_events(&EventsQuery {
            after: page.newest_id(),
            ..EventsQuery::machine(&sid, EventLevel::Info, 100)
        })
        .await
        .unwrap();
    assert!(newer.events.is_empty());
    let other = nth(&maas, 1).await;
    let by_host = maas
        .query_events(&EventsQuery {
            hostnames: vec!["gpu00002".into()],
            ..EventsQuery::default()
        })
        .await
        .unwrap();
    assert!(
        by_host
            .events
            .iter()
            .all(|e| e.node.as_deref() == Some(other.as_str()))
    );

    let err = maas
        .query_events(&EventsQuery::machine(&sid, EventLevel::Info, 1001))
        .await
        .unwrap_err();
    assert_eq!(
        err.maas_message(),
        "Requested number of events 1001 is greater than limit: 1000"
    );
    let err = maas
        .query_events(&EventsQuery {
            after: Some(1),
            before: Some(5),
            ..EventsQuery::default()
        })
        .await
        .unwrap_err();
    assert!(
        matches!(err, MaasError::BadRequest { status: 400, .. }),
        "{err}"
    );
}

#[tokio::test]
async fn machine_tokens_change_with_ownership_and_need_an_admin() {
    let sim = Sim::start(site(1)).await;
    let maas = admin(&sim);
    let sid = nth(&maas, 0).await;
    maas.deploy(&sid, &DeployParams::default()).await.unwrap();
    let first = maas.get_token(&sid).await.unwrap().unwrap();
    assert_eq!(
        maas.get_token(&sid).await.unwrap().unwrap(),
        first,
        "stable while owned"
    );
    let err = user(&sim).get_token(&sid).await.unwrap_err();
    assert!(matches!(err, MaasError::Forbidden { .. }), "{err}");
    maas.release(&sid, &ReleaseParams::default()).await.unwrap();
    wait_for(&sim, &maas, &sid, MaasStatus::Ready, 5, 60).await;
    maas.deploy(&sid, &DeployParams::default()).await.unwrap();
    let second = maas.get_token(&sid).await.unwrap().unwrap();
    assert_ne!(
        second.token_key, first.token_key,
        "a new ownership, a new token"
    );
}

/// Rescue mode as MAAS runs it (API_REFERENCE §4.2, §5.23): start and exit go through the
/// transition guard (MAAS's own `Invalid transition` 409 otherwise), the rescue environment
/// boots into Rescue mode, and exit returns to the status the machine had before — a
/// deployed machine to Deployed, powered on; a Ready one to Ready, powered off.
#[tokio::test]
async fn rescue_mode_enter_and_exit_from_ready_and_deployed() {
    let sim = Sim::start(site(1)).await;
    let maas = admin(&sim);
    let sid = nth(&maas, 0).await;

    let err = maas.exit_rescue_mode(&sid).await.unwrap_err();
    assert!(matches!(err, MaasError::Conflict { .. }), "{err}");
    assert_eq!(
        err.maas_message(),
        "Invalid transition: Ready -> Exiting rescue mode."
    );
    // Non-admins may not start it.
    let err = user(&sim).rescue_mode(&sid).await.unwrap_err();
    assert!(matches!(err, MaasError::Forbidden { .. }), "{err}");

    let entering = maas.rescue_mode(&sid).await.unwrap();
    assert_eq!(entering.status, MaasStatus::EnteringRescueMode);
    assert_eq!(entering.status_name, "Entering rescue mode");
    wait_for(&sim, &maas, &sid, MaasStatus::RescueMode, 60, 600).await;
    let m = maas.read_machine(&sid).await.unwrap();
    assert_eq!(m.power_state.as_str(), "on");
    let exiting = maas.exit_rescue_mode(&sid).await.unwrap();
    assert_eq!(exiting.status, MaasStatus::ExitingRescueMode);
    wait_for(&sim, &maas, &sid, MaasStatus::Ready, 60, 600).await;
    assert_eq!(
        maas.read_machine(&sid).await.unwrap().power_state.as_str(),
        "off"
    );

    // Deploying cannot enter rescue mode; Deployed can, and comes back Deployed.
    maas.deploy(&sid, &DeployParams::default()).await.unwrap();
    let err = maas.rescue_mode(&sid).await.unwrap_err();
    assert!(matches!(err, MaasError::Conflict { .. }), "{err}");
    assert_eq!(
        err.maas_message(),
        "Invalid transition: Deploying -> Entering rescue mode."
    );
    wait_for(&sim, &maas, &sid, MaasStatus::Deployed, 120, 1200).await;
    maas.rescue_mode(&sid).await.unwrap();
    wait_for(&sim, &maas, &sid, MaasStatus::RescueMode, 60, 600).await;
    // Rescue mode cannot be entered twice.
    let err = maas.rescue_mode(&sid).await.unwrap_err();
    assert_eq!(
        err.maas_message(),
        "Invalid transition: Rescue mode -> Entering rescue mode."
    );
    maas.exit_rescue_mode(&sid).await.unwrap();
    wait_for(&sim, &maas, &sid, MaasStatus::Deployed, 60, 600).await;
    let m = maas.read_machine(&sid).await.unwrap();
    assert_eq!(m.power_state.as_str(), "on");
    assert_eq!(m.owner.as_deref(), Some("admin"));
}

#[tokio::test]
async fn power_parameters_of_given_machines_answer_only_those() {
    let sim = Sim::start(site(3)).await;
    let maas = admin(&sim);
    let machines = maas.list_machines(&MachineFilter::all()).await.unwrap();
    let all = maas.power_parameters(&[]).await.unwrap();
    assert_eq!(all.len(), 3);
    let asked = vec![machines[2].system_id.clone(), "absent".to_owned()];
    let some = maas.power_parameters(&asked).await.unwrap();
    // MAAS filters on `system_id IN ids`: an unknown id is left out, not an error.
    assert_eq!(
        some.keys().collect::<Vec<_>>(),
        [&machines[2].system_id],
        "only the machine asked for"
    );
    assert_eq!(some[&machines[2].system_id], all[&machines[2].system_id]);
    assert!(some[&machines[2].system_id].power_address.is_some());
    let err = user(&sim).power_parameters(&asked).await.unwrap_err();
    assert!(matches!(err, MaasError::Forbidden { .. }), "{err}");
}

#[tokio::test]
async fn a_subnet_is_found_by_its_cidr_specifier() {
    let sim = Sim::start(site(1)).await;
    let maas = admin(&sim);
    assert_eq!(
        maas.find_subnet_by_cidr("172.30.9.60/31").await.unwrap(),
        None
    );
    let created = maas
        .create_subnet(&CreateSubnetParams::new("172.30.9.60/31"))
        .await
        .unwrap();
    let found = maas.find_subnet_by_cidr("172.30.9.60/31").await.unwrap();
    assert_eq!(found.as_ref(), Some(&created));
    let pxe = maas.find_subnet_by_cidr("10.176.46.0/24").await.unwrap();
    assert_eq!(pxe.unwrap().gateway_ip.as_deref(), Some("10.176.46.1"));
    // `GET subnets/cidr:…/` went over the wire, its `:` percent-encoded as clients send it.
    let reads: Vec<String> = sim.handle.with_world(|w| {
        w.ops
            .iter()
            .filter(|op| op.path.contains("subnets/cidr"))
            .map(|op| op.path.clone())
            .collect()
    });
    assert_eq!(reads.len(), 3, "{reads:?}");
    assert!(
        reads[0].ends_with("/subnets/cidr%3A172.30.9.60/31/"),
        "{reads:?}"
    );
    // A one-digit prefix length routes nowhere in MAAS: it is looked for in the list.
    assert_eq!(maas.find_subnet_by_cidr("10.0.0.0/8").await.unwrap(), None);
    let listed = sim.handle.with_world(|w| {
        w.ops
            .iter()
            .filter(|op| op.method == "GET" && op.path.ends_with("/subnets/"))
            .count()
    });
    assert_eq!(listed, 1);
}
