//! The resolved desired fleet (DESIGN.md §2): typed ids, profile defaults applied.
