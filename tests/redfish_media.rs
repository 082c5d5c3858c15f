//! Serving task ISOs to BMCs over HTTP (seed 003 "Task ISO Serving"): content type, Range
//! requests (206, 416), HEAD, and signed expiring URLs (403 when expired, altered or unsigned).
//! Hermetic: the image here is a stand-in file; tests/redfish_iso_services.rs serves real ones.

use crate::redfish_support;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use metalform::clock::ManualClock;
use metalform::provider::redfish::media::MediaStore;
use redfish_support::serve_media;
use reqwest::StatusCode;
use reqwest::header::{
    ACCEPT_RANGES, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, ETAG, IF_RANGE, RANGE,
};
use uuid::Uuid;

struct Setup {
    base: String,
    clock: ManualClock,
    signer: metalform::provider::redfish::media::UrlSigner,
    image: Vec<u8>,
    job: Uuid,
    _dir: tempfile::TempDir,
}

fn start() -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000, 0).unwrap()
}

async fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let store = MediaStore::new(dir.path());
    let job = Uuid::from_u128(0x1234);
    let image: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    let path = store.iso_path(job);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, &image).unwrap();
    let clock = ManualClock::new(start());
    let (addr, service) = serve_media(store, Arc::new(clock.clone())).await;
    Setup {
        base: format!("http://{addr}"),
        clock,
        signer: service.signer.clone(),
        image,
        job,
        _dir: dir,
    }
}

impl Setup {
    fn url(&self, job: Uuid, valid_for: i64) -> String {
        let expires = start() + chrono::Duration::seconds(valid_for);
        format!("{}{}", self.base, self.signer.signed_path(job, expires))
    }
}

async fn error_of(response: reqwest::Response) -> (StatusCode, String, String) {
    let status = response.status();
    let body: serde_json::Value = response.json().await.unwrap();
    (
        status,
        body["error"].as_str().unwrap().to_owned(),
        body["message"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn whole_image_and_head() {
    let s = setup().await;
    let http = redfish_support::http();
    let response = http.get(s.url(s.job, 600)).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()[CONTENT_TYPE],
        "application/x-iso9660-image"
    );
    assert_eq!(response.headers()[ACCEPT_RANGES], "bytes");
    assert_eq!(response.headers()[CONTENT_LENGTH], "10000");
    assert_eq!(response.bytes().await.unwrap().as_ref(), s.image.as_slice());
    let head = http.head(s.url(s.job, 600)).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::OK);
    assert_eq!(head.headers()[CONTENT_LENGTH], "10000");
    assert!(head.bytes().await.unwrap().is_empty());
}

#[tokio::test]
async fn ranges_are_partial_content_and_past_the_end_is_416() {
    let s = setup().await;
    let http = redfish_support::http();
    for (range, start, end) in [
        ("bytes=0-99", 0, 99),
        ("bytes=9990-", 9990, 9999),
        ("bytes=-16", 9984, 9999),
        ("bytes=5000-99999", 5000, 9999),
    ] {
        let response = http
            .get(s.url(s.job, 600))
            .header(RANGE, range)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::PARTIAL_CONTENT, "{range}");
        assert_eq!(
            response.headers()[CONTENT_RANGE],
            format!("bytes {start}-{end}/10000"),
            "{range}"
        );
        assert_eq!(
            response.bytes().await.unwrap().as_ref(),
            &s.image[start..=end],
            "{range}"
        );
    }
    let response = http
        .get(s.url(s.job, 600))
        .header(RANGE, "bytes=10000-")
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()[CONTENT_RANGE], "bytes */10000");
    let (status, code, message) = error_of(response).await;
    assert_eq!(status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(code, "range_not_satisfiable");
    assert_eq!(
        message,
        "the requested range is outside the image (10000 bytes)"
    );
    // A resumed download of another image (ETag changed) gets the whole new image.
    let etag = http.head(s.url(s.job, 600)).send().await.unwrap().headers()[ETAG].clone();
    let same = http
        .get(s.url(s.job, 600))
        .header(RANGE, "bytes=0-9")
        .header(IF_RANGE, etag)
        .send()
        .await
        .unwrap();
    assert_eq!(same.status(), StatusCode::PARTIAL_CONTENT);
    let other = http
        .get(s.url(s.job, 600))
        .header(RANGE, "bytes=0-9")
        .header(IF_RANGE, "\"stale\"")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::OK);
    assert_eq!(other.bytes().await.unwrap().len(), 10_000);
}

#[tokio::test]
async fn expired_altered_and_unsigned_urls_are_forbidden() {
    let s = setup().await;
    let http = redfish_support::http();
    let url = s.url(s.job, 60);
    assert_eq!(
        http.get(&url).send().await.unwrap().status(),
        StatusCode::OK
    );
    let cases = [
        // Another job's path with this job's signature.
        (
            url.replace(&s.job.to_string(), &Uuid::from_u128(0x9999).to_string()),
            "the media URL's signature does not match",
        ),
        // A later expiry written by hand.
        (
            url.replace("expires=1700000060", "expires=1800000000"),
            "the media URL's signature does not match",
        ),
        // One signature digit changed.
        (
            {
                let (head, sig) = url.rsplit_once("signature=").unwrap();
                let flipped = if sig.starts_with('0') { "1" } else { "0" };
                format!("{head}signature={flipped}{}", &sig[1..])
            },
            "the media URL's signature does not match",
        ),
        (
            format!("{}/media/tasks/{}/task.iso", s.base, s.job),
            "the media URL is not signed",
        ),
    ];
    for (url, expected) in cases {
        let (status, code, message) = error_of(http.get(&url).send().await.unwrap()).await;
        assert_eq!(
            (status, code.as_str(), message.as_str()),
            (StatusCode::FORBIDDEN, "forbidden", expected),
            "{url}"
        );
    }
    s.clock.advance(chrono::Duration::seconds(60));
    let (status, _, message) = error_of(http.get(&url).send().await.unwrap()).await;
    assert_eq!(
        (status, message.as_str()),
        (StatusCode::FORBIDDEN, "the media URL has expired")
    );
}

#[tokio::test]
async fn unknown_jobs_and_collected_images_are_404() {
    let s = setup().await;
    let http = redfish_support::http();
    let other = Uuid::from_u128(0x5555);
    let (status, code, message) = error_of(http.get(s.url(other, 600)).send().await.unwrap()).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    assert_eq!(
        message,
        format!("job {other} has no task ISO (built yet, or collected)")
    );
    let response = http
        .get(format!("{}/media/tasks/not-a-uuid/task.iso", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}
