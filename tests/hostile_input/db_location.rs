//! `--db` itself: a mistyped location, a foreign database, a read-only one, and a database
//! of an earlier ttdb, as SQLite files and, where PostgreSQL has the same hazard, as
//! PostgreSQL databases.
use super::*;
use ttdb::store::testing::{db_arg, fresh_postgres, raw_session};
use ttdb::store::{Location, OpenMode, Store};

#[test]
fn a_database_of_an_earlier_ttdb_stops_ranking_its_bad_costs_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("old.db");
    let line = first_record();
    // A mean below the real record's, from a negative cost.
    let bad = with_costs(&line, "0.0001, -0.00005, 0.0001");
    std::fs::write(dir.path().join("l.json"), format!("{line}\n{bad}\n")).unwrap();
    import_ok(&db, &[&dir.path().join("l.json")]);
    {
        // As an earlier ttdb stored it: schema 5, the bad record ranked by its mean, and
        // none of what later migrations added (the work queue of schema 7, with its column
        // of `measurements`: both tables are empty here, so they are made again as schema
        // 2 had them; the index of schema 8; the pinned layout plans of schema 9; the
        // record pins of schema 10).
        let store = ttdb::store::Store::open(&db).unwrap();
        let c = store.connection_for_tests();
        c.execute_batch(
            "DROP TABLE measurements; DROP TABLE jobs; DROP TABLE job_batches; DROP TABLE tunes;
             DROP TABLE workers; DROP TABLE hosts; DROP INDEX records_unrankable;
             DROP TABLE layout_plans; DROP TABLE record_pins;",
        )
        .unwrap();
        c.execute_batch(include_str!("../../schema/002_measurements.sql"))
            .unwrap();
        c.execute_batch(
            "UPDATE records SET mean_cost = 1e-9 WHERE mean_cost IS NULL;
             PRAGMA user_version = 5; PRAGMA application_id = 0;",
        )
        .unwrap();
    }
    let best = best_lines(&db);
    assert_eq!(best, vec![line]);
}

/// The commands that only read the database: each must refuse a `--db` that names none,
/// creating nothing (`bundle export` would write `out_file`).
fn reading_commands<'a>(model: &'a Path, out_file: &'a Path) -> Vec<Vec<&'a str>> {
    vec![
        vec!["stats"],
        vec!["workloads"],
        vec!["match", model.to_str().unwrap()],
        vec!["export", "--best"],
        vec!["bundle", "export", "-o", out_file.to_str().unwrap()],
        vec!["trust", "list"],
        vec!["verify", "--all", "--no-timing"],
    ]
}

#[test]
fn a_mistyped_db_is_an_error_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("no/such/folder/tdb.db");
    let model = resnet18_model();
    let out_file = dir.path().join("out.ttdb");
    for args in reading_commands(&model, &out_file) {
        let (code, out, err) = ttdb_on(&typo, &args);
        assert_ne!(code, 0, "{args:?} succeeded on a missing database: {out}");
        assert!(
            err.contains("no ttdb database at") && err.contains("no/such/folder/tdb.db"),
            "{args:?}: {err}"
        );
        assert!(!dir.path().join("no").exists(), "{args:?} created folders");
        assert!(!out_file.exists());
    }
    // An import of a path that does not exist creates no database either.
    let (code, _, _) = ttdb_on(&typo, &["import", "/nonexistent/logs"]);
    assert_ne!(code, 0);
    assert!(!dir.path().join("no").exists());
}

#[test]
fn a_foreign_sqlite_file_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    {
        let c = rusqlite::Connection::open(&db).unwrap();
        c.execute_batch("CREATE TABLE notes (t TEXT); INSERT INTO notes VALUES ('mine');")
            .unwrap();
    }
    let before = std::fs::read(&db).unwrap();
    for args in [
        vec!["stats"],
        vec!["import", log("resnet_18").to_str().unwrap()],
        vec!["trust", "list"],
    ] {
        let (code, _, err) = ttdb_on(&db, &args);
        assert_ne!(code, 0, "{args:?} accepted a foreign database");
        assert!(err.contains("is not a ttdb database"), "{args:?}: {err}");
    }
    assert_eq!(std::fs::read(&db).unwrap(), before, "the file changed");
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        vec!["app.db".to_string()],
        "files appeared beside it"
    );
    // Not SQLite at all.
    let text = dir.path().join("notes.db");
    std::fs::write(&text, "hello\n").unwrap();
    let (code, _, err) = ttdb_on(&text, &["stats"]);
    assert_ne!(code, 0);
    assert!(err.contains("not SQLite"), "{err}");
    assert_eq!(std::fs::read_to_string(&text).unwrap(), "hello\n");
}

/// Copies `db` and its rollback journal while `writer` holds an uncommitted transaction
/// that spilled pages into the file: the copy is what a kill mid-write leaves behind.
fn interrupted_copy(db: &Path, to: &Path, write: &str) {
    let c = rusqlite::Connection::open(db).unwrap();
    c.execute_batch("PRAGMA journal_mode = DELETE; PRAGMA cache_size = 2; BEGIN;")
        .unwrap();
    c.execute_batch(write).unwrap();
    let journal = |p: &Path| PathBuf::from(format!("{}-journal", p.display()));
    assert!(journal(db).exists(), "no rollback journal to copy");
    std::fs::copy(db, to).unwrap();
    std::fs::copy(journal(db), journal(to)).unwrap();
    c.execute_batch("ROLLBACK").unwrap();
}

/// A kill in the middle of a database's first write (before it is in WAL mode) leaves a
/// hot rollback journal. The next command rolls it back and goes on; a foreign file with
/// one is restored by the rollback and still refused.
#[test]
fn an_interrupted_write_is_rolled_back_on_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let ours = dir.path().join("ours.db");
    drop(Store::open_with(&ours, OpenMode::Create).unwrap());
    let spill = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000) \
                 INSERT INTO notes SELECT printf('%0200d', i) FROM n;";
    {
        let c = rusqlite::Connection::open(&ours).unwrap();
        c.execute_batch("CREATE TABLE notes (t TEXT);").unwrap();
    }
    let copy = dir.path().join("killed.db");
    interrupted_copy(&ours, &copy, spill);
    for args in [
        vec!["stats"],
        vec!["import", log("resnet_18").to_str().unwrap()],
    ] {
        let (code, _, err) = ttdb_on(&copy, &args);
        assert_eq!(code, 0, "{args:?}: {err}");
    }
    let c = rusqlite::Connection::open(&copy).unwrap();
    let notes: i64 = c
        .query_row("SELECT COUNT(*) FROM notes", [], |r| r.get(0))
        .unwrap();
    assert_eq!(notes, 0, "the interrupted write survived");
    let records: i64 = c
        .query_row("SELECT COUNT(*) FROM records", [], |r| r.get(0))
        .unwrap();
    assert!(records > 0);

    let foreign = dir.path().join("app.db");
    {
        let c = rusqlite::Connection::open(&foreign).unwrap();
        c.execute_batch("CREATE TABLE notes (t TEXT); INSERT INTO notes VALUES ('mine');")
            .unwrap();
    }
    let foreign_copy = dir.path().join("app-killed.db");
    interrupted_copy(&foreign, &foreign_copy, spill);
    let (code, _, err) = ttdb_on(&foreign_copy, &["stats"]);
    assert_ne!(code, 0);
    assert!(err.contains("is not a ttdb database"), "{err}");
    let c = rusqlite::Connection::open(&foreign_copy).unwrap();
    let kept: Vec<String> = c
        .prepare("SELECT t FROM notes")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(kept, vec!["mine".to_string()]);
}

fn is_root() -> bool {
    extern "C" {
        fn geteuid() -> u32;
    }
    // SAFETY: geteuid has no preconditions.
    unsafe { geteuid() == 0 }
}

#[test]
fn a_read_only_database_can_be_queried() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("ro");
    std::fs::create_dir(&folder).unwrap();
    let db = folder.join("t.db");
    import_ok(&db, &[&log("resnet_18")]);
    assert!(
        !folder.join("t.db-wal").exists(),
        "the import left a WAL behind"
    );
    let perms = |p: &Path, mode| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
    perms(&db, 0o444).unwrap();
    perms(&folder, 0o555).unwrap();
    perms(dir.path(), 0o755).unwrap();
    // Root writes anywhere: run the query as `nobody` then.
    let mut cmd = if is_root() {
        let mut c = std::process::Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_ttdb"));
        c
    } else {
        std::process::Command::new(env!("CARGO_BIN_EXE_ttdb"))
    };
    let out = cmd.arg("--db").arg(&db).args(["stats"]).output().unwrap();
    perms(&folder, 0o755).unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("records: 17"), "{stdout}");
}

/// A mistyped database name, a server that is not there, a socket folder that does not
/// exist: each command fails, saying so and naming the URL, and creates nothing (no
/// database, no folder, no output file).
#[test]
fn a_mistyped_postgres_url_is_an_error_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let typo = db_arg(&fresh_postgres()).replacen("/ttdb_test_", "/ttdb_tset_", 1);
    let no_folder = dir.path().join("no/such/folder");
    let cases = [
        (typo.clone(), "does not exist"),
        (
            "postgres://ttdb@127.0.0.1:1/ttdb".to_string(),
            "Connection refused",
        ),
        (
            format!("postgres://ttdb@/ttdb?host={}", no_folder.display()),
            "No such file or directory",
        ),
    ];
    let model = resnet18_model();
    let out_file = dir.path().join("out.ttdb");
    let a_log = log("resnet_18");
    for (url, why) in &cases {
        let mut commands = reading_commands(&model, &out_file);
        commands.push(vec!["import", a_log.to_str().unwrap()]);
        for args in commands {
            let (code, out, err) = ttdb_on(Path::new(url), &args);
            assert_ne!(code, 0, "{args:?} succeeded on {url}: {out}");
            assert!(
                err.contains(url.as_str()) && err.contains(why),
                "{args:?} on {url}: {err}"
            );
            assert!(!out_file.exists(), "{args:?} wrote its output");
        }
    }
    assert!(!dir.path().join("no").exists(), "a folder was created");
    let e = Store::open_at(&Location::parse(Path::new(&typo)), OpenMode::ReadOnly)
        .err()
        .expect("the mistyped database was created");
    assert!(e.to_string().contains("does not exist"), "{e}");
}

/// The tables of the current schema, with the rows of `notes` when there is one.
fn tables_and_notes(session: &ttdb::store::db::Db) -> (Vec<String>, Vec<String>) {
    let tables = session
        .query_map(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1",
            &[],
            |r| r.get(0),
        )
        .unwrap();
    let notes = session
        .query_map("SELECT t FROM notes ORDER BY t", &[], |r| r.get(0))
        .unwrap();
    (tables, notes)
}

#[test]
fn a_foreign_postgres_database_is_refused_untouched() {
    let location = fresh_postgres();
    let db = PathBuf::from(db_arg(&location));
    let session = raw_session(&location);
    session
        .execute_batch("CREATE TABLE notes (t TEXT); INSERT INTO notes VALUES ('mine');")
        .unwrap();
    let before = tables_and_notes(&session);
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("b.ttdb");
    let src = new_db(Backend::Sqlite, dir.path(), "src.db");
    import_ok(&src, &[&log("resnet_18")]);
    let (code, _, err) = ttdb_on(&src, &["bundle", "export", "-o", bundle.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    for args in [
        vec!["stats"],
        vec!["import", log("resnet_18").to_str().unwrap()],
        vec!["bundle", "import", bundle.to_str().unwrap()],
        vec!["trust", "list"],
    ] {
        let (code, _, err) = ttdb_on(&db, &args);
        assert_ne!(code, 0, "{args:?} accepted a foreign database");
        assert!(
            err.contains("is not a ttdb database") && err.contains("notes"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(tables_and_notes(&session), before, "the database changed");
}

/// A team's analysts may get a role that only reads: the reading commands work under it,
/// and a write is refused by the server with nothing changed.
#[test]
fn a_role_that_may_only_read_can_query_a_postgres_database() {
    let location = fresh_postgres();
    let db = db_arg(&location);
    import_ok(Path::new(&db), &[&log("resnet_18")]);
    let role = format!("ttdb_reader_{}", std::process::id());
    let admin = Store::open_at(&location, OpenMode::Write).unwrap();
    let name: String = admin
        .sql_for_tests()
        .query_one("SELECT current_database()::text", &[], |r| r.get(0))
        .unwrap();
    admin
        .sql_for_tests()
        .execute_batch(&format!(
            "CREATE ROLE {role} LOGIN; GRANT CONNECT ON DATABASE {name} TO {role};
             GRANT USAGE ON SCHEMA public TO {role}; GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role};"
        ))
        .unwrap();
    let reader = PathBuf::from(db.replacen("postgres://ttdb@", &format!("postgres://{role}@"), 1));
    let model = resnet18_model();
    for args in [
        vec!["stats"],
        vec!["workloads"],
        vec!["export", "--best"],
        vec!["match", model.to_str().unwrap()],
    ] {
        let (code, out, err) = ttdb_on(&reader, &args);
        assert_eq!(code, 0, "{args:?} as a reader: {err}");
        assert!(!out.is_empty(), "{args:?}");
    }
    let (_, stats, _) = ttdb_on(&reader, &["stats"]);
    assert!(stats.contains("records: 17"), "{stats}");
    let (code, out, err) = ttdb_on(&reader, &["import", log("vgg_16").to_str().unwrap()]);
    assert_ne!(code, 0, "a reader imported");
    // The file's error is in the report, the exit status in stderr.
    assert!(out.contains("permission denied"), "{out}{err}");
    assert_eq!(
        query_int(Path::new(&db), "SELECT COUNT(*) FROM records"),
        17
    );
    admin
        .sql_for_tests()
        .execute_batch(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
        .unwrap();
}
