//! What the MAAS client puts on the wire and how it reads MAAS's answers (issue 3 "Show":
//! OAuth header, paths with trailing slashes, op dispatch, form and boolean encoding, every
//! typed error). The server is a recording axum app answering with real fixture bodies and
//! MAAS's error shapes (API_REFERENCE §1, §2).

use crate::maas_support;

use metalform::lifecycle::MaasStatus;
use std::net::IpAddr;

use base64::Engine as _;
use maas_support::*;
use metalform::provider::maas::*;
use metalform::secrets::Secret;

/// Answers each operation with a body of the shape MAAS sends for it.
fn maas_like(request: &Recorded, _: usize) -> Reply {
    let path = request.path.as_str();
    let method = request.method.as_str();
    match (method, request.op()) {
        ("GET", None) if path.ends_with("/version/") => {
            Reply::json(example("maas-3.6__api-examples__version.json", "version"))
        }
        ("GET", Some("whoami")) => Reply::json(
            r#"{"is_superuser": true, "username": "admin", "email": "admin@example.com",
                "is_local": true, "resource_uri": "/MAAS/api/2.0/users/admin/"}"#,
        ),
        ("GET", Some("query")) => Reply::json(example(
            "maas-3.6__api-examples__events.json",
            "events-query",
        )),
        ("GET", Some("query_power_state")) => Reply::json(r#"{"state": "off"}"#),
        ("GET", Some("get_token")) => Reply::json(
            r#"{"token_key": "mk", "token_secret": "machine-secret", "consumer_key": "mc"}"#,
        ),
        ("POST", Some("set_boot_disk")) => Reply::text(200, "OK"),
        ("POST", Some("power_off")) => Reply::json("null"),
        ("POST", Some("accept")) => Reply::json(format!("[{}]", machine_json())),
        ("POST", Some("link_subnet" | "unlink_subnet")) => {
            Reply::json(fixture("gomaasclient__interface.json"))
        }
        ("DELETE", None) => Reply::empty(204),
        ("GET", None) if path.ends_with("/machines/") => {
            Reply::json(format!("[{}]", machine_json()))
        }
        ("GET", None) if path.contains("/blockdevices/") && path.ends_with("/blockdevices/") => {
            Reply::json(fixture("gomaasclient__block_devices.json"))
        }
        ("GET", None) if path.contains("/blockdevices/") => {
            Reply::json(fixture("gomaasclient__block_device.json"))
        }
        ("GET", None) if path.ends_with("/interfaces/") => {
            Reply::json(fixture("gomaasclient__interfaces.json"))
        }
        ("GET", None) if path.contains("/interfaces/") => {
            Reply::json(fixture("gomaasclient__interface.json"))
        }
        ("GET", None) if path.ends_with("/subnets/") => {
            Reply::json(fixture("gomaasclient__subnets.json"))
        }
        (_, None) if path.contains("/subnets/") => {
            Reply::json(fixture("gomaasclient__subnet.json"))
        }
        ("GET", None) if path.contains("/nodes/") => {
            Reply::json(fixture("gomaasclient__node.json"))
        }
        _ => Reply::json(machine_json()),
    }
}

#[tokio::test]
async fn oauth_header_is_plaintext_with_a_fresh_nonce_and_the_clock_timestamp() {
    let server = FakeMaas::start(maas_like).await;
    let maas = client(&server);
    maas.version().await.unwrap();
    maas.whoami().await.unwrap();

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let params: Vec<_> = requests
        .iter()
        .map(|r| oauth_params(r.header("authorization").expect("signed")))
        .collect();
    for p in &params {
        assert_eq!(p["realm"], "");
        assert_eq!(p["oauth_version"], "1.0");
        assert_eq!(p["oauth_signature_method"], "PLAINTEXT");
        assert_eq!(p["oauth_consumer_key"], "ck-consumer");
        assert_eq!(p["oauth_token"], TOKEN_KEY);
        // consumer secret "" + "&" + token secret, percent-encoded in the header.
        assert_eq!(p["oauth_signature"], format!("%26{TOKEN_SECRET}"));
        // 2026-01-01T00:00:00Z from the injected clock.
        assert_eq!(p["oauth_timestamp"], "1767225600");
        assert!(p["oauth_nonce"].len() >= 16);
    }
    assert_ne!(params[0]["oauth_nonce"], params[1]["oauth_nonce"]);
    // No cookies: MAAS's CSRF check applies only to session-cookie requests.
    assert!(requests.iter().all(|r| r.header("cookie").is_none()));
}

/// A request as routed by MAAS: method, path, query pairs.
type Route<'a> = (&'a str, String, Vec<(&'a str, &'a str)>);

/// (method, path, query pairs) of every operation, exactly as MAAS routes them.
#[tokio::test]
async fn every_operation_uses_maas_paths_methods_and_op_dispatch() {
    let server = FakeMaas::start(maas_like).await;
    let maas = client(&server);
    let sid = "tdgqkw";

    let version = maas.version().await.unwrap();
    assert_eq!(version.version, "2.5.0 from source");
    assert!(maas.whoami().await.unwrap().is_superuser);
    let filter = MachineFilter::all()
        .hostname("gpu-01")
        .system_id(sid)
        .mac_address("CB:D5:C9:F7:78:04");
    assert_eq!(
        maas.list_machines(&filter).await.unwrap()[0].status,
        MaasStatus::Deploying
    );
    assert_eq!(maas.read_machine(sid).await.unwrap().system_id, sid);
    assert_eq!(
        maas.read_node(sid).await.unwrap().status,
        Some(MaasStatus::FailedExitingRescueMode.into())
    );
    let mut create = CreateMachineParams::new("amd64/generic");
    create.mac_addresses.push("cb:d5:c9:f7:78:04".into());
    maas.create_machine(&create).await.unwrap();
    maas.update_machine(sid, &UpdateMachineParams::default())
        .await
        .unwrap();
    maas.delete_machine(sid).await.unwrap();
    assert_eq!(maas.accept(&[sid]).await.unwrap().len(), 1);
    maas.commission(sid, &CommissionParams::default())
        .await
        .unwrap();
    maas.abort(sid, None).await.unwrap();
    maas.deploy(sid, &DeployParams::default()).await.unwrap();
    maas.release(sid, &ReleaseParams::default()).await.unwrap();
    maas.mark_broken(sid, Some("fan")).await.unwrap();
    maas.mark_fixed(sid, None).await.unwrap();
    maas.power_on(sid, None).await.unwrap();
    assert_eq!(
        maas.power_off(sid, StopMode::Soft, None).await.unwrap(),
        None
    );
    assert_eq!(maas.query_power_state(sid).await.unwrap(), PowerState::Off);
    maas.set_storage_layout(sid, &StorageLayoutParams::flat(Some(11)))
        .await
        .unwrap();
    assert_eq!(maas.list_block_devices(sid).await.unwrap().len(), 2);
    maas.read_block_device(sid, 11).await.unwrap();
    maas.set_boot_disk(sid, 11).await.unwrap();
    assert_eq!(maas.list_interfaces(sid).await.unwrap().len(), 6);
    maas.read_interface(sid, 16).await.unwrap();
    let link = LinkSubnetParams::new(LinkRequest::Auto {
        subnet: SubnetRef::Id(2),
    });
    maas.link_subnet(sid, 16, &link).await.unwrap();
    maas.unlink_subnet(sid, 16, 31).await.unwrap();
    assert_eq!(maas.list_subnets().await.unwrap().len(), 7);
    maas.read_subnet(2).await.unwrap();
    maas.create_subnet(&CreateSubnetParams::new("10.0.0.0/31"))
        .await
        .unwrap();
    let events = maas
        .query_events(&EventsQuery::machine(sid, EventLevel::Warning, 20))
        .await
        .unwrap();
    assert_eq!(events.newest_id(), Some(1667));
    let token = maas.get_token(sid).await.unwrap().unwrap();
    assert_eq!(token.token_secret.expose(), "machine-secret");

    let m = "/MAAS/api/2.0/machines/tdgqkw/";
    let n = "/MAAS/api/2.0/nodes/tdgqkw";
    let expected: Vec<Route> = vec![
        ("GET", "/MAAS/api/2.0/version/".into(), vec![]),
        ("GET", "/MAAS/api/2.0/users/".into(), vec![("op", "whoami")]),
        (
            "GET",
            "/MAAS/api/2.0/machines/".into(),
            vec![
                ("hostname", "gpu-01"),
                ("id", sid),
                ("mac_address", "cb:d5:c9:f7:78:04"),
            ],
        ),
        ("GET", m.into(), vec![]),
        ("GET", format!("{n}/"), vec![]),
        ("POST", "/MAAS/api/2.0/machines/".into(), vec![]),
        ("PUT", m.into(), vec![]),
        ("DELETE", m.into(), vec![]),
        (
            "POST",
            "/MAAS/api/2.0/machines/".into(),
            vec![("op", "accept")],
        ),
        ("POST", m.into(), vec![("op", "commission")]),
        ("POST", m.into(), vec![("op", "abort")]),
        ("POST", m.into(), vec![("op", "deploy")]),
        ("POST", m.into(), vec![("op", "release")]),
        ("POST", m.into(), vec![("op", "mark_broken")]),
        ("POST", m.into(), vec![("op", "mark_fixed")]),
        ("POST", m.into(), vec![("op", "power_on")]),
        ("POST", m.into(), vec![("op", "power_off")]),
        ("GET", m.into(), vec![("op", "query_power_state")]),
        ("POST", m.into(), vec![("op", "set_storage_layout")]),
        ("GET", format!("{n}/blockdevices/"), vec![]),
        ("GET", format!("{n}/blockdevices/11/"), vec![]),
        (
            "POST",
            format!("{n}/blockdevices/11/"),
            vec![("op", "set_boot_disk")],
        ),
        ("GET", format!("{n}/interfaces/"), vec![]),
        ("GET", format!("{n}/interfaces/16/"), vec![]),
        (
            "POST",
            format!("{n}/interfaces/16/"),
            vec![("op", "link_subnet")],
        ),
        (
            "POST",
            format!("{n}/interfaces/16/"),
            vec![("op", "unlink_subnet")],
        ),
        ("GET", "/MAAS/api/2.0/subnets/".into(), vec![]),
        ("GET", "/MAAS/api/2.0/subnets/2/".into(), vec![]),
        ("POST", "/MAAS/api/2.0/subnets/".into(), vec![]),
        (
            "GET",
            "/MAAS/api/2.0/events/".into(),
            vec![
                ("op", "query"),
                ("id", sid),
                ("level", "WARNING"),
                ("limit", "20"),
            ],
        ),
        ("GET", m.into(), vec![("op", "get_token")]),
    ];
    let requests = server.requests();
    let actual: Vec<Route> = requests
        .iter()
        .map(|r| {
            (
                r.method.as_str(),
                r.path.clone(),
                r.query
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect(),
            )
        })
        .collect();
    assert_eq!(actual, expected);

    for request in &requests {
        assert!(request.path.ends_with('/'), "{}", request.path);
        if request.method == "GET" {
            assert!(
                request.body.is_empty(),
                "{} {}",
                request.method,
                request.path
            );
        } else {
            // Form-encoded bodies (MAAS reads request.POST), the op in the query only.
            assert_eq!(
                request.header("content-type"),
                Some("application/x-www-form-urlencoded"),
                "{} {}",
                request.method,
                request.path
            );
            assert!(request.form_values("op").is_empty());
        }
    }
}

#[tokio::test]
async fn form_bodies_send_true_false_repeat_lists_and_base64_user_data() {
    let server = FakeMaas::start(maas_like).await;
    let maas = client(&server);
    let sid = "tdgqkw";

    let mut ipmi = IpmiPower::new("10.0.0.5", "admin", Secret::new("p&ss word"));
    ipmi.power_driver = Some("LAN_2_0".into());
    let create = CreateMachineParams {
        mac_addresses: vec!["aa:bb:cc:dd:ee:01".into(), "aa:bb:cc:dd:ee:02".into()],
        hostname: Some("gpu-01".into()),
        power: Some(PowerParameters::Ipmi(ipmi)),
        commission: Some(false),
        ..CreateMachineParams::new("amd64/generic")
    };
    maas.create_machine(&create).await.unwrap();
    let commission = CommissionParams {
        enable_ssh: Some(true),
        skip_bmc_config: Some(true),
        skip_networking: Some(false),
        skip_storage: Some(false),
        testing_scripts: vec!["none".into()],
        ..CommissionParams::default()
    };
    maas.commission(sid, &commission).await.unwrap();
    let user_data = "#cloud-config\nwrite_files:\n- path: /etc/metalform/agent.env\n";
    let deploy = DeployParams {
        user_data: Some(Secret::new(user_data)),
        distro_series: Some("ubuntu/jammy".into()),
        enable_hw_sync: Some(true),
        ..DeployParams::default()
    };
    maas.deploy(sid, &deploy).await.unwrap();
    maas.release(sid, &ReleaseParams::erasing(EraseMode::Quick))
        .await
        .unwrap();
    let link = LinkSubnetParams {
        default_gateway: Some(false),
        ..LinkSubnetParams::new(LinkRequest::Static {
            subnet: SubnetRef::Cidr("10.10.0.0/31".into()),
            ip_address: Some("10.10.0.1".parse::<IpAddr>().unwrap()),
        })
    };
    maas.link_subnet(sid, 16, &link).await.unwrap();
    let update = UpdateMachineParams {
        hostname: Some("gpu-01".into()),
        power: Some(PowerParameters::Ipmi(IpmiPower::new(
            "10.0.0.6",
            "root",
            Secret::new("x"),
        ))),
        ..UpdateMachineParams::default()
    };
    maas.update_machine(sid, &update).await.unwrap();

    let requests = server.requests();
    let form = |i: usize| -> Vec<(String, String)> { requests[i].form() };
    let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert_eq!(
        form(0),
        pairs(&[
            ("architecture", "amd64/generic"),
            ("mac_addresses", "aa:bb:cc:dd:ee:01"),
            ("mac_addresses", "aa:bb:cc:dd:ee:02"),
            ("hostname", "gpu-01"),
            ("power_type", "ipmi"),
            ("power_parameters_power_address", "10.0.0.5"),
            ("power_parameters_power_user", "admin"),
            ("power_parameters_power_pass", "p&ss word"),
            ("power_parameters_power_driver", "LAN_2_0"),
            ("commission", "false"),
        ])
    );
    assert_eq!(
        form(1),
        pairs(&[
            ("enable_ssh", "true"),
            ("skip_bmc_config", "true"),
            ("skip_networking", "false"),
            ("skip_storage", "false"),
            ("testing_scripts", "none"),
        ])
    );
    let deploy_form = form(2);
    assert_eq!(deploy_form[0].0, "user_data");
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(&deploy_form[0].1)
        .unwrap();
    assert_eq!(String::from_utf8(decoded).unwrap(), user_data);
    assert_eq!(
        deploy_form[1..].to_vec(),
        pairs(&[
            ("distro_series", "ubuntu/jammy"),
            ("enable_hw_sync", "true")
        ])
    );
    assert_eq!(
        form(3),
        pairs(&[("erase", "true"), ("quick_erase", "true")])
    );
    assert_eq!(
        form(4),
        pairs(&[
            ("mode", "STATIC"),
            ("subnet", "cidr:10.10.0.0/31"),
            ("ip_address", "10.10.0.1"),
            ("default_gateway", "false"),
        ])
    );
    assert_eq!(requests[5].method, "PUT");
    assert_eq!(
        form(5),
        pairs(&[
            ("hostname", "gpu-01"),
            ("power_type", "ipmi"),
            ("power_parameters_power_address", "10.0.0.6"),
            ("power_parameters_power_user", "root"),
            ("power_parameters_power_pass", "x"),
        ])
    );
    // Never Python-truthiness bait: no flag is ever sent as 0/1.
    for request in &requests {
        for (name, value) in request.form() {
            assert!(value != "0" && value != "1", "{name}={value}");
        }
    }
}

#[tokio::test]
async fn create_machine_without_architecture_sends_nothing() {
    let server = FakeMaas::start(maas_like).await;
    let maas = client(&server);
    let mut params = CreateMachineParams::new("");
    params.mac_addresses.push("aa:bb:cc:dd:ee:01".into());
    let err = maas.create_machine(&params).await.unwrap_err();
    assert!(matches!(err, MaasError::Config { .. }), "{err}");
    assert!(server.requests().is_empty());
}

async fn error_for(reply: Reply) -> (MaasError, usize) {
    let server = FakeMaas::always(reply).await;
    let maas = client_for(
        &server.base_url(),
        MaasClientOptions {
            retry: RetryPolicy::never(),
            ..test_options()
        },
    );
    let err = maas
        .deploy("tdgqkw", &DeployParams::default())
        .await
        .unwrap_err();
    (err, server.requests().len())
}

#[tokio::test]
async fn each_maas_error_shape_becomes_its_typed_error() {
    let (err, _) = error_for(
        Reply::text(
            401,
            format!("Authorization Error: 'Invalid access token: {TOKEN_KEY}'"),
        )
        .header("www-authenticate", "OAuth realm=\"OAuth\""),
    )
    .await;
    assert!(matches!(err, MaasError::Unauthorized { .. }));
    assert_eq!(
        err.to_string(),
        "MAAS deploy: unauthorized (401): Authorization Error: 'Invalid access token: ***'"
    );

    let (err, _) = error_for(Reply::text(403, "")).await;
    assert!(matches!(err, MaasError::Forbidden { .. }));
    assert_eq!(
        err.to_string(),
        "MAAS deploy: forbidden (403): (no message)"
    );

    let (err, _) = error_for(Reply::text(404, "No Machine matches the given query.")).await;
    assert!(matches!(err, MaasError::NotFound { .. }));
    assert_eq!(err.maas_message(), "No Machine matches the given query.");

    let (err, requests) = error_for(Reply::text(
        409,
        "Can't deploy a machine that is in the 'Deployed' state",
    ))
    .await;
    assert!(matches!(err, MaasError::Conflict { .. }));
    assert!(!err.is_retryable());
    assert_eq!(requests, 1);

    let (err, _) = error_for(Reply::json_status(
        400,
        r#"{"distro_series": ["'plucky' is not a valid distro_series.  It should be one of: 'ubuntu/jammy'."]}"#,
    ))
    .await;
    assert_eq!(
        err.form_errors().unwrap()["distro_series"],
        ["'plucky' is not a valid distro_series.  It should be one of: 'ubuntu/jammy'."]
    );
    assert_eq!(err.status(), Some(400));

    let (err, _) = error_for(Reply::text(
        400,
        "Unrecognised signature: method=POST op=deploy",
    ))
    .await;
    assert!(matches!(err, MaasError::BadRequest { status: 400, .. }));
    assert_eq!(err.form_errors(), None);

    let (err, _) =
        error_for(Reply::text(503, "No rack controllers connected").retry_after(10)).await;
    assert!(matches!(
        err,
        MaasError::Transient {
            cause: TransientCause::Status(503),
            outcome_unknown: false,
            ..
        }
    ));
    assert_eq!(err.retry_after(), Some(std::time::Duration::from_secs(10)));

    let (err, _) = error_for(Reply::text(500, "division by zero")).await;
    assert!(err.is_retryable() && err.is_outcome_unknown(), "{err}");

    let (err, _) = error_for(Reply::json("<html>not json</html>")).await;
    match &err {
        MaasError::Decode { body_excerpt, .. } => {
            assert_eq!(body_excerpt.as_deref(), Some("<html>not json</html>"))
        }
        other => panic!("{other}"),
    }
    // `null` is not a machine.
    let (err, _) = error_for(Reply::json("null")).await;
    assert!(matches!(err, MaasError::Decode { .. }), "{err}");
}

#[tokio::test]
async fn maas_text_echoing_the_key_is_scrubbed_from_errors() {
    // Upstream piston's bad-signature message echoes the expected signature (API_REFERENCE §9).
    let (err, _) = error_for(Reply::text(
        401,
        format!("Authorization Error: 'Invalid signature. Expected signature base string: &{TOKEN_SECRET}'"),
    ))
    .await;
    for text in [err.to_string(), format!("{err:?}")] {
        assert!(!text.contains(TOKEN_SECRET), "{text}");
        assert!(!text.contains(TOKEN_KEY), "{text}");
    }
    assert!(
        err.to_string()
            .ends_with("Expected signature base string: &***'")
    );
}

#[tokio::test]
async fn undecodable_tokens_never_reach_the_error() {
    let server = FakeMaas::always(Reply::json(
        r#"{"token_key": "k", "token_secret": 987654321, "consumer_key": "c"}"#,
    ))
    .await;
    let err = client(&server).get_token("tdgqkw").await.unwrap_err();
    let MaasError::Decode {
        message,
        body_excerpt,
        ..
    } = &err
    else {
        panic!("{err}");
    };
    assert_eq!(body_excerpt, &None);
    assert!(!format!("{err} {err:?} {message}").contains("987654321"));

    let server = FakeMaas::always(Reply::json("null")).await;
    assert_eq!(client(&server).get_token("tdgqkw").await.unwrap(), None);
}

#[tokio::test]
async fn an_unreachable_maas_is_a_transient_connect_error() {
    // Bind and drop to find a port nobody listens on.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let maas = client_for(
        &format!("http://127.0.0.1:{port}/MAAS"),
        MaasClientOptions {
            retry: RetryPolicy::never(),
            ..test_options()
        },
    );
    let err = maas.read_machine("tdgqkw").await.unwrap_err();
    assert!(
        matches!(
            err,
            MaasError::Transient {
                cause: TransientCause::Connect,
                outcome_unknown: false,
                attempts: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.hint().contains("unreachable"));
    assert_eq!(
        maas.metrics()
            .get("read_machine", RequestStatus::ConnectError),
        1
    );
}

#[tokio::test]
async fn ids_that_would_change_the_path_are_refused_before_sending() {
    let server = FakeMaas::start(maas_like).await;
    let maas = client(&server);
    let err = maas.read_machine("..").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "MAAS client configuration: read_machine: \"..\" is not a valid MAAS id"
    );
    // Other characters are percent-encoded into one segment.
    let _ = maas.read_machine("a/b?c").await;
    assert_eq!(
        server.requests()[0].path,
        "/MAAS/api/2.0/machines/a%2Fb%3Fc/"
    );
}
