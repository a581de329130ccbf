//! Bundles through the CLI: tampering is refused with the database byte-for-byte
//! unchanged, signatures and trust, idempotent imports, concurrent imports with a reader.
//! The tests of what a database holds run on SQLite and on PostgreSQL; the tampering
//! tests check a SQLite file's bytes.
use crate::common;
use common::{corpus_dir, new_db, ttdb_on};
use std::path::{Path, PathBuf};
use ttdb::store::testing::Backend;
use ttdb_store::on_both_backends;

fn log(name: &str) -> PathBuf {
    corpus_dir().join(format!("ansor/tvm_ansor_bench_nchwc/{name}.best.json"))
}

/// A database in `dir` named `name` with these corpus logs imported.
fn db_with(backend: Backend, dir: &Path, name: &str, logs: &[&str]) -> PathBuf {
    let db = new_db(backend, dir, name);
    let mut args = vec!["import".to_string()];
    args.extend(logs.iter().map(|l| log(l).display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, _, err) = ttdb_on(&db, &args);
    assert_eq!(code, 0, "import failed: {err}");
    db
}

/// A bundle of every record of resnet_18's log (exported from its own database).
fn resnet18_bundle(backend: Backend, dir: &Path) -> PathBuf {
    let src = db_with(backend, dir, "src.db", &["resnet_18"]);
    let out = dir.join("r18.ttdb");
    let (code, _, err) = ttdb_on(
        &src,
        &[
            "bundle",
            "export",
            "-o",
            out.to_str().unwrap(),
            "--all-records",
            "--description",
            "resnet-18 from the corpus",
        ],
    );
    assert_eq!(code, 0, "export failed: {err}");
    out
}

/// The bytes of a database file (and of its WAL, if any): what must not change.
fn db_bytes(db: &Path) -> Vec<u8> {
    let mut b = std::fs::read(db).unwrap();
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    if let Ok(w) = std::fs::read(PathBuf::from(wal)) {
        b.extend(w);
    }
    b
}

/// Importing `bundle` (after `tamper` rewrote its text) into a database holding vgg_16's log
/// is refused, naming `expect` in the message, and leaves the database byte-for-byte as it
/// was.
fn assert_refused(tamper: impl Fn(&mut Vec<String>), expect: &str) {
    let dir = tempfile::tempdir().unwrap();
    let bundle = resnet18_bundle(Backend::Sqlite, dir.path());
    let mut lines: Vec<String> = std::fs::read_to_string(&bundle)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    tamper(&mut lines);
    let bad = dir.path().join("bad.ttdb");
    std::fs::write(&bad, lines.join("\n") + "\n").unwrap();
    let db = db_with(Backend::Sqlite, dir.path(), "dst.db", &["vgg_16"]);
    let before = db_bytes(&db);
    for args in [
        vec!["bundle", "import", bad.to_str().unwrap()],
        vec!["bundle", "inspect", bad.to_str().unwrap()],
    ] {
        let (code, out, err) = ttdb_on(&db, &args);
        assert_ne!(code, 0, "{args:?} accepted a tampered bundle: {out}");
        assert!(
            err.contains("bad.ttdb") && err.contains(expect),
            "{args:?}: the error should name the file and say `{expect}`: {err}"
        );
    }
    assert!(
        db_bytes(&db) == before,
        "a refused import changed the database file"
    );
}

/// Line index of the first record (after the format, manifest and first meta lines).
const FIRST_RECORD: usize = 3;

fn flip(line: &mut String, at: usize) {
    let mut b = std::mem::take(line).into_bytes();
    let i = at.min(b.len() - 1);
    // A different printable byte: the line stays text, so only the hashes can tell.
    b[i] = if b[i] == b'7' { b'8' } else { b'7' };
    *line = String::from_utf8(b).unwrap();
}

#[test]
fn a_byte_flipped_in_a_record_is_refused() {
    assert_refused(
        |l| {
            let n = l[FIRST_RECORD].len();
            flip(&mut l[FIRST_RECORD], n / 2)
        },
        "line 4 (record 1): the record's sha256",
    );
}

#[test]
fn a_byte_flipped_in_the_last_record_is_refused() {
    assert_refused(
        |l| {
            let i = l.len() - 2;
            let n = l[i].len();
            flip(&mut l[i], n - 3)
        },
        "the record's sha256",
    );
}

#[test]
fn a_byte_flipped_in_the_manifest_is_refused() {
    assert_refused(
        |l| {
            let at = l[1].find("resnet-18").unwrap();
            // "resnet-18" -> "resnet-17": still valid JSON, still a plausible manifest.
            flip(&mut l[1], at + 8)
        },
        "the bundle's sha256 does not match",
    );
}

#[test]
fn a_byte_flipped_in_a_record_meta_line_is_refused() {
    assert_refused(
        |l| {
            let at = l[2].find("\"source\":\"").unwrap() + 10;
            flip(&mut l[2], at)
        },
        "the bundle's sha256 does not match",
    );
}

#[test]
fn a_byte_flipped_in_the_trailer_is_refused() {
    assert_refused(
        |l| {
            let i = l.len() - 1;
            let n = l[i].len();
            flip(&mut l[i], n - 1)
        },
        "the bundle's sha256 does not match",
    );
}

#[test]
fn a_dropped_record_is_refused() {
    // The meta line and its record together: the structure stays valid.
    assert_refused(
        |l| {
            l.drain(4..6);
        },
        "the bundle's sha256 does not match",
    );
}

#[test]
fn a_dropped_line_is_refused() {
    assert_refused(
        |l| {
            l.remove(FIRST_RECORD);
        },
        "record",
    );
}

#[test]
fn a_dropped_trailer_is_refused_as_truncated() {
    assert_refused(
        |l| {
            l.pop();
        },
        "truncated",
    );
}

#[test]
fn an_added_record_is_refused() {
    // A new valid record (a copy with another timestamp) with a correct meta line of its
    // own, inserted in canonical order: only the trailer and manifest can tell.
    assert_refused(
        |l| {
            let rec = &l[FIRST_RECORD];
            let at = rec.rfind(", 1").expect("the record's timestamp") + 3;
            let mut line = rec.clone();
            flip(&mut line, at);
            let sha = ttdb::bundle::format::sha256_hex(line.as_bytes());
            let old = &l[2][l[2].find("\"sha256\":\"").unwrap() + 10..][..64];
            let meta = l[2].replace(old, &sha);
            // Before the first record whose sha256 is larger.
            let mut i = 2;
            while i + 1 < l.len() && l[i].starts_with("# record ") && l[i] < meta {
                i += 2;
            }
            l.insert(i, line);
            l.insert(i, meta);
        },
        "the bundle's sha256 does not match",
    );
}

#[test]
fn a_duplicated_record_is_refused() {
    assert_refused(
        |l| {
            let pair = [l[2].clone(), l[3].clone()];
            l.splice(4..4, pair);
        },
        "line 6 (record 2): the record appears twice",
    );
}

#[test]
fn an_added_comment_line_is_refused() {
    assert_refused(
        |l| l.insert(FIRST_RECORD + 1, "# hello".to_string()),
        "line 5",
    );
}

#[test]
fn a_line_added_after_the_end_is_refused() {
    assert_refused(
        |l| l.push(l[FIRST_RECORD].clone()),
        "content after the bundle's end",
    );
}

on_both_backends! {
    fn import_is_idempotent_and_keeps_provenance(backend) {
        let dir = tempfile::tempdir().unwrap();
        let bundle = resnet18_bundle(backend, dir.path());
        let db = new_db(backend, dir.path(), "dst.db");
        let b = bundle.to_str().unwrap();
        let (code, first, err) = ttdb_on(&db, &["bundle", "import", b, "--json"]);
        assert_eq!(code, 0, "{err}");
        let first: serde_json::Value = serde_json::from_str(&first).unwrap();
        let n = first[0]["records"].as_u64().unwrap();
        assert!(n > 10);
        assert_eq!(first[0]["inserted"].as_u64(), Some(n));
        let (code, again, _) = ttdb_on(&db, &["bundle", "import", b, "--json"]);
        assert_eq!(code, 0);
        let again: serde_json::Value = serde_json::from_str(&again).unwrap();
        assert_eq!(again[0]["inserted"].as_u64(), Some(0));
        assert_eq!(again[0]["duplicates"].as_u64(), Some(n));
        assert_eq!(again[0]["new_origins"].as_u64(), Some(0));
        // Re-exported, every record still says where it was first read.
        let back = dir.path().join("back.ttdb");
        let (code, _, err) = ttdb_on(
            &db,
            &[
                "bundle",
                "export",
                "-o",
                back.to_str().unwrap(),
                "--all-records",
            ],
        );
        assert_eq!(code, 0, "{err}");
        let text = std::fs::read_to_string(&back).unwrap();
        let metas: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("# record "))
            .collect();
        assert_eq!(metas.len() as u64, n);
        assert!(metas.iter().all(|m| m.contains(
            "{\"kind\":\"imported\",\"source\":\"tvm_ansor_bench_nchwc/resnet_18.best.json\",\"line\":"
        )));
    }
}

on_both_backends! {
    fn signatures_and_trust(backend) {
        let dir = tempfile::tempdir().unwrap();
        let bundle = resnet18_bundle(backend, dir.path());
        let db = new_db(backend, dir.path(), "dst.db");
        let p = |x: &Path| x.to_str().unwrap().to_string();
        let key = dir.path().join("team.key");
        let (code, public, err) = ttdb_on(&db, &["key", "generate", "-o", &p(&key)]);
        assert_eq!(code, 0, "{err}");
        let public = public.trim().to_string();
        assert_eq!(public.len(), 64);
        let signed = dir.path().join("signed.ttdb");
        let (code, _, err) = ttdb_on(
            &db,
            &[
                "bundle",
                "sign",
                &p(&bundle),
                "--key",
                &p(&key),
                "-o",
                &p(&signed),
            ],
        );
        assert_eq!(code, 0, "{err}");

        // Unsigned and untrusted bundles are refused under --require-signed.
        let (code, _, err) = ttdb_on(&db, &["bundle", "import", &p(&bundle), "--require-signed"]);
        assert_ne!(code, 0);
        assert!(err.contains("unsigned"), "{err}");
        let (code, _, err) = ttdb_on(&db, &["bundle", "import", &p(&signed), "--require-signed"]);
        assert_ne!(code, 0);
        assert!(
            err.contains("not trusted here") && err.contains(&public),
            "{err}"
        );
        let (_, stats, _) = ttdb_on(&db, &["stats", "--json"]);
        assert!(
            stats.contains("\"records\": 0") || stats.contains("\"records\":0"),
            "{stats}"
        );

        // Trusted: it imports.
        let pubfile = format!("{}.pub", p(&key));
        let (code, _, err) = ttdb_on(&db, &["trust", "add", &pubfile, "--name", "team"]);
        assert_eq!(code, 0, "{err}");
        let (_, list, _) = ttdb_on(&db, &["trust", "list"]);
        assert!(list.contains(&public) && list.contains("team"), "{list}");
        let (code, out, err) = ttdb_on(&db, &["bundle", "import", &p(&signed), "--require-signed"]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("signature: valid (`team`)"), "{out}");

        // A signature that does not match (one digit changed) is refused, required or not.
        let text = std::fs::read_to_string(&signed).unwrap();
        let last = text.trim_end().rsplit('\n').next().unwrap();
        let mut bad_sig = last.to_string();
        let i = bad_sig.len() - 5;
        let c = if &bad_sig[i..i + 1] == "0" { "1" } else { "0" };
        bad_sig.replace_range(i..i + 1, c);
        let forged = dir.path().join("forged.ttdb");
        std::fs::write(&forged, text.replace(last, &bad_sig)).unwrap();
        let (code, _, err) = ttdb_on(&db, &["bundle", "import", &p(&forged)]);
        assert_ne!(code, 0);
        assert!(err.contains("does not match the content"), "{err}");

        // Removing the key makes the signed bundle untrusted again.
        let (code, _, _) = ttdb_on(&db, &["trust", "remove", "team"]);
        assert_eq!(code, 0);
        let (code, _, _) = ttdb_on(&db, &["bundle", "import", &p(&signed), "--require-signed"]);
        assert_ne!(code, 0);
    }
}

on_both_backends! {
    fn two_imports_and_a_match_run_at_once(backend) {
        let dir = tempfile::tempdir().unwrap();
        let p = |x: &Path| x.to_str().unwrap().to_string();
        let mut bundles = Vec::new();
        for (name, logs) in [
            ("a", ["resnet_50", "vgg_16"]),
            ("b", ["resnet_18", "alexnet"]),
        ] {
            let src = db_with(backend, dir.path(), &format!("{name}.db"), &logs);
            let out = dir.path().join(format!("{name}.ttdb"));
            let (code, _, err) = ttdb_on(&src, &["bundle", "export", "-o", &p(&out), "--all-records"]);
            assert_eq!(code, 0, "{err}");
            bundles.push(out);
        }
        let model = corpus_dir().join("onnx/torchvision_graph_only/resnet18.onnx");
        for round in 0..3 {
            let db = new_db(backend, dir.path(), &format!("shared{round}.db"));
            // Created first (by importing an empty log: reading commands create nothing), so
            // the three processes race on imports, not on migrations.
            let empty = dir.path().join("empty.json");
            std::fs::write(&empty, "").unwrap();
            let (code, _, _) = ttdb_on(&db, &["import", &p(&empty)]);
            assert_eq!(code, 0);
            let spawn = |args: Vec<String>| {
                std::process::Command::new(env!("CARGO_BIN_EXE_ttdb"))
                    .arg("--db")
                    .arg(&db)
                    .args(args)
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            };
            let children = vec![
                spawn(vec!["bundle".into(), "import".into(), p(&bundles[0])]),
                spawn(vec!["match".into(), p(&model)]),
                spawn(vec!["bundle".into(), "import".into(), p(&bundles[1])]),
            ];
            for c in children {
                let out = c.wait_with_output().unwrap();
                let err = String::from_utf8_lossy(&out.stderr);
                assert!(out.status.success(), "round {round}: {err}");
                assert!(!err.contains("locked"), "round {round}: {err}");
            }
            // Nothing lost: the union of both bundles is there.
            let count = |path: &Path| {
                std::fs::read_to_string(path)
                    .unwrap()
                    .lines()
                    .filter(|l| l.starts_with("# record "))
                    .count()
            };
            let at = ttdb::store::Location::parse(&db);
            let store = ttdb::store::Store::open_at(&at, ttdb::store::OpenMode::ReadOnly).unwrap();
            let records: i64 = store
                .sql_for_tests()
                .query_one("SELECT COUNT(*) FROM records", &[], |r| r.get(0))
                .unwrap();
            assert!(records as usize <= count(&bundles[0]) + count(&bundles[1]));
            let both = dir.path().join("both.ttdb");
            let (code, _, err) = ttdb_on(
                &db,
                &[
                    "bundle",
                    "merge",
                    &p(&bundles[0]),
                    &p(&bundles[1]),
                    "-o",
                    &p(&both),
                ],
            );
            assert_eq!(code, 0, "{err}");
            assert_eq!(
                records as usize,
                count(&both),
                "round {round}: records lost"
            );
        }
    }
}

#[test]
fn import_verify_remeasures_and_flags_records_much_slower_here() {
    let dir = tempfile::tempdir().unwrap();
    let p = |x: &Path| x.to_str().unwrap().to_string();
    // resnet_18's pooling records: one as logged, one claiming to be 1000x faster than it is.
    let text = std::fs::read_to_string(log("resnet_18")).unwrap();
    let mut lines = Vec::new();
    for l in text.lines() {
        let mut r = ttdb::ansor::Record::parse(l).unwrap();
        // The max-pool: its key has two shapes, the first 112x112.
        let k = &r.task.workload_key;
        if !k.contains("[1, 2, 112, 112, 32]")
            || k.matches('[').count() != 3
            || !r.result.is_valid()
        {
            continue;
        }
        lines.push(r.to_line());
        for c in &mut r.result.costs {
            *c *= 1e-3;
        }
        r.result.timestamp += 1.0;
        lines.push(r.to_line());
    }
    assert_eq!(lines.len(), 2, "expected resnet_18's one max-pool record");
    let fake = dir.path().join("fast_claims.json");
    std::fs::write(&fake, lines.join("\n") + "\n").unwrap();
    let src = dir.path().join("src.db");
    assert_eq!(ttdb_on(&src, &["import", &p(&fake)]).0, 0);
    let bundle = dir.path().join("pool.ttdb");
    let (code, _, err) = ttdb_on(
        &src,
        &["bundle", "export", "-o", &p(&bundle), "--all-records"],
    );
    assert_eq!(code, 0, "{err}");
    let db = dir.path().join("dst.db");
    let (code, out, err) = ttdb_on(
        &db,
        &["bundle", "import", &p(&bundle), "--verify", "--json"],
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let flags = v[0]["verify"].as_array().expect("verify results");
    // The bundle's best record of the workload is the one claiming 1000x: re-measured here,
    // it verifies but is flagged as far slower than logged.
    assert_eq!(flags.len(), 1, "{out}");
    let f = &flags[0];
    assert_eq!(f["verified"], true, "{out}");
    assert!(f["ratio"].as_f64().unwrap() > 100.0, "{out}");
    assert_eq!(f["flagged"], true, "{out}");
    let (_, human, _) = ttdb_on(&db, &["bundle", "import", &p(&bundle), "--verify"]);
    assert!(human.contains("1 flagged"), "{human}");
}

on_both_backends! {
    fn export_of_a_model_takes_only_its_kernels(backend) {
        let dir = tempfile::tempdir().unwrap();
        let db = db_with(backend, dir.path(), "both.db", &["resnet_18", "vgg_16"]);
        let out = dir.path().join("r18.ttdb");
        let model = corpus_dir().join("onnx/torchvision_graph_only/resnet18.onnx");
        let (code, _, err) = ttdb_on(
            &db,
            &[
                "bundle",
                "export",
                "-o",
                out.to_str().unwrap(),
                "--model",
                model.to_str().unwrap(),
            ],
        );
        assert_eq!(code, 0, "{err}");
        let exported = common::workload_keys(&std::fs::read_to_string(&out).unwrap());
        let resnet18 = common::workload_keys(&std::fs::read_to_string(log("resnet_18")).unwrap());
        assert!(
            exported.len() >= 15,
            "resnet-18's kernels have its log's keys: {}",
            exported.len()
        );
        assert!(
            exported.is_subset(&resnet18),
            "only resnet-18's keys: {:?}",
            exported.difference(&resnet18).collect::<Vec<_>>()
        );
    }
}

/// `bundle sign` and `bundle merge` report what they wrote as JSON, like `export`.
#[test]
fn sign_and_merge_report_json() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = resnet18_bundle(Backend::Sqlite, dir.path());
    let db = dir.path().join("k.db");
    let key = dir.path().join("team.key");
    let (code, public, err) = ttdb_on(&db, &["key", "generate", "-o", key.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let signed = dir.path().join("signed.ttdb");
    let json = |args: &[&str]| -> serde_json::Value {
        let (code, out, err) = ttdb_on(&db, args);
        assert_eq!(code, 0, "{args:?}: {err}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    };
    let s = json(&[
        "bundle",
        "sign",
        bundle.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
        "-o",
        signed.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(s["signed_by"].as_str(), Some(public.trim()), "{s}");
    assert_eq!(s["bytes"], std::fs::metadata(&signed).unwrap().len(), "{s}");
    let merged = dir.path().join("merged.ttdb");
    let m = json(&[
        "bundle",
        "merge",
        bundle.to_str().unwrap(),
        signed.to_str().unwrap(),
        "-o",
        merged.to_str().unwrap(),
        "--json",
    ]);
    // The same records: merging a bundle with its signed copy changes nothing but the
    // signature, which a merge drops.
    assert_eq!(m["records"], s["records"], "{m}");
    assert_eq!(m["bundle_sha256"], s["bundle_sha256"], "{m}");
    assert_eq!(m["signed_by"], serde_json::Value::Null, "{m}");
}
