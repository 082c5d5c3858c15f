//! Stage actions (seed 000 §4.3, §5, §6): one file per stage family, each stage an idempotent
//! `ensure_*`.
