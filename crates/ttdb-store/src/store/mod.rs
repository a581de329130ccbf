//! The SQLite schedule database: open with migrations (SQL in `schema/`), import, queries.
//!
//! Concurrency: WAL mode with a busy timeout, so readers work while one writer imports.
//! Atomicity: each imported file is one transaction, so a killed import leaves the file
//! either fully in or absent.
use rusqlite::Connection;
use std::fmt;
use std::path::{Path, PathBuf};

pub mod bundle;
pub mod cost_model;
pub mod import;
pub mod lookup;
pub mod measurement;
pub mod query;
pub mod structural;
pub mod target;

pub use import::{import_file, FileReport, Rejected};

/// Schema migrations, in order; migration `i` brings `user_version` from `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    include_str!("../../../../schema/001_init.sql"),
    include_str!("../../../../schema/002_measurements.sql"),
    include_str!("../../../../schema/003_record_workload_index.sql"),
    include_str!("../../../../schema/004_cost_models.sql"),
    include_str!("../../../../schema/005_bundles.sql"),
    include_str!("../../../../schema/006_cost_validity.sql"),
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

#[derive(Debug)]
pub enum StoreError {
    Sqlite(rusqlite::Error),
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// The database was written by a newer ttdb.
    TooNew {
        found: u32,
        supported: u32,
    },
    /// No database at the path, and the command does not create one.
    Missing {
        path: PathBuf,
    },
    /// The file is not a ttdb database (another SQLite file, or not SQLite at all); it was
    /// not changed.
    Foreign {
        path: PathBuf,
        what: String,
    },
    Other(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Sqlite(e) => write!(f, "database: {e}"),
            StoreError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            StoreError::TooNew { found, supported } => write!(
                f,
                "database schema version {found} is newer than this ttdb supports ({supported}); upgrade ttdb"
            ),
            StoreError::Missing { path } => write!(
                f,
                "no ttdb database at {} (nothing was created: `ttdb import LOGS` or `ttdb bundle import FILE` creates one; --db PATH or $TTDB_DB chooses another)",
                path.display()
            ),
            StoreError::Foreign { path, what } => write!(
                f,
                "{} is not a ttdb database ({what}); it was left untouched",
                path.display()
            ),
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

pub type Result<T> = std::result::Result<T, StoreError>;

/// An open ttdb database.
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

impl Store {
    /// Opens (creating if needed) the database at `path` and applies pending migrations.
    pub fn open(path: &Path) -> Result<Store> {
        Self::open_with(path, OpenMode::Create)
    }

    /// Opens the database at `path` as `mode` says. Before anything is written, the file
    /// must be a ttdb database: one carrying [`APPLICATION_ID`], one of an earlier ttdb
    /// (its tables, no marker yet), or an empty file (`Create` only). Anything else is
    /// refused untouched, byte for byte.
    pub fn open_with(path: &Path, mode: OpenMode) -> Result<Store> {
        use rusqlite::OpenFlags;
        let exists = path.exists();
        if !exists && mode != OpenMode::Create {
            return Err(StoreError::Missing {
                path: path.to_path_buf(),
            });
        }
        if !exists {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|error| StoreError::Io {
                    path: dir.to_path_buf(),
                    error,
                })?;
            }
        }
        let flags = OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
        let read_only = flags | OpenFlags::SQLITE_OPEN_READ_ONLY;
        let writable = flags | OpenFlags::SQLITE_OPEN_READ_WRITE;
        if exists {
            // Identify the file through a read-only connection: a foreign file is never
            // opened for writing, so nothing (not even a journal mode) can change it.
            let mut probe = Connection::open_with_flags(path, read_only)?;
            let mut kind = identify(&probe);
            if mode == OpenMode::ReadOnly && is_read_only_wal_error(&kind) {
                // A WAL database in a folder this user cannot write: SQLite cannot create
                // the shared-memory file a reader needs. With no write-ahead log beside it
                // (every change is in the file), reading it as immutable is exact.
                let wal = PathBuf::from(format!("{}-wal", path.display()));
                if !wal.exists() {
                    probe = Connection::open_with_flags(immutable_uri(path), read_only)?;
                    kind = identify(&probe);
                }
            }
            let kind = kind.map_err(|e| match e {
                StoreError::Sqlite(rusqlite::Error::SqliteFailure(f, m))
                    if f.code == rusqlite::ErrorCode::NotADatabase =>
                {
                    foreign(
                        path,
                        format!("not SQLite: {}", m.unwrap_or_else(|| f.to_string())),
                    )
                }
                e => e,
            })?;
            match kind {
                FileKind::Foreign(what) => return Err(foreign(path, what)),
                FileKind::Empty if mode == OpenMode::ReadOnly => {
                    return Err(StoreError::Missing {
                        path: path.to_path_buf(),
                    })
                }
                _ => {}
            }
            if mode == OpenMode::ReadOnly {
                if needs_upgrade(&probe)? {
                    // An older ttdb's database: upgrade it once through a writing
                    // connection (when the file may be written), then read.
                    drop(probe);
                    let conn = Connection::open_with_flags(path, writable).map_err(|e| {
                        StoreError::Other(format!(
                            "{}: its schema is older than this ttdb's and it cannot be upgraded here ({e}); run a writing command (`ttdb import`) with write access once",
                            path.display()
                        ))
                    })?;
                    drop(Self::configure(conn, path)?);
                    return Self::open_with(path, OpenMode::ReadOnly);
                }
                probe.busy_timeout(std::time::Duration::from_secs(30))?;
                probe.pragma_update(None, "query_only", true)?;
                probe.pragma_update(None, "mmap_size", 1i64 << 32)?;
                return Ok(Store {
                    conn: probe,
                    path: path.to_path_buf(),
                });
            }
        }
        let conn = Connection::open_with_flags(path, writable | OpenFlags::SQLITE_OPEN_CREATE)?;
        Self::configure(conn, path)
    }

    /// An in-memory database (tests, dry runs).
    pub fn open_in_memory() -> Result<Store> {
        Self::configure(Connection::open_in_memory()?, Path::new(":memory:"))
    }

    fn configure(conn: Connection, path: &Path) -> Result<Store> {
        conn.busy_timeout(std::time::Duration::from_secs(30))?;
        // 16 KiB pages (new databases only): a record line is ~700 bytes, and larger pages
        // cut the per-page work of a bulk import's commit by a third, and the file by 30%.
        conn.pragma_update(None, "page_size", 16384)?;
        // WAL: readers never block the writer; NORMAL sync is crash-safe in WAL mode.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // Imports touch the digest index at random: a page cache that holds it (up to
        // 256 MiB, allocated only as used) and memory-mapped reads avoid a read syscall per
        // page, which otherwise dominates large imports.
        conn.pragma_update(None, "cache_size", -262_144)?;
        conn.pragma_update(None, "mmap_size", 1i64 << 32)?;
        register_functions(&conn)?;
        let mut store = Store {
            conn,
            path: path.to_path_buf(),
        };
        store.migrate()?;
        store.resign_outdated()?;
        Ok(store)
    }

    fn migrate(&mut self) -> Result<()> {
        let version: u32 = self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::TooNew {
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            let tx = self
                .conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            // Another process may have migrated while we waited for the write lock.
            let now: u32 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
            if now > i as u32 {
                continue;
            }
            tx.execute_batch(sql)?;
            tx.pragma_update(None, "user_version", i as u32 + 1)?;
            tx.commit()?;
        }
        Ok(())
    }

    /// Recomputes the signatures of workloads stored by an older signature producer
    /// (`signature_version` below the current one), in one transaction. Returns how many.
    pub fn resign_outdated(&mut self) -> Result<usize> {
        let current = ttdb_format::signature::SIGNATURE_VERSION;
        let stale: Vec<(i64, String)> = self
            .conn
            .prepare("SELECT id, key FROM workloads WHERE signature_version < ?1")?
            .query_map([current], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<std::result::Result<_, _>>()?;
        if stale.is_empty() {
            return Ok(0);
        }
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        {
            let mut update = tx.prepare(
                "UPDATE workloads SET signature = ?2, signature_json = ?3, op_class = ?4, recognized_by = ?5,
                 signature_version = ?6 WHERE id = ?1",
            )?;
            for (id, raw) in &stale {
                let key = ttdb_format::ansor::WorkloadKey::parse(raw)
                    .map_err(|e| StoreError::Other(e.to_string()))?;
                let (sig, by) = ttdb_algo::recognize::signature_for(&key);
                update.execute(rusqlite::params![
                    id,
                    sig.sha256_hex(),
                    sig.canonical_json(),
                    sig.op_class,
                    by,
                    current
                ])?;
            }
        }
        let ids: Vec<i64> = stale.iter().map(|(id, _)| *id).collect();
        structural::check_guesses(&tx, &ids)?;
        tx.commit()?;
        Ok(stale.len())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Moves the write-ahead log into the database file (benchmarks measure file sizes).
    pub fn checkpoint(&self) -> Result<()> {
        self.conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")?;
        Ok(())
    }

    /// SQLite's own consistency check: "ok", or what is wrong.
    pub fn integrity_check(&self) -> Result<String> {
        Ok(self
            .conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))?)
    }

    /// The connection, for integration tests that check the database's own invariants
    /// (query plans, raw rows). Production code goes through this module's functions: all
    /// SQL lives in `store/` (the layering test checks that nothing else in `src/` calls
    /// this).
    #[doc(hidden)]
    pub fn connection_for_tests(&self) -> &Connection {
        &self.conn
    }

    pub fn schema_version(&self) -> Result<u32> {
        Ok(self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))?)
    }
}

/// Whether identifying the file failed because SQLite could not set up a read-only WAL
/// reader (no shared-memory file, and none can be created).
fn is_read_only_wal_error(r: &Result<FileKind>) -> bool {
    matches!(
        r,
        Err(StoreError::Sqlite(rusqlite::Error::SqliteFailure(f, _)))
            if matches!(f.code, rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::CannotOpen)
    )
}

/// `file:PATH?immutable=1`, with the path percent-encoded where a URI needs it.
fn immutable_uri(path: &Path) -> String {
    let mut uri = String::from("file:");
    for b in path.to_string_lossy().bytes() {
        match b {
            b'?' | b'#' | b'%' | b' ' | 0x80.. => uri.push_str(&format!("%{b:02X}")),
            _ => uri.push(b as char),
        }
    }
    uri.push_str("?immutable=1");
    uri
}

fn foreign(path: &Path, what: String) -> StoreError {
    StoreError::Foreign {
        path: path.to_path_buf(),
        what,
    }
}

/// What an existing file is, read without writing.
enum FileKind {
    /// Marked as ttdb's, or an earlier ttdb's (its tables, user_version set, no marker).
    Ttdb,
    /// No tables and no version: a new, empty file.
    Empty,
    Foreign(String),
}

/// The tables every ttdb schema has had since version 1.
const TTDB_TABLES: [&str; 4] = ["sources", "targets", "workloads", "records"];

fn identify(conn: &Connection) -> Result<FileKind> {
    let app: i32 = conn.pragma_query_value(None, "application_id", |r| r.get(0))?;
    let version: u32 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    if app == APPLICATION_ID {
        return Ok(FileKind::Ttdb);
    }
    if app == 0 && version == 0 && tables.is_empty() {
        return Ok(FileKind::Empty);
    }
    let ours = TTDB_TABLES.iter().all(|t| tables.iter().any(|n| n == t));
    if app == 0 && version >= 1 && ours {
        return Ok(FileKind::Ttdb);
    }
    let shown: Vec<&str> = tables.iter().take(5).map(String::as_str).collect();
    Ok(FileKind::Foreign(format!(
        "a SQLite database with application_id {app}, user_version {version} and {} table(s){}{}",
        tables.len(),
        if shown.is_empty() { "" } else { ": " },
        shown.join(", ")
            + if tables.len() > shown.len() {
                ", ..."
            } else {
                ""
            }
    )))
}

/// Whether opening would write: pending migrations or signatures to recompute.
fn needs_upgrade(conn: &Connection) -> Result<bool> {
    let version: u32 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::TooNew {
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    if version < SCHEMA_VERSION {
        return Ok(true);
    }
    Ok(conn
        .prepare("SELECT 1 FROM workloads WHERE signature_version < ?1 LIMIT 1")?
        .exists([ttdb_format::signature::SIGNATURE_VERSION])?)
}

/// SQL functions the migrations use: `ttdb_costs_valid(raw)`, whether a record line's
/// costs may rank (the rule is [`ttdb_format::ansor::MeasureResult::invalid_reason`]; a line
/// that does not parse is not valid).
fn register_functions(conn: &Connection) -> Result<()> {
    use rusqlite::functions::FunctionFlags;
    conn.create_scalar_function(
        "ttdb_costs_valid",
        1,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| {
            let raw: String = ctx.get(0)?;
            Ok(
                ttdb_format::ansor::Record::parse(raw.trim_end())
                    .is_ok_and(|r| r.result.is_valid()),
            )
        },
    )?;
    Ok(())
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

    #[test]
    fn migrates_to_current_version() {
        let s = Store::open_in_memory().unwrap();
        assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
    }

    #[test]
    fn refuses_a_newer_schema() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.db");
        Store::open(&p)
            .unwrap()
            .conn
            .pragma_update(None, "user_version", 99)
            .unwrap();
        assert!(matches!(
            Store::open(&p),
            Err(StoreError::TooNew { found: 99, .. })
        ));
    }

    #[test]
    fn outdated_signatures_are_recomputed_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("old.db");
        let s = Store::open(&p).unwrap();
        s.conn
            .execute_batch(
                "INSERT INTO workloads (key, key_head, key_form, signature, signature_json, op_class, recognized_by, signature_version)
                 VALUES ('[\"218090bc617f9a36fbabdf253ec28064\", [14, 3072], [768, 3072], [14, 768]]', '218090bc617f9a36fbabdf253ec28064',
                         'nested', 'x', '{}', 'dense', 'structural', 1)",
            )
            .unwrap();
        drop(s);
        let s = Store::open(&p).unwrap();
        let (class, by, v): (String, String, u32) = s
            .conn
            .query_row(
                "SELECT op_class, recognized_by, signature_version FROM workloads",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(
            (class.as_str(), by.as_str(), v),
            ("dense", "md5", ttdb_format::signature::SIGNATURE_VERSION)
        );
    }

    #[test]
    fn formats_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_606_960_986), "2020-12-03T02:03:06Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }
}
