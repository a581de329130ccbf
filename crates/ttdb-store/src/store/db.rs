//! One SQL interface over the two backends, SQLite (embedded) and PostgreSQL (shared): the
//! store's modules write each statement once, with `?N` parameters, in the SQL both engines
//! accept (docs/design/postgres.md lists the rules), and this module binds, runs and reads
//! it on either connection.
use super::{Result, StoreError};
use std::cell::RefCell;
use std::collections::HashMap;

/// A statement parameter, borrowed from the caller (a record line is bound, not copied).
#[derive(Clone, Copy, Debug)]
pub enum Param<'a> {
    Null,
    Int(i64),
    Real(f64),
    Text(&'a str),
    Blob(&'a [u8]),
}

/// What can be bound to a parameter.
pub trait ToParam {
    fn to_param(&self) -> Param<'_>;
}

macro_rules! int_param {
    ($($t:ty),*) => {$(
        impl ToParam for $t {
            fn to_param(&self) -> Param<'_> {
                Param::Int(*self as i64)
            }
        }
    )*};
}
int_param!(i64, i32, u32, u8, usize, bool);

impl ToParam for f64 {
    fn to_param(&self) -> Param<'_> {
        Param::Real(*self)
    }
}
impl ToParam for str {
    fn to_param(&self) -> Param<'_> {
        Param::Text(self)
    }
}
impl ToParam for String {
    fn to_param(&self) -> Param<'_> {
        Param::Text(self)
    }
}
impl ToParam for [u8] {
    fn to_param(&self) -> Param<'_> {
        Param::Blob(self)
    }
}
impl ToParam for Vec<u8> {
    fn to_param(&self) -> Param<'_> {
        Param::Blob(self)
    }
}
impl<const N: usize> ToParam for [u8; N] {
    fn to_param(&self) -> Param<'_> {
        Param::Blob(self)
    }
}
impl<T: ToParam> ToParam for Option<T> {
    fn to_param(&self) -> Param<'_> {
        self.as_ref().map_or(Param::Null, ToParam::to_param)
    }
}
impl<T: ToParam + ?Sized> ToParam for &T {
    fn to_param(&self) -> Param<'_> {
        (**self).to_param()
    }
}

/// `params![a, b]`: a statement's parameters, in `?1, ?2` order.
macro_rules! params {
    ($($p:expr),* $(,)?) => {
        &[$(&$p as &dyn $crate::store::db::ToParam),*] as &[&dyn $crate::store::db::ToParam]
    };
}
pub(crate) use params;

/// A column value read back.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

/// A result row.
pub struct Row(Vec<Value>);

impl Row {
    /// Column `i` as `T`; a NULL or a value of another type is an error (read an `Option`
    /// where NULL is allowed).
    pub fn get<T: FromValue>(&self, i: usize) -> Result<T> {
        let v = self.0.get(i).unwrap_or(&Value::Null);
        T::from_value(v).ok_or_else(|| StoreError::Other(format!("column {i}: unexpected {v:?}")))
    }
}

/// What a column value can be read as.
pub trait FromValue: Sized {
    fn from_value(v: &Value) -> Option<Self>;
}
impl FromValue for i64 {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }
}
impl FromValue for u32 {
    fn from_value(v: &Value) -> Option<Self> {
        i64::from_value(v).and_then(|i| u32::try_from(i).ok())
    }
}
impl FromValue for bool {
    fn from_value(v: &Value) -> Option<Self> {
        i64::from_value(v).map(|i| i != 0)
    }
}
impl FromValue for f64 {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Real(f) => Some(*f),
            // SQLite stores a whole REAL as an integer in some expressions (MIN of 0.0).
            Value::Int(i) => Some(*i as f64),
            _ => None,
        }
    }
}
impl FromValue for String {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Text(s) => Some(s.clone()),
            _ => None,
        }
    }
}
impl FromValue for Vec<u8> {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Blob(b) => Some(b.clone()),
            Value::Text(s) => Some(s.clone().into_bytes()),
            _ => None,
        }
    }
}
impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Null => Some(None),
            v => T::from_value(v).map(Some),
        }
    }
}

/// Which engine a connection talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

/// A PostgreSQL client and its prepared statements (by the statement's `?N` text), and
/// where it connected, to connect again when the server went away.
pub struct Pg {
    pub(super) client: postgres::Client,
    statements: HashMap<String, postgres::Statement>,
    url: super::postgres::PgUrl,
    /// The channels this session listens on, listened to again after a reconnect.
    listening: Vec<String>,
}

impl Pg {
    pub(super) fn new(client: postgres::Client, url: super::postgres::PgUrl) -> Pg {
        Pg {
            client,
            statements: HashMap::new(),
            url,
            listening: Vec::new(),
        }
    }
}

/// How long a PostgreSQL session whose server went away (a restart, a failover) tries to
/// connect again before the error is reported.
pub const RECONNECT_FOR: std::time::Duration = std::time::Duration::from_secs(60);

/// An open connection. PostgreSQL's client needs `&mut` for every call; the store is used
/// from one thread, so a `RefCell` gives both backends the same `&self` interface.
pub enum Db {
    Sqlite(rusqlite::Connection),
    // Boxed: a client is ten times the size of a SQLite connection handle.
    Postgres(Box<RefCell<Pg>>),
}

/// How often a transaction that PostgreSQL aborted to break a deadlock between writers is
/// run again before the error is reported.
const RETRIES: usize = 8;

impl Db {
    pub fn dialect(&self) -> Dialect {
        match self {
            Db::Sqlite(_) => Dialect::Sqlite,
            Db::Postgres(_) => Dialect::Postgres,
        }
    }

    /// Runs a statement; returns the number of rows it changed.
    pub fn execute(&self, sql: &str, params: &[&dyn ToParam]) -> Result<usize> {
        match self {
            Db::Sqlite(c) => {
                let mut st = c.prepare_cached(sql)?;
                Ok(st.execute(rusqlite::params_from_iter(
                    params.iter().map(|p| p.to_param()),
                ))?)
            }
            Db::Postgres(pg) => {
                let pg = &mut *pg.borrow_mut();
                let st = pg.statement(sql)?;
                let bound: Vec<Param> = params.iter().map(|p| p.to_param()).collect();
                let refs: Vec<&(dyn postgres::types::ToSql + Sync)> =
                    bound.iter().map(|p| p as _).collect();
                Ok(pg.client.execute(&st, &refs)? as usize)
            }
        }
    }

    /// Runs a query and maps each row with `f`, in the query's order.
    pub fn query_map<T>(
        &self,
        sql: &str,
        params: &[&dyn ToParam],
        mut f: impl FnMut(&Row) -> Result<T>,
    ) -> Result<Vec<T>> {
        let mut out = Vec::new();
        self.query_each(sql, params, |r| {
            out.push(f(r)?);
            Ok(())
        })?;
        Ok(out)
    }

    /// Calls `f` on each row. `f` must not run statements on this connection.
    pub fn query_each(
        &self,
        sql: &str,
        params: &[&dyn ToParam],
        mut f: impl FnMut(&Row) -> Result<()>,
    ) -> Result<()> {
        match self {
            Db::Sqlite(c) => {
                let mut st = c.prepare_cached(sql)?;
                let n = st.column_count();
                let mut rows = st.query(rusqlite::params_from_iter(
                    params.iter().map(|p| p.to_param()),
                ))?;
                while let Some(r) = rows.next()? {
                    let values = (0..n)
                        .map(|i| Ok(sqlite_value(r.get_ref(i)?)))
                        .collect::<rusqlite::Result<_>>()?;
                    f(&Row(values))?;
                }
                Ok(())
            }
            Db::Postgres(pg) => {
                let rows = {
                    let pg = &mut *pg.borrow_mut();
                    let st = pg.statement(sql)?;
                    let bound: Vec<Param> = params.iter().map(|p| p.to_param()).collect();
                    let refs: Vec<&(dyn postgres::types::ToSql + Sync)> =
                        bound.iter().map(|p| p as _).collect();
                    pg.client.query(&st, &refs)?
                };
                for r in rows {
                    let values = (0..r.len())
                        .map(|i| r.try_get::<_, Value>(i))
                        .collect::<std::result::Result<_, _>>()?;
                    f(&Row(values))?;
                }
                Ok(())
            }
        }
    }

    /// The first row mapped by `f`, if there is one.
    pub fn query_opt<T>(
        &self,
        sql: &str,
        params: &[&dyn ToParam],
        f: impl FnOnce(&Row) -> Result<T>,
    ) -> Result<Option<T>> {
        let mut first = None;
        self.query_each(sql, params, |r| {
            if first.is_none() {
                first = Some(r.0.clone());
            }
            Ok(())
        })?;
        first.map(|values| f(&Row(values))).transpose()
    }

    /// The first row mapped by `f`; no row is an error.
    pub fn query_one<T>(
        &self,
        sql: &str,
        params: &[&dyn ToParam],
        f: impl FnOnce(&Row) -> Result<T>,
    ) -> Result<T> {
        self.query_opt(sql, params, f)?
            .ok_or_else(|| StoreError::Other(format!("no row from: {sql}")))
    }

    /// The id of a row that `insert` (an `INSERT ... ON CONFLICT DO NOTHING RETURNING id`)
    /// creates, or that `select` finds when the row exists, as another writer may have just
    /// committed it; and whether it was created.
    pub fn insert_or_select(
        &self,
        insert: &str,
        insert_params: &[&dyn ToParam],
        select: &str,
        select_params: &[&dyn ToParam],
    ) -> Result<(i64, bool)> {
        if let Some(id) = self.query_opt(insert, insert_params, |r| r.get(0))? {
            return Ok((id, true));
        }
        Ok((self.query_one(select, select_params, |r| r.get(0))?, false))
    }

    /// Runs several statements without parameters (migrations).
    pub fn execute_batch(&self, sql: &str) -> Result<()> {
        match self {
            Db::Sqlite(c) => Ok(c.execute_batch(sql)?),
            Db::Postgres(pg) => Ok(pg.borrow_mut().client.batch_execute(sql)?),
        }
    }

    /// Runs `f` in one write transaction, committed when `f` succeeds and rolled back when it
    /// fails. SQLite takes the write lock at the start (`BEGIN IMMEDIATE`), so writers queue
    /// and never deadlock; PostgreSQL's writers lock rows as they go, and when two lock the
    /// same rows in opposite orders (two logs sharing records) it aborts one, which is then
    /// run again from the start: `f` must be safe to repeat.
    pub fn transaction<T>(&self, mut f: impl FnMut(&Db) -> Result<T>) -> Result<T> {
        let begin = match self.dialect() {
            Dialect::Sqlite => "BEGIN IMMEDIATE",
            Dialect::Postgres => "BEGIN",
        };
        let mut attempt = 0;
        loop {
            // BEGIN too may find the connection lost (the first statement after a restart).
            let outcome = self
                .execute_batch(begin)
                .and_then(|()| f(self))
                .and_then(|out| self.execute_batch("COMMIT").map(|()| out));
            match outcome {
                Ok(out) => return Ok(out),
                Err(e) if is_connection_lost(&e) && attempt < RETRIES => {
                    // The server went away (restarted): nothing of this transaction was
                    // committed, unless the COMMIT itself was lost on its way back; `f` is
                    // safe to repeat, so connect again and run it from the start.
                    attempt += 1;
                    self.reconnect(&e)?;
                }
                Err(e) => {
                    // A failed COMMIT has already ended the transaction; then this errs too.
                    let _ = self.execute_batch("ROLLBACK");
                    attempt += 1;
                    if !is_retryable(&e) || attempt > RETRIES {
                        return Err(e);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10 << attempt.min(6)));
                }
            }
        }
    }
}

impl Db {
    /// Connects a PostgreSQL session again after `lost` (its server went away), trying for
    /// [`RECONNECT_FOR`]; listens again on its channels. `lost` is returned when no
    /// connection comes back. (A SQLite connection is never lost.)
    pub fn reconnect(&self, lost: &StoreError) -> Result<()> {
        let Db::Postgres(pg) = self else {
            return Err(StoreError::Other(lost.to_string()));
        };
        let url = pg.borrow().url.clone();
        let t0 = std::time::Instant::now();
        let mut wait = std::time::Duration::from_millis(100);
        loop {
            match super::postgres::connect_client(&url) {
                Ok(client) => {
                    let mut pg = pg.borrow_mut();
                    pg.client = client;
                    pg.statements.clear();
                    for channel in pg.listening.clone() {
                        pg.client.batch_execute(&format!("LISTEN {channel}"))?;
                    }
                    return Ok(());
                }
                Err(_) if t0.elapsed() < RECONNECT_FOR => {
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(std::time::Duration::from_secs(2));
                }
                Err(e) => {
                    return Err(StoreError::Other(format!(
                        "the database connection was lost ({lost}) and did not come back within {} s: {e}",
                        RECONNECT_FOR.as_secs()
                    )))
                }
            }
        }
    }

    /// Runs `f` (outside a transaction), connecting again and repeating it once when the
    /// server went away: for reads and single statements that are safe to repeat.
    pub fn retrying<T>(&self, mut f: impl FnMut(&Db) -> Result<T>) -> Result<T> {
        match f(self) {
            Err(e) if is_connection_lost(&e) => {
                self.reconnect(&e)?;
                f(self)
            }
            other => other,
        }
    }

    /// Seconds since the epoch on the database's clock: PostgreSQL's (the machines that share
    /// a database may disagree on the time; leases need one clock), this machine's for SQLite.
    pub fn now_epoch(&self) -> Result<f64> {
        match self {
            Db::Sqlite(_) => Ok(std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64())),
            Db::Postgres(_) => self.query_one(
                "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)",
                params![],
                |r| r.get(0),
            ),
        }
    }

    /// Listens for `channel`'s notifications (PostgreSQL's LISTEN; nothing on SQLite, whose
    /// readers poll). `channel` is one of ttdb's own names, never user text.
    pub fn listen(&self, channel: &'static str) -> Result<()> {
        if let Db::Postgres(pg) = self {
            pg.borrow_mut()
                .client
                .batch_execute(&format!("LISTEN {channel}"))?;
            pg.borrow_mut().listening.push(channel.to_string());
        }
        Ok(())
    }

    /// Waits up to `timeout` for a notification on a channel this session listens on; true
    /// when one came. SQLite has none: it sleeps `timeout` (the caller polls).
    pub fn wait_notification(&self, timeout: std::time::Duration) -> Result<bool> {
        match self {
            Db::Sqlite(_) => {
                std::thread::sleep(timeout);
                Ok(false)
            }
            Db::Postgres(pg) => {
                use postgres::fallible_iterator::FallibleIterator;
                let mut pg = pg.borrow_mut();
                let mut n = pg.client.notifications();
                let first = n.timeout_iter(timeout).next()?.is_some();
                // Drain what else arrived: one wake-up serves them all.
                while let Ok(Some(_)) = n.iter().next() {}
                Ok(first)
            }
        }
    }

    /// Sends a notification on `channel` with `payload`, delivered when the surrounding
    /// transaction commits (at once outside one). Nothing on SQLite.
    pub fn notify(&self, channel: &str, payload: &str) -> Result<()> {
        if self.dialect() == Dialect::Postgres {
            self.query_one(
                "SELECT CAST(pg_notify(?1, ?2) AS TEXT)",
                params![channel, payload],
                |_| Ok(()),
            )?;
        }
        Ok(())
    }
}

/// Whether the PostgreSQL server went away (closed the connection, or is shutting down or
/// restarting): connecting again may go on where this left off.
pub fn is_connection_lost(e: &StoreError) -> bool {
    use postgres::error::SqlState;
    let StoreError::Postgres(p) = e else {
        return false;
    };
    if p.is_closed() {
        return true;
    }
    match p.code() {
        Some(c) => {
            *c == SqlState::ADMIN_SHUTDOWN
                || *c == SqlState::CRASH_SHUTDOWN
                || *c == SqlState::CANNOT_CONNECT_NOW
        }
        // No server error: the socket itself failed.
        None => std::error::Error::source(p).is_some_and(|s| s.is::<std::io::Error>()),
    }
}

/// Whether PostgreSQL aborted the transaction only to let another writer go on (deadlock,
/// serialization failure): running it again is correct.
fn is_retryable(e: &StoreError) -> bool {
    use postgres::error::SqlState;
    matches!(e, StoreError::Postgres(p) if matches!(p.code(),
        Some(c) if *c == SqlState::T_R_DEADLOCK_DETECTED || *c == SqlState::T_R_SERIALIZATION_FAILURE))
}

fn sqlite_value(v: rusqlite::types::ValueRef) -> Value {
    use rusqlite::types::ValueRef;
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::Int(i),
        ValueRef::Real(f) => Value::Real(f),
        ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Value::Blob(b.to_vec()),
    }
}

impl rusqlite::ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match *self {
            Param::Null => ValueRef::Null,
            Param::Int(i) => ValueRef::Integer(i),
            Param::Real(f) => ValueRef::Real(f),
            Param::Text(s) => ValueRef::Text(s.as_bytes()),
            Param::Blob(b) => ValueRef::Blob(b),
        }))
    }
}

impl Pg {
    /// The prepared statement of `sql`, with its `?N` parameters written as `$N`.
    fn statement(&mut self, sql: &str) -> Result<postgres::Statement> {
        if let Some(st) = self.statements.get(sql) {
            return Ok(st.clone());
        }
        let st = self.client.prepare(&dollar_parameters(sql))?;
        self.statements.insert(sql.to_string(), st.clone());
        Ok(st)
    }
}

/// `?N` → `$N` outside quoted text (PostgreSQL's parameter syntax; SQLite takes both, but
/// `?N` is what the store's statements have always used).
fn dollar_parameters(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quote: Option<char> = None;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '?') if chars.peek().is_some_and(char::is_ascii_digit) => {
                out.push('$');
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
    out
}

mod pg_types {
    //! Parameters take the type PostgreSQL inferred for them (an integer binds to an
    //! `int4`, `int8` or `boolean` parameter alike), and any column reads back as a
    //! [`Value`].
    use super::{Param, Value};
    use bytes::BytesMut;
    use postgres::types::{accepts, to_sql_checked, FromSql, IsNull, ToSql, Type};
    use std::error::Error;

    type BoxError = Box<dyn Error + Sync + Send>;

    impl ToSql for Param<'_> {
        fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
            match (*self, ty) {
                (Param::Null, _) => Ok(IsNull::Yes),
                (Param::Int(i), &Type::INT8) => i.to_sql(ty, out),
                (Param::Int(i), &Type::INT4) => i32::try_from(i)?.to_sql(ty, out),
                (Param::Int(i), &Type::INT2) => i16::try_from(i)?.to_sql(ty, out),
                (Param::Int(i), &Type::BOOL) => (i != 0).to_sql(ty, out),
                (Param::Int(i), &Type::FLOAT8) => (i as f64).to_sql(ty, out),
                (Param::Real(f), &Type::FLOAT8) => f.to_sql(ty, out),
                (Param::Text(s), _) if <&str as ToSql>::accepts(ty) => s.to_sql(ty, out),
                (Param::Blob(b), &Type::BYTEA) => b.to_sql(ty, out),
                (p, ty) => Err(format!("cannot bind {p:?} to a parameter of type {ty}").into()),
            }
        }

        accepts!(INT2, INT4, INT8, BOOL, FLOAT8, TEXT, VARCHAR, BPCHAR, NAME, UNKNOWN, BYTEA);
        to_sql_checked!();
    }

    impl<'a> FromSql<'a> for Value {
        fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Value, BoxError> {
            Ok(match *ty {
                Type::INT8 => Value::Int(i64::from_sql(ty, raw)?),
                Type::INT4 => Value::Int(i32::from_sql(ty, raw)?.into()),
                Type::INT2 => Value::Int(i16::from_sql(ty, raw)?.into()),
                Type::BOOL => Value::Int(bool::from_sql(ty, raw)?.into()),
                Type::FLOAT8 => Value::Real(f64::from_sql(ty, raw)?),
                Type::FLOAT4 => Value::Real(f32::from_sql(ty, raw)?.into()),
                Type::BYTEA => Value::Blob(<Vec<u8>>::from_sql(ty, raw)?),
                _ => Value::Text(<String>::from_sql(ty, raw)?),
            })
        }

        fn from_sql_null(_: &Type) -> Result<Value, BoxError> {
            Ok(Value::Null)
        }

        fn accepts(ty: &Type) -> bool {
            matches!(
                *ty,
                Type::INT8
                    | Type::INT4
                    | Type::INT2
                    | Type::BOOL
                    | Type::FLOAT8
                    | Type::FLOAT4
                    | Type::BYTEA
            ) || <String as FromSql>::accepts(ty)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::dollar_parameters;

    #[test]
    fn parameters_become_dollars_outside_quotes() {
        assert_eq!(
            dollar_parameters("SELECT ?1, '?2', \"?3\", ?12 || '+%' WHERE x = ?"),
            "SELECT $1, '?2', \"?3\", $12 || '+%' WHERE x = ?"
        );
    }
}
