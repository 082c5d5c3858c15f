//! Observed-state snapshot (seed 000 §6.3, DESIGN.md §4): MAAS machines per site + inventory.
