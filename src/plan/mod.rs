//! Pure planner (DESIGN.md §4): (model, observed, store view) -> Plan + reasons; rendering;
//! plan files.
