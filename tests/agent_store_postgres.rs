//! The agent-enrollment store suite on a real PostgreSQL (scripts/services/10-postgres.sh
//! starts it and exports METALFORM_TEST_POSTGRES_URL). Each case gets its own fresh database.
//! Fails, never skips, when the service is missing.
#![cfg(feature = "services")]

use crate::agent_suite;
use crate::postgres_support;

use postgres_support::fresh_database;

crate::agent_suite_tests!(fresh_database);
