//! The large-fleet generator (examples/large_fleet.rs, used by `cargo bench --bench validate`)
//! writes a fleet that validates, with the shape asked for.

#[allow(dead_code)]
#[path = "../examples/large_fleet.rs"]
mod large_fleet;

use metalform::manifest;
use metalform::model::SiteName;
use metalform::source::{self, FleetSource};

#[test]
fn the_generated_fleet_is_valid_and_shaped_as_asked() {
    let dir = tempfile::tempdir().unwrap();
    let shape = large_fleet::Shape {
        nodes: 1_003,
        sites: 5,
        groups: 10,
    };
    let files = large_fleet::generate(dir.path(), shape).unwrap();
    assert_eq!(files, 5 * 2 + 10);
    let validation =
        manifest::load(&source::read(&FleetSource::Directory(dir.path().to_path_buf())).unwrap());
    assert!(
        validation.errors.is_empty(),
        "{:?}",
        validation.errors.first()
    );
    assert!(
        validation.warnings.is_empty(),
        "{:?}",
        validation.warnings.first()
    );
    let fleet = validation.fleet.unwrap();
    assert_eq!(fleet.nodes.len(), 1_003);
    assert_eq!(fleet.sites.len(), 5);
    assert_eq!(fleet.nodes_of_site(&SiteName::new("site0")).count(), 201);
    assert!(fleet.nodes.values().all(|n| n.roce.len() == 2));
}
