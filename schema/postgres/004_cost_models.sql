-- PostgreSQL's text of migration 4 (see postgres/001_init.sql for the type mapping).

-- ttdb schema v4: the search's learned cost model, one per host class (CPU, lanes, cores),
-- so the next `ttdb tune` on a like machine starts warm. `model` is opaque to the store
-- (the search module encodes and validates it).
CREATE TABLE cost_models (
    host_class TEXT PRIMARY KEY,
    model BYTEA NOT NULL,
    programs BIGINT NOT NULL,
    updated_at TEXT NOT NULL
);
