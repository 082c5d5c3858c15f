//! Error classification at the edge (DESIGN.md §3, §8): typed errors inside, one class here.
//!
//! Every command returns `Result<Exit, CliError>`. A `CliError` carries a class that decides the
//! exit code, a one-line message, and `hint:` lines that tell the operator what to do next.

use std::fmt;
use std::process::ExitCode;

/// How an error is reported and which exit code it gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The input or the world is not as the command needs it (bad manifest, unknown rev,
    /// unreachable MAAS, stale plan). Exit 1.
    User,
    /// The command line itself is wrong (unknown flag, conflicting options, a value out of
    /// range). Exit 2, as clap and most tools do; under `plan --detailed-exitcode`, where 2
    /// means "changes", a usage error exits 1 instead (see `cli::main`).
    Argument,
    /// A bug or an impossible state inside metalform. Exit 70 (EX_SOFTWARE).
    Unexpected,
}

impl ErrorClass {
    pub fn exit_code(self) -> u8 {
        match self {
            ErrorClass::User => 1,
            ErrorClass::Argument => 2,
            ErrorClass::Unexpected => 70,
        }
    }
}

/// What a successful command asks the process to exit with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0
    Success,
    /// 1: the command ran and found problems (validate: invalid fleet).
    Findings,
    /// 2: `plan --detailed-exitcode` found changes.
    Changes,
    /// 3: `plan --detailed-exitcode` found nodes that need an operator before the fleet can
    /// converge (listed on stderr); applying would not get past them.
    Blocked,
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(match exit {
            Exit::Success => 0,
            Exit::Findings => 1,
            Exit::Changes => 2,
            Exit::Blocked => 3,
        })
    }
}

#[derive(Debug, Clone)]
pub struct CliError {
    pub class: ErrorClass,
    pub message: String,
    pub hints: Vec<String>,
}

impl CliError {
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        Self {
            class,
            message: message.into(),
            hints: Vec::new(),
        }
    }

    pub fn user(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::User, message)
    }

    pub fn argument(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Argument, message)
    }

    pub fn unexpected(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Unexpected, message)
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hints.push(hint.into());
        self
    }
}

/// Messages quote what came from outside (manifest values, MAAS answers, URLs): credentials
/// in them are masked and control characters shown as escapes. Hints are ours (they may show
/// a URL's shape, `postgres://USER@HOST/DB`): only escaped.
impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let message = crate::sanitize::redact::text(&self.message);
        write!(f, "error: {}", crate::sanitize::terminal::escape(&message))?;
        for hint in &self.hints {
            write!(f, "\nhint: {}", crate::sanitize::terminal::escape(hint))?;
        }
        Ok(())
    }
}

impl std::error::Error for CliError {}

impl From<std::io::Error> for CliError {
    fn from(err: std::io::Error) -> Self {
        CliError::user(err.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_message_and_hints() {
        let err = CliError::user("fleet directory `nope` does not exist")
            .hint("pass --fleet DIR pointing at a directory with sites/, profiles/ and nodes/");
        assert_eq!(
            err.to_string(),
            "error: fleet directory `nope` does not exist\n\
             hint: pass --fleet DIR pointing at a directory with sites/, profiles/ and nodes/"
        );
        assert_eq!(err.class.exit_code(), 1);
        let hostile = CliError::user("site \u{1b}]0;owned\u{7} at https://u:pw@maas.example/MAAS");
        assert_eq!(
            hostile.to_string(),
            "error: site \\x1b]0;owned\\x07 at https://***@maas.example/MAAS"
        );
        assert_eq!(ErrorClass::Argument.exit_code(), 2);
        assert_eq!(ErrorClass::Unexpected.exit_code(), 70);
    }
}
