//! ttdb on a PostgreSQL database through the CLI (scripts/test starts the cluster): a
//! password never shows, a bundle round trip PostgreSQL → SQLite → PostgreSQL keeps the best
//! records, and concurrent imports lose and duplicate nothing.
mod common;
use common::{corpus_dir, ttdb_on};
use std::path::{Path, PathBuf};
use ttdb::store::testing::{db_arg, fresh_postgres};
use ttdb::store::Location;

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

