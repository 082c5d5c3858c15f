//! Long-running reconciler (seed 000 §6, DESIGN.md §6): source polling, per-site reconcile
//! ticks, admin and agent HTTP API, metrics.
