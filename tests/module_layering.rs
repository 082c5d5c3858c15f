//! The files of `src/sim/` and `src/provider/maas/` form a clean order (issue 13 item 4): no
//! file reaches, through `super::<file>` paths, a sibling that reaches back to it. A new edge
//! that closes a circle fails here with the circle spelled out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// `file -> siblings it names as super::<sibling>`, from the sources of one folder.
fn sibling_graph(folder: &str) -> BTreeMap<String, BTreeSet<String>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(folder);
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            files.insert(name, std::fs::read_to_string(&path).unwrap());
        }
    }
    let names: BTreeSet<String> = files.keys().cloned().collect();
    let mut graph = BTreeMap::new();
    for (name, text) in &files {
        if name == "mod" {
            continue;
        }
        let mut deps = BTreeSet::new();
        for (at, _) in text.match_indices("super::") {
            let rest = &text[at + "super::".len()..];
            let word: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if names.contains(&word) && &word != name && word != "mod" {
                deps.insert(word);
            }
        }
        graph.insert(name.clone(), deps);
    }
    graph
}

/// A circle of the graph, if any (depth-first search keeping the path).
fn find_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut circle = path[at..].to_vec();
            circle.push(node.to_owned());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(circle) = visit(node, graph, &mut Vec::new(), &mut done) {
            return Some(circle);
        }
    }
    None
}

#[test]
fn the_simulator_files_form_a_clean_order() {
    let graph = sibling_graph("src/sim");
    assert!(graph.contains_key("world") && graph.contains_key("lifecycle"));
    assert_eq!(find_circle(&graph), None, "{graph:#?}");
    // The shared records sit at the bottom: they name no sibling.
    assert!(graph["model"].is_empty(), "{:?}", graph["model"]);
}

#[test]
fn the_maas_client_files_form_a_clean_order() {
    let graph = sibling_graph("src/provider/maas");
    assert_eq!(find_circle(&graph), None, "{graph:#?}");
    assert!(!graph["subnets"].contains("interfaces"));
    assert!(!graph["machines"].contains("power") && !graph["storage"].contains("machines"));
}

#[test]
fn a_circle_is_found_and_spelled_out() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(
        find_circle(&graph),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}
