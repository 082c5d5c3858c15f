//! metalform — a declarative reconciler for bare-metal GPU fleets (DESIGN.md).
//!
//! Data flows one way: source -> manifest -> model -> plan (with observe) -> apply -> stages ->
//! provider clients / store. `plan` and `lifecycle` are pure: no I/O, no clock, no randomness.

pub mod agent;
pub mod api;
pub mod apply;
pub mod backoff;
pub mod cli;
pub mod clock;
pub mod cloudinit;
pub mod daemon;
pub mod drift;
pub mod events;
pub mod lifecycle;
pub mod listener;
pub mod manifest;
pub mod memory;
pub mod model;
pub mod observe;
pub mod plan;
pub mod provider;
pub mod sanitize;
pub mod secrets;
pub mod sim;
pub mod source;
pub mod stages;
pub mod store;
pub mod web;
