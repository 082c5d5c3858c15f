//! TOML manifests (DESIGN.md §2): one document per file, the same shape as YAML, read with the
//! `toml` crate's spanned parser so every key and value keeps its position.

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::tree::{Entry, LineIndex, Node, Value};
use super::yaml::SyntaxError;

pub fn parse(text: &str) -> Result<Node, SyntaxError> {
    let index = LineIndex::new(text);
    let table = DeTable::parse(text).map_err(|err| SyntaxError {
        pos: index.pos(err.span().map_or(0, |span| span.start)),
        // The parser bounds its own recursion; say so as the YAML reader does.
        message: if err.message().contains("recurs") {
            super::yaml::nesting_message()
        } else {
            err.message().trim_end().to_string()
        },
    })?;
    let start = table.span().start;
    Ok(Node {
        pos: index.pos(start),
        value: table_value(table.get_ref(), &index),
    })
}

fn table_value(table: &DeTable<'_>, index: &LineIndex<'_>) -> Value {
    let mut entries: Vec<Entry> = table
        .iter()
        .map(|(key, value)| Entry {
            key: key.get_ref().to_string(),
            key_pos: index.pos(key.span().start),
            value: convert(value, index),
        })
        .collect();
    // The parser keeps keys sorted; present them in file order like YAML.
    entries.sort_by_key(|e| e.key_pos);
    Value::Map(entries)
}

fn convert(value: &Spanned<DeValue<'_>>, index: &LineIndex<'_>) -> Node {
    let converted = match value.get_ref() {
        DeValue::String(s) => Value::Str(s.to_string()),
        DeValue::Integer(i) => i64::from_str_radix(&i.as_str().replace('_', ""), i.radix())
            .map_or_else(|_| Value::Str(i.to_string()), Value::Int),
        DeValue::Float(f) => f
            .as_str()
            .replace('_', "")
            .parse::<f64>()
            .map_or_else(|_| Value::Str(f.to_string()), Value::Float),
        DeValue::Boolean(b) => Value::Bool(*b),
        // No manifest field is a date; keep its text so the schema names the wrong type.
        DeValue::Datetime(d) => Value::Str(d.to_string()),
        DeValue::Array(items) => Value::Seq(items.iter().map(|v| convert(v, index)).collect()),
        DeValue::Table(table) => table_value(table, index),
    };
    Node {
        pos: index.pos(value.span().start),
        value: converted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_keys_and_values_keep_positions() {
        let doc = parse("kind = \"Site\"\n[metadata]\nname = \"dc1\"\n[[spec.nodes]]\nhostname = \"a\"\ngpus = 8\n")
            .unwrap();
        assert_eq!(
            doc.to_json(),
            serde_json::json!({"kind": "Site", "metadata": {"name": "dc1"}, "spec": {"nodes": [{"hostname": "a", "gpus": 8}]}})
        );
        let name = doc.get("metadata").unwrap().entry("name").unwrap();
        assert_eq!((name.key_pos.line, name.key_pos.column), (3, 1));
        assert_eq!((name.value.pos.line, name.value.pos.column), (3, 8));
    }

    #[test]
    fn syntax_errors_have_positions() {
        let err = parse("a = 1\nb = \n").unwrap_err();
        assert_eq!(err.pos.line, 2, "{err:?}");
        let err = parse("a = 1\na = 2\n").unwrap_err();
        assert!(err.message.contains("duplicate"), "{err:?}");
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let n = 50_000;
        let arrays = format!("a = {}{}\n", "[".repeat(n), "]".repeat(n));
        let inline = format!("a = {}{}\n", "{b = ".repeat(n), "}".repeat(n));
        let dotted = format!("{} = 1\n", vec!["k"; n].join("."));
        let header = format!("[{}]\n", vec!["k"; n].join("."));
        for text in [arrays, inline, dotted, header] {
            let err = parse(&text).unwrap_err();
            assert_eq!(err.pos.line, 1, "{err:?}");
            assert_eq!(err.message, super::super::yaml::nesting_message());
        }
    }
}
