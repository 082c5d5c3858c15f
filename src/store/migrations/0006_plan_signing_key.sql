-- metalform state store, version 6: the key plan files are signed with (issue 16; docs/security.md
-- "Plan files"). `metalform plan --out` signs the plan with HMAC-SHA256 under this key and
-- `metalform apply PLANFILE` refuses a file whose signature does not verify, so a plan edited
-- after it was written, or written against another state store, is never run. One row, made on
-- first use; whoever can read this table can sign plans for this store.
CREATE TABLE plan_signing_key (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    key_hex TEXT NOT NULL,
    created_at TEXT NOT NULL
);
