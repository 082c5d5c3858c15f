//! Interfaces, links, subnets, block devices, the boot disk and the flat layout over HTTP
//! (API_REFERENCE.md §5.17–§5.20; seed 000 §4.3 ConfigureStorage / ApplyRoCEPhase2 /
//! EnsurePxeInterfaceAuto).

use crate::sim_support;

use serde_json::json;
use sim_support::{Sim, fleet};

#[tokio::test]
async fn roce_static_links_on_31_subnets() {
    let sim = Sim::start(fleet(1)).await;
    let sid = sim.system_ids().await.remove(0);
    let ifaces = sim
        .get(&format!("nodes/{sid}/interfaces/"), &[])
        .await
        .expect(200)
        .json();
    let roce = ifaces
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "enp28s0np0")
        .unwrap()
        .clone();
    // Commissioning found the port unlinked and gave it a fabric of its own
    // (builtin_scripts/network.py guess_vlan_for_interface).
    assert_eq!(roce["vlan"]["name"], "untagged");
    assert_ne!(roce["vlan"]["fabric_id"], 0);
    assert!(roce["links"].as_array().unwrap().is_empty());
    let vlan = roce["vlan"]["id"].to_string();
    // A subnet created with only a CIDR lands on the default fabric's VLAN: not the port's.
    let elsewhere = sim
        .post("subnets/", &[("cidr", "172.30.8.0/31")])
        .await
        .expect(200)
        .json();
    assert_eq!(elsewhere["vlan"]["fabric_id"], 0);
    let path = format!("nodes/{sid}/interfaces/{}/", roce["id"]);
    let other_vlan = sim
        .op(
            &path,
            "link_subnet",
            &[("mode", "STATIC"), ("subnet", &elsewhere["id"].to_string())],
        )
        .await
        .expect(400);
    assert_eq!(
        other_vlan.json(),
        json!({"subnet": [format!("None found with id={}.", elsewhere["id"])]})
    );
    let other_vlan = sim
        .op(
            &path,
            "link_subnet",
            &[("mode", "STATIC"), ("subnet", "cidr:172.30.8.0/31")],
        )
        .await
        .expect(400);
    assert_eq!(
        other_vlan.json(),
        json!({"subnet": ["Select a valid choice. That choice is not one of the available choices."]})
    );
    let s = sim
        .post(
            "subnets/",
            &[
                ("cidr", "172.30.9.60/31"),
                ("name", "roce-c07u43-0"),
                ("vlan", &vlan),
            ],
        )
        .await
        .expect(200)
        .json();
    assert_eq!(s["cidr"], "172.30.9.60/31");
    assert_eq!(s["name"], "roce-c07u43-0");
    assert_eq!(s["vlan"]["name"], "untagged");
    assert_eq!(
        s["resource_uri"],
        format!("/MAAS/api/2.0/subnets/{}/", s["id"])
    );
    let dup = sim
        .post("subnets/", &[("cidr", "172.30.9.60/31")])
        .await
        .expect(400);
    assert_eq!(
        dup.json(),
        json!({"cidr": ["Subnet with this Cidr already exists."]})
    );
    let bad = sim
        .post("subnets/", &[("cidr", "172.30.9.61/31")])
        .await
        .expect(400);
    assert_eq!(
        bad.json(),
        json!({"cidr": ["Required format: <network>/<prefixlen>."]})
    );
    let by_cidr = sim
        .get("subnets/cidr:172.30.9.60/31/", &[])
        .await
        .expect(200)
        .json();
    assert_eq!(by_cidr["id"], s["id"]);
    sim.get("subnets/999/", &[]).await.expect(404);
    assert_eq!(
        sim.get("subnets/", &[])
            .await
            .json()
            .as_array()
            .unwrap()
            .len(),
        3
    );

    let linked = sim
        .op(
            &path,
            "link_subnet",
            &[
                ("mode", "STATIC"),
                ("subnet", "cidr:172.30.9.60/31"),
                ("ip_address", "172.30.9.61"),
            ],
        )
        .await
        .expect(200)
        .json();
    assert_eq!(linked["links"][0]["mode"], "static");
    assert_eq!(linked["links"][0]["ip_address"], "172.30.9.61");
    assert_eq!(linked["links"][0]["subnet"]["cidr"], "172.30.9.60/31");
    assert_eq!(linked["vlan"]["name"], "untagged");
    let by_name = sim
        .get(&format!("nodes/{sid}/interfaces/enp28s0np0/"), &[])
        .await
        .expect(200)
        .json();
    assert_eq!(by_name["id"], roce["id"]);

    let taken = sim
        .op(
            &path,
            "link_subnet",
            &[
                ("mode", "static"),
                ("subnet", &s["id"].to_string()),
                ("ip_address", "172.30.9.61"),
            ],
        )
        .await
        .expect(404);
    // StaticIPAddressUnavailable (models/interface.py): a 404 text, not a form error.
    assert_eq!(taken.text, "IP address is already in use.");
    assert!(taken.content_type().starts_with("text/plain"));
    let outside = sim
        .op(
            &path,
            "link_subnet",
            &[
                ("mode", "static"),
                ("subnet", &s["id"].to_string()),
                ("ip_address", "10.0.0.1"),
            ],
        )
        .await
        .expect(400);
    assert_eq!(
        outside.json(),
        json!({"ip_address": ["IP address is not in the given subnet 'roce-c07u43-0:172.30.9.60/31(vid=0)'."]})
    );
    let no_mode = sim.op(&path, "link_subnet", &[]).await.expect(400);
    assert_eq!(no_mode.json(), json!({"mode": ["This field is required."]}));
    let no_subnet = sim
        .op(&path, "link_subnet", &[("mode", "AUTO")])
        .await
        .expect(400);
    assert_eq!(
        no_subnet.json(),
        json!({"subnet": ["This field is required."]})
    );

    let link_id = linked["links"][0]["id"].to_string();
    let unlinked = sim
        .op(&path, "unlink_subnet", &[("id", &link_id)])
        .await
        .expect(200)
        .json();
    assert_eq!(
        unlinked["links"][0]["mode"], "link_up",
        "a connected interface stays link-up"
    );
    let again = sim
        .op(&path, "unlink_subnet", &[("id", &link_id)])
        .await
        .expect(400);
    let link_up = unlinked["links"][0]["id"].to_string();
    assert_eq!(
        again.json(),
        json!({"id": [format!("'{link_id}' is not a valid id.  It should be one of: '{link_up}'.")]})
    );

    // Deployed machines refuse link changes.
    sim.op(&format!("machines/{sid}/"), "deploy", &[])
        .await
        .expect(200);
    sim.advance(601);
    let refused = sim
        .op(&path, "link_subnet", &[("mode", "DHCP")])
        .await
        .expect(409);
    assert_eq!(
        refused.text,
        "Cannot link subnet interface because the machine is not New, Ready, Allocated, or Broken."
    );
    let refused = sim
        .op(&path, "unlink_subnet", &[("id", "1")])
        .await
        .expect(409);
    assert_eq!(
        refused.text,
        "Cannot unlink subnet interface because the machine is not New, Ready, Allocated, or Broken."
    );
}

#[tokio::test]
async fn pxe_interface_relinked_auto() {
    let sim = Sim::start(fleet(1)).await;
    let sid = sim.system_ids().await.remove(0);
    let pxe = sim
        .get(&format!("nodes/{sid}/interfaces/eno8303/"), &[])
        .await
        .expect(200)
        .json();
    let path = format!("nodes/{sid}/interfaces/{}/", pxe["id"]);
    let auto_id = pxe["links"][0]["id"].to_string();
    let dhcp = sim
        .op(&path, "unlink_subnet", &[("id", &auto_id)])
        .await
        .expect(200)
        .json();
    assert_eq!(dhcp["links"][0]["mode"], "link_up");
    let auto = sim
        .op(
            &path,
            "link_subnet",
            &[("mode", "auto"), ("subnet", "10.176.46.0/24")],
        )
        .await
        .expect(200)
        .json();
    assert_eq!(
        auto["links"].as_array().unwrap().len(),
        1,
        "linking replaces the link-up placeholder"
    );
    assert_eq!(auto["links"][0]["mode"], "auto");
    assert!(
        auto["links"][0].get("ip_address").is_none(),
        "AUTO gets its address at deployment"
    );
    let twice = sim
        .op(&path, "link_subnet", &[("mode", "DHCP")])
        .await
        .expect(200)
        .json();
    assert_eq!(twice["links"][1]["mode"], "dhcp");
    let dup = sim
        .op(&path, "link_subnet", &[("mode", "DHCP")])
        .await
        .expect(400);
    assert_eq!(
        dup.json(),
        json!({"mode": ["Interface is already set to DHCP."]})
    );
}

#[tokio::test]
async fn boss_boot_disk_and_flat_layout() {
    let mut config = fleet(2);
    // The second machine has no BOSS/M.2 disk at all.
    config.machines[1]
        .disks
        .retain(|d| d.model != "Dell BOSS-N1");
    let sim = Sim::start(config).await;
    let sids = sim.system_ids().await;
    let disks = sim
        .get(&format!("nodes/{}/blockdevices/", sids[0]), &[])
        .await
        .expect(200)
        .json();
    let boss = disks
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["model"] == "Dell BOSS-N1")
        .unwrap()
        .clone();
    let nvme = disks
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "nvme1n1")
        .unwrap()
        .clone();
    assert!(boss["id_path"].as_str().unwrap().contains("BOSS"));
    assert_eq!(nvme["used_for"], "Unused");

    let ok = sim
        .op(
            &format!("nodes/{}/blockdevices/{}/", sids[0], nvme["id"]),
            "set_boot_disk",
            &[],
        )
        .await
        .expect(200);
    assert_eq!(ok.text, "OK");
    assert!(ok.content_type().starts_with("text/plain"));
    assert_eq!(sim.machine(&sids[0]).await["boot_disk"]["id"], nvme["id"]);
    sim.op(
        &format!("nodes/{}/blockdevices/{}/", sids[0], boss["id"]),
        "set_boot_disk",
        &[],
    )
    .await
    .expect(200);
    sim.op(
        &format!("nodes/{}/blockdevices/nosuch/", sids[0]),
        "set_boot_disk",
        &[],
    )
    .await
    .expect(404);

    let bad_root = sim
        .op(
            &format!("machines/{}/", sids[0]),
            "set_storage_layout",
            &[("storage_layout", "flat"), ("root_device", "/dev/sda")],
        )
        .await
        .expect(400);
    let choices = bad_root.json()["root_device"][0]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        choices.starts_with("'/dev/sda' is not a valid root_device.  It should be one of: '"),
        "{choices}"
    );
    let m = sim
        .op(
            &format!("machines/{}/", sids[0]),
            "set_storage_layout",
            &[
                ("storage_layout", "flat"),
                ("root_device", &boss["id"].to_string()),
            ],
        )
        .await
        .expect(200)
        .json();
    let boot = &m["boot_disk"];
    assert_eq!(boot["model"], "Dell BOSS-N1");
    assert_eq!(boot["partition_table_type"], "GPT");
    let parts = boot["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), 2);
    assert_eq!(parts[0]["filesystem"]["mount_point"], "/boot/efi");
    assert_eq!(parts[0]["filesystem"]["fstype"], "fat32");
    assert_eq!(parts[1]["filesystem"]["mount_point"], "/");
    assert_eq!(parts[1]["filesystem"]["label"], "root");
    assert_eq!(
        parts[1]["resource_uri"],
        format!(
            "/MAAS/api/2.0/nodes/{}/blockdevices/{}/partition/{}",
            sids[0], boss["id"], parts[1]["id"]
        )
    );
    let read = sim
        .get(
            &format!(
                "nodes/{}/blockdevices/{}/",
                sids[0],
                boss["name"].as_str().unwrap()
            ),
            &[],
        )
        .await
        .expect(200)
        .json();
    assert_eq!(read["used_for"], "GPT partitioned with 2 partitions");

    let no_boss = sim
        .get(&format!("nodes/{}/blockdevices/", sids[1]), &[])
        .await
        .json();
    assert!(
        no_boss
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["model"] != "Dell BOSS-N1")
    );

    sim.op(&format!("machines/{}/", sids[0]), "deploy", &[])
        .await
        .expect(200);
    let late = sim
        .op(
            &format!("nodes/{}/blockdevices/{}/", sids[0], boss["id"]),
            "set_boot_disk",
            &[],
        )
        .await
        .expect(409);
    assert_eq!(
        late.text,
        "Cannot set as boot disk because the machine is not Ready."
    );
}

#[tokio::test]
async fn machine_without_disks_cannot_get_a_layout() {
    let mut config = fleet(1);
    config.machines[0].disks.clear();
    let sim = Sim::start(config).await;
    let sid = sim.system_ids().await.remove(0);
    let a = sim
        .op(
            &format!("machines/{sid}/"),
            "set_storage_layout",
            &[("storage_layout", "flat")],
        )
        .await
        .expect(400);
    assert_eq!(
        a.text,
        "Machine is missing a boot disk; no storage layout can be applied."
    );
}
