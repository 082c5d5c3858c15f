//! Raw spanned documents (DESIGN.md §8: raw spanned config kept apart from the resolved model).
//!
//! YAML and TOML are both read into this one tree, which remembers the line and column of every
//! value and every mapping key. Validation runs on its JSON form; a JSON instance path from the
//! schema validator, or a field path from a semantic check, is mapped back to a position here.

use std::borrow::Cow;

use serde_json::{Map, Number, Value as Json};

/// 1-based line and column (columns count characters, not bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pos {
    pub line: u32,
    pub column: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<Entry>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub pos: Pos,
    pub value: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub key: String,
    pub key_pos: Pos,
    pub value: Node,
}

/// One step of a path into a document: a mapping key or a list index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathSegment {
    /// Field names known in advance are borrowed; names from a document are owned.
    Key(Cow<'static, str>),
    Index(usize),
}

impl From<&'static str> for PathSegment {
    fn from(key: &'static str) -> Self {
        PathSegment::Key(Cow::Borrowed(key))
    }
}

impl From<String> for PathSegment {
    fn from(key: String) -> Self {
        PathSegment::Key(Cow::Owned(key))
    }
}

impl From<usize> for PathSegment {
    fn from(index: usize) -> Self {
        PathSegment::Index(index)
    }
}

/// A path written as its steps: `field_path!["spec", "nodes", 3, "bmc", "ipmiIp"]`.
macro_rules! field_path {
    ($($step:expr),* $(,)?) => {
        [$($crate::manifest::tree::PathSegment::from($step)),*]
    };
}
pub(crate) use field_path;

/// Render a path the way operators read it: `spec.nodes[3].bmc.ipmiIp`.
pub fn display_path(path: &[PathSegment]) -> String {
    let mut text = String::new();
    for segment in path {
        match segment {
            PathSegment::Key(key) => {
                if !text.is_empty() {
                    text.push('.');
                }
                text.push_str(key);
            }
            PathSegment::Index(i) => {
                text.push('[');
                text.push_str(&i.to_string());
                text.push(']');
            }
        }
    }
    text
}

/// Where a path landed: the position of the value and, when the last step was a mapping key,
/// of that key. When the path runs past the document (a missing field), `found` is false and
/// the positions are those of the deepest node that exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Located {
    pub value_pos: Pos,
    pub key_pos: Option<Pos>,
    pub found: bool,
}

impl Node {
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.entry(key).map(|e| &e.value)
    }

    pub fn entry(&self, key: &str) -> Option<&Entry> {
        match &self.value {
            Value::Map(entries) => entries.iter().find(|e| e.key == key),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Follow `path` as far as it goes.
    pub fn locate(&self, path: &[PathSegment]) -> Located {
        let mut node = self;
        let mut key_pos = None;
        for step in path {
            let next = match (step, &node.value) {
                (PathSegment::Key(key), Value::Map(entries)) => entries
                    .iter()
                    .find(|e| e.key == *key)
                    .map(|e| (&e.value, Some(e.key_pos))),
                (PathSegment::Index(i), Value::Seq(items)) => items.get(*i).map(|n| (n, None)),
                _ => None,
            };
            match next {
                Some((child, child_key)) => {
                    node = child;
                    key_pos = child_key;
                }
                None => {
                    return Located {
                        value_pos: node.pos,
                        key_pos,
                        found: false,
                    };
                }
            }
        }
        Located {
            value_pos: node.pos,
            key_pos,
            found: true,
        }
    }

    /// The JSON form validated against the schemas and deserialised into documents. Floats
    /// without a fraction become integers, because the schemas' `integer` accepts them and the
    /// typed documents must too.
    pub fn to_json(&self) -> Json {
        match &self.value {
            Value::Null => Json::Null,
            Value::Bool(b) => Json::Bool(*b),
            Value::Int(i) => Json::Number((*i).into()),
            Value::Float(f) => {
                if f.fract() == 0.0 && f.abs() < 9.0e15 {
                    Json::Number((*f as i64).into())
                } else {
                    Number::from_f64(*f).map_or(Json::Null, Json::Number)
                }
            }
            Value::Str(s) => Json::String(s.clone()),
            Value::Seq(items) => Json::Array(items.iter().map(Node::to_json).collect()),
            Value::Map(entries) => {
                let mut map = Map::with_capacity(entries.len());
                for entry in entries {
                    map.insert(entry.key.clone(), entry.value.to_json());
                }
                Json::Object(map)
            }
        }
    }

    /// The JSON type name used in messages.
    pub fn type_name(&self) -> &'static str {
        match &self.value {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a number",
            Value::Str(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }
}

/// Turns byte offsets into 1-based line/column positions (columns in characters), for parsers
/// that report byte spans (TOML).
pub struct LineIndex<'a> {
    text: &'a str,
    line_starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    pub fn new(text: &'a str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Self { text, line_starts }
    }

    pub fn pos(&self, byte: usize) -> Pos {
        let byte = byte.min(self.text.len());
        let line = self.line_starts.partition_point(|start| *start <= byte) - 1;
        let start = self.line_starts[line];
        let column = self.text.get(start..byte).map_or(0, |s| s.chars().count());
        Pos {
            line: line as u32 + 1,
            column: column as u32 + 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(line: u32, column: u32) -> Pos {
        Pos { line, column }
    }

    #[test]
    fn line_index_counts_characters() {
        let index = LineIndex::new("a = 1\nbé = 2\n");
        assert_eq!(index.pos(0), pos(1, 1));
        assert_eq!(index.pos(6), pos(2, 1));
        // `=` after a two-byte character is at column 4, byte 10.
        assert_eq!(index.pos(10), pos(2, 4));
        assert_eq!(index.pos(999), pos(3, 1));
    }

    #[test]
    fn locate_reports_key_value_and_missing() {
        let doc = Node {
            pos: pos(1, 1),
            value: Value::Map(vec![Entry {
                key: "spec".into(),
                key_pos: pos(2, 1),
                value: Node {
                    pos: pos(3, 3),
                    value: Value::Seq(vec![Node {
                        pos: pos(3, 5),
                        value: Value::Float(8.0),
                    }]),
                },
            }]),
        };
        let hit = doc.locate(&field_path!["spec", 0]);
        assert_eq!(
            (hit.value_pos, hit.key_pos, hit.found),
            (pos(3, 5), None, true)
        );
        let key = doc.locate(&field_path!["spec"]);
        assert_eq!(key.key_pos, Some(pos(2, 1)));
        let miss = doc.locate(&field_path!["spec", 4]);
        assert_eq!(
            display_path(&field_path!["spec", "nodes", 3, "bmc"]),
            "spec.nodes[3].bmc"
        );
        assert_eq!((miss.value_pos, miss.found), (pos(3, 3), false));
        assert_eq!(doc.to_json(), serde_json::json!({"spec": [8]}));
    }
}
