//! Where desired state comes from (DESIGN.md §1): a directory, a git revision, a watched checkout.
