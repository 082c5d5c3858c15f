//! Secrets (seed 000 §3.2, DESIGN.md §6): values never stored, never printed.
//!
//! `Secret` is the one type secret material travels in. Its `Debug` and `Display` print
//! `<redacted>`; the value is reachable only through `expose()`, which is easy to grep for.

mod value;

pub use value::Secret;
