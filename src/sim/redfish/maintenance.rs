//! The simulated maintenance OS (seed 003 "Await webhook"): booted from CD1, it finds the
//! task medium among the inserted images by its ISO 9660 volume label, reads recipe.json from
//! it and posts the status webhook `{"status": "success"}` — or `{"status": "failed",
//! "failed_step": …}` — with the shared secret in `X-Webhook-Secret`.
//!
//! Reading the image is a small ISO 9660 reader: the Joliet supplementary volume descriptor
//! (full file names, as xorriso writes them with `-J`), else the primary one.

use std::time::Duration;

use serde_json::{Value as Json, json};

use crate::provider::redfish::iso::VOLUME_LABEL;
use crate::secrets::Secret;

const SECTOR: usize = 2048;

/// An ISO 9660 image in memory.
pub struct IsoImage<'a> {
    bytes: &'a [u8],
    root: (usize, usize),
    joliet: bool,
    pub label: String,
}

impl<'a> IsoImage<'a> {
    /// Reads the volume descriptors; `None` when this is not an ISO 9660 image.
    pub fn parse(bytes: &'a [u8]) -> Option<Self> {
        let mut primary = None;
        let mut joliet = None;
        for sector in 16..64 {
            let d = bytes.get(sector * SECTOR..(sector + 1) * SECTOR)?;
            if &d[1..6] != b"CD001" {
                return None;
            }
            match d[0] {
                1 => primary = Some(d),
                2 if [b"%/@", b"%/C", b"%/E"].contains(&&[d[88], d[89], d[90]]) => joliet = Some(d),
                255 => break,
                _ => {}
            }
        }
        let primary = primary?;
        let label = String::from_utf8_lossy(&primary[40..72])
            .trim_end()
            .to_owned();
        let descriptor = joliet.unwrap_or(primary);
        let record = &descriptor[156..190];
        Some(Self {
            bytes,
            root: (le32(&record[2..6]) * SECTOR, le32(&record[10..14])),
            joliet: joliet.is_some(),
            label,
        })
    }

    /// The contents of the file at `path` (`a/b.txt`), matched case-insensitively.
    pub fn read(&self, path: &str) -> Option<&'a [u8]> {
        let mut extent = self.root;
        let parts: Vec<&str> = path.split('/').collect();
        for (i, part) in parts.iter().enumerate() {
            let last = i + 1 == parts.len();
            let (start, len, is_dir) = self.find(extent, part)?;
            if last {
                return (!is_dir)
                    .then(|| self.bytes.get(start..start + len))
                    .flatten();
            }
            if !is_dir {
                return None;
            }
            extent = (start, len);
        }
        None
    }

    fn find(&self, (start, len): (usize, usize), name: &str) -> Option<(usize, usize, bool)> {
        let dir = self.bytes.get(start..start + len)?;
        let mut offset = 0;
        while offset < dir.len() {
            let size = dir[offset] as usize;
            if size == 0 {
                // Records do not cross sectors: skip to the next one.
                offset = (offset / SECTOR + 1) * SECTOR;
                continue;
            }
            let record = dir.get(offset..offset + size)?;
            let name_len = record[32] as usize;
            let raw = record.get(33..33 + name_len)?;
            let entry = if self.joliet {
                let units: Vec<u16> = raw
                    .chunks_exact(2)
                    .map(|c| u16::from_be_bytes([c[0], c[1]]))
                    .collect();
                String::from_utf16_lossy(&units)
            } else {
                String::from_utf8_lossy(raw).into_owned()
            };
            let entry = entry
                .split(';')
                .next()
                .unwrap_or_default()
                .trim_end_matches('.');
            if entry.eq_ignore_ascii_case(name) {
                let extent = le32(&record[2..6]) * SECTOR;
                let data_len = le32(&record[10..14]);
                return Some((extent, data_len, record[25] & 2 != 0));
            }
            offset += size;
        }
        None
    }
}

fn le32(bytes: &[u8]) -> usize {
    u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize
}

/// Where and how the maintenance OS reports.
#[derive(Debug, Clone)]
pub struct WebhookTarget {
    /// The controller's base URL; the report goes to
    /// `{base}/api/v1/status-webhook/{server_serial}`.
    pub base: url::Url,
    pub secret: Secret,
}

/// The report the maintenance OS sends, from the images it booted with.
pub fn report(images: &[&[u8]], fail_step: Option<&str>) -> Json {
    let task = images
        .iter()
        .filter_map(|bytes| IsoImage::parse(bytes))
        .find(|iso| iso.label == VOLUME_LABEL);
    let failed = |step: &str| json!({"status": "failed", "failed_step": step});
    let Some(task) = task else {
        return failed("find-task-media");
    };
    let recipe: Option<Json> = task
        .read("recipe.json")
        .and_then(|b| serde_json::from_slice(b).ok());
    match recipe {
        None => failed("read-recipe"),
        Some(recipe) if recipe["task_target"].as_str().is_none() => failed("read-recipe"),
        Some(_) => match fail_step {
            Some(step) => failed(step),
            None => json!({"status": "success"}),
        },
    }
}

/// One delivery of the webhook (retried by the caller); the HTTP status or the error text.
pub async fn post(
    http: &reqwest::Client,
    target: &WebhookTarget,
    serial: &str,
    body: &Json,
) -> Result<u16, String> {
    let url = target
        .base
        .join(&format!("api/v1/status-webhook/{serial}"))
        .map_err(|e| e.to_string())?;
    let response = http
        .post(url)
        .header("X-Webhook-Secret", target.secret.expose())
        .json(body)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    Ok(response.status().as_u16())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_not_an_iso_is_not_a_task_medium() {
        assert!(IsoImage::parse(&[0u8; 100]).is_none());
        assert!(IsoImage::parse(&vec![0u8; 40 * SECTOR]).is_none());
        assert_eq!(
            report(&[b"not an image"], None),
            json!({"status": "failed", "failed_step": "find-task-media"})
        );
    }
}
