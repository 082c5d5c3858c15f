//! Issue 15 point 6: the endpoints operators and their tools use besides onboarding — fabrics
//! and VLANs, tags, zones and resource pools, workload annotations, events, power parameters —
//! through metalform's MAAS client against the simulator, each expectation what MAAS's handler
//! does (cited).

use crate::maas_sim_support;
use crate::sim_support;

use std::collections::BTreeMap;

use maas_sim_support::*;
use metalform::provider::maas::*;
use sim_support::Sim;

/// api/fabrics.py, api/vlans.py: fabric-0 with its untagged VLAN (vid 0) always exists; each
/// NIC commissioning found unlinked has a fabric of its own; updates answer the new record;
/// moving an interface to a VLAN (api/interfaces.py update) is what lets it link a subnet there.
#[tokio::test]
async fn fabrics_and_vlans_read_update_and_an_interface_moved() {
    let sim = Sim::start(site(2)).await;
    let maas = admin(&sim);
    let fabrics = maas.list_fabrics().await.unwrap();
    let zero = fabrics.iter().find(|f| f.id == 0).expect("fabric-0");
    assert_eq!(zero.name, "fabric-0");
    let untagged = zero.default_vlan().expect("its untagged VLAN");
    assert_eq!((untagged.vid, untagged.name.as_str()), (0, "untagged"));

    let sid = nth(&maas, 0).await;
    let machine = maas.read_machine(&sid).await.unwrap();
    let port = machine.interface_named("enp28s0np0").unwrap();
    let port_vlan = port.vlan.clone().expect("a VLAN");
    let port_fabric = port_vlan.fabric_id.unwrap();
    assert_ne!(
        port_fabric, 0,
        "commissioning gave the unlinked port its own fabric"
    );
    let fabric = maas.read_fabric(port_fabric).await.unwrap();
    assert_eq!(fabric.vlans.len(), 1);
    assert_eq!(fabric.vlans[0].id, port_vlan.id);

    let renamed = maas
        .update_fabric(
            port_fabric,
            &UpdateFabricParams {
                name: Some("roce-a".into()),
                ..UpdateFabricParams::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(renamed.name, "roce-a");
    let vlan = maas
        .update_vlan(
            port_fabric,
            0,
            &UpdateVlanParams {
                mtu: Some(9000),
                ..UpdateVlanParams::default()
            },
        )
        .await
        .unwrap();
    assert_eq!((vlan.mtu, vlan.fabric.as_str()), (9000, "roce-a"));
    assert_eq!(maas.read_vlan(port_fabric, 0).await.unwrap().mtu, 9000);
    assert_eq!(maas.list_vlans(port_fabric).await.unwrap().len(), 1);

    // The second machine's port joins the first one's VLAN; its own fabric, left empty, goes
    // away as MAAS deletes an empty fabric of an interface's old VLAN.
    let other = nth(&maas, 1).await;
    let other_port = maas
        .read_machine(&other)
        .await
        .unwrap()
        .interface_named("enp28s0np0")
        .unwrap()
        .clone();
    let old_fabric = other_port.vlan.as_ref().unwrap().fabric_id.unwrap();
    let moved = maas
        .set_interface_vlan(&other, other_port.id, port_vlan.id)
        .await
        .unwrap();
    assert_eq!(moved.vlan.as_ref().unwrap().id, port_vlan.id);
    let err = maas.read_fabric(old_fabric).await.unwrap_err();
    assert!(matches!(err, MaasError::NotFound { .. }), "{err}");
}

/// api/tags.py: an admin creates a tag, adds and removes machines (update_nodes answers the
/// counts), the machine shows it in tag_names; a definition that is not the tag's is a 409.
#[tokio::test]
async fn tags_create_add_remove_and_a_stale_definition() {
    let sim = Sim::start(site(2)).await;
    let maas = admin(&sim);
    let sid = nth(&maas, 0).await;
    let tag = maas
        .create_tag(&TagParams {
            comment: Some("8 GPUs".into()),
            ..TagParams::named("gpu-8x")
        })
        .await
        .unwrap();
    assert_eq!(
        (tag.name.as_str(), tag.comment.as_str()),
        ("gpu-8x", "8 GPUs")
    );
    let changed = maas.update_tag_nodes("gpu-8x", &[&sid], &[]).await.unwrap();
    assert_eq!((changed.added, changed.removed), (1, 0));
    let tagged = maas.tag_machines("gpu-8x").await.unwrap();
    assert_eq!(tagged.len(), 1);
    assert_eq!(tagged[0].system_id, sid);
    assert!(
        maas.read_machine(&sid)
            .await
            .unwrap()
            .tag_names
            .contains(&"gpu-8x".to_string())
    );
    assert_eq!(
        maas.list_tags()
            .await
            .unwrap()
            .iter()
            .filter(|t| t.name == "gpu-8x")
            .count(),
        1
    );
    let changed = maas.update_tag_nodes("gpu-8x", &[], &[&sid]).await.unwrap();
    assert_eq!((changed.added, changed.removed), (0, 1));
    assert!(maas.tag_machines("gpu-8x").await.unwrap().is_empty());

    // A non-admin may not (PermissionDenied → 403).
    let err = user(&sim)
        .update_tag_nodes("gpu-8x", &[&sid], &[])
        .await
        .unwrap_err();
    assert!(matches!(err, MaasError::Forbidden { .. }), "{err}");
    // An invalid name is the form's error.
    let err = maas
        .create_tag(&TagParams::named("gpu 8x"))
        .await
        .unwrap_err();
    assert!(err.form_errors().unwrap().contains_key("name"), "{err}");
}

/// api/zones.py, api/resourcepools.py: the default zone and pool exist; an admin creates more.
#[tokio::test]
async fn zones_and_resource_pools() {
    let sim = Sim::start(site(1)).await;
    let maas = admin(&sim);
    let zones = maas.list_zones().await.unwrap();
    assert!(zones.iter().any(|z| z.name == "default"), "{zones:?}");
    let zone = maas.create_zone("row-c", Some("hall C")).await.unwrap();
    assert_eq!(maas.read_zone("row-c").await.unwrap(), zone);
    let pools = maas.list_resource_pools().await.unwrap();
    let default = pools
        .iter()
        .find(|p| p.name == "default")
        .expect("default pool");
    assert_eq!(default.id, 0);
    let pool = maas.create_resource_pool("gpu", None).await.unwrap();
    assert_eq!(maas.read_resource_pool(pool.id).await.unwrap().name, "gpu");
    let err = user(&sim).create_zone("row-d", None).await.unwrap_err();
    assert!(matches!(err, MaasError::Forbidden { .. }), "{err}");
    let sid = nth(&maas, 0).await;
    let machine = maas.read_machine(&sid).await.unwrap();
    assert_eq!(machine.zone.unwrap().name, "default");
    assert_eq!(machine.pool.unwrap().name, "default");
}

/// api/machines.py set_workload_annotations: only the machine's owner sets them (409
/// otherwise); an empty value removes a key; owner_data is the same dictionary.
#[tokio::test]
async fn workload_annotations_need_ownership() {
    let sim = Sim::start(site(1)).await;
    let maas = admin(&sim);
    let sid = nth(&maas, 0).await;
    let set = |k: &str, v: Option<&str>| -> BTreeMap<String, Option<String>> {
        [(k.to_owned(), v.map(str::to_owned))].into_iter().collect()
    };
    let err = maas
        .set_workload_annotations(&sid, &set("rack", Some("c07")))
        .await
        .unwrap_err();
    assert!(matches!(err, MaasError::Conflict { .. }), "{err}");
    maas.deploy(&sid, &DeployParams::default()).await.unwrap();
    let machine = maas
        .set_workload_annotations(&sid, &set("rack", Some("c07")))
        .await
        .unwrap();
    assert_eq!(machine.workload_annotations["rack"], "c07");
    assert_eq!(machine.owner_data, machine.workload_annotations);
    let machine = maas
        .set_workload_annotations(&sid, &set("rack", None))
        .await
        .unwrap();
    assert!(machine.workload_annotations.is_empty());
}

/// api/machines.py power_parameters: the admin reads the stored parameters, password included
/// (MAAS returns it as stored); a user may not.
#[tokio::test]
async fn power_parameters_of_one_machine_and_of_many() {
    let mut config = site(2);
    config.machines[0].power_pass = "s3cret-bmc".into();
    let sim = Sim::start(config).await;
    let maas = admin(&sim);
    let sid = nth(&maas, 0).await;
    let params = maas.machine_power_parameters(&sid).await.unwrap();
    assert!(params.power_address.is_some());
    assert_eq!(params.others["power_pass"].expose(), "s3cret-bmc");
    assert_eq!(params.others["power_user"].expose(), "root");
    assert!(
        !format!("{params:?}").contains("s3cret-bmc"),
        "kept secret in Debug"
    );
    let err = user(&sim).machine_power_parameters(&sid).await.unwrap_err();
    assert!(matches!(err, MaasError::Forbidden { .. }), "{err}");
}

/// api/events.py query: a machine's events, newest first, at or above the level asked.
#[tokio::test]
async fn events_of_a_deployment() {
    let sim = Sim::start(site(1)).await;
    let maas = admin(&sim);
    let sid = nth(&maas, 0).await;
    maas.deploy(&sid, &DeployParams::default()).await.unwrap();
    wait_for(&sim, &maas, &sid, MaasStatus::Deployed, 60, 1200).await;
    let events = maas
        .query_events(&EventsQuery {
            system_ids: vec![sid.clone()],
            level: Some(EventLevel::Info),
            ..EventsQuery::default()
        })
        .await
        .unwrap();
    let types: Vec<&str> = events
        .events
        .iter()
        .map(|e| e.event_type.as_str())
        .collect();
    assert_eq!(types.first(), Some(&"Deployed"), "{types:?}");
    assert!(types.contains(&"Deploying"), "{types:?}");
    assert!(
        !types.contains(&"Node installation"),
        "DEBUG events stay out: {types:?}"
    );
    assert!(
        events.events.windows(2).all(|w| w[0].id > w[1].id),
        "newest first"
    );
}

use metalform::lifecycle::MaasStatus;
