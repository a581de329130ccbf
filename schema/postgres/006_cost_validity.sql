-- PostgreSQL's text of migration 6 (schema/006_cost_validity.sql is SQLite's): nothing.
-- SQLite's migration demotes records that earlier ttdb versions ranked with implausible
-- costs, through a function ttdb registers in SQLite, and marks the file as ttdb's. A
-- PostgreSQL database has only ever been written by a ttdb that applies the current rule
-- at import, so it holds no such records, and it is marked by its `ttdb_schema` table.
SELECT 1;
