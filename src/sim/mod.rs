//! Embedded MAAS simulator (DESIGN.md §5): a real HTTP server speaking MAAS API 2.0, plus
//! simulated node agents.
