//! ttdb on a PostgreSQL database through the CLI (scripts/test starts the cluster): a
//! password never shows, a bundle round trip PostgreSQL → SQLite → PostgreSQL keeps the best
//! records, concurrent imports lose and duplicate nothing, and TLS (on a cluster of the
//! test's own) does what `sslmode` asks.
use crate::common;
use common::{corpus_dir, ttdb_on};
use std::path::{Path, PathBuf};
use ttdb::store::testing::{db_arg, fresh_postgres};
use ttdb::store::{Location, OpenMode, Store};

fn log(name: &str) -> PathBuf {
    corpus_dir().join(format!("ansor/tvm_ansor_bench_nchwc/{name}.best.json"))
}

/// ttdb with `--db` at `location`; panics with stderr unless it succeeds. Returns stdout.
fn ttdb(location: &str, args: &[&str]) -> String {
    let (code, out, err) = ttdb_on(Path::new(location), args);
    assert_eq!(code, 0, "ttdb {args:?} on {location}: {err}");
    out
}

fn sorted(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text.lines().map(str::to_string).collect();
    v.sort_unstable();
    v
}

/// The test cluster's URL with a password added (the cluster trusts local users, so any
/// password connects).
fn with_password(location: &Location, password: &str) -> String {
    db_arg(location).replacen(
        "postgres://ttdb@",
        &format!("postgres://ttdb:{password}@"),
        1,
    )
}

#[test]
fn a_password_is_never_printed() {
    const SECRET: &str = "Sw0rdf1sh-never-shown";
    let db = fresh_postgres();
    let url = with_password(&db, SECRET);
    let mut outputs = Vec::new();
    let mut run = |args: &[&str], env_db: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ttdb"));
        if let Some(v) = env_db {
            cmd.env("TTDB_DB", v);
        }
        let out = cmd.args(args).output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        outputs.push((args.join(" "), out.status.success(), text));
    };
    let a_log = log("alexnet").display().to_string();
    // Success, with --json, from the flag and from the environment.
    run(&["--db", &url, "import", "--json", &a_log], None);
    run(&["--db", &url, "stats", "--json"], None);
    run(&["stats"], Some(&url));
    run(&["--help"], Some(&url));
    // Failures: a database that does not exist, a server that is not there, TLS asked of
    // a server without it, an sslmode that does not exist, a socket that is not there.
    let missing = with_password(&fresh_postgres(), SECRET).replace("/ttdb_test_", "/no_such_");
    run(&["--db", &missing, "stats", "--json"], None);
    let nowhere = format!("postgres://ttdb:{SECRET}@127.0.0.1:1/ttdb");
    run(&["--db", &nowhere, "stats"], None);
    run(&["--db", &format!("{url}&sslmode=require"), "stats"], None);
    run(&["--db", &format!("{url}&sslmode=bogus"), "stats"], None);
    run(
        &[
            "--db",
            &format!("postgres://ttdb@/x?host=/nonexistent&password={SECRET}"),
            "stats",
        ],
        None,
    );
    for (args, _, text) in &outputs {
        assert!(
            !text.contains(SECRET),
            "ttdb {args} printed the password:\n{text}"
        );
    }
    let status: Vec<bool> = outputs.iter().map(|(_, ok, _)| *ok).collect();
    assert_eq!(
        status,
        [true, true, true, true, false, false, false, false, false],
        "{outputs:#?}"
    );
    // The failures name the database, redacted, and say what was wrong.
    assert!(outputs[4].2.contains("ttdb:***@"), "{}", outputs[4].2);
    assert!(outputs[4].2.contains("does not exist"), "{}", outputs[4].2);
    assert!(
        outputs[5].2.contains("Connection refused"),
        "{}",
        outputs[5].2
    );
    assert!(outputs[5].2.contains("127.0.0.1:1"), "{}", outputs[5].2);
    assert!(
        outputs[6].2.contains("server does not support TLS"),
        "{}",
        outputs[6].2
    );
    assert!(
        outputs[7]
            .2
            .contains("sslmode=\"bogus\" is not one of disable, prefer, require"),
        "{}",
        outputs[7].2
    );
    assert!(outputs[2].2.contains("records"), "{}", outputs[2].2);
}

#[test]
fn a_bundle_round_trip_postgres_sqlite_postgres_keeps_the_best_records() {
    let dir = tempfile::tempdir().unwrap();
    let pg = db_arg(&fresh_postgres());
    let back = db_arg(&fresh_postgres());
    let lite = dir.path().join("copy.db").display().to_string();
    let logs: Vec<String> = ["resnet_18", "alexnet", "vgg_16"]
        .iter()
        .map(|l| log(l).display().to_string())
        .collect();
    let mut import = vec!["import"];
    import.extend(logs.iter().map(String::as_str));
    ttdb(&pg, &import);
    let bundle = |db: &str, name: &str| {
        let out = dir.path().join(name).display().to_string();
        ttdb(db, &["bundle", "export", "-o", &out, "--all-records"]);
        out
    };
    let first = bundle(&pg, "from_pg.ttdb");
    ttdb(&lite, &["bundle", "import", &first]);
    let second = bundle(&lite, "from_sqlite.ttdb");
    ttdb(&back, &["bundle", "import", &second]);

    let best = |db: &str| sorted(&ttdb(db, &["export", "--best"]));
    let (a, b, c) = (best(&pg), best(&lite), best(&back));
    assert!(a.len() > 20, "{} best records", a.len());
    assert_eq!(a, b, "PostgreSQL → SQLite changed the best records");
    assert_eq!(b, c, "SQLite → PostgreSQL changed the best records");
    let all = |db: &str| sorted(&ttdb(db, &["export"]));
    assert_eq!(all(&pg), all(&back));
    // The two bundles carry the same records with the same provenance.
    let records = |path: &str| {
        let text = ttdb(&lite, &["bundle", "inspect", "--json", path]);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["manifest"]["content_sha256"].clone()
    };
    assert_eq!(records(&first), records(&second));
    // And a model matches the same way on both backends.
    let model = corpus_dir().join("onnx/torchvision_graph_only/resnet18.onnx");
    let matched = |db: &str| {
        let (code, out, err) = std::process::Command::new(env!("CARGO_BIN_EXE_ttdb"))
            .env("TTDB_PRETEND_ISA", "avx,avx2,fma")
            .args(["--db", db, "match", model.to_str().unwrap()])
            .output()
            .map(|o| {
                (
                    o.status.code(),
                    String::from_utf8_lossy(&o.stdout).into_owned(),
                    String::from_utf8_lossy(&o.stderr).into_owned(),
                )
            })
            .unwrap();
        assert_eq!(code, Some(0), "{err}");
        out
    };
    assert_eq!(matched(&pg), matched(&lite));
}

#[test]
fn concurrent_imports_of_different_logs_lose_and_duplicate_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let pg = db_arg(&fresh_postgres());
    // Logs of different networks share workloads, targets and (resnet_18 and resnet_50)
    // records, so the importers contend on every unique key.
    let names = ["resnet_18", "resnet_50", "mobilenet_v2", "googlenet"];
    // Created by the first writer: the others race it through the migrations too.
    let children: Vec<_> = names
        .iter()
        .map(|n| {
            std::process::Command::new(env!("CARGO_BIN_EXE_ttdb"))
                .args(["--db", &pg, "import", "--json"])
                .arg(log(n))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut inserted = 0;
    for (child, name) in children.into_iter().zip(names) {
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "import {name}: {err}");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        inserted += report_inserted(&report);
    }
    // The same logs one after the other into SQLite: the reference.
    let lite = dir.path().join("ref.db").display().to_string();
    let mut import = vec!["import".to_string()];
    import.extend(names.iter().map(|n| log(n).display().to_string()));
    ttdb(
        &lite,
        &import.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let records = |db: &str| {
        let v: serde_json::Value = serde_json::from_str(&ttdb(db, &["stats", "--json"])).unwrap();
        (
            v["records"].as_i64().unwrap(),
            v["sources"].as_i64().unwrap(),
            v["workload_keys"].as_i64().unwrap(),
        )
    };
    let (pg_records, sources, keys) = records(&pg);
    assert_eq!((pg_records, sources, keys), records(&lite));
    assert_eq!(
        inserted, pg_records,
        "each record counted new by exactly one importer"
    );
    let lines = sorted(&ttdb(&pg, &["export"]));
    let mut unique = lines.clone();
    unique.dedup();
    assert_eq!(lines.len(), unique.len(), "duplicated records");
    assert_eq!(lines, sorted(&ttdb(&lite, &["export"])));
}

/// The records an `import --json` report says were new.
fn report_inserted(report: &serde_json::Value) -> i64 {
    report["inserted"].as_i64().expect("an inserted count")
}

use crate::common::pg_cluster;

#[test]
fn tls_follows_sslmode_and_sslrootcert() {
    const SECRET: &str = "tls-Sw0rdf1sh";
    let cluster = pg_cluster::Cluster::start_with(pg_cluster::Options { tls: true });
    let ca = cluster.ca().display().to_string();
    let base = cluster.tcp_url("postgres");
    let url = |query: &str| format!("{base}?{query}");
    let fails = |db: &str, args: &[&str]| {
        let (code, _, err) = ttdb_on(Path::new(db), args);
        assert_ne!(code, 0, "ttdb {args:?} on {db} succeeded");
        assert!(!err.contains(SECRET), "the password was printed:\n{err}");
        err
    };

    // The cluster takes TCP sessions only over TLS (hostssl), so an import that works was
    // encrypted; the store's own session says so from the server's side too.
    let full = url(&format!("sslmode=verify-full&sslrootcert={ca}"));
    let report: serde_json::Value = serde_json::from_str(&ttdb(
        &full,
        &["import", "--json", log("alexnet").to_str().unwrap()],
    ))
    .unwrap();
    let imported = report_inserted(&report);
    assert!(imported > 0, "{report}");
    let store = Store::open_at(
        &Location::Postgres(ttdb::store::PgUrl::parse(&full).unwrap()),
        OpenMode::ReadOnly,
    )
    .unwrap();
    let ssl: bool = store
        .sql_for_tests()
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
            |r| r.get(0),
        )
        .unwrap();
    assert!(ssl, "the server sees the session unencrypted");

    // require: encrypted, with no certificate to check against.
    let records = |db: &str| {
        let stats: serde_json::Value =
            serde_json::from_str(&ttdb(db, &["stats", "--json"])).unwrap();
        stats["records"].as_i64().unwrap()
    };
    assert_eq!(records(&url("sslmode=require")), imported);

    // verify-ca checks the chain only; verify-full also the name the client asked for
    // (the certificate is for 127.0.0.1, not localhost; hostaddr keeps the address).
    let by_name = base.replace("127.0.0.1", "localhost");
    let named =
        |mode: &str| format!("{by_name}?hostaddr=127.0.0.1&sslmode={mode}&sslrootcert={ca}");
    assert_eq!(records(&named("verify-ca")), imported);
    let err = fails(&named("verify-full"), &["stats"]);
    assert!(err.contains("certificate verify failed"), "{err}");
    assert!(err.contains("hostname mismatch"), "{err}");
    assert!(
        err.contains("sslmode=verify-full checks that the server's certificate names this host"),
        "{err}"
    );

    // A CA that did not sign the server's certificate: refused before the password goes.
    let dir = tempfile::tempdir().unwrap();
    let stranger = pg_cluster::self_signed_ca(dir.path(), "stranger");
    let with_secret = |query: &str| {
        url(query).replacen("postgres://ttdb@", &format!("postgres://ttdb:{SECRET}@"), 1)
    };
    let err = fails(
        &with_secret(&format!(
            "sslmode=verify-full&sslrootcert={}",
            stranger.display()
        )),
        &["stats"],
    );
    assert!(err.contains("certificate verify failed"), "{err}");
    assert!(err.contains(&stranger.display().to_string()), "{err}");
    assert!(err.contains("ttdb:***@127.0.0.1"), "{err}");

    // A root file that is not there is named.
    let err = fails(
        &url("sslmode=verify-ca&sslrootcert=/no/such/ca.pem"),
        &["stats"],
    );
    assert!(
        err.contains("sslrootcert /no/such/ca.pem: cannot read it"),
        "{err}"
    );

    // disable: the server's pg_hba.conf refuses a session in clear, with its message.
    let err = fails(&with_secret("sslmode=disable"), &["stats"]);
    assert!(err.contains("no pg_hba.conf entry"), "{err}");
    assert!(err.contains("no encryption"), "{err}");
}
