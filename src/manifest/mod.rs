//! Manifests (DESIGN.md §2, seed 000 §3–§4.1): raw spanned documents -> validated typed model,
//! with diagnostics at file:line:col.
