//! Executor (DESIGN.md §4, seed 000 §4.6–§4.13): runs plan items as durable per-node stage
//! journals with retries, failure classes, compensation, leases and per-site concurrency.
