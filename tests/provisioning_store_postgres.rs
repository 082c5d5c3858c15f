//! The Redfish provisioner's tables on a real PostgreSQL (scripts/services/10-postgres.sh
//! starts it): migration 0008, the partial unique index, the seed's lease statements under
//! concurrency. Each case gets its own fresh database. Fails, never skips, when the service is
//! missing.
#![cfg(feature = "services")]

use crate::postgres_support;
use crate::provisioning_store_suite;

use postgres_support::fresh_database;

crate::provisioning_store_tests!(fresh_database);
