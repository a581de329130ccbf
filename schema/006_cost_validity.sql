-- ttdb schema v6: untrusted costs, and the ttdb marker.
--
-- A record ranks only when every cost is a plausible time: finite, positive, at most
-- 3600 s (`MeasureResult::invalid_reason` in src/ansor/record.rs is the rule). Earlier
-- versions ranked any finite mean, so a log or bundle claiming a negative or zero cost
-- became the best schedule. Records stored that way become failed measurements here
-- (kept, never chosen). `ttdb_costs_valid(raw)` is that rule, registered by the store.
UPDATE records SET mean_cost = NULL WHERE mean_cost IS NOT NULL AND NOT ttdb_costs_valid(raw);

-- 'ttdb' in the file header: a SQLite file without it (and without ttdb's tables) is not a
-- ttdb database, and ttdb refuses to touch it (`Store::open`).
PRAGMA application_id = 1953784930;
