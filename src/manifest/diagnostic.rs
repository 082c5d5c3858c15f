//! Validation findings (DESIGN.md §2: every problem at once, each with file:line:col, the field
//! path, a message and, where useful, a hint). Errors and warnings are kept apart.

use std::fmt;

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// One finding. Messages never contain a secret value: checks on secret fields describe the
/// problem without quoting what was written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    pub severity: Severity,
    /// A stable identifier of the check (`unknown-field`, `duplicate-hostname`, ...), listed in
    /// docs/manifests.md.
    pub code: &'static str,
    /// The file as the operator names it (fleet path + path inside the fleet).
    pub file: String,
    pub line: u32,
    pub column: u32,
    /// The field, as `spec.nodes[3].bmc.ipmiIp`; empty for a whole file or document.
    pub path: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl Diagnostic {
    /// Order of presentation: by file, then position, then severity.
    pub fn sort_key(&self) -> (&str, u32, u32, Severity, &str) {
        (
            &self.file,
            self.line,
            self.column,
            self.severity,
            &self.message,
        )
    }

    /// `FILE:LINE:COL: error: PATH: MESSAGE`, the first line of the text rendering.
    pub fn headline(&self) -> String {
        let mut line = format!(
            "{}:{}:{}: {}: ",
            self.file,
            self.line,
            self.column,
            self.severity.as_str()
        );
        if !self.path.is_empty() {
            line.push_str(&self.path);
            line.push_str(": ");
        }
        line.push_str(&self.message);
        line
    }
}

/// The headline, then `  hint: ...` when there is one. Messages quote what the manifest
/// says; a control character in it is shown as an escape, never sent to the terminal.
impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::sanitize::terminal::escape_line(&self.headline()))?;
        if let Some(hint) = &self.hint {
            write!(
                f,
                "\n  hint: {}",
                crate::sanitize::terminal::escape_line(hint)
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_headline_and_hint() {
        let d = Diagnostic {
            severity: Severity::Error,
            code: "unknown-field",
            file: "fleet/nodes/a.yaml".into(),
            line: 7,
            column: 5,
            path: "spec.bmc.ipmiip".into(),
            message: "unknown field `ipmiip`".into(),
            hint: Some("did you mean `ipmiIp`?".into()),
        };
        assert_eq!(
            d.to_string(),
            "fleet/nodes/a.yaml:7:5: error: spec.bmc.ipmiip: unknown field `ipmiip`\n  hint: did you mean `ipmiIp`?"
        );
        let whole_file = Diagnostic {
            path: String::new(),
            hint: None,
            ..d
        };
        assert_eq!(
            whole_file.to_string(),
            "fleet/nodes/a.yaml:7:5: error: unknown field `ipmiip`"
        );
    }
}
