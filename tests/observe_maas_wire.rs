//! The MAAS client's bulk power-parameters read on the wire (API_REFERENCE §5: `GET
//! machines/?op=power_parameters` → `{system_id: {...}}`, admin only): what is sent, how the
//! answer is read (the BMC address in the clear, everything else secret), and that a broken
//! answer never quotes the passwords it carries.

use crate::maas_support;

use maas_support::*;
use metalform::provider::maas::MaasError;

const ANSWER: &str = r#"{
    "4y3h7n": {"power_address": "10.176.16.20", "power_user": "root", "power_pass": "calvin-1",
               "power_driver": "LAN_2_0", "workaround_flags": ["opensesspriv"], "k_g": ""},
    "xk2m9p": {},
    "9aa7qe": null
}"#;

#[tokio::test]
async fn power_parameters_is_one_get_with_op_and_ids() {
    let server = FakeMaas::always(Reply::json(ANSWER)).await;
    let client = client(&server);
    let all = client.power_parameters(&[]).await.unwrap();
    let some = client
        .power_parameters(&["4y3h7n".to_owned(), "xk2m9p".to_owned()])
        .await
        .unwrap();

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(request.method, "GET");
        assert_eq!(request.path, "/MAAS/api/2.0/machines/");
        assert_eq!(request.op(), Some("power_parameters"));
        assert!(
            request
                .header("authorization")
                .unwrap()
                .starts_with("OAuth ")
        );
        assert!(request.body.is_empty());
    }
    assert_eq!(
        requests[0].query,
        [("op".to_owned(), "power_parameters".to_owned())]
    );
    let ids: Vec<&str> = requests[1]
        .query
        .iter()
        .filter(|(k, _)| k == "id")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(ids, ["4y3h7n", "xk2m9p"]);

    assert_eq!(all, some);
    assert_eq!(all.len(), 3);
    let bmc = &all["4y3h7n"];
    assert_eq!(bmc.power_address.as_deref(), Some("10.176.16.20"));
    assert_eq!(bmc.others["power_pass"].expose(), "calvin-1");
    assert_eq!(
        bmc.others["workaround_flags"].expose(),
        r#"["opensesspriv"]"#
    );
    assert!(
        !format!("{all:?}").contains("calvin-1"),
        "passwords stay redacted"
    );
    assert_eq!(
        all["xk2m9p"].power_address, None,
        "a manual machine has none"
    );
    assert_eq!(all["9aa7qe"].power_address, None, "null reads as empty");
    assert_eq!(client.metrics().operation_total("power_parameters"), 2);
}

#[tokio::test]
async fn a_broken_answer_never_quotes_the_passwords() {
    // Truncated after a password: the decode error must not carry the body.
    let server = FakeMaas::always(Reply::json(
        r#"{"4y3h7n": {"power_address": "10.176.16.20", "power_pass": "calvin-1""#,
    ))
    .await;
    let err = client(&server).power_parameters(&[]).await.unwrap_err();
    assert!(matches!(err, MaasError::Decode { .. }), "{err:?}");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains("calvin-1"), "{shown}");
}

#[tokio::test]
async fn a_non_admin_key_is_forbidden() {
    let server = FakeMaas::always(Reply::text(403, "")).await;
    let err = client(&server).power_parameters(&[]).await.unwrap_err();
    assert!(matches!(err, MaasError::Forbidden { .. }), "{err:?}");
    assert!(err.hint().contains("must be a MAAS admin"));
}

/// Every machine object in the real MAAS captures (tests/fixtures/maas), wherever it sits in
/// its file.
fn captured_machines() -> Vec<(String, serde_json::Value)> {
    fn walk(origin: &str, value: &serde_json::Value, out: &mut Vec<(String, serde_json::Value)>) {
        match value {
            serde_json::Value::Object(map) => {
                let machine_like = ["system_id", "hostname", "status", "interface_set"]
                    .iter()
                    .all(|k| map.contains_key(*k))
                    && map.get("node_type").is_none_or(|t| t == 0);
                if machine_like {
                    out.push((origin.to_owned(), value.clone()));
                } else {
                    for (key, child) in map {
                        walk(&format!("{origin}/{key}"), child, out);
                    }
                }
            }
            serde_json::Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    walk(&format!("{origin}[{i}]"), child, out);
                }
            }
            _ => {}
        }
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/maas");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".json") || n.ends_with(".json-fragment"))
        .collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let text = fixture(&name);
        let text = if name.ends_with("-fragment") {
            format!("[{text}]")
        } else {
            text
        };
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        walk(&name, &value, &mut out);
    }
    out
}

#[test]
fn machine_summaries_agree_with_full_machines_on_every_real_capture() {
    use metalform::provider::maas::{Machine, MachineSummary};
    let machines = captured_machines();
    assert!(machines.len() >= 30, "found {}", machines.len());
    for (origin, value) in &machines {
        let full: Machine =
            serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{origin}: {e}"));
        let summary: MachineSummary =
            serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{origin}: {e}"));
        assert_eq!(summary.system_id, full.system_id, "{origin}");
        assert_eq!(summary.hostname, full.hostname, "{origin}");
        assert_eq!(summary.status, full.status, "{origin}");
        assert_eq!(summary.status_label(), full.status_label(), "{origin}");
        assert_eq!(summary.owner, full.owner, "{origin}");
        assert_eq!(summary.power_state, full.power_state, "{origin}");
        assert_eq!(summary.ip_addresses, full.ip_addresses, "{origin}");
        assert!(summary.mac_addresses().eq(full.mac_addresses()), "{origin}");
        assert_eq!(summary.enable_hw_sync, full.enable_hw_sync, "{origin}");
        assert_eq!(summary.last_sync, full.last_sync, "{origin}");
        assert_eq!(summary.next_sync, full.next_sync, "{origin}");
        assert_eq!(summary.sync_interval, full.sync_interval, "{origin}");
    }
}

/// The summaries list is decoded machine by machine as the answer arrives: the same machines
/// as decoding the whole answer, and a broken answer is a decode error that says where.
#[tokio::test]
async fn machine_summaries_are_decoded_from_the_list_as_it_arrives() {
    use metalform::provider::maas::{MachineFilter, MachineSummary};
    // Every captured machine, in one list: real MAAS's layout (piston, indent 4) and compact.
    let value = serde_json::Value::Array(captured_machines().into_iter().map(|(_, m)| m).collect());
    let list = String::from_utf8(metalform::sim::reply::to_piston_json(&value)).unwrap();
    let whole: Vec<MachineSummary> = serde_json::from_str(&list).unwrap();
    assert!(whole.len() >= 30);
    for text in [list.clone(), value.to_string()] {
        let server = FakeMaas::always(Reply::json(text)).await;
        let client = client(&server);
        let read = client
            .list_machine_summaries(&MachineFilter::all())
            .await
            .unwrap();
        assert_eq!(read, whole);
        assert_eq!(client.metrics().operation_total("list_machines"), 1);
    }

    // Cut inside the second machine.
    let second = list[1..].find("\"system_id\"").map(|i| i + 1).unwrap();
    let second = second + list[second + 1..].find("\"system_id\"").unwrap() + 1;
    let server = FakeMaas::always(Reply::json(&list[..second + 20])).await;
    let err = client(&server)
        .list_machine_summaries(&MachineFilter::all())
        .await
        .unwrap_err();
    let MaasError::Decode {
        message,
        body_excerpt,
        ..
    } = &err
    else {
        panic!("{err}");
    };
    assert!(
        message
            .starts_with("the answer ends early (truncated in element 1 of the list, from byte "),
        "{message}"
    );
    let excerpt: String = list.chars().take(200).collect();
    assert_eq!(body_excerpt.as_deref(), Some(excerpt.as_str()));

    let server = FakeMaas::always(Reply::json("<html>not json</html>")).await;
    let err = client(&server)
        .list_machine_summaries(&MachineFilter::all())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "MAAS list_machines: unexpected answer from GET /MAAS/api/2.0/machines/: expected a \
         list of machines; got an HTML page: not json"
    );
}
