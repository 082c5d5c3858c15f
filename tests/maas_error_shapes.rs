//! Every MAAS error answer of the shared table (tests/maas_shapes, each citing its MAAS
//! handler) reaches metalform's MAAS client as MAAS sends it, and is classified once, by what
//! MAAS means: a state violation is never retried, a serialization conflict is, an address MAAS
//! will not give is not a missing machine, a form error keeps its fields.

use crate::maas_shapes;
use crate::maas_support;

use maas_shapes::{Body, Call, Class, SHAPES, fill};
use maas_support::{FakeMaas, Reply, client_for, test_options};
use metalform::provider::maas::*;

const SID: &str = "4y3ha3";

fn reply(shape: &maas_shapes::Shape) -> Reply {
    let body = |text: &str| fill(text, SID, "12", "7", "3");
    let reply = match shape.body {
        Body::Text(text) => Reply::text(shape.status, body(text)),
        Body::Json(json) => Reply::json_status(shape.status, body(json)),
        Body::Html(title) => {
            let mut page = Reply::text(
                shape.status,
                format!(
                    "<!DOCTYPE html>\n<html><head><title>{title}</title></head><body><h2>Conflict error. Try your request again, as it will most likely succeed.</h2></body></html>"
                ),
            );
            page.headers = vec![("content-type".into(), "text/html; charset=utf-8".into())];
            page
        }
    };
    match shape.retry_after {
        Some(secs) => reply.retry_after(secs),
        None => reply,
    }
}

async fn call(maas: &MaasClient, call: Call) -> MaasError {
    let link = LinkSubnetParams::new(LinkRequest::Static {
        subnet: SubnetRef::Cidr("172.30.9.60/31".into()),
        ip_address: Some("172.30.9.61".parse().unwrap()),
    });
    let result = match call {
        Call::Deploy => maas.deploy(SID, &DeployParams::default()).await.map(drop),
        Call::Release => maas.release(SID, &ReleaseParams::default()).await.map(drop),
        Call::Abort => maas.abort(SID, None).await.map(drop),
        Call::Commission => maas
            .commission(SID, &CommissionParams::default())
            .await
            .map(drop),
        Call::MarkFixed => maas.mark_fixed(SID, None).await.map(drop),
        Call::PowerOn => maas.power_on(SID, None).await.map(drop),
        Call::ReadMachine => maas.read_machine(SID).await.map(drop),
        Call::LinkStatic => maas.link_subnet(SID, 12, &link).await.map(drop),
        Call::SetStorageLayout(name) => maas
            .set_storage_layout(
                SID,
                &StorageLayoutParams::new(StorageLayout::Other(name.into()), None),
            )
            .await
            .map(drop),
        Call::SetBootDisk => maas.set_boot_disk(SID, 3).await,
        Call::QueryEvents => maas.query_events(&EventsQuery::default()).await.map(drop),
        Call::CreateSubnet => maas
            .create_subnet(&CreateSubnetParams::new("172.30.9.62/31"))
            .await
            .map(drop),
        Call::Whoami => maas.whoami().await.map(drop),
        Call::CreateTag => maas.create_tag(&TagParams::named("gpu")).await.map(drop),
        Call::SetWorkloadAnnotations => maas
            .set_workload_annotations(
                SID,
                &[("rack".to_owned(), Some("c07".to_owned()))]
                    .into_iter()
                    .collect(),
            )
            .await
            .map(drop),
    };
    result.expect_err("MAAS answered an error")
}

#[tokio::test]
async fn every_maas_error_answer_is_classified_by_what_maas_means() {
    for shape in SHAPES {
        let server = FakeMaas::always(reply(shape)).await;
        let maas = client_for(
            &format!("{}/MAAS", server.base_url()),
            MaasClientOptions {
                retry: RetryPolicy::never(),
                ..test_options()
            },
        );
        let err = call(&maas, shape.call).await;
        let what = format!("{} ({}): {err:?}", shape.name, shape.maas);
        assert_eq!(err.status(), Some(shape.status), "{what}");
        match shape.class {
            Class::BadRequest => {
                assert!(matches!(err, MaasError::BadRequest { .. }), "{what}");
                assert_eq!(err.form_errors(), None, "{what}");
            }
            Class::Form(field) => {
                assert!(matches!(err, MaasError::BadRequest { .. }), "{what}");
                assert!(err.form_errors().unwrap().contains_key(field), "{what}");
            }
            Class::Unauthorized => assert!(matches!(err, MaasError::Unauthorized { .. }), "{what}"),
            Class::Forbidden => assert!(matches!(err, MaasError::Forbidden { .. }), "{what}"),
            Class::NotFound => assert!(matches!(err, MaasError::NotFound { .. }), "{what}"),
            Class::AddressUnavailable => {
                assert!(
                    matches!(err, MaasError::AddressUnavailable { .. }),
                    "{what}"
                )
            }
            Class::Conflict => {
                assert!(matches!(err, MaasError::Conflict { .. }), "{what}");
                assert!(!err.is_retryable(), "{what}");
            }
            Class::Transient { unknown } => {
                assert!(err.is_retryable(), "{what}");
                assert_eq!(err.is_outcome_unknown(), unknown, "{what}");
                assert_eq!(
                    err.retry_after().map(|d| d.as_secs()),
                    shape.retry_after,
                    "{what}"
                );
            }
        }
        if let Body::Text(text) = shape.body {
            assert_eq!(
                err.maas_message(),
                fill(text, SID, "12", "7", "3"),
                "{what}"
            );
        }
    }
}
