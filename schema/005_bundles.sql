-- ttdb schema v5: schedule bundles (src/bundle/).

-- Where a record came from before it reached this database, as the bundles that carried it
-- said (kind: imported | search | droplet | transfer | verify | default; source: the file
-- it was first read from). A record's own first source (`records.source_id`) says how it
-- arrived here; these rows keep the history a bundle brought with it, so a re-export keeps
-- it. Untrusted text: shown, never interpreted.
CREATE TABLE record_origins (
    record_id INTEGER NOT NULL REFERENCES records(id),
    kind      TEXT    NOT NULL,
    source    TEXT    NOT NULL,
    line      INTEGER NOT NULL,   -- the record's line in `source`, 0 if none
    host      TEXT    NOT NULL,   -- hosts.fingerprint of the measuring machine, '' if none
    UNIQUE (record_id, kind, source, line, host)
);
CREATE INDEX record_origins_record ON record_origins(record_id);

-- Public keys whose signed bundles `bundle import --require-signed` accepts.
CREATE TABLE trusted_keys (
    public_key TEXT NOT NULL PRIMARY KEY,  -- ed25519, 64 hex digits
    name       TEXT NOT NULL UNIQUE,
    added_at   TEXT NOT NULL
);
