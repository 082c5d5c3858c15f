//! YAML manifests (DESIGN.md §2): several documents per file, read with saphyr, which follows
//! YAML 1.2 — `yes`, `no`, `on` and `off` are strings, not booleans, and there are no merge
//! keys. Duplicate keys are an error (the YAML spec requires unique keys).

use saphyr::{LoadableYamlNode, MarkedYaml, Marker, Scalar, YamlData};

use super::tree::{Entry, Node, Pos, Value};

/// A YAML syntax error at a position.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntaxError {
    pub pos: Pos,
    pub message: String,
}

/// Every non-empty document of a YAML stream.
pub fn parse(text: &str) -> Result<Vec<Node>, SyntaxError> {
    let documents = MarkedYaml::load_from_str(text).map_err(|err| SyntaxError {
        pos: pos(err.marker()),
        message: err.info().to_string(),
    })?;
    Ok(documents
        .iter()
        .filter(|doc| !matches!(doc.data, YamlData::BadValue | YamlData::Value(Scalar::Null)))
        .map(convert)
        .collect())
}

fn pos(marker: &Marker) -> Pos {
    Pos {
        line: marker.line() as u32,
        column: marker.col() as u32 + 1,
    }
}

fn convert(node: &MarkedYaml<'_>) -> Node {
    let value = match &node.data {
        YamlData::Value(scalar) => scalar_value(scalar),
        YamlData::Representation(text, _, _) => Value::Str(text.to_string()),
        YamlData::Sequence(items) => Value::Seq(items.iter().map(convert).collect()),
        YamlData::Mapping(entries) => Value::Map(
            entries
                .iter()
                .map(|(key, value)| Entry {
                    key: key_text(key),
                    key_pos: pos(&key.span.start),
                    value: convert(value),
                })
                .collect(),
        ),
        // A custom tag does not change what the value is for a manifest.
        YamlData::Tagged(_, inner) => return convert(inner).with_pos(pos(&node.span.start)),
        YamlData::Alias(_) | YamlData::BadValue => Value::Null,
    };
    Node {
        pos: pos(&node.span.start),
        value,
    }
}

fn scalar_value(scalar: &Scalar<'_>) -> Value {
    match scalar {
        Scalar::Null => Value::Null,
        Scalar::Boolean(b) => Value::Bool(*b),
        Scalar::Integer(i) => Value::Int(*i),
        Scalar::FloatingPoint(f) => Value::Float(f.into_inner()),
        Scalar::String(s) => Value::Str(s.to_string()),
    }
}

/// Mapping keys are field names; a non-string key (`1:`, `true:`) is kept as its text so the
/// schema reports it as an unknown field.
fn key_text(key: &MarkedYaml<'_>) -> String {
    match &key.data {
        YamlData::Value(Scalar::String(s)) => s.to_string(),
        YamlData::Value(Scalar::Integer(i)) => i.to_string(),
        YamlData::Value(Scalar::Boolean(b)) => b.to_string(),
        YamlData::Value(Scalar::FloatingPoint(f)) => f.to_string(),
        YamlData::Value(Scalar::Null) => "null".into(),
        YamlData::Representation(text, _, _) => text.to_string(),
        _ => "<complex key>".into(),
    }
}

impl Node {
    fn with_pos(mut self, pos: Pos) -> Node {
        self.pos = pos;
        self
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
    fn duplicate_keys_and_bad_syntax_are_errors_with_positions() {
        let err = parse("a: 1\nb: 2\na: 3\n").unwrap_err();
        assert_eq!(err.message, "duplicated key in mapping");
        assert_eq!(err.pos.line, 3);
        let err = parse("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(err.pos.line >= 2, "{err:?}");
    }
}
