//! A small, deterministic YAML writer for the cloud-config document (seed 000 §9: the payload
//! must be identical byte for byte for the same input).
//!
//! The document is built as an ordered tree and written in one fixed style: block mappings and
//! sequences, plain scalars only where YAML cannot read them as anything but the same string,
//! double-quoted (JSON-escaped, which YAML reads the same way) otherwise, and `|` literal
//! blocks for file contents that can be written that way without changing a byte.

/// A node of the document. Mapping keys keep their insertion order.
#[derive(Debug, Clone, PartialEq)]
pub enum Yaml {
    Str(String),
    /// A string written as a `|` literal block when that keeps it byte for byte (file
    /// contents), else double-quoted.
    Text(String),
    Bool(bool),
    Seq(Vec<Yaml>),
    /// A sequence of strings written on one line (`[a, "b c"]`): runcmd argument vectors.
    Flow(Vec<String>),
    Map(Vec<(String, Yaml)>),
}

impl Yaml {
    pub fn str(value: impl Into<String>) -> Yaml {
        Yaml::Str(value.into())
    }

    pub fn map<K: Into<String>>(entries: impl IntoIterator<Item = (K, Yaml)>) -> Yaml {
        Yaml::Map(entries.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }
}

/// Writes `root` (a mapping) as a document body, without the `#cloud-config` header.
pub fn write_document(root: &Yaml, out: &mut String) {
    match root {
        Yaml::Map(entries) => write_map(entries, 0, out),
        other => {
            write_inline(other, 0, out);
            out.push('\n');
        }
    }
}

fn indent(out: &mut String, n: usize) {
    out.extend(std::iter::repeat_n(' ', n));
}

fn write_map(entries: &[(String, Yaml)], level: usize, out: &mut String) {
    for (key, value) in entries {
        indent(out, level);
        write_entry(key, value, level, out);
    }
}

/// `key: value` with the cursor already indented; nested blocks go below.
fn write_entry(key: &str, value: &Yaml, level: usize, out: &mut String) {
    out.push_str(&scalar(key));
    out.push(':');
    match value {
        Yaml::Map(entries) if !entries.is_empty() => {
            out.push('\n');
            write_map(entries, level + 2, out);
        }
        Yaml::Seq(items) if !items.is_empty() => {
            out.push('\n');
            write_seq(items, level + 2, out);
        }
        other => {
            out.push(' ');
            write_inline(other, level + 2, out);
            out.push('\n');
        }
    }
}

fn write_seq(items: &[Yaml], level: usize, out: &mut String) {
    for item in items {
        indent(out, level);
        out.push_str("- ");
        match item {
            Yaml::Map(entries) if !entries.is_empty() => {
                // The first entry shares the dash's line; the others align under it.
                let (first_key, first_value) = &entries[0];
                write_entry(first_key, first_value, level + 2, out);
                write_map(&entries[1..], level + 2, out);
            }
            Yaml::Seq(inner) if !inner.is_empty() => {
                out.push('\n');
                write_seq(inner, level + 2, out);
            }
            other => {
                write_inline(other, level + 2, out);
                out.push('\n');
            }
        }
    }
}

/// A value that fits after `key: ` or `- ` (literal blocks continue on the next lines,
/// indented by `level`).
fn write_inline(value: &Yaml, level: usize, out: &mut String) {
    match value {
        Yaml::Str(s) => out.push_str(&scalar(s)),
        Yaml::Text(s) => match literal_block(s, level) {
            Some(block) => out.push_str(&block),
            None => out.push_str(&quoted(s)),
        },
        Yaml::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Yaml::Flow(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&scalar(item));
            }
            out.push(']');
        }
        Yaml::Seq(_) => out.push_str("[]"),
        Yaml::Map(_) => out.push_str("{}"),
    }
}

/// Words every YAML version (1.1 included, which cloud-init's PyYAML speaks) reads as
/// something other than a string.
const RESERVED: &[&str] = &[
    "y", "n", "yes", "no", "on", "off", "true", "false", "null", "~",
];

/// A string as a plain scalar when that is unambiguous, else double-quoted.
pub fn scalar(s: &str) -> String {
    let plain = !s.is_empty()
        && s.len() <= 200
        && s.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '/' || c == '_')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '.' | '-'))
        && !RESERVED.contains(&s.to_ascii_lowercase().as_str());
    if plain { s.to_string() } else { quoted(s) }
}

/// A YAML double-quoted scalar. JSON's string escapes are a subset of YAML's, so a JSON string
/// literal reads back as the same string.
pub fn quoted(s: &str) -> String {
    serde_json::to_string(s).expect("a string always serialises")
}

/// `|` followed by the lines indented by `level`, when a literal block reads back as exactly
/// `s`: one final newline (clip chomping), no carriage returns or other control characters
/// (tabs aside), and a first line that does not start with a space (which would need an
/// indentation indicator).
fn literal_block(s: &str, level: usize) -> Option<String> {
    let body = s.strip_suffix('\n')?;
    if body.is_empty()
        || body.ends_with('\n')
        || body.starts_with(' ')
        || body.starts_with('\n')
        || body
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t')
        || body
            .chars()
            .any(|c| matches!(c, '\u{feff}' | '\u{2028}' | '\u{2029}'))
        || body.lines().any(|l| l.ends_with(' ') || l.ends_with('\t'))
    {
        return None;
    }
    let mut block = String::from("|");
    for line in body.split('\n') {
        block.push('\n');
        if !line.is_empty() {
            block.extend(std::iter::repeat_n(' ', level));
            block.push_str(line);
        }
    }
    Some(block)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use saphyr::{LoadableYamlNode, Yaml as Parsed};

    fn emit(root: &Yaml) -> String {
        let mut out = String::new();
        write_document(root, &mut out);
        out
    }

    fn parse_str(doc: &str, key: &str) -> String {
        let docs = Parsed::load_from_str(doc).unwrap_or_else(|e| panic!("{e}\n{doc}"));
        docs[0]
            .as_mapping_get(key)
            .and_then(|v| v.as_str())
            .unwrap_or_else(|| panic!("no string `{key}` in\n{doc}"))
            .to_string()
    }

    #[test]
    fn writes_block_style_with_literal_contents() {
        let root = Yaml::map([
            (
                "write_files",
                Yaml::Seq(vec![Yaml::map([
                    ("path", Yaml::str("/etc/x")),
                    ("permissions", Yaml::str("0600")),
                    ("content", Yaml::Text("a=1\n\nb=\"2\"\n".into())),
                ])]),
            ),
            ("ssh_pwauth", Yaml::Bool(true)),
            (
                "runcmd",
                Yaml::Seq(vec![Yaml::Flow(vec!["/bin/run".into(), "a b".into()])]),
            ),
        ]);
        assert_eq!(
            emit(&root),
            "write_files:\n  - path: /etc/x\n    permissions: \"0600\"\n    content: |\n      a=1\n\n      b=\"2\"\nssh_pwauth: true\nruncmd:\n  - [/bin/run, \"a b\"]\n"
        );
    }

    #[test]
    fn quotes_what_yaml_would_read_otherwise() {
        for s in [
            "yes", "No", "true", "null", "~", "0600", "1.5", "", "a: b", "#x", "-x", "*a",
        ] {
            assert!(scalar(s).starts_with('"'), "{s} must be quoted");
        }
        for s in ["/usr/bin/x", "hpcadmin", "run-layer", "ubuntu_noble.1"] {
            assert_eq!(scalar(s), s);
        }
    }

    #[test]
    fn contents_that_a_literal_block_would_change_are_quoted() {
        for s in [
            "no newline",
            "two\n\n",
            " leading\n",
            "trailing \n",
            "cr\r\n",
            "\n",
        ] {
            let doc = emit(&Yaml::map([("k", Yaml::Text(s.into()))]));
            assert!(doc.starts_with("k: \""), "{s:?} -> {doc}");
            assert_eq!(parse_str(&doc, "k"), s);
        }
    }

    proptest! {
        #[test]
        fn any_string_reads_back_unchanged(s in "\\PC{0,40}|[ -~\\n\\t]{0,60}") {
            let doc = emit(&Yaml::map([
                ("plain", Yaml::Str(s.clone())),
                ("text", Yaml::Text(s.clone())),
            ]));
            prop_assert_eq!(parse_str(&doc, "plain"), s.clone());
            prop_assert_eq!(parse_str(&doc, "text"), s);
        }
    }
}
