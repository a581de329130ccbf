//! Hostile and careless input through the CLI: costs that are not times, bundles handed
//! to `import`, a mistyped `--db`, a foreign database, directories of mixed files, a
//! decompression bomb, and the smaller holes (flags, messages, help texts). Each test here
//! failed on the code before these fixes. What a database stores or refuses is checked on
//! SQLite and on PostgreSQL; `--db` itself in `db_location`.
use crate::common;
#[path = "hostile_input/db_location.rs"]
mod db_location;
use common::{corpus_dir, holds_ttdb_database, new_db, open_db, query_int, ttdb_on};
use std::path::{Path, PathBuf};
use ttdb::store::testing::Backend;
use ttdb_store::on_both_backends;

fn ttdb(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ttdb"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn log(name: &str) -> PathBuf {
    corpus_dir().join(format!("ansor/tvm_ansor_bench_nchwc/{name}.best.json"))
}

fn resnet18_model() -> PathBuf {
    corpus_dir().join("onnx/torchvision_graph_only/resnet18.onnx")
}

/// The first record line of resnet_18's log (a conv of ResNet-18's layer 4).
fn first_record() -> String {
    std::fs::read_to_string(log("resnet_18"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap()
        .to_string()
}

/// `line` with its costs list replaced by `costs` (the text between the brackets).
fn with_costs(line: &str, costs: &str) -> String {
    let start = line.find("\"r\": [[").unwrap() + "\"r\": [[".len();
    let end = start + line[start..].find(']').unwrap();
    format!("{}{costs}{}", &line[..start], &line[end..])
}

/// Costs no record may rank with, and the word `--explain` uses for each.
const BAD_COSTS: [(&str, &str); 8] = [
    ("-0.001", "is not positive"),
    ("NaN", "is NaN"),
    ("Infinity", "is infinite"),
    ("0", "is not positive"),
    ("-Infinity", "is infinite"),
    ("1e10", "above the ceiling"),
    ("0.001, -0.002, 0.003", "is not positive"),
    ("5000", "above the ceiling"),
];

/// A log of one workload: a record for each bad cost, then one valid record that is slower
/// than all of them would claim (0.5 s).
fn hostile_log(dir: &Path) -> (PathBuf, String) {
    let line = first_record();
    let mut lines: Vec<String> = BAD_COSTS
        .iter()
        .map(|(c, _)| with_costs(&line, c))
        .collect();
    let valid = with_costs(&line, "0.5");
    lines.push(valid.clone());
    let path = dir.join("hostile.json");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    (path, valid)
}

fn import_ok(db: &Path, paths: &[&Path]) -> String {
    let mut args = vec!["import"];
    args.extend(paths.iter().map(|p| p.to_str().unwrap()));
    let (code, out, err) = ttdb_on(db, &args);
    assert_eq!(code, 0, "import failed: {out}{err}");
    out
}

/// The only workload's signature in `db`.
fn only_signature(db: &Path) -> String {
    let (code, out, err) = ttdb_on(db, &["workloads", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{out}");
    rows[0]["signature"].as_str().unwrap().to_string()
}

/// `export --best` of `db`: what ranks first.
fn best_lines(db: &Path) -> Vec<String> {
    let (code, out, err) = ttdb_on(db, &["export", "--best"]);
    assert_eq!(code, 0, "{err}");
    out.lines().map(str::to_string).collect()
}

on_both_backends! {
    fn costs_that_are_not_times_never_rank_from_a_log(backend) {
        let dir = tempfile::tempdir().unwrap();
        let (path, valid) = hostile_log(dir.path());
        let db = new_db(backend, dir.path(), "t.db");
        let out = import_ok(&db, &[&path]);
        assert!(
            out.contains("failed measurements: 8 (kept, never chosen; 8 with costs that are not plausible times)"),
            "{out}"
        );
        assert_eq!(best_lines(&db), vec![valid]);
        // --explain names each dropped record with its reason.
        let sig = only_signature(&db);
        let (code, out, err) = ttdb_on(
            &db,
            &[
                "match",
                resnet18_model().to_str().unwrap(),
                // The log's record is keyed under TopHub's blocking, as TVM tuned it.
                "--layout-plan",
                "tophub",
                "--explain",
                &sig[..12],
                "--show",
                "20",
            ],
        );
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("tier: exact"), "{out}");
        for (line, (_, why)) in BAD_COSTS.iter().enumerate().take(3) {
            assert!(
                out.contains(&format!("hostile.json:{} ", line + 1))
                    && out.contains("dropped, never ranked: cost 1 "),
                "record {} not explained: {out}",
                line + 1
            );
            assert!(out.contains(why), "`{why}` missing: {out}");
        }
        assert!(
            out.contains("and 5 more records of this workload dropped for their costs"),
            "{out}"
        );
    }
}

on_both_backends! {
    fn costs_that_are_not_times_never_rank_from_a_bundle_or_a_merge(backend) {
        let dir = tempfile::tempdir().unwrap();
        let (path, valid) = hostile_log(dir.path());
        let src = new_db(backend, dir.path(), "src.db");
        import_ok(&src, &[&path]);
        let all = dir.path().join("all.ttdb");
        let (code, _, err) = ttdb_on(
            &src,
            &[
                "bundle",
                "export",
                "--all-records",
                "-o",
                all.to_str().unwrap(),
            ],
        );
        assert_eq!(code, 0, "{err}");
        // A second bundle with the valid record only, merged with the first.
        let only_valid = dir.path().join("valid.json");
        std::fs::write(&only_valid, format!("{valid}\n")).unwrap();
        let other = new_db(backend, dir.path(), "other.db");
        import_ok(&other, &[&only_valid]);
        let second = dir.path().join("second.ttdb");
        let (code, _, err) = ttdb_on(
            &other,
            &["bundle", "export", "-o", second.to_str().unwrap()],
        );
        assert_eq!(code, 0, "{err}");
        let merged = dir.path().join("merged.ttdb");
        let (code, _, err) = ttdb_on(
            &other,
            &[
                "bundle",
                "merge",
                all.to_str().unwrap(),
                second.to_str().unwrap(),
                "-o",
                merged.to_str().unwrap(),
            ],
        );
        assert_eq!(code, 0, "{err}");
        for (i, bundle) in [&all, &merged].into_iter().enumerate() {
            // What `inspect` compares is the valid record's cost, never a bad one.
            let fresh = new_db(backend, dir.path(), &format!("fresh{i}.db"));
            let (code, out, err) = ttdb_on(
                &fresh,
                &["bundle", "inspect", bundle.to_str().unwrap(), "--json"],
            );
            assert_eq!(code, 0, "{err}");
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert_eq!(v["workloads"][0]["theirs_s"].as_f64(), Some(0.5), "{out}");
            assert!(!holds_ttdb_database(&fresh), "inspect created a database");
            let (code, _, err) = ttdb_on(&fresh, &["bundle", "import", bundle.to_str().unwrap()]);
            assert_eq!(code, 0, "{err}");
            assert_eq!(
                best_lines(&fresh),
                vec![valid.clone()],
                "{}",
                bundle.display()
            );
        }
    }
}

on_both_backends! {
    fn ttdb_own_measurements_with_impossible_times_never_rank(backend) {
        use ttdb::store::measurement::{store_measurements, NewMeasurement};
        let line = first_record();
        let rec = ttdb::ansor::Record::parse(&line).unwrap();
        let host = ttdb::host::HostFingerprint {
            cpu_model: "test".into(),
            isa_flags: vec!["avx2".into()],
            llvm_cpu: "haswell".into(),
            llvm_features: String::new(),
            cores: 2,
            ttdb_version: "test".into(),
        };
        let m = |samples: Vec<f64>| NewMeasurement {
            workload_key: rec.task.workload_key.clone(),
            steps: rec.steps.clone(),
            samples,
            error_no: 0,
            error: None,
            verified: true,
            max_rel_error: Some(0.0),
            median_s: Some(1e-3),
            min_s: Some(1e-3),
            max_s: Some(1e-3),
            gflops: None,
            compile_ms: None,
            wall_s: 1.0,
            origin_record_id: None,
            provenance: "test".into(),
        };
        let mut store = backend.store();
        let ids = store_measurements(
            &mut store,
            "search",
            &host,
            &[m(vec![0.0]), m(vec![-1e-3, 2e-3]), m(vec![4e-3])],
        )
        .unwrap();
        let costs: Vec<Option<f64>> = ids
            .iter()
            .map(|id| {
                let sql = format!("SELECT mean_cost FROM records WHERE id = {id}");
                store.sql_for_tests().query_one(&sql, &[], |r| r.get(0)).unwrap()
            })
            .collect();
        assert_eq!(costs, vec![None, None, Some(4e-3)]);
    }
}

on_both_backends! {
    fn import_reads_a_bundle_as_a_bundle(backend) {
        let dir = tempfile::tempdir().unwrap();
        let src = new_db(backend, dir.path(), "src.db");
        import_ok(&src, &[&log("resnet_18")]);
        let plain = dir.path().join("team.ttdb");
        let packed = dir.path().join("team.zst");
        for (out, extra) in [(&plain, None), (&packed, Some("--compress"))] {
            let mut args = vec!["bundle", "export", "-o", out.to_str().unwrap()];
            args.extend(extra);
            let (code, _, err) = ttdb_on(&src, &args);
            assert_eq!(code, 0, "{err}");
        }
        // One altered record: `import` refuses the bundle, stores nothing of it.
        let text = std::fs::read_to_string(&plain).unwrap();
        let altered = text.replacen("\"r\": [[", "\"r\": [[1e-9, ", 1);
        let bad = dir.path().join("bad.ttdb");
        std::fs::write(&bad, altered).unwrap();
        let db = new_db(backend, dir.path(), "t.db");
        let (code, out, err) = ttdb_on(&db, &["import", bad.to_str().unwrap()]);
        assert_ne!(code, 0, "an altered bundle imported: {out}");
        assert!(out.contains("the record was altered"), "{out}{err}");
        let (_, stats, _) = ttdb_on(&db, &["stats", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&stats).unwrap();
        assert_eq!(v["records"], 0, "{stats}");
        // The compressed one goes through the bundle path: checked, provenance kept.
        let (code, out, err) = ttdb_on(&db, &["import", packed.to_str().unwrap()]);
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains("bundle ") && out.contains("signature unsigned"),
            "{out}"
        );
        assert!(!out.contains("rejected lines: 1"), "{out}");
        let kinds: Vec<String> = open_db(&db)
            .sql_for_tests()
            .query_map(
                "SELECT DISTINCT s.kind FROM records r JOIN sources s ON s.id = r.source_id",
                &[],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(kinds, vec!["bundle".to_string()]);
        // --require-signed holds on `import` too.
        let db2 = new_db(backend, dir.path(), "t2.db");
        let (code, out, _) = ttdb_on(
            &db2,
            &["import", "--require-signed", plain.to_str().unwrap()],
        );
        assert_ne!(code, 0);
        assert!(out.contains("unsigned, and --require-signed"), "{out}");
    }
}

/// The bytes a database takes: a SQLite file's after moving its WAL in, a PostgreSQL
/// database's files.
fn db_size(db: &Path) -> u64 {
    use ttdb::store::{Location, OpenMode, Store};
    let store = Store::open_at(&Location::parse(db), OpenMode::Write).unwrap();
    match store.location() {
        Location::File(path) => {
            store.checkpoint().unwrap();
            std::fs::metadata(path).unwrap().len()
        }
        Location::Postgres(_) => store
            .sql_for_tests()
            .query_one("SELECT pg_database_size(current_database())", &[], |r| {
                r.get::<i64>(0)
            })
            .unwrap() as u64,
    }
}

on_both_backends! {
    fn a_directory_import_reads_only_the_logs(backend) {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("mixed");
        std::fs::create_dir_all(d.join("sub")).unwrap();
        std::fs::copy(log("resnet_18"), d.join("resnet_18.json")).unwrap();
        std::fs::copy(log("vgg_16"), d.join("sub/vgg_16.log")).unwrap();
        std::fs::copy(resnet18_model(), d.join("resnet18.onnx")).unwrap();
        std::fs::write(
            d.join("README.md"),
            "# Logs\n\nTuned on a Xeon.\n".repeat(1000),
        )
        .unwrap();
        std::fs::write(d.join("notes.txt"), "tuned on 2024-01-01\n").unwrap();
        // A binary without an extension, with 50 MB of line-free bytes.
        let mut blob = vec![0x7fu8, b'E', b'L', b'F', 0, 1];
        blob.resize(50 << 20, b'x');
        std::fs::write(d.join("tool"), &blob).unwrap();
        symlink("nowhere.json", d.join("dangling.json")).unwrap();
        symlink("loop_b", d.join("loop_a")).unwrap();
        symlink("loop_a", d.join("loop_b")).unwrap();
        symlink("..", d.join("sub/up")).unwrap();
        let db = new_db(backend, dir.path(), "t.db");
        let (code, out, err) = ttdb_on(&db, &["import", d.to_str().unwrap(), "--json"]);
        assert_eq!(code, 0, "{out}{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let files: Vec<&str> = v["per_file"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["path"].as_str().unwrap())
            .collect();
        assert_eq!(files.len(), 2, "{files:?}");
        assert!(files[0].ends_with("resnet_18.json") && files[1].ends_with("vgg_16.log"));
        assert_eq!(v["rejected_lines"], 0);
        let skipped: Vec<(String, String)> = v["skipped"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let p = s["path"].as_str().unwrap();
                (
                    Path::new(p)
                        .file_name()
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                    s["reason"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let reason = |name: &str| {
            skipped
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, r)| r.clone())
                .unwrap_or_else(|| panic!("{name} not skipped: {skipped:?}"))
        };
        assert!(reason("resnet18.onnx").contains("extension .onnx"));
        assert!(reason("README.md").contains("extension .md"));
        assert!(reason("notes.txt").contains("not an Ansor log"));
        assert!(reason("tool").contains("binary content"));
        assert!(reason("dangling.json").contains("dangling symlink"));
        assert!(reason("loop_a").contains("symlink loop"));
        assert!(reason("loop_b").contains("symlink loop"));
        assert!(reason("up").contains("symlink loop"));
        assert_eq!(skipped.len(), 8, "{skipped:?}");
        // The database holds the logs and nothing of the rest: the rows of importing the two
        // logs alone, and within 1 MB of their size.
        let alone = new_db(backend, dir.path(), "alone.db");
        import_ok(&alone, &[&log("resnet_18"), &log("vgg_16")]);
        for table in ["sources", "records", "workloads", "rejected_lines"] {
            let sql = format!("SELECT COUNT(*) FROM {table}");
            assert_eq!(query_int(&db, &sql), query_int(&alone, &sql), "{table}");
        }
        let (a, b) = (db_size(&db), db_size(&alone));
        assert!(a < b + (1 << 20), "mixed import {a} bytes, logs alone {b}");
    }
}

on_both_backends! {
    fn a_rejected_line_keeps_a_bounded_prefix_and_a_binary_file_is_one_error(backend) {
        let dir = tempfile::tempdir().unwrap();
        let line = first_record();
        let junk = format!("{{\"i\": {}", "x".repeat(5 << 20));
        let path = dir.path().join("l.json");
        std::fs::write(&path, format!("{line}\n{junk}\n")).unwrap();
        let db = new_db(backend, dir.path(), "t.db");
        let out = import_ok(&db, &[&path]);
        assert!(out.contains("rejected lines: 1"), "{out}");
        assert_eq!(query_int(&db, "SELECT length(raw) FROM rejected_lines"), 256);
        // A binary named on the command line: one error, no lines.
        let bin = dir.path().join("model.bin");
        std::fs::write(&bin, [0u8, 1, 2, 3].repeat(1 << 16)).unwrap();
        let (code, out, err) = ttdb_on(&db, &["import", bin.to_str().unwrap(), "--json"]);
        assert_ne!(code, 0);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["errors"].as_array().unwrap().len(), 1, "{out}{err}");
        assert_eq!(v["rejected_lines"], 0);
        assert!(out.contains("binary content"), "{out}");
    }
}

/// Peak resident memory (KiB) of this process's waited-for children.
fn children_max_rss_kib() -> i64 {
    #[repr(C)]
    struct RUsage {
        fields: [i64; 18],
    }
    extern "C" {
        fn getrusage(who: i32, usage: *mut RUsage) -> i32;
    }
    const RUSAGE_CHILDREN: i32 = -1;
    let mut u = RUsage { fields: [0; 18] };
    // SAFETY: getrusage fills the struct, which has the size of Linux's `struct rusage`
    // on 64-bit targets (two timevals, then 14 longs; ru_maxrss first).
    assert_eq!(unsafe { getrusage(RUSAGE_CHILDREN, &mut u) }, 0);
    u.fields[4]
}

#[test]
fn a_decompression_bomb_is_refused_in_bounded_memory() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let size: u64 = 3 << 30;
    let text =
        || std::io::Cursor::new(b"# ttdb-bundle 1\n".to_vec()).chain(std::io::repeat(0).take(size));
    // Without a declared size (a streamed frame), and with one.
    let no_size = dir.path().join("bomb.ttdb");
    let mut enc =
        zstd::stream::write::Encoder::new(std::fs::File::create(&no_size).unwrap(), 1).unwrap();
    std::io::copy(&mut text(), &mut enc).unwrap();
    enc.finish().unwrap().flush().unwrap();
    let declared = dir.path().join("declared.ttdb");
    let mut enc =
        zstd::stream::write::Encoder::new(std::fs::File::create(&declared).unwrap(), 1).unwrap();
    enc.set_pledged_src_size(Some(size + 16)).unwrap();
    enc.include_contentsize(true).unwrap();
    std::io::copy(&mut text(), &mut enc).unwrap();
    enc.finish().unwrap().flush().unwrap();
    assert!(std::fs::metadata(&no_size).unwrap().len() < 1 << 20);
    let db = dir.path().join("t.db");
    for (bomb, expect) in [
        (&no_size, "a line over the limit"),
        (&declared, "declares 3221225488 bytes of text"),
    ] {
        for args in [
            vec!["bundle", "inspect", bomb.to_str().unwrap()],
            vec!["bundle", "import", bomb.to_str().unwrap()],
            vec!["import", bomb.to_str().unwrap()],
        ] {
            let (code, out, err) = ttdb_on(&db, &args);
            assert_ne!(code, 0, "{args:?}");
            assert!(
                out.contains(expect) || err.contains(expect),
                "{args:?}: {out}{err}"
            );
        }
    }
    let rss = children_max_rss_kib();
    assert!(
        rss < 300 << 10,
        "peak RSS {rss} KiB while refusing the bombs"
    );
}

#[test]
fn the_bundle_text_cap_holds_while_streaming() {
    use ttdb::bundle::format::{self, Limits};
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.db");
    import_ok(&src, &[&log("resnet_18")]);
    let plain = dir.path().join("b.ttdb");
    let (code, _, err) = ttdb_on(&src, &["bundle", "export", "-o", plain.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read(&plain).unwrap();
    // Compressed as a stream (no declared size): the cap stops the text, not the file size.
    let packed = zstd::stream::encode_all(&text[..], 3).unwrap();
    let limits = Limits {
        max_bytes: text.len() as u64 - 1,
        ..Limits::default()
    };
    let e = format::read(&packed, &limits).unwrap_err();
    assert!(e.reason.contains("over the limit"), "{e}");
    assert!(format::read(&packed, &Limits::default()).is_ok());
    // A frame that declares its size is refused before decompressing when over the cap.
    let mut declared = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
    declared
        .set_pledged_src_size(Some(text.len() as u64))
        .unwrap();
    declared.include_contentsize(true).unwrap();
    std::io::Write::write_all(&mut declared, &text).unwrap();
    let declared = declared.finish().unwrap();
    assert!(format::read(&declared, &Limits::default()).is_ok());
    let e = format::read(&declared, &limits).unwrap_err();
    assert!(e.reason.contains("the zstd frame declares"), "{e}");
    // On the CLI, --max-bundle-mib 0 refuses it and says which flag moves the cap.
    let (code, _, err) = ttdb_on(
        &dir.path().join("t.db"),
        &[
            "bundle",
            "import",
            plain.to_str().unwrap(),
            "--max-bundle-mib",
            "0",
        ],
    );
    assert_ne!(code, 0);
    assert!(err.contains("--max-bundle-mib raises it"), "{err}");
}

#[test]
fn the_tophub_table_travels_with_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("ttdb");
    std::fs::copy(env!("CARGO_BIN_EXE_ttdb"), &bin).unwrap();
    let model = dir.path().join("resnet18.onnx");
    std::fs::copy(resnet18_model(), &model).unwrap();
    let run = |cwd: &Path, exe: &Path| {
        let out = std::process::Command::new(exe)
            .current_dir(cwd)
            .args([
                "kernels",
                model.to_str().unwrap(),
                "--layout-plan",
                "tophub",
                "--json",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let here = run(
        Path::new(env!("CARGO_MANIFEST_DIR")),
        Path::new(env!("CARGO_BIN_EXE_ttdb")),
    );
    let away = run(dir.path(), &bin);
    assert_eq!(here, away);
    let v: serde_json::Value = serde_json::from_str(&away).unwrap();
    assert_eq!(v["tophub"], "llvm_v0.04.log");
    // TopHub's blocks of 64 channels, where the 4-lane fallback rule gives 4.
    assert!(away.contains("\"layout\":\"NCHW64c\""), "{away}");
}

#[test]
fn verify_without_timing_measures_no_peak() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    import_ok(&db, &[&log("resnet_18")]);
    let (code, out, err) = ttdb_on(
        &db,
        &[
            "verify",
            "--all",
            "--limit",
            "1",
            "--no-timing",
            "--dry-run",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["peak_gflops"].is_null(), "{out}");
}

on_both_backends! {
    fn bundle_inspect_names_workloads_as_export_finds_them(backend) {
        let dir = tempfile::tempdir().unwrap();
        let db = new_db(backend, dir.path(), "t.db");
        import_ok(&db, &[&log("resnet_18")]);
        let b = dir.path().join("b.ttdb");
        let (code, _, err) = ttdb_on(&db, &["bundle", "export", "-o", b.to_str().unwrap()]);
        assert_eq!(code, 0, "{err}");
        let (code, out, err) = ttdb_on(&db, &["bundle", "inspect", b.to_str().unwrap()]);
        assert_eq!(code, 0, "{err}");
        let table = out.split("import would:").nth(1).unwrap();
        let first = table.lines().nth(2).unwrap();
        let prefix = first.split_whitespace().next().unwrap();
        let (code, lines, err) = ttdb_on(&db, &["export", "--workload", prefix]);
        assert_eq!(code, 0, "{prefix}: {err}");
        assert!(
            !lines.is_empty(),
            "export --workload {prefix} found nothing"
        );
    }
}

on_both_backends! {
    fn export_of_an_unknown_workload_is_an_error(backend) {
        let dir = tempfile::tempdir().unwrap();
        let db = new_db(backend, dir.path(), "t.db");
        import_ok(&db, &[&log("resnet_18")]);
        let out = dir.path().join("out.json");
        for prefix in ["zz", "ffffffffffff"] {
            let (code, _, err) = ttdb_on(
                &db,
                &["export", "--workload", prefix, "-o", out.to_str().unwrap()],
            );
            assert_ne!(code, 0, "{prefix}");
            assert!(
                err.contains(&format!("no workload's signature starts with `{prefix}`")),
                "{err}"
            );
            assert!(!out.exists(), "an empty output file was written");
        }
    }
}

#[test]
fn lanes_and_mcpu_are_checked() {
    let model = resnet18_model();
    let m = model.to_str().unwrap();
    for (flag, value, expect) in [
        ("--lanes", "0", "power of two"),
        ("--lanes", "3", "power of two"),
        ("--lanes=-8", "", "power of two"),
        ("--mcpu", "bogus", "not an x86 CPU LLVM knows"),
    ] {
        let mut args = vec!["kernels", m, flag];
        if !value.is_empty() {
            args.push(value);
        }
        let (code, _, err) = ttdb(&args);
        assert_eq!(code, 2, "{flag} {value}: {err}");
        assert!(err.contains(expect), "{flag} {value}: {err}");
    }
    let (code, _, err) = ttdb(&["kernels", m, "--mcpu", "znver4"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn bad_model_dims_are_named_for_what_they_are() {
    use ttdb_testkit::onnx_model::ModelBuilder;
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, dims: &[i64]| {
        let mut b = ModelBuilder::new(name, 13);
        b.input("x", dims);
        b.node("Relu", "relu", &["x"], &["y"], vec![]);
        b.output("y");
        let p = dir.path().join(format!("{name}.onnx"));
        std::fs::write(&p, b.encode()).unwrap();
        p
    };
    let negative = write("negative", &[1, -3, 4, 4]);
    let (code, _, err) = ttdb(&["kernels", negative.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(
        err.contains("dim 1 = -3") && err.contains("cannot be negative"),
        "{err}"
    );
    assert!(!err.contains("symbolic"), "{err}");
    let huge = write("huge", &[1 << 40, 1 << 40, 1 << 40]);
    let (code, _, err) = ttdb(&["kernels", huge.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(
        err.contains("too many elements") && err.contains("as the model declares it"),
        "{err}"
    );
    assert!(!err.contains("bad --input-shape"), "{err}");
}

/// Every argument and option of every command says what it is.
#[test]
fn every_option_has_help() {
    let commands: &[&[&str]] = &[
        &["import"],
        &["stats"],
        &["workloads"],
        &["kernels"],
        &["verify"],
        &["match"],
        &["apply"],
        &["refine"],
        &["tune"],
        &["bench-peak"],
        &["export"],
        &["bundle", "export"],
        &["bundle", "inspect"],
        &["bundle", "import"],
        &["bundle", "sign"],
        &["bundle", "merge"],
        &["key", "generate"],
        &["trust", "add"],
        &["trust", "list"],
        &["trust", "remove"],
    ];
    let mut missing = Vec::new();
    for c in commands {
        let mut args = c.to_vec();
        args.push("--help");
        let (code, out, _) = ttdb(&args);
        assert_eq!(code, 0, "{c:?}");
        let lines: Vec<&str> = out.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            let t = l.trim_start();
            let indent = l.len() - t.len();
            let is_item = (2..=8).contains(&indent)
                && (t.starts_with('-') || t.starts_with('<') || t.starts_with('['));
            if !is_item || t.contains("--help") || t.contains("--version") {
                continue;
            }
            let inline = t.split("  ").filter(|s| !s.trim().is_empty()).count() > 1;
            let below = lines
                .get(i + 1)
                .is_some_and(|n| n.len() - n.trim_start().len() >= 10 && !n.trim().is_empty());
            if !inline && !below {
                missing.push(format!("{}: {t}", c.join(" ")));
            }
        }
        if c == &["bundle", "export"] {
            assert!(out.matches("(the default)").count() == 0, "{out}");
        }
    }
    assert!(missing.is_empty(), "options without help: {missing:#?}");
}
