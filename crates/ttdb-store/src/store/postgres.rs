//! The PostgreSQL backend: a database a team shares, named by a `postgres://` URL. The URL
//! may hold a password, so it is shown only redacted ([`PgUrl`]'s `Display` and `Debug`),
//! and error messages are scrubbed of it. The schema version lives in `ttdb_schema`, and
//! migrations run under an advisory lock so that processes opening a new database at once
//! apply each one exactly once.
use super::db::{params, Db, Pg};
use super::{OpenMode, Result, StoreError};
use std::cell::RefCell;
use std::fmt;

#[path = "postgres_tls.rs"]
mod tls;

/// A `postgres://` or `postgresql://` connection URL, password included.
#[derive(Clone, PartialEq, Eq)]
pub struct PgUrl(String);

impl PgUrl {
    /// `Some` when `s` is a PostgreSQL URL (anything else names a SQLite file).
    pub fn parse(s: &str) -> Option<PgUrl> {
        (s.starts_with("postgres://") || s.starts_with("postgresql://"))
            .then(|| PgUrl(s.to_string()))
    }

    /// The URL with its password (in the user part, or a `password=` option) as `***`.
    pub fn redacted(&self) -> String {
        let (scheme, rest) = self.0.split_once("://").unwrap_or(("", &self.0));
        let (authority, query) = match rest.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (rest, None),
        };
        let mut out = format!("{scheme}://");
        match authority.rsplit_once('@') {
            Some((user_info, host)) if user_info.contains(':') => {
                let user = user_info.split_once(':').map_or("", |(u, _)| u);
                out.push_str(&format!("{user}:***@{host}"));
            }
            _ => out.push_str(authority),
        }
        if let Some(query) = query {
            let options: Vec<&str> = query
                .split('&')
                .map(|o| {
                    if o.starts_with("password=") {
                        "password=***"
                    } else {
                        o
                    }
                })
                .collect();
            out.push('?');
            out.push_str(&options.join("&"));
        }
        out
    }

    /// The password as written in the URL (and percent-decoded, when it differs): what must
    /// never be shown.
    fn secrets(&self) -> Vec<String> {
        let rest = self.0.split_once("://").map_or("", |(_, r)| r);
        let (authority, query) = rest.split_once('?').unwrap_or((rest, ""));
        let mut written = Vec::new();
        if let Some((user_info, _)) = authority.rsplit_once('@') {
            if let Some((_, pw)) = user_info.split_once(':') {
                written.push(pw.to_string());
            }
        }
        for option in query.split('&') {
            if let Some(pw) = option.strip_prefix("password=") {
                written.push(pw.to_string());
            }
        }
        let mut all: Vec<String> = written
            .iter()
            .flat_map(|w| [w.clone(), percent_decoded(w)])
            .filter(|s| !s.is_empty())
            .collect();
        // Longest first, so a password that contains another is replaced whole.
        all.sort_by_key(|s| std::cmp::Reverse(s.len()));
        all.dedup();
        all
    }

    /// The URL as given, password included: only for handing on to a process ttdb starts.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The same server and options, database `name`.
    pub fn with_database(&self, name: &str) -> PgUrl {
        let (scheme, rest) = self.0.split_once("://").unwrap_or(("", &self.0));
        let (before_query, query) = match rest.split_once('?') {
            Some((b, q)) => (b, format!("?{q}")),
            None => (rest, String::new()),
        };
        let authority = before_query
            .split_once('/')
            .map_or(before_query, |(a, _)| a);
        PgUrl(format!("{scheme}://{authority}/{name}{query}"))
    }

    /// `message` with the password replaced by `***`.
    pub fn scrub(&self, message: &str) -> String {
        let mut out = message.to_string();
        for secret in self.secrets() {
            out = out.replace(&secret, "***");
        }
        out
    }
}

impl fmt::Display for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PgUrl({})", self.redacted())
    }
}

fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Connects to the database `url` names, with TLS as its `sslmode` asks ([`tls`]).
pub(super) fn connect(url: &PgUrl) -> Result<Db> {
    let client = connect_client(url)?;
    Ok(Db::Postgres(Box::new(RefCell::new(Pg::new(
        client,
        url.clone(),
    )))))
}

/// A new client session on `url` (see [`connect`]).
pub(super) fn connect_client(url: &PgUrl) -> Result<postgres::Client> {
    let scrubbed = |e: String| StoreError::Other(format!("{url}: {}", url.scrub(&e)));
    let (driver_url, tls) = tls::split(&url.0).map_err(&scrubbed)?;
    let mut config: postgres::Config = driver_url.parse().map_err(|e| scrubbed(describe(&e)))?;
    config.ssl_mode(tls.driver_mode());
    let connected = match tls.connector().map_err(&scrubbed)? {
        None => config.connect(postgres::NoTls),
        Some(connector) => config.connect(connector),
    };
    connected.map_err(|e| {
        let message = describe(&e);
        // A handshake's failure says what it checked (OpenSSL's text alone does not).
        if message.starts_with("error performing TLS handshake") {
            scrubbed(format!("{message} ({})", tls.describe()))
        } else {
            scrubbed(message)
        }
    })
}

/// What went wrong, in full: the server's message for a database error, else the driver's
/// error and its causes (its own text is only "error connecting to server").
pub(super) fn describe(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{}: {}", db.severity(), db.message());
    }
    let mut out = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        // native-tls's error repeats OpenSSL's, its cause, word for word.
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(&format!(": {text}"));
        }
        cause = c.source();
    }
    out
}

/// Checks that the database is ttdb's (or empty, when `mode` may create), before anything
/// is written: the schema of another application is left untouched.
pub(super) fn check_identity(db: &Db, url: &PgUrl, mode: OpenMode) -> Result<()> {
    // One statement, so one snapshot: another process may be creating ttdb's tables right
    // now, and they appear together with ttdb_schema, in one committed migration.
    let tables: Vec<String> = db.query_map(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1",
        params![],
        |r| r.get(0),
    )?;
    if tables.iter().any(|t| t == "ttdb_schema") {
        return Ok(());
    }
    if !tables.is_empty() {
        return Err(StoreError::Foreign {
            location: url.to_string(),
            what: format!(
                "a PostgreSQL database whose schema holds {} table(s) of another application: {}",
                tables.len(),
                tables
                    .iter()
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    if mode != OpenMode::Create {
        return Err(StoreError::Missing {
            location: url.to_string(),
        });
    }
    Ok(())
}

fn has_version_table(db: &Db) -> Result<bool> {
    db.query_one(
        "SELECT to_regclass('ttdb_schema') IS NOT NULL",
        params![],
        |r| r.get(0),
    )
}

/// The schema version; 0 for a database ttdb has not written yet.
pub(super) fn schema_version(db: &Db) -> Result<u32> {
    if !has_version_table(db)? {
        return Ok(0);
    }
    db.query_one("SELECT version FROM ttdb_schema", params![], |r| r.get(0))
}

/// Takes the migration lock for the rest of the transaction (writers that open a new
/// database at once queue here), creating the version table on first use.
pub(super) fn lock_for_migration(db: &Db) -> Result<()> {
    // 0x74746462: "ttdb", the same marker SQLite files carry as their application_id.
    db.execute_batch(
        "SELECT pg_advisory_xact_lock(1953784930);
         CREATE TABLE IF NOT EXISTS ttdb_schema (version BIGINT NOT NULL);
         INSERT INTO ttdb_schema (version) SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM ttdb_schema);",
    )
}

pub(super) fn set_schema_version(db: &Db, version: u32) -> Result<()> {
    db.execute("UPDATE ttdb_schema SET version = ?1", params![version])?;
    Ok(())
}

/// Makes every later transaction of this session read-only (the reading commands).
pub(super) fn read_only(db: &Db) -> Result<()> {
    db.execute_batch("SET default_transaction_read_only = on")
}

#[cfg(test)]
mod tests {
    use super::PgUrl;

    #[test]
    fn passwords_are_redacted_and_scrubbed() {
        let u =
            PgUrl::parse("postgres://ann:s%40cret@db.example/ttdb?password=other&sslmode=disable")
                .unwrap();
        assert_eq!(
            u.to_string(),
            "postgres://ann:***@db.example/ttdb?password=***&sslmode=disable"
        );
        assert!(!format!("{u:?}").contains("cret"));
        assert_eq!(
            u.scrub("failed for s@cret and other"),
            "failed for *** and ***"
        );
        assert!(PgUrl::parse("/tmp/ttdb.db").is_none());
        let plain = PgUrl::parse("postgresql://ann@db/ttdb").unwrap();
        assert_eq!(plain.to_string(), "postgresql://ann@db/ttdb");
    }
}
