//! The schedule database: one interface over two backends, SQLite (an embedded file, the
//! default) and PostgreSQL (a database a team shares, `postgres://...`). Both apply the same
//! numbered migrations (`schema/`, with PostgreSQL's own text where the dialects differ:
//! `schema/postgres/`), and every query here is written once for both (`db`).
//!
//! Atomicity: each imported file is one transaction, so a killed import leaves the file
//! either fully in or absent. Concurrency: see `db::Db::transaction`.
use std::fmt;
use std::path::{Path, PathBuf};

pub mod bundle;
pub mod cost_model;
pub mod db;
pub mod import;
pub mod layout_plans;
pub mod lookup;
pub mod measurement;
pub mod postgres;
pub mod query;
pub mod queue;
pub mod record_pins;
mod sqlite;
pub mod structural;
pub mod target;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod testing;

use db::{Db, Dialect};
pub use import::{import_file, FileReport, Rejected};
pub use postgres::PgUrl;

/// One schema version: the SQL that brings a database from the version before to it, per
/// dialect (the same text where the dialects agree).
struct Migration {
    sqlite: &'static str,
    postgres: &'static str,
}

macro_rules! shared {
    ($file:literal) => {
        Migration {
            sqlite: include_str!(concat!("../../../../schema/", $file)),
            postgres: include_str!(concat!("../../../../schema/", $file)),
        }
    };
}

macro_rules! per_dialect {
    ($file:literal) => {
        Migration {
            sqlite: include_str!(concat!("../../../../schema/", $file)),
            postgres: include_str!(concat!("../../../../schema/postgres/", $file)),
        }
    };
}

/// Schema migrations, in order; migration `i` brings the version from `i` to `i + 1`.
/// docs/design/postgres.md says why some have PostgreSQL text of their own.
const MIGRATIONS: &[Migration] = &[
    per_dialect!("001_init.sql"),
    per_dialect!("002_measurements.sql"),
    shared!("003_record_workload_index.sql"),
    per_dialect!("004_cost_models.sql"),
    shared!("005_bundles.sql"),
    per_dialect!("006_cost_validity.sql"),
    per_dialect!("007_work_queue.sql"),
    shared!("008_unrankable_index.sql"),
    shared!("009_layout_plans.sql"),
    shared!("010_record_pins.sql"),
];

/// `PRAGMA application_id` of a ttdb database: "ttdb" in ASCII, written by migration 6.
pub const APPLICATION_ID: i32 = 0x7474_6462;

/// How a command opens the database: whether it may create it, and whether it writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Open it, creating it (and its folder) when missing: the commands that store what
    /// they read or measure (import, bundle import, apply, refine, tune, trust).
    Create,
    /// Open an existing database for writing (verify stores its measurements).
    Write,
    /// Open an existing database without writing to it (stats, workloads, match, export,
    /// bundle export and inspect): works on a read-only file, and never creates one.
    ReadOnly,
}

pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// Where a database is: a SQLite file, or a PostgreSQL database. Shown without a password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    File(PathBuf),
    Postgres(PgUrl),
}

impl Location {
    /// A `postgres://` or `postgresql://` URL names a PostgreSQL database; anything else is a
    /// file path.
    pub fn parse(s: &Path) -> Location {
        match s.to_str().and_then(PgUrl::parse) {
            Some(url) => Location::Postgres(url),
            None => Location::File(s.to_path_buf()),
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::File(p) => write!(f, "{}", p.display()),
            Location::Postgres(u) => write!(f, "{u}"),
        }
    }
}

#[derive(Debug)]
pub enum StoreError {
    Sqlite(rusqlite::Error),
    Postgres(::postgres::Error),
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// The database was written by a newer ttdb.
    TooNew {
        found: u32,
        supported: u32,
    },
    /// No database there, and the command does not create one.
    Missing {
        location: String,
    },
    /// Not a ttdb database (another SQLite file, not SQLite at all, or a PostgreSQL schema
    /// of another application); it was not changed.
    Foreign {
        location: String,
        what: String,
    },
    Other(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Sqlite(e) => write!(f, "database: {e}"),
            StoreError::Postgres(e) => write!(f, "database: {}", postgres::describe(e)),
            StoreError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            StoreError::TooNew { found, supported } => write!(
                f,
                "database schema version {found} is newer than this ttdb supports ({supported}); upgrade ttdb"
            ),
            StoreError::Missing { location } => write!(
                f,
                "no ttdb database at {location} (nothing was created: `ttdb import LOGS` or `ttdb bundle import FILE` creates one; --db PATH|postgres://... or $TTDB_DB chooses another)"
            ),
            StoreError::Foreign { location, what } => {
                write!(f, "{location} is not a ttdb database ({what}); it was left untouched")
            }
            StoreError::Other(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for StoreError {}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Sqlite(e)
    }
}

impl From<::postgres::Error> for StoreError {
    fn from(e: ::postgres::Error) -> Self {
        StoreError::Postgres(e)
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// An open ttdb database.
pub struct Store {
    db: Db,
    location: Location,
}

impl Store {
    /// Opens (creating if needed) the database file at `path` and applies pending
    /// migrations.
    pub fn open(path: &Path) -> Result<Store> {
        Self::open_with(path, OpenMode::Create)
    }

    /// Opens the database file at `path` as `mode` says (see [`Store::open_at`]).
    pub fn open_with(path: &Path, mode: OpenMode) -> Result<Store> {
        Self::open_at(&Location::File(path.to_path_buf()), mode)
    }

    /// Opens the database at `location` as `mode` says: migrated to this ttdb's schema, and
    /// for `ReadOnly`, unable to write (after a one-time upgrade of an older schema). What
    /// is not a ttdb database is refused untouched.
    pub fn open_at(location: &Location, mode: OpenMode) -> Result<Store> {
        let (db, writable) = match location {
            Location::File(path) => sqlite::open_file(path, mode)?,
            Location::Postgres(url) => {
                let db = postgres::connect(url)?;
                postgres::check_identity(&db, url, mode)?;
                (db, true)
            }
        };
        let mut store = Store {
            db,
            location: location.clone(),
        };
        if writable {
            store.migrate()?;
            store.resign_outdated()?;
        }
        if mode == OpenMode::ReadOnly && store.db.dialect() == Dialect::Postgres {
            postgres::read_only(&store.db)?;
        }
        Ok(store)
    }

    /// An in-memory SQLite database (tests, dry runs).
    pub fn open_in_memory() -> Result<Store> {
        let mut store = Store {
            db: sqlite::configure(rusqlite::Connection::open_in_memory()?)?,
            location: Location::File(PathBuf::from(":memory:")),
        };
        store.migrate()?;
        Ok(store)
    }

    fn migrate(&mut self) -> Result<()> {
        let version = self.schema_version()?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::TooNew {
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        for (i, m) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            let to = i as u32 + 1;
            self.db.transaction(|db| {
                if db.dialect() == Dialect::Postgres {
                    postgres::lock_for_migration(db)?;
                }
                // Another process may have migrated while we waited for the write lock.
                if schema_version_of(db)? >= to {
                    return Ok(());
                }
                match db {
                    Db::Sqlite(c) => {
                        c.execute_batch(m.sqlite)?;
                        sqlite::set_schema_version(c, to)
                    }
                    Db::Postgres(_) => {
                        db.execute_batch(m.postgres)?;
                        postgres::set_schema_version(db, to)
                    }
                }
            })?;
        }
        Ok(())
    }

    /// Recomputes the signatures of workloads stored by an older signature producer
    /// (`signature_version` below the current one), in one transaction. Returns how many.
    pub fn resign_outdated(&mut self) -> Result<usize> {
        use db::params;
        let current = ttdb_format::signature::SIGNATURE_VERSION;
        let stale: Vec<(i64, String)> = self.db.query_map(
            "SELECT id, key FROM workloads WHERE signature_version < ?1",
            params![current],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        if stale.is_empty() {
            return Ok(0);
        }
        self.db.transaction(|tx| {
            for (id, raw) in &stale {
                let key = ttdb_format::ansor::WorkloadKey::parse(raw)
                    .map_err(|e| StoreError::Other(e.to_string()))?;
                let (sig, by) = ttdb_algo::recognize::signature_for(&key);
                tx.execute(
                    "UPDATE workloads SET signature = ?2, signature_json = ?3, op_class = ?4, recognized_by = ?5,
                     signature_version = ?6 WHERE id = ?1",
                    params![
                        id,
                        sig.sha256_hex(),
                        sig.canonical_json(),
                        sig.op_class,
                        by,
                        current
                    ],
                )?;
            }
            let ids: Vec<i64> = stale.iter().map(|(id, _)| *id).collect();
            structural::check_guesses(tx, &ids)
        })?;
        Ok(stale.len())
    }

    pub fn location(&self) -> &Location {
        &self.location
    }

    /// Moves SQLite's write-ahead log into the database file (benchmarks measure file
    /// sizes); nothing to do on PostgreSQL.
    pub fn checkpoint(&self) -> Result<()> {
        match &self.db {
            Db::Sqlite(c) => Ok(c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")?),
            Db::Postgres(_) => Ok(()),
        }
    }

    /// SQLite's own consistency check: "ok", or what is wrong. (PostgreSQL checks its
    /// constraints on every write, and has no such statement: "ok".)
    pub fn integrity_check(&self) -> Result<String> {
        match &self.db {
            Db::Sqlite(c) => Ok(c.query_row("PRAGMA integrity_check", [], |r| r.get(0))?),
            Db::Postgres(_) => Ok("ok".into()),
        }
    }

    /// The SQLite connection, for integration tests that check SQLite's own invariants
    /// (query plans, pragmas, raw rows). Production code goes through this module's
    /// functions: all SQL lives in `store/` (the layering test checks that nothing else in
    /// `src/` calls this). Panics on a PostgreSQL store.
    #[doc(hidden)]
    pub fn connection_for_tests(&self) -> &rusqlite::Connection {
        match &self.db {
            Db::Sqlite(c) => c,
            Db::Postgres(_) => {
                panic!("connection_for_tests: a SQLite store only; use sql_for_tests")
            }
        }
    }

    /// The connection of either backend, for tests that read raw rows on both.
    #[doc(hidden)]
    pub fn sql_for_tests(&self) -> &Db {
        &self.db
    }

    pub fn schema_version(&self) -> Result<u32> {
        schema_version_of(&self.db)
    }
}

fn schema_version_of(db: &Db) -> Result<u32> {
    match db {
        Db::Sqlite(c) => sqlite::schema_version(c),
        Db::Postgres(_) => postgres::schema_version(db),
    }
}

/// Current UTC time as RFC 3339 (`2026-11-22T01:12:14Z`), without a date crate.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    rfc3339(secs)
}

fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::on_both_backends;
    use db::params;

    on_both_backends! {
        fn migrates_to_current_version(backend) {
            assert_eq!(backend.store().schema_version().unwrap(), SCHEMA_VERSION);
        }
    }

    on_both_backends! {
        fn refuses_a_newer_schema(backend) {
            let dir = tempfile::tempdir().unwrap();
            let at = backend.location(dir.path(), "x.db");
            let s = Store::open_at(&at, OpenMode::Create).unwrap();
            match &s.db {
                Db::Sqlite(c) => sqlite::set_schema_version(c, 99).unwrap(),
                Db::Postgres(_) => postgres::set_schema_version(&s.db, 99).unwrap(),
            }
            drop(s);
            assert!(matches!(
                Store::open_at(&at, OpenMode::Create),
                Err(StoreError::TooNew { found: 99, .. })
            ));
        }
    }

    on_both_backends! {
        fn outdated_signatures_are_recomputed_on_open(backend) {
            let dir = tempfile::tempdir().unwrap();
            let at = backend.location(dir.path(), "old.db");
            let s = Store::open_at(&at, OpenMode::Create).unwrap();
            s.db.execute_batch(
                "INSERT INTO workloads (key, key_head, key_form, signature, signature_json, op_class, recognized_by, signature_version)
                 VALUES ('[\"218090bc617f9a36fbabdf253ec28064\", [14, 3072], [768, 3072], [14, 768]]', '218090bc617f9a36fbabdf253ec28064',
                         'nested', 'x', '{}', 'dense', 'structural', 1)",
            )
            .unwrap();
            drop(s);
            let s = Store::open_at(&at, OpenMode::Create).unwrap();
            let (class, by, v): (String, String, u32) = s
                .db
                .query_one(
                    "SELECT op_class, recognized_by, signature_version FROM workloads",
                    params![],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .unwrap();
            assert_eq!(
                (class.as_str(), by.as_str(), v),
                ("dense", "md5", ttdb_format::signature::SIGNATURE_VERSION)
            );
        }
    }

    /// The two dialects' migrations build the same tables with the same columns.
    #[test]
    fn both_dialects_have_the_same_schema() {
        let columns = |s: &Store, sql: &str| -> Vec<(String, String)> {
            s.db.query_map(sql, params![], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
        };
        let sqlite = columns(
            &Store::open_in_memory().unwrap(),
            "SELECT m.name, p.name FROM sqlite_master m JOIN pragma_table_info(m.name) p
             WHERE m.type = 'table' ORDER BY 1, 2",
        );
        let pg = columns(
            &testing::Backend::Postgres.store(),
            "SELECT table_name::text, column_name::text FROM information_schema.columns
             WHERE table_schema = current_schema() AND table_name <> 'ttdb_schema' ORDER BY 1, 2",
        );
        assert!(sqlite.len() > 40, "{sqlite:?}");
        assert_eq!(sqlite, pg);
    }

    #[test]
    fn formats_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_606_960_986), "2020-12-03T02:03:06Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }
}
