//! State store (DESIGN.md §6, seeds 000 §4.2/§5.7/§6.5, 001): sqlx on SQLite or PostgreSQL,
//! migrations, read models.
