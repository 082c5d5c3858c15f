//! First-boot payload composition (seed 000 §9): ordered, deterministic layers.
