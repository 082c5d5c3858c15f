//! Pure state machines (seeds 001, 002, 004): node states, job states, stage catalogs, MAAS
//! status mapping, Ironic provision states and verbs, retirement and protection rules.
