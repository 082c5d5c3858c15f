//! Serving task ISOs to BMCs (seed 003 "Task ISO Serving", "Task ISO Lifecycle", "Signed
//! media URL"): `GET /media/tasks/{job_id}/task.iso` as `application/x-iso9660-image`, with
//! Range requests (206, 416), HMAC-signed expiring URLs (403 when expired or altered) and
//! garbage collection of images whose job completed longer ago than the retention window.
//!
//! A BMC mounts the image by URL and cannot send our credentials, so the URL itself is the
//! credential: `?expires=<unix seconds>&signature=<hex HMAC-SHA256>` over the job id and the
//! expiry, checked in constant time on every request.

use std::collections::BTreeMap;
use std::io::SeekFrom;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use uuid::Uuid;

use crate::api::ApiError;
use crate::clock::Clock;
use crate::secrets::Secret;

/// The media type of ISO 9660 images.
pub const ISO_CONTENT_TYPE: &str = "application/x-iso9660-image";

/// Where task ISOs live: `<root>/<job_id>/task.iso` (TASK_ISO_DIR).
#[derive(Debug, Clone)]
pub struct MediaStore {
    root: PathBuf,
}

/// What garbage collection needs to know about the job of an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobMedia {
    /// The job is still queued, provisioning, succeeded or failed: its image stays.
    Active,
    /// The job reached `complete` at this time.
    CompletedAt(DateTime<Utc>),
    /// No such job (a crash between the build and the job's record): the image is judged
    /// by its file's age.
    Unknown,
}

/// What one garbage-collection pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    pub removed: Vec<Uuid>,
    pub kept: usize,
    pub bytes_freed: u64,
}

impl MediaStore {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The image of one job.
    pub fn iso_path(&self, job_id: Uuid) -> PathBuf {
        self.root.join(job_id.to_string()).join("task.iso")
    }

    /// Job ids that have a directory here, sorted.
    pub async fn list(&self) -> std::io::Result<Vec<Uuid>> {
        let mut ids = Vec::new();
        let mut entries = match tokio::fs::read_dir(&self.root).await {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(ids),
            Err(err) => return Err(err),
        };
        while let Some(entry) = entries.next_entry().await? {
            if let Some(id) = entry.file_name().to_str().and_then(|n| n.parse().ok()) {
                ids.push(id);
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// Deletes the image of one job; `Ok(false)` when there was none.
    pub async fn remove(&self, job_id: Uuid) -> std::io::Result<bool> {
        match tokio::fs::remove_dir_all(self.root.join(job_id.to_string())).await {
            Ok(()) => Ok(true),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// One pass: removes the images of jobs that completed at least `retention` before `now`,
    /// and of unknown jobs whose image is older than `retention`. `states` comes from the
    /// store (for the ids of [`MediaStore::list`]); an id missing from it counts as unknown.
    pub async fn collect_garbage(
        &self,
        now: DateTime<Utc>,
        retention: Duration,
        states: &BTreeMap<Uuid, JobMedia>,
    ) -> std::io::Result<GcReport> {
        let retention = chrono::Duration::from_std(retention).unwrap_or(chrono::Duration::MAX);
        let mut report = GcReport::default();
        for id in self.list().await? {
            let iso = self.iso_path(id);
            let metadata = tokio::fs::metadata(&iso).await.ok();
            let expired = match states.get(&id).copied().unwrap_or(JobMedia::Unknown) {
                JobMedia::Active => false,
                JobMedia::CompletedAt(at) => at + retention <= now,
                JobMedia::Unknown => metadata
                    .as_ref()
                    .and_then(|m| m.modified().ok())
                    .map(DateTime::<Utc>::from)
                    // A directory without an image is debris of a failed build.
                    .is_none_or(|modified| modified + retention <= now),
            };
            if expired && self.remove(id).await? {
                report.removed.push(id);
                report.bytes_freed += metadata.map_or(0, |m| m.len());
            } else {
                report.kept += 1;
            }
        }
        Ok(report)
    }
}

/// Signs and checks media URLs with an HMAC-SHA256 key.
#[derive(Clone)]
pub struct UrlSigner {
    key: Secret,
}

impl std::fmt::Debug for UrlSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UrlSigner(<key redacted>)")
    }
}

/// Why a media URL was refused (all answered 403: the URL is the credential).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("the media URL is not signed")]
    Unsigned,
    #[error("the media URL has expired")]
    Expired,
    #[error("the media URL's signature does not match")]
    BadSignature,
}

/// The query of a signed media URL.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SignedQuery {
    pub expires: Option<String>,
    pub signature: Option<String>,
}

impl UrlSigner {
    /// `key` should be at least 32 random bytes (MEDIA_URL_KEY).
    pub fn new(key: Secret) -> Self {
        Self { key }
    }

    fn mac(&self, job_id: Uuid, expires: i64) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(self.key.expose().as_bytes())
            .expect("HMAC takes keys of any length");
        mac.update(format!("task.iso\n{job_id}\n{expires}").as_bytes());
        mac
    }

    /// The path and query of the job's image, valid until `expires`.
    pub fn signed_path(&self, job_id: Uuid, expires: DateTime<Utc>) -> String {
        let expires = expires.timestamp();
        let signature = hex::encode(self.mac(job_id, expires).finalize().into_bytes());
        format!("/media/tasks/{job_id}/task.iso?expires={expires}&signature={signature}")
    }

    /// The full URL a BMC is given: `base` is the controller's address as the BMCs reach it.
    pub fn signed_url(&self, base: &url::Url, job_id: Uuid, expires: DateTime<Utc>) -> url::Url {
        let mut url = base.clone();
        let signed = self.signed_path(job_id, expires);
        let (path, query) = signed.split_once('?').expect("signed paths have a query");
        url.set_path(&format!("{}{}", base.path().trim_end_matches('/'), path));
        url.set_query(Some(query));
        url
    }

    /// Checks a request's query: signed with our key for this job, and not expired at `now`.
    pub fn verify(
        &self,
        job_id: Uuid,
        query: &SignedQuery,
        now: DateTime<Utc>,
    ) -> Result<(), UrlError> {
        let (Some(expires), Some(signature)) = (&query.expires, &query.signature) else {
            return Err(UrlError::Unsigned);
        };
        let expires: i64 = expires.parse().map_err(|_| UrlError::BadSignature)?;
        let signature = hex::decode(signature).map_err(|_| UrlError::BadSignature)?;
        // Constant-time comparison (hmac uses `subtle`); checked before the expiry so that an
        // altered expiry reads as altered, not as expired.
        self.mac(job_id, expires)
            .verify_slice(&signature)
            .map_err(|_| UrlError::BadSignature)?;
        if now.timestamp() >= expires {
            return Err(UrlError::Expired);
        }
        Ok(())
    }
}

/// What the media routes need.
#[derive(Debug, Clone)]
pub struct MediaService {
    pub store: MediaStore,
    pub signer: UrlSigner,
    pub clock: Arc<dyn Clock>,
}

/// `GET`/`HEAD /media/tasks/{job_id}/task.iso`.
pub fn router(service: Arc<MediaService>) -> Router {
    Router::new()
        .route(
            "/media/tasks/{job_id}/task.iso",
            axum::routing::get(serve_task_iso),
        )
        .with_state(service)
}

async fn serve_task_iso(
    State(service): State<Arc<MediaService>>,
    UrlPath(job_id): UrlPath<String>,
    Query(query): Query<SignedQuery>,
    method: Method,
    headers: HeaderMap,
) -> Response {
    let Ok(job_id) = job_id.parse::<Uuid>() else {
        return ApiError::not_found("no task ISO at this address").into_response();
    };
    if let Err(err) = service.signer.verify(job_id, &query, service.clock.now()) {
        return ApiError::forbidden(err.to_string())
            .hint("ask the controller for a fresh media URL; the BMC must use it unchanged")
            .into_response();
    }
    let path = service.store.iso_path(job_id);
    match serve_file(&path, &method, &headers).await {
        Ok(response) => response,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => ApiError::not_found(format!(
            "job {job_id} has no task ISO (built yet, or collected)"
        ))
        .into_response(),
        Err(err) => ApiError::internal(format!("cannot read the task ISO of job {job_id}: {err}"))
            .into_response(),
    }
}

/// A `Range` that no byte of the image satisfies (416).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unsatisfiable;

/// The byte range a `Range` header asks for, given the file length: `Ok(None)` serves the whole
/// file (no header, a unit we do not know, or several ranges: RFC 9110 lets a server ignore
/// Range).
pub fn parse_range(header: Option<&str>, len: u64) -> Result<Option<(u64, u64)>, Unsatisfiable> {
    let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else {
        return Ok(None);
    };
    if spec.contains(',') {
        return Ok(None);
    }
    let (start, end) = spec.split_once('-').ok_or(Unsatisfiable)?;
    let (start, end) = (start.trim(), end.trim());
    let range = if start.is_empty() {
        // The last N bytes.
        let n: u64 = end.parse().map_err(|_| Unsatisfiable)?;
        if n == 0 || len == 0 {
            return Err(Unsatisfiable);
        }
        (len.saturating_sub(n), len - 1)
    } else {
        let start: u64 = start.parse().map_err(|_| Unsatisfiable)?;
        let end: u64 = if end.is_empty() {
            len.saturating_sub(1)
        } else {
            end.parse::<u64>()
                .map_err(|_| Unsatisfiable)?
                .min(len.saturating_sub(1))
        };
        if start >= len || end < start {
            return Err(Unsatisfiable);
        }
        (start, end)
    };
    Ok(Some(range))
}

async fn serve_file(
    path: &Path,
    method: &Method,
    headers: &HeaderMap,
) -> std::io::Result<Response> {
    let mut file = tokio::fs::File::open(path).await?;
    let metadata = file.metadata().await?;
    let len = metadata.len();
    let modified = metadata.modified().ok().map(DateTime::<Utc>::from);
    // Images are immutable once built: size and build time identify the content.
    let etag = format!(
        "\"{len:x}-{:x}\"",
        modified.map_or(0, |m| m.timestamp_nanos_opt().unwrap_or_default())
    );
    let header_text = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    // If-Range: a resumed download of a different image starts over.
    let range_header = match header_text(header::IF_RANGE) {
        Some(tag) if tag != etag => None,
        _ => header_text(header::RANGE),
    };
    let mut builder = Response::builder()
        .header(header::CONTENT_TYPE, ISO_CONTENT_TYPE)
        .header(header::ACCEPT_RANGES, "bytes")
        .header(header::ETAG, &etag)
        .header(header::CACHE_CONTROL, "no-store");
    if let Some(modified) = modified {
        builder = builder.header(
            header::LAST_MODIFIED,
            modified.format("%a, %d %b %Y %H:%M:%S GMT").to_string(),
        );
    }
    let (status, start, count) = match parse_range(range_header, len) {
        Ok(None) => (StatusCode::OK, 0, len),
        Ok(Some((start, end))) => {
            builder = builder.header(header::CONTENT_RANGE, format!("bytes {start}-{end}/{len}"));
            (StatusCode::PARTIAL_CONTENT, start, end - start + 1)
        }
        Err(Unsatisfiable) => {
            let body = ApiError::new(
                StatusCode::RANGE_NOT_SATISFIABLE,
                "range_not_satisfiable",
                format!("the requested range is outside the image ({len} bytes)"),
            );
            let mut response = body.into_response();
            response.headers_mut().insert(
                header::CONTENT_RANGE,
                HeaderValue::from_str(&format!("bytes */{len}")).expect("ascii"),
            );
            return Ok(response);
        }
    };
    builder = builder
        .status(status)
        .header(header::CONTENT_LENGTH, count.to_string());
    if method == Method::HEAD {
        return Ok(builder.body(Body::empty()).expect("valid response"));
    }
    file.seek(SeekFrom::Start(start)).await?;
    let stream = futures::stream::try_unfold((file, count), |(mut file, left)| async move {
        if left == 0 {
            return Ok::<_, std::io::Error>(None);
        }
        let mut buf = vec![0u8; left.min(64 * 1024) as usize];
        let read = file.read(&mut buf).await?;
        if read == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the image shrank while it was served",
            ));
        }
        buf.truncate(read);
        Ok(Some((bytes::Bytes::from(buf), (file, left - read as u64))))
    });
    Ok(builder
        .body(Body::from_stream(stream))
        .expect("valid response"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_follow_rfc_9110() {
        assert_eq!(parse_range(None, 100), Ok(None));
        assert_eq!(parse_range(Some("bytes=0-9"), 100), Ok(Some((0, 9))));
        assert_eq!(parse_range(Some("bytes=90-"), 100), Ok(Some((90, 99))));
        assert_eq!(parse_range(Some("bytes=-10"), 100), Ok(Some((90, 99))));
        assert_eq!(parse_range(Some("bytes=-500"), 100), Ok(Some((0, 99))));
        assert_eq!(parse_range(Some("bytes=50-500"), 100), Ok(Some((50, 99))));
        assert_eq!(parse_range(Some("bytes=0-1,5-6"), 100), Ok(None));
        assert_eq!(parse_range(Some("items=0-1"), 100), Ok(None));
        assert_eq!(parse_range(Some("bytes=100-"), 100), Err(Unsatisfiable));
        assert_eq!(parse_range(Some("bytes=9-3"), 100), Err(Unsatisfiable));
        assert_eq!(parse_range(Some("bytes=-0"), 100), Err(Unsatisfiable));
        assert_eq!(parse_range(Some("bytes=x-3"), 100), Err(Unsatisfiable));
    }

    #[test]
    fn signatures_bind_the_job_and_the_expiry() {
        let signer = UrlSigner::new(Secret::new("k".repeat(32)));
        let job = Uuid::from_u128(7);
        let now = DateTime::from_timestamp(1_000, 0).unwrap();
        let expires = now + chrono::Duration::seconds(60);
        let path = signer.signed_path(job, expires);
        let query = |path: &str| -> SignedQuery { parse_query(path.split_once('?').unwrap().1) };
        let good = query(&path);
        assert_eq!(signer.verify(job, &good, now), Ok(()));
        assert_eq!(
            signer.verify(job, &good, expires),
            Err(UrlError::Expired),
            "valid strictly before the expiry"
        );
        assert_eq!(
            signer.verify(Uuid::from_u128(8), &good, now),
            Err(UrlError::BadSignature)
        );
        let mut longer = good.clone();
        longer.expires = Some("99999999999".into());
        assert_eq!(
            signer.verify(job, &longer, now),
            Err(UrlError::BadSignature)
        );
        let other = UrlSigner::new(Secret::new("x".repeat(32)));
        assert_eq!(other.verify(job, &good, now), Err(UrlError::BadSignature));
        assert_eq!(
            signer.verify(job, &SignedQuery::default(), now),
            Err(UrlError::Unsigned)
        );
        assert!(!format!("{signer:?}").contains("kkkk"));
        let base = url::Url::parse("http://10.0.0.1:8080/prefix/").unwrap();
        let url = signer.signed_url(&base, job, expires);
        assert_eq!(url.path(), format!("/prefix/media/tasks/{job}/task.iso"));
        assert_eq!(url.query(), path.split_once('?').map(|(_, q)| q));
    }

    fn parse_query(query: &str) -> SignedQuery {
        let mut q = SignedQuery::default();
        for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
            match k.as_ref() {
                "expires" => q.expires = Some(v.into_owned()),
                "signature" => q.signature = Some(v.into_owned()),
                _ => {}
            }
        }
        q
    }

    #[tokio::test]
    async fn garbage_collection_keeps_active_and_recent_images() {
        let dir = tempfile::tempdir().unwrap();
        let store = MediaStore::new(dir.path());
        let now = Utc::now();
        let ids: Vec<Uuid> = (1..=5).map(Uuid::from_u128).collect();
        for id in &ids {
            let path = store.iso_path(*id);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, vec![0u8; 2048]).unwrap();
        }
        std::fs::create_dir_all(dir.path().join("not-a-job")).unwrap();
        let day = chrono::Duration::days(1);
        let states = BTreeMap::from([
            (ids[0], JobMedia::Active),
            (ids[1], JobMedia::CompletedAt(now - day * 8)),
            (ids[2], JobMedia::CompletedAt(now - day)),
            // ids[3]: unknown and fresh; ids[4]: unknown, fresh too.
        ]);
        let week = Duration::from_secs(7 * 86_400);
        let report = store.collect_garbage(now, week, &states).await.unwrap();
        assert_eq!(report.removed, [ids[1]]);
        assert_eq!(report.kept, 4);
        assert_eq!(report.bytes_freed, 2048);
        assert!(!store.iso_path(ids[1]).exists());
        // Much later, only the active job's image survives.
        let later = now + day * 30;
        let report = store.collect_garbage(later, week, &states).await.unwrap();
        assert_eq!(report.removed, [ids[2], ids[3], ids[4]]);
        assert_eq!(store.list().await.unwrap(), [ids[0]]);
        assert!(!store.remove(ids[4]).await.unwrap());
    }
}
