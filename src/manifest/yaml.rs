//! YAML manifests (DESIGN.md §2): several documents per file, read with saphyr, which follows
//! YAML 1.2 — `yes`, `no`, `on` and `off` are strings, not booleans, and there are no merge
//! keys. Duplicate keys are an error (the YAML spec requires unique keys).

use std::borrow::Cow;
use std::collections::HashMap;

use saphyr::Scalar;
use saphyr_parser::{Event, Marker, Parser, ScalarStyle, Span, SpannedEventReceiver, Tag};

use super::tree::{Entry, Node, Pos, Value};

/// A YAML syntax error at a position.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntaxError {
    pub pos: Pos,
    pub message: String,
}

/// Nodes an alias may copy in one file, all aliases together: enough for any real manifest,
/// small enough that nested aliases ("billion laughs") cannot exhaust memory.
const ALIAS_BUDGET: usize = 100_000;

/// Collections nested in one another, at most (the deepest manifest field is 6 levels down):
/// a document nested 50,000 deep would otherwise overflow the stack of every later step.
pub const MAX_NESTING: usize = 64;

/// Above this many keys a mapping checks duplicates through a set rather than a scan, so a
/// mapping of 100,000 keys costs linear time, not quadratic.
const KEY_SCAN: usize = 32;

/// Every non-empty document of a YAML stream.
pub fn parse(text: &str) -> Result<Vec<Node>, SyntaxError> {
    let mut builder = TreeBuilder::default();
    // Events one at a time (the parser's own `load` recurses once per nesting level), and the
    // first problem ends the read.
    let mut parser = Parser::new_from_str(text);
    while let Some(next) = parser.next_event() {
        let (event, span) = next.map_err(|err| SyntaxError {
            pos: pos(err.marker()),
            // The scanner has its own, higher bound on flow collections: one message for both.
            message: match err.info() {
                "recursion limit exceeded" => nesting_message(),
                info => info.to_string(),
            },
        })?;
        builder.on_event(event, span);
        if let Some(err) = builder.error.take() {
            return Err(err);
        }
    }
    Ok(builder.documents)
}

pub(crate) fn nesting_message() -> String {
    format!("collections nested more than {MAX_NESTING} deep")
}

fn pos(marker: &Marker) -> Pos {
    Pos {
        line: marker.line() as u32,
        column: marker.col() as u32 + 1,
    }
}

/// A collection being built: its node, anchor, and for a mapping the key waiting for a value.
enum Frame {
    Seq {
        node: Node,
        anchor: usize,
    },
    Map {
        node: Node,
        anchor: usize,
        key: Option<(String, Pos)>,
        /// The keys so far, once there are more than [`KEY_SCAN`].
        seen: Option<std::collections::HashSet<String>>,
    },
}

/// Builds spanned trees straight from parser events (no intermediate YAML tree), enforcing
/// unique keys and bounding alias expansion.
#[derive(Default)]
struct TreeBuilder {
    documents: Vec<Node>,
    stack: Vec<Frame>,
    anchors: HashMap<usize, Node>,
    alias_budget_used: usize,
    error: Option<SyntaxError>,
}

impl<'input> SpannedEventReceiver<'input> for TreeBuilder {
    fn on_event(&mut self, event: Event<'input>, span: Span) {
        if self.error.is_some() {
            return;
        }
        let at = pos(&span.start);
        if matches!(event, Event::SequenceStart(..) | Event::MappingStart(..))
            && self.stack.len() >= MAX_NESTING
        {
            self.error = Some(SyntaxError {
                pos: at,
                message: nesting_message(),
            });
            return;
        }
        match event {
            // Anchors do not carry over from one document to the next.
            Event::DocumentStart(_) => self.anchors.clear(),
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => {}
            Event::SequenceStart(anchor, _) => self.stack.push(Frame::Seq {
                node: Node {
                    pos: at,
                    value: Value::Seq(Vec::new()),
                },
                anchor,
            }),
            Event::MappingStart(anchor, _) => self.stack.push(Frame::Map {
                node: Node {
                    pos: at,
                    value: Value::Map(Vec::new()),
                },
                anchor,
                key: None,
                seen: None,
            }),
            Event::SequenceEnd | Event::MappingEnd => match self.stack.pop() {
                Some(Frame::Seq { node, anchor } | Frame::Map { node, anchor, .. }) => {
                    self.insert(node, anchor)
                }
                None => {}
            },
            Event::Scalar(text, style, anchor, tag) => {
                let node = Node {
                    pos: at,
                    value: scalar_value(text, style, tag.as_ref()),
                };
                self.insert(node, anchor);
            }
            Event::Alias(id) => match self.anchors.get(&id) {
                Some(target) => {
                    self.alias_budget_used += count_nodes(target);
                    if self.alias_budget_used > ALIAS_BUDGET {
                        self.error = Some(SyntaxError {
                            pos: at,
                            message: "aliases expand to too many nodes".into(),
                        });
                        return;
                    }
                    let mut copy = target.clone();
                    copy.pos = at;
                    self.insert(copy, 0);
                }
                None => {
                    self.error = Some(SyntaxError {
                        pos: at,
                        message: "unknown alias".into(),
                    });
                }
            },
        }
    }
}

impl TreeBuilder {
    /// Place a finished node: as a document, a list item, a mapping key or a mapping value.
    fn insert(&mut self, node: Node, anchor: usize) {
        if anchor > 0 {
            self.anchors.insert(anchor, node.clone());
        }
        match self.stack.last_mut() {
            None => {
                // An empty document (only comments, or a bare `---`) is not a manifest.
                if node.value != Value::Null {
                    self.documents.push(node);
                }
            }
            Some(Frame::Seq { node: parent, .. }) => {
                if let Value::Seq(items) = &mut parent.value {
                    items.push(node);
                }
            }
            Some(Frame::Map {
                node: parent,
                key,
                seen,
                ..
            }) => match key.take() {
                None => *key = Some((key_text(&node), node.pos)),
                Some((name, key_pos)) => {
                    if let Value::Map(entries) = &mut parent.value {
                        let duplicate = match seen {
                            Some(seen) => !seen.insert(name.clone()),
                            None => entries.iter().any(|e| e.key == name),
                        };
                        if seen.is_none() && entries.len() >= KEY_SCAN {
                            let mut keys: std::collections::HashSet<String> =
                                entries.iter().map(|e| e.key.clone()).collect();
                            keys.insert(name.clone());
                            *seen = Some(keys);
                        }
                        if duplicate {
                            self.error = Some(SyntaxError {
                                pos: key_pos,
                                message: "duplicated key in mapping".into(),
                            });
                            return;
                        }
                        entries.push(Entry {
                            key: name,
                            key_pos,
                            value: node,
                        });
                    }
                }
            },
        }
    }
}

/// YAML 1.2 core schema for plain scalars; quoted scalars are strings; `!!str`-style tags apply.
fn scalar_value(text: Cow<'_, str>, style: ScalarStyle, tag: Option<&Cow<'_, Tag>>) -> Value {
    match Scalar::parse_from_cow_and_metadata(text.clone(), style, tag) {
        Some(Scalar::Null) => Value::Null,
        Some(Scalar::Boolean(b)) => Value::Bool(b),
        Some(Scalar::Integer(i)) => Value::Int(i),
        Some(Scalar::FloatingPoint(f)) => Value::Float(f.into_inner()),
        Some(Scalar::String(s)) => Value::Str(s.into_owned()),
        // A tag the value does not fit (`!!int abc`): keep the text; the schema names the type.
        None => Value::Str(text.into_owned()),
    }
}

/// Mapping keys are field names; a non-string key (`1:`, `true:`) is kept as its text so the
/// schema reports it as an unknown field.
fn key_text(key: &Node) -> String {
    match &key.value {
        Value::Str(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Null => "null".into(),
        Value::Seq(_) | Value::Map(_) => "<complex key>".into(),
    }
}

fn count_nodes(node: &Node) -> usize {
    1 + match &node.value {
        Value::Seq(items) => items.iter().map(count_nodes).sum(),
        Value::Map(entries) => entries.iter().map(|e| 1 + count_nodes(&e.value)).sum(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_positions_of_keys_and_values() {
        let docs = parse("a: 1\nb:\n  - yes\n  - true\n---\n# only a comment\n---\nc: {d: 2.5}\n")
            .unwrap();
        assert_eq!(docs.len(), 2);
        let a = docs[0].entry("a").unwrap();
        assert_eq!((a.key_pos.line, a.key_pos.column), (1, 1));
        assert_eq!((a.value.pos.line, a.value.pos.column), (1, 4));
        // YAML 1.2: `yes` is a string, `true` a boolean.
        assert_eq!(
            docs[0].to_json(),
            serde_json::json!({"a": 1, "b": ["yes", true]})
        );
        let d = docs[1].get("c").unwrap().entry("d").unwrap();
        assert_eq!((d.key_pos.line, d.key_pos.column), (8, 5));
    }

    #[test]
    fn anchors_tags_and_quoting_follow_yaml_1_2() {
        let docs = parse("a: &x {b: 1}\nc: *x\nd: !!str 8\ne: '8'\nf: null\ng: ~\n").unwrap();
        assert_eq!(
            docs[0].to_json(),
            serde_json::json!({"a": {"b": 1}, "c": {"b": 1}, "d": "8", "e": "8", "f": null, "g": null})
        );
        let c = docs[0].entry("c").unwrap();
        assert_eq!((c.value.pos.line, c.value.pos.column), (2, 4));
        let bomb = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n";
        assert_eq!(
            parse(bomb).unwrap_err().message,
            "aliases expand to too many nodes"
        );
    }

    #[test]
    fn duplicate_keys_and_bad_syntax_are_errors_with_positions() {
        let err = parse("a: 1\nb: 2\na: 3\n").unwrap_err();
        assert_eq!(err.message, "duplicated key in mapping");
        assert_eq!(err.pos.line, 3);
        let err = parse("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(err.pos.line >= 2, "{err:?}");
    }

    #[test]
    fn nesting_past_the_bound_is_an_error_not_a_stack_overflow() {
        // A block sequence nested 50,000 deep (`- - - …`) and the same in flow style.
        let block = "- ".repeat(50_000) + "x\n";
        let flow = "[".repeat(50_000) + &"]".repeat(50_000);
        for text in [block, flow] {
            let err = parse(&text).unwrap_err();
            assert_eq!(err.message, nesting_message());
            assert_eq!(err.pos.line, 1);
        }
        let ok = "[".repeat(MAX_NESTING) + &"]".repeat(MAX_NESTING);
        assert!(parse(&ok).is_ok());
    }

    #[test]
    fn duplicate_keys_are_found_in_large_mappings_too() {
        let mut text: String = (0..100_000).map(|i| format!("k{i}: {i}\n")).collect();
        assert_eq!(
            parse(&text).unwrap()[0]
                .to_json()
                .as_object()
                .unwrap()
                .len(),
            100_000
        );
        text.push_str("k77: again\n");
        let err = parse(&text).unwrap_err();
        assert_eq!(err.message, "duplicated key in mapping");
        assert_eq!(err.pos.line, 100_001);
    }
}
