//! Where metalform's MAAS client and the simulator disagreed, decided by
//! ../shared/maas/API_REFERENCE.md (and the real fixtures); each test pins the side that was
//! fixed. docs/simulator.md and docs/maas-client.md describe the resulting behaviour.

use crate::maas_sim_support;
use crate::sim_support;

use maas_sim_support::*;
use metalform::lifecycle::MaasStatus;
use metalform::provider::maas::*;
use sim_support::Sim;

/// §2.3: PLAINTEXT compares the unescaped header value with
/// `escape(consumer_secret) + "&" + escape(token_secret)` — the client (like oauthlib, which
/// python-libmaas uses) percent-encodes the secret inside the signature and the header value
/// again. A secret with reserved characters must therefore still authenticate.
#[tokio::test]
async fn a_token_secret_with_reserved_characters_authenticates() {
    let mut config = site(1);
    config.api_key = "ck-metal:tk-metal:s3cr+t/k=y~ok".to_string();
    let sim = Sim::start(config).await;
    let maas = admin(&sim);
    assert_eq!(maas.whoami().await.unwrap().username, "admin");
    assert_eq!(
        maas.list_machines(&MachineFilter::all())
            .await
            .unwrap()
            .len(),
        1
    );
}

/// §5.12: for an Allocated machine MAAS moves the status to Deploying synchronously and
/// claims AUTO addresses post-commit, answering 503 on exhaustion — so the 503 arrives after
/// the deployment took effect. The client calls that outcome-unknown and does not resend; the
/// simulator used to validate first and change nothing, which made the client look
/// over-cautious. Now the machine is left Deploying (its deployment cannot finish and fails
/// when MAAS's deployment timeout, 2 × node_timeout, expires).
#[tokio::test]
async fn address_exhaustion_answers_503_after_the_machine_moved_to_deploying() {
    let mut config = site(5);
    // 10.176.46.11–14 are the only addresses the simulator hands out on a /28.
    config.pxe_cidr = "10.176.46.0/28".to_string();
    config.timings.node_timeout_secs = 600.0;
    let sim = Sim::start(config).await;
    let maas = admin(&sim);
    let machines = maas.list_machines(&MachineFilter::all()).await.unwrap();
    for m in &machines[..4] {
        maas.deploy(&m.system_id, &DeployParams::default())
            .await
            .unwrap();
    }
    let sid = &machines[4].system_id;
    let err = maas
        .deploy(sid, &DeployParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            MaasError::Transient {
                cause: TransientCause::Status(503),
                outcome_unknown: true,
                attempts: 1,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        err.maas_message(),
        format!("{sid}: Unable to allocate static IP due to address exhaustion.")
    );
    assert_eq!(maas.metrics().operation_total("deploy"), 5, "not resent");
    // Re-reading shows why the outcome was unknown: the deployment did start.
    let machine = maas.read_machine(sid).await.unwrap();
    assert_eq!(machine.status, MaasStatus::Deploying);
    assert_eq!(machine.owner.as_deref(), Some("admin"));
    assert!(machine.ip_addresses.is_empty());
    assert_eq!(
        sim.counters(sid).await["deploy"],
        1,
        "the request took effect"
    );
    // It cannot finish: MAAS fails it at the deployment timeout (2 × node_timeout).
    sim.advance(1199);
    assert_eq!(
        maas.read_machine(sid).await.unwrap().status,
        MaasStatus::Deploying
    );
    sim.advance(2);
    let failed = maas.read_machine(sid).await.unwrap();
    assert_eq!(failed.status, MaasStatus::FailedDeployment);
    assert!(failed.status_message.is_some());
    // The others deployed normally.
    assert_eq!(
        maas.read_machine(&machines[0].system_id)
            .await
            .unwrap()
            .status,
        MaasStatus::Deployed
    );
}

/// §5.6/§5.7: `zone`, `pool` (names) and `domain` are create/update parameters the client
/// sends; the simulator ignored them on create and took any name on update. Now they are
/// applied when they name an existing object and refused with Django's choice error otherwise.
#[tokio::test]
async fn zone_pool_and_domain_are_applied_or_refused() {
    let sim = Sim::start(site(1)).await;
    let maas = admin(&sim);
    let mut create = CreateMachineParams::new("amd64/generic");
    create.mac_addresses = vec!["52:54:00:00:00:01".into()];
    create.power = Some(PowerParameters::Manual);
    create.commission = Some(false);
    create.zone = Some("default".into());
    create.pool = Some("default".into());
    create.domain = Some("maas".into());
    let created = maas.create_machine(&create).await.unwrap();
    assert_eq!(created.zone.unwrap().name, "default");
    assert_eq!(created.pool.unwrap().name, "default");
    assert_eq!(created.domain.unwrap().name, "maas");

    let choice = "Select a valid choice. That choice is not one of the available choices.";
    for field in ["zone", "pool", "domain"] {
        let mut bad = CreateMachineParams::new("amd64/generic");
        bad.mac_addresses = vec!["52:54:00:00:00:02".into()];
        bad.power = Some(PowerParameters::Manual);
        let mut update = UpdateMachineParams::default();
        match field {
            "zone" => (bad.zone, update.zone) = (Some("rack7".into()), Some("rack7".into())),
            "pool" => (bad.pool, update.pool) = (Some("gpu".into()), Some("gpu".into())),
            _ => (bad.domain, update.domain) = (Some("lab".into()), Some("lab".into())),
        }
        let err = maas.create_machine(&bad).await.unwrap_err();
        assert_eq!(
            err.form_errors().unwrap()[field],
            [choice],
            "create {field}"
        );
        let err = maas
            .update_machine(&created.system_id, &update)
            .await
            .unwrap_err();
        assert_eq!(
            err.form_errors().unwrap()[field],
            [choice],
            "update {field}"
        );
    }
    let machines = maas.list_machines(&MachineFilter::all()).await.unwrap();
    assert_eq!(
        machines.len(),
        2,
        "no machine was created by a refused request"
    );
    assert!(
        machines
            .iter()
            .all(|m| m.zone.as_ref().unwrap().name == "default")
    );
}

/// §5.20: `rdns_mode` and `fabric` + `vid` are subnet-create parameters the client sends; the
/// simulator always answered `rdns_mode: 2` and put the subnet on the default VLAN whatever
/// fabric/vid named.
#[tokio::test]
async fn subnet_rdns_mode_and_fabric_vid_are_honoured() {
    let sim = Sim::start(site(1)).await;
    let maas = admin(&sim);
    let created = maas
        .create_subnet(&CreateSubnetParams {
            rdns_mode: Some(0),
            fabric: Some(0),
            vid: Some(0),
            ..CreateSubnetParams::new("172.30.9.60/31")
        })
        .await
        .unwrap();
    assert_eq!(created.rdns_mode, 0);
    assert_eq!(created.vlan.as_ref().unwrap().vid, 0);
    assert_eq!(created.vlan.as_ref().unwrap().fabric_id, Some(0));
    let err = maas
        .create_subnet(&CreateSubnetParams {
            rdns_mode: Some(7),
            ..CreateSubnetParams::new("172.30.9.62/31")
        })
        .await
        .unwrap_err();
    assert_eq!(
        err.form_errors().unwrap()["rdns_mode"],
        ["Select a valid choice. 7 is not one of the available choices."]
    );
    let err = maas
        .create_subnet(&CreateSubnetParams {
            fabric: Some(0),
            vid: Some(42),
            ..CreateSubnetParams::new("172.30.9.62/31")
        })
        .await
        .unwrap_err();
    assert_eq!(
        err.form_errors().unwrap()["vid"],
        ["No VLAN with vid 42 in fabric fabric-0."]
    );
    let err = maas
        .create_subnet(&CreateSubnetParams {
            fabric: Some(9),
            ..CreateSubnetParams::new("172.30.9.62/31")
        })
        .await
        .unwrap_err();
    assert!(err.form_errors().unwrap().contains_key("fabric"), "{err}");
    assert_eq!(maas.list_subnets().await.unwrap().len(), 2);
}

/// §5.17: `root_size` (bytes, a K/M/G/T suffix or `NN%`) and `boot_size` are flat-layout
/// parameters the client sends; the simulator ignored them (root always took the whole disk).
#[tokio::test]
async fn flat_layout_honours_root_size_and_boot_size() {
    let sim = Sim::start(site(1)).await;
    let maas = admin(&sim);
    let sid = maas.list_machines(&MachineFilter::all()).await.unwrap()[0]
        .system_id
        .clone();
    let nvme = maas
        .list_block_devices(&sid)
        .await
        .unwrap()
        .into_iter()
        .find(|d| d.name == "nvme0n1")
        .unwrap();
    let layout =
        |root_device, boot_size: Option<&str>, root_size: Option<&str>| StorageLayoutParams {
            boot_size: boot_size.map(String::from),
            root_size: root_size.map(String::from),
            ..StorageLayoutParams::flat(root_device)
        };
    let sizes = |machine: &Machine, device: i64| -> Vec<(String, u64)> {
        machine
            .physicalblockdevice_set
            .iter()
            .find(|d| d.id == device)
            .unwrap()
            .partitions
            .iter()
            .map(|p| {
                let fs = p.filesystem.as_ref().unwrap();
                (fs.mount_point.clone().unwrap(), p.size)
            })
            .collect()
    };
    let m = maas
        .set_storage_layout(&sid, &layout(None, Some("1G"), Some("100G")))
        .await
        .unwrap();
    let boot = m.boot_disk.as_ref().unwrap().id;
    assert_eq!(
        sizes(&m, boot),
        [
            ("/boot/efi".to_string(), 512 * 1024 * 1024),
            ("/boot".to_string(), 1_000_000_000),
            ("/".to_string(), 100_000_000_000)
        ]
    );
    // A percentage is of the boot disk without its EFI partition, wherever the root goes
    // (storage_layouts.py `_clean_size`).
    let m = maas
        .set_storage_layout(&sid, &layout(Some(nvme.id), None, Some("50%")))
        .await
        .unwrap();
    let boss = m.boot_disk.as_ref().unwrap().size;
    assert_eq!(
        sizes(&m, nvme.id),
        [("/".to_string(), (boss - 512 * 1024 * 1024).div_ceil(2))]
    );
    let m = maas
        .set_storage_layout(&sid, &layout(Some(nvme.id), None, Some("4000000000")))
        .await
        .unwrap();
    assert_eq!(sizes(&m, nvme.id), [("/".to_string(), 4_000_000_000)]);
    // Below MIN_ROOT_PARTITION_SIZE (3 GiB): the form's error (storage_layouts.py).
    let err = maas
        .set_storage_layout(&sid, &layout(Some(nvme.id), None, Some("1234567")))
        .await
        .unwrap_err();
    assert_eq!(
        err.form_errors().unwrap()["root_size"],
        ["Size is too small. Minimum size is 3221225472."]
    );
    let err = maas
        .set_storage_layout(&sid, &layout(None, None, Some("lots")))
        .await
        .unwrap_err();
    assert!(
        err.form_errors().unwrap().contains_key("root_size"),
        "{err}"
    );
    // clean_boot_size bounds it by the boot disk: a form error, not a layout failure.
    let err = maas
        .set_storage_layout(&sid, &layout(None, Some("10T"), None))
        .await
        .unwrap_err();
    let max = boss - 512 * 1024 * 1024 - 3 * 1024 * 1024 * 1024;
    assert_eq!(
        err.form_errors().unwrap()["boot_size"],
        [format!("Size is too large. Maximum size is {max}.")]
    );
}

/// §5.19: `default_gateway` makes the link the machine's default gateway (AUTO/STATIC only,
/// on a subnet with a gateway); the simulator ignored it.
#[tokio::test]
async fn link_subnet_default_gateway_is_validated_and_applied() {
    let sim = Sim::start(site(1)).await;
    let maas = admin(&sim);
    let sid = maas.list_machines(&MachineFilter::all()).await.unwrap()[0]
        .system_id
        .clone();
    let interfaces = maas.list_interfaces(&sid).await.unwrap();
    let roce = interfaces[1].id;
    // Subnets on the RoCE port's own VLAN (commissioning gave it a fabric of its own).
    let vlan = interfaces[1].vlan.as_ref().map(|v| v.id);
    let routed = maas
        .create_subnet(&CreateSubnetParams {
            gateway_ip: Some("172.30.10.1".into()),
            vlan,
            ..CreateSubnetParams::new("172.30.10.0/24")
        })
        .await
        .unwrap();
    maas.create_subnet(&CreateSubnetParams {
        vlan,
        ..CreateSubnetParams::new("172.30.9.60/31")
    })
    .await
    .unwrap();
    let gateway = |request: LinkRequest| LinkSubnetParams {
        default_gateway: Some(true),
        ..LinkSubnetParams::new(request)
    };
    let err = maas
        .link_subnet(
            &sid,
            roce,
            &gateway(LinkRequest::Dhcp {
                subnet: Some(SubnetRef::Id(routed.id)),
            }),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.form_errors().unwrap()["default_gateway"],
        ["Cannot use in mode 'dhcp'."]
    );
    let err = maas
        .link_subnet(
            &sid,
            roce,
            &gateway(LinkRequest::Static {
                subnet: SubnetRef::Cidr("172.30.9.60/31".into()),
                ip_address: None,
            }),
        )
        .await
        .unwrap_err();
    assert!(
        err.form_errors().unwrap().contains_key("default_gateway"),
        "{err}"
    );
    assert!(
        maas.read_interface(&sid, roce)
            .await
            .unwrap()
            .links
            .is_empty()
    );

    let linked = maas
        .link_subnet(
            &sid,
            roce,
            &gateway(LinkRequest::Static {
                subnet: SubnetRef::Id(routed.id),
                ip_address: Some("172.30.10.20".parse().unwrap()),
            }),
        )
        .await
        .unwrap();
    let link = linked.links[0].id;
    let view = sim
        .get(&format!("machines/{sid}/"), &[])
        .await
        .expect(200)
        .json();
    assert_eq!(
        view["default_gateways"]["ipv4"]["gateway_ip"],
        "172.30.10.1"
    );
    assert_eq!(view["default_gateways"]["ipv4"]["link_id"], link);
    // Unlinking it falls back to MAAS's choice (the PXE subnet's gateway).
    maas.unlink_subnet(&sid, roce, link).await.unwrap();
    let view = sim.get(&format!("machines/{sid}/"), &[]).await.json();
    assert_eq!(
        view["default_gateways"]["ipv4"]["gateway_ip"],
        "10.176.46.1"
    );
    assert_eq!(
        view["default_gateways"]["ipv4"]["link_id"],
        serde_json::Value::Null
    );
}
