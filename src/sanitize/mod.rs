//! What may be shown, and how (DESIGN.md §8 "secrets are redacted in one place"; issue 16
//! points 2 and 4; docs/security.md "What is redacted where"). Values that reach a terminal, a
//! pull-request comment or a log come from manifests, from MAAS and from configuration — all of
//! them input. This module is the one path they take:
//!
//! | file | what |
//! |---|---|
//! | `redact` | credentials out: URL userinfo and secret query parameters masked, known secret values masked as whole values, secrets too short to mask refused |
//! | `terminal` | control characters (ANSI escapes, BEL, C1, bidirectional overrides) shown as escapes, never sent raw |
//! | `markdown` | text and code spans safe in a GitHub comment and its tables: no HTML, links, images or table breaks |

pub mod markdown;
pub mod redact;
pub mod terminal;

pub use redact::{MIN_SECRET_LEN, RedactError, Redactor};
