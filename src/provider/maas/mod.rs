//! MAAS API 2.0 client (../shared/maas/API_REFERENCE.md, seed 000 §4.3): OAuth 1.0 PLAINTEXT,
//! typed requests and responses, typed errors.
