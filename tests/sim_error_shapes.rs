//! The simulator answers every MAAS error of the shared table (tests/maas_shapes, each citing
//! its MAAS handler) exactly as MAAS does: status, content type, body and `Retry-After` — over
//! raw HTTP, never through metalform's client.

use crate::maas_shapes;
use crate::sim_support;

use maas_shapes::{Body, SHAPES, Setup, fill};
use reqwest::Method;
use sim_support::{Sim, fleet};

const USER_KEY: &str = "userconsumer00000:usertoken0000000:usersecret00000000000000";

/// A simulator with the machine the row needs; returns (sid, RoCE port id, subnet, disk).
async fn prepare(sim: &Sim, setup: Setup) -> (String, String, String, String) {
    let sids = sim.system_ids().await;
    let sid = sids[0].clone();
    let roce = sim
        .get(&format!("nodes/{sid}/interfaces/enp28s0np0/"), &[])
        .await
        .expect(200)
        .json();
    let iface = roce["id"].to_string();
    let disk = sim
        .get(&format!("nodes/{sid}/blockdevices/sda/"), &[])
        .await
        .expect(200)
        .json()["id"]
        .to_string();
    let mut subnet = String::new();
    match setup {
        Setup::Ready => {}
        Setup::Deployed => {
            sim.op(&format!("machines/{sid}/"), "deploy", &[])
                .await
                .expect(200);
            sim.advance(601);
            assert_eq!(sim.status_name(&sid).await, "Deployed");
        }
        Setup::Commissioning => {
            sim.op(&format!("machines/{sid}/"), "commission", &[])
                .await
                .expect(200);
        }
        Setup::AddressTaken => {
            // The /31 on the port's VLAN; the other machine's port (moved onto that VLAN)
            // holds .61 first.
            let vlan = roce["vlan"]["id"].to_string();
            sim.post("subnets/", &[("cidr", "172.30.9.60/31"), ("vlan", &vlan)])
                .await
                .expect(200);
            let other = &sids[1];
            let port = sim
                .get(&format!("nodes/{other}/interfaces/enp28s0np0/"), &[])
                .await
                .json();
            let path = format!("nodes/{other}/interfaces/{}/", port["id"]);
            sim.put(&path, &[("vlan", &vlan)]).await.expect(200);
            sim.op(
                &path,
                "link_subnet",
                &[
                    ("mode", "STATIC"),
                    ("subnet", "cidr:172.30.9.60/31"),
                    ("ip_address", "172.30.9.61"),
                ],
            )
            .await
            .expect(200);
        }
        Setup::OtherVlanSubnet => {
            let s = sim
                .post("subnets/", &[("cidr", "172.30.8.0/31")])
                .await
                .expect(200)
                .json();
            subnet = s["id"].to_string();
        }
        Setup::Fault("bad-key") | Setup::Fault("tag-exists") => {}
        Setup::Fault(spec) => sim.handle.set_faults(spec).unwrap(),
    }
    (sid, iface, subnet, disk)
}

#[tokio::test]
async fn the_simulator_answers_each_error_as_maas_does() {
    for shape in SHAPES {
        let mut config = fleet(2);
        config.users.push(metalform::sim::config::UserSpec {
            username: "operator".into(),
            api_key: USER_KEY.into(),
        });
        let sim = Sim::start(config).await;
        let (sid, iface, subnet, disk) = prepare(&sim, shape.setup).await;
        if shape.setup == Setup::Fault("tag-exists") {
            sim.post("tags/", &[("name", "gpu")]).await.expect(200);
        }
        let fill = |text: &str| fill(text, &sid, &iface, &subnet, &disk);
        let mut url = sim.api(&fill(shape.path));
        if let Some(op) = shape.op {
            url = format!("{url}?op={op}");
        }
        let form: Vec<(String, String)> = shape
            .form
            .iter()
            .map(|(k, v)| (k.to_string(), fill(v)))
            .collect();
        let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let key = match (shape.as_user, shape.setup) {
            (_, Setup::Fault("bad-key")) => "nosuchconsumer:tk:ts".to_string(),
            (true, _) => USER_KEY.to_string(),
            (false, _) => sim.key.clone(),
        };
        let method = Method::from_bytes(shape.method.as_bytes()).unwrap();
        let auth = sim.auth_header_with(&key);
        let answer = sim.send(method, &url, Some(auth), &form).await;
        let what = format!(
            "{} ({}): {} {}",
            shape.name, shape.maas, answer.status, answer.text
        );
        assert_eq!(answer.status, shape.status, "{what}");
        assert_eq!(
            answer.header("retry-after").map(str::to_owned),
            shape.retry_after.map(|s| s.to_string()),
            "{what}"
        );
        match shape.body {
            Body::Text(text) => {
                assert!(answer.content_type().starts_with("text/plain"), "{what}");
                assert_eq!(answer.text, fill(text), "{what}");
            }
            Body::Json(json) => {
                assert!(
                    answer.content_type().starts_with("application/json"),
                    "{what}"
                );
                let expected: serde_json::Value = serde_json::from_str(&fill(json)).unwrap();
                assert_eq!(answer.json(), expected, "{what}");
            }
            Body::Html(title) => {
                assert!(answer.content_type().starts_with("text/html"), "{what}");
                assert!(
                    answer.text.contains(&format!("<title>{title}</title>")),
                    "{what}"
                );
            }
        }
    }
}
