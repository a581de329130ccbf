//! The SQLite backend: opening a database file (refusing anything that is not ttdb's),
//! its pragmas, its schema version (`PRAGMA user_version`) and the SQL function its
//! migrations use.
//!
//! Concurrency: WAL mode with a busy timeout, so readers work while one writer imports.
use super::db::Db;
use super::{OpenMode, Result, StoreError, APPLICATION_ID, SCHEMA_VERSION};
use rusqlite::Connection;
use std::path::{Path, PathBuf};

/// Opens the database file at `path` as `mode` says. Before anything is written, the file
/// must be a ttdb database: one carrying [`APPLICATION_ID`], one of an earlier ttdb (its
/// tables, no marker yet), or an empty file (`Create` only). Anything else is refused
/// untouched, byte for byte. Returns the connection and whether it may be written.
pub(super) fn open_file(path: &Path, mode: OpenMode) -> Result<(Db, bool)> {
    use rusqlite::OpenFlags;
    let exists = path.exists();
    if !exists && mode != OpenMode::Create {
        return Err(StoreError::Missing {
            location: path.display().to_string(),
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
        if is_hot_journal_error(&kind) {
            // A write was interrupted (a kill, a power cut) before it committed: its
            // rollback journal is still beside the file, and a read-only connection may
            // not roll it back. Any writing SQLite connection would; this one does only
            // that (it reads, which restores the last committed state) and writes nothing
            // of ours, so a foreign file is still refused below, restored but unchanged.
            drop(probe);
            let restorer = Connection::open_with_flags(path, writable).map_err(|e| {
                StoreError::Other(format!(
                    "{}: a write to it was interrupted and its journal ({}-journal) must be rolled back, which needs write access ({e})",
                    path.display(),
                    path.display()
                ))
            })?;
            identify(&restorer)?;
            drop(restorer);
            probe = Connection::open_with_flags(path, read_only)?;
            kind = identify(&probe);
        }
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
                    location: path.display().to_string(),
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
                return Ok((configure(conn)?, true));
            }
            probe.busy_timeout(std::time::Duration::from_secs(30))?;
            probe.pragma_update(None, "query_only", true)?;
            probe.pragma_update(None, "mmap_size", 1i64 << 32)?;
            return Ok((Db::Sqlite(probe), false));
        }
    }
    let conn = Connection::open_with_flags(path, writable | OpenFlags::SQLITE_OPEN_CREATE)?;
    Ok((configure(conn)?, true))
}

/// A writing connection's settings (the caller migrates it).
pub(super) fn configure(conn: Connection) -> Result<Db> {
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
    Ok(Db::Sqlite(conn))
}

pub(super) fn schema_version(conn: &Connection) -> Result<u32> {
    Ok(conn.pragma_query_value(None, "user_version", |r| r.get(0))?)
}

pub(super) fn set_schema_version(conn: &Connection, version: u32) -> Result<()> {
    Ok(conn.pragma_update(None, "user_version", version)?)
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

/// Whether identifying the file failed because a hot rollback journal lies beside it
/// (`SQLITE_READONLY_ROLLBACK`: a read-only connection cannot roll it back).
fn is_hot_journal_error(r: &Result<FileKind>) -> bool {
    const SQLITE_READONLY_ROLLBACK: std::ffi::c_int = 8 | (3 << 8);
    matches!(
        r,
        Err(StoreError::Sqlite(rusqlite::Error::SqliteFailure(f, _)))
            if f.extended_code == SQLITE_READONLY_ROLLBACK
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
        location: path.display().to_string(),
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
    let version = schema_version(conn)?;
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
    let version = schema_version(conn)?;
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
