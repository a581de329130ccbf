//! Test support, hidden from the docs: one test body runs on both backends. SQLite tests get
//! a database of their own in memory or in a temporary folder; PostgreSQL tests get a new
//! database on the cluster `$TTDB_TEST_POSTGRES` names (scripts/test starts a throwaway
//! one), and fail, never skip, when there is none.
use super::db::Db;
use super::postgres::{connect, PgUrl};
use super::{Location, OpenMode, Store};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The environment variable with the test cluster's URL.
pub const POSTGRES_ENV: &str = "TTDB_TEST_POSTGRES";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// A new, empty, migrated store.
    pub fn store(self) -> Store {
        match self {
            Backend::Sqlite => Store::open_in_memory().unwrap(),
            Backend::Postgres => Store::open_at(&fresh_postgres(), OpenMode::Create).unwrap(),
        }
    }

    /// Where a new database goes (not created yet for SQLite: a file `name` in `dir`).
    pub fn location(self, dir: &Path, name: &str) -> Location {
        match self {
            Backend::Sqlite => Location::File(dir.join(name)),
            Backend::Postgres => fresh_postgres(),
        }
    }
}

/// What `--db` takes for `location`, password included (for the `ttdb` a test starts).
pub fn db_arg(location: &Location) -> String {
    match location {
        Location::File(p) => p.display().to_string(),
        Location::Postgres(u) => u.expose().to_string(),
    }
}

/// A new, empty database on the test cluster.
pub fn fresh_postgres() -> Location {
    static N: AtomicUsize = AtomicUsize::new(0);
    let url = std::env::var(POSTGRES_ENV).unwrap_or_else(|_| {
        panic!(
            "${POSTGRES_ENV} is not set, and this test needs PostgreSQL: run it through scripts/test, which starts a throwaway cluster, or set ${POSTGRES_ENV} to the URL of a database whose user may create databases"
        )
    });
    let admin =
        PgUrl::parse(&url).unwrap_or_else(|| panic!("${POSTGRES_ENV} is not a postgres:// URL"));
    let name = format!(
        "ttdb_test_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    new_database(&admin, &name)
}

/// A new, empty database `name` on the cluster `admin` reaches (one left by an earlier
/// process of the same name is dropped first).
pub fn new_database(admin: &PgUrl, name: &str) -> Location {
    let db = connect(admin)
        .unwrap_or_else(|e| panic!("${POSTGRES_ENV}: cannot reach the test cluster: {e}"));
    // (Two statements: PostgreSQL runs a batch as one transaction, which these refuse.)
    db.execute_batch(&format!("DROP DATABASE IF EXISTS {name}"))
        .and_then(|()| db.execute_batch(&format!("CREATE DATABASE {name}")))
        .unwrap_or_else(|e| panic!("creating the test database {name}: {e}"));
    Location::Postgres(admin.with_database(name))
}

/// A plain session on the PostgreSQL database `location` names, without ttdb's identity
/// check or migrations: for tests that set up what ttdb must refuse or cope with (another
/// application's tables, a role that may only read).
pub fn raw_session(location: &Location) -> Db {
    let Location::Postgres(url) = location else {
        panic!("raw_session: {location} is not a PostgreSQL database");
    };
    connect(url).unwrap_or_else(|e| panic!("connecting to {url}: {e}"))
}

/// Defines `mod NAME { fn sqlite(); fn postgres() }`: the body runs once per backend, with
/// `$backend` the [`Backend`]. The enclosing module's names are in scope.
#[macro_export]
macro_rules! on_both_backends {
    ($(#[$meta:meta])* fn $name:ident($backend:ident) $body:block) => {
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            fn body($backend: $crate::store::testing::Backend) $body
            #[test]
            fn sqlite() {
                body($crate::store::testing::Backend::Sqlite)
            }
            #[test]
            fn postgres() {
                body($crate::store::testing::Backend::Postgres)
            }
        }
    };
}
