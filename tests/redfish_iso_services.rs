//! Real task ISOs built by Debian `xorriso` (seed 003 "Task ISO", DESIGN.md §9): byte-identical
//! for the same inputs, the files readable back with xorriso itself, size and sha256 as
//! reported, and served whole and by range. Needs `METALFORM_XORRISO` (set by
//! scripts/services/50-xorriso.sh); fails, never skips, without it.
#![cfg(feature = "services")]

use crate::redfish_support;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use metalform::clock::SystemClock;
use metalform::provider::redfish::iso::{IsoBuilder, TaskIsoContents};
use metalform::provider::redfish::media::MediaStore;
use metalform::provider::redfish::recipe;
use redfish_support::{http, serve_media, xorriso};
use serde_json::json;
use sha2::{Digest, Sha256};
use uuid::Uuid;

fn recipe_json() -> serde_json::Value {
    json!({
        "task_target": "install-linux.target",
        "target_disk": "/dev/sda",
        "oci_url": "controller.internal:8080/os-images/ubuntu-rootfs:22.04",
        "user_data": "I2Nsb3VkLWNvbmZpZwpob3N0bmFtZTogYzA3dTQzCg==",
        "partition_layout": [
            {"size": "512M", "type_guid": "ef00", "format": "vfat"},
            {"size": "100%", "type_guid": "8300", "format": "ext4"}
        ],
        "assets": {"unattend.xml": "PHVuYXR0ZW5kLz4K", "b.txt": "Yg=="}
    })
}

fn contents(recipe: &serde_json::Value) -> TaskIsoContents {
    let version = recipe::validate(recipe).unwrap();
    TaskIsoContents::from_recipe(recipe, version).unwrap()
}

/// Extracts the image with xorriso's own reader (`-osirrox on -extract / DIR`).
fn extract(iso: &Path, into: &Path) {
    let out = Command::new(xorriso())
        .args(["-osirrox", "on", "-indev"])
        .arg(iso)
        .args(["-extract", "/"])
        .arg(into)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn equal_inputs_give_identical_images_whatever_the_key_order() {
    let dir = tempfile::tempdir().unwrap();
    let builder = IsoBuilder::new(xorriso());
    let first = builder
        .build(&contents(&recipe_json()), &dir.path().join("a/task.iso"))
        .await
        .unwrap();
    // The same recipe with its keys in another order, built later into another directory.
    let mut reordered = serde_json::Map::new();
    let original = recipe_json();
    for key in original.as_object().unwrap().keys().rev() {
        reordered.insert(key.clone(), original[key].clone());
    }
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let second = builder
        .build(
            &contents(&serde_json::Value::Object(reordered)),
            &dir.path().join("b/task.iso"),
        )
        .await
        .unwrap();
    let a = std::fs::read(&first.path).unwrap();
    let b = std::fs::read(&second.path).unwrap();
    assert!(a == b, "the two images differ");
    assert_eq!(first.sha256, second.sha256);
    assert_eq!(first.sha256, hex::encode(Sha256::digest(&a)));
    assert_eq!(first.size, a.len() as u64);
    assert_eq!(
        &a[0x8001..0x8006],
        b"CD001",
        "an ISO 9660 primary volume descriptor"
    );
    assert_eq!(&a[0x8028..0x802e], b"MFTASK", "the volume label");
    // A different recipe gives a different image.
    let mut other = recipe_json();
    other["target_disk"] = json!("/dev/nvme0n1");
    let third = builder
        .build(&contents(&other), &dir.path().join("c/task.iso"))
        .await
        .unwrap();
    assert_ne!(third.sha256, first.sha256);
}

#[tokio::test]
async fn the_image_holds_the_recipe_schema_user_data_and_assets() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = recipe_json();
    let contents = contents(&recipe);
    let built = IsoBuilder::new(xorriso())
        .build(&contents, &dir.path().join("job/task.iso"))
        .await
        .unwrap();
    let out = dir.path().join("extracted");
    extract(&built.path, &out);
    let mut found: Vec<String> = walk(&out);
    found.sort();
    assert_eq!(
        found,
        [
            "assets/b.txt",
            "assets/unattend.xml",
            "recipe.json",
            "recipe.schema.json",
            "user-data"
        ]
    );
    for (path, bytes) in contents.files() {
        assert_eq!(std::fs::read(out.join(path)).unwrap(), bytes, "{path}");
    }
    assert_eq!(
        std::fs::read_to_string(out.join("user-data")).unwrap(),
        "#cloud-config\nhostname: c07u43\n"
    );
    let on_image: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("recipe.json")).unwrap()).unwrap();
    assert_eq!(on_image, recipe);
    let schema: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("recipe.schema.json")).unwrap()).unwrap();
    assert_eq!(schema["$id"], recipe::current().id);
}

fn walk(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(
                    path.strip_prefix(root)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    out
}

#[tokio::test]
async fn a_real_image_is_served_whole_and_by_range() {
    let dir = tempfile::tempdir().unwrap();
    let store = MediaStore::new(dir.path());
    let job = Uuid::from_u128(42);
    let built = IsoBuilder::new(xorriso())
        .build(&contents(&recipe_json()), &store.iso_path(job))
        .await
        .unwrap();
    let (addr, service) = serve_media(store, Arc::new(SystemClock)).await;
    let expires = chrono::Utc::now() + chrono::Duration::minutes(5);
    let url = format!("http://{addr}{}", service.signer.signed_path(job, expires));
    let whole = http()
        .get(&url)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(whole.len() as u64, built.size);
    assert_eq!(hex::encode(Sha256::digest(&whole)), built.sha256);
    let pvd = http()
        .get(&url)
        .header("Range", "bytes=32768-34815")
        .send()
        .await
        .unwrap();
    assert_eq!(pvd.status(), 206);
    let pvd = pvd.bytes().await.unwrap();
    assert_eq!(&pvd[1..6], b"CD001");
}
