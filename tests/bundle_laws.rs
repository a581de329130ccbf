//! Bundle merge laws, provenance and host round trips, and reading what was written, through
//! the library: merge(A,B) = merge(B,A); merge(A,A) = A; importing merge(A,B) equals
//! importing A and then B. Each runs on SQLite and on PostgreSQL.
use crate::common;
use common::corpus_dir;
use std::path::{Path, PathBuf};
use ttdb::ansor::Record;
use ttdb::bundle::format::{self, Bundle, Creation, Limits};
use ttdb::bundle::{self, Selection};
use ttdb::host::HostFingerprint;
use ttdb::store::measurement::{store_measurements, NewMeasurement};
use ttdb::store::testing::Backend;
use ttdb::store::Store;
use ttdb_store::on_both_backends;

fn log(name: &str) -> PathBuf {
    corpus_dir().join(format!("ansor/tvm_ansor_bench_nchwc/{name}.best.json"))
}

fn creation(who: &str) -> Creation {
    Creation {
        created_at: "2026-11-24T00:00:00Z".into(),
        creator: who.into(),
        description: format!("made by {who}"),
    }
}

fn import(store: &mut Store, path: &Path) {
    ttdb::store::import_file(store, path, &|_| {}).unwrap();
}

/// A host that is not this one, so the bundle has to carry it.
fn remote_host() -> HostFingerprint {
    HostFingerprint {
        cpu_model: "Remote CPU 9000".into(),
        isa_flags: vec!["avx2".into(), "avx512f".into(), "fma".into()],
        llvm_cpu: "znver5".into(),
        llvm_features: String::new(),
        cores: 8,
        ttdb_version: "0.1.0".into(),
    }
}

/// Stores a "search" measurement of the first record of `log_path` on `host`.
fn add_search_trial(store: &mut Store, log_path: &Path, host: &HostFingerprint) {
    let text = std::fs::read_to_string(log_path).unwrap();
    let rec = Record::parse(text.lines().next().unwrap()).unwrap();
    let m = NewMeasurement {
        workload_key: rec.task.workload_key.clone(),
        steps: rec.steps.clone(),
        samples: vec![1.5e-3, 1.6e-3, 1.55e-3],
        error_no: 0,
        error: None,
        verified: true,
        max_rel_error: Some(1e-6),
        median_s: Some(1.55e-3),
        min_s: Some(1.5e-3),
        max_s: Some(1.6e-3),
        gflops: Some(100.0),
        compile_ms: Some(50.0),
        wall_s: 0.5,
        origin_record_id: None,
        provenance: "test search".into(),
    };
    store_measurements(store, "search", host, &[m]).unwrap();
}

/// Bundle A: resnet_18 and alexnet, plus a search trial measured on a remote host.
/// Bundle B: alexnet again, but read from another file (a second provenance for the same
/// records), and vgg_16.
fn two_bundles(dir: &Path, backend: Backend) -> (Bundle, Bundle) {
    let mut a = backend.store();
    import(&mut a, &log("resnet_18"));
    import(&mut a, &log("alexnet"));
    add_search_trial(&mut a, &log("resnet_18"), &remote_host());
    let mut b = backend.store();
    let copy = dir.join("alexnet_copy.json");
    std::fs::copy(log("alexnet"), &copy).unwrap();
    import(&mut b, &copy);
    import(&mut b, &log("vgg_16"));
    (
        bundle::export(&a, &Selection::All, false, creation("alice")).unwrap(),
        bundle::export(&b, &Selection::All, false, creation("bob")).unwrap(),
    )
}

/// Everything an import put in a database, as a bundle would carry it.
fn contents(store: &Store) -> Bundle {
    bundle::export(store, &Selection::All, false, creation("check")).unwrap()
}

on_both_backends! {
    fn merge_is_commutative_and_idempotent(backend) {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = two_bundles(dir.path(), backend);
        let ab = bundle::merge(&a, &b);
        let ba = bundle::merge(&b, &a);
        assert_eq!(ab.to_text(), ba.to_text(), "merge(A,B) != merge(B,A)");
        assert_eq!(
            bundle::merge(&a, &a).to_text(),
            a.to_text(),
            "merge(A,A) != A"
        );
        assert_eq!(bundle::merge(&ab, &ab).to_text(), ab.to_text());
        // The shared alexnet records carry both provenance entries, and nothing was lost.
        let both = ab
            .records
            .iter()
            .filter(|r| r.meta.provenance.len() == 2)
            .count();
        let alexnet = std::fs::read_to_string(log("alexnet"))
            .unwrap()
            .lines()
            .count();
        assert_eq!(
            both, alexnet,
            "each alexnet record keeps both of its sources"
        );
        let distinct: std::collections::BTreeSet<&str> = a
            .records
            .iter()
            .chain(&b.records)
            .map(|r| r.meta.sha256.as_str())
            .collect();
        assert_eq!(ab.records.len(), distinct.len());
        assert_eq!(ab.manifest.creator, "alice + bob");
        // The remote host travels with the trial it measured.
        assert_eq!(ab.manifest.hosts.len(), 1);
        assert_eq!(ab.manifest.hosts[0].llvm_cpu, "znver5");
    }
}

on_both_backends! {
    fn importing_a_merge_equals_importing_both(backend) {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = two_bundles(dir.path(), backend);
        let ab = bundle::merge(&a, &b);
        let mut one = backend.store();
        bundle::import(&mut one, Path::new("ab.ttdb"), &ab).unwrap();
        let mut two = backend.store();
        bundle::import(&mut two, Path::new("a.ttdb"), &a).unwrap();
        bundle::import(&mut two, Path::new("b.ttdb"), &b).unwrap();
        let (x, y) = (contents(&one), contents(&two));
        assert_eq!(x.records, y.records);
        assert_eq!(x.manifest, y.manifest);
        // And both equal the merge itself, provenance and hosts included.
        assert_eq!(x.records, ab.records);
        assert_eq!(x.manifest.hosts, ab.manifest.hosts);
    }
}

on_both_backends! {
    fn a_written_bundle_reads_back_identically_plain_and_compressed(backend) {
        let dir = tempfile::tempdir().unwrap();
        let (a, _) = two_bundles(dir.path(), backend);
        for compress in [false, true] {
            let bytes = a.to_bytes(compress).unwrap();
            let back = format::read(&bytes, &Limits::default()).unwrap();
            assert_eq!(back, a, "compress={compress}");
        }
        // Every record line is one TVM reads: ttdb's own reader of Ansor logs sees every record
        // and skips every other line as a comment.
        let text = a.to_text();
        let mut records = 0;
        for line in text.lines() {
            match ttdb::ansor::parse_line(line.as_bytes()) {
                ttdb::ansor::LogLine::Record { .. } => records += 1,
                ttdb::ansor::LogLine::Comment => {}
                other => panic!("unexpected line kind {other:?}: {line}"),
            }
        }
        assert_eq!(records, a.records.len());
    }
}

on_both_backends! {
    fn signing_changes_no_hash_and_verifies(backend) {
        let dir = tempfile::tempdir().unwrap();
        let (mut a, _) = two_bundles(dir.path(), backend);
        let key = bundle::sign::generate().unwrap();
        let before = a.sha256.clone();
        bundle::sign::sign(&mut a, &key);
        let back = format::read(&a.to_bytes(false).unwrap(), &Limits::default()).unwrap();
        assert_eq!(back.sha256, before);
        assert_eq!(
            bundle::sign::check(&back),
            bundle::sign::SignatureStatus::Valid {
                public_key: bundle::sign::public_hex(&key)
            }
        );
        // Another bundle's signature does not carry over.
        let (_, mut b) = two_bundles(dir.path(), backend);
        b.signature = a.signature.clone();
        assert!(matches!(
            bundle::sign::check(&b),
            bundle::sign::SignatureStatus::Invalid { .. }
        ));
    }
}

on_both_backends! {
    fn inspect_plans_new_duplicate_and_better(backend) {
        let dir = tempfile::tempdir().unwrap();
        let (a, _) = two_bundles(dir.path(), backend);
        let empty = backend.store();
        let plans = bundle::plan(&empty, &a).unwrap();
        assert!(plans.iter().all(|p| p.verdict == bundle::Verdict::New));
        let mut full = backend.store();
        bundle::import(&mut full, Path::new("a.ttdb"), &a).unwrap();
        let plans = bundle::plan(&full, &a).unwrap();
        assert!(plans
            .iter()
            .all(|p| p.verdict == bundle::Verdict::Duplicate));
        // Our resnet_18 records made slower by 10x (a copy of the log with its costs scaled):
        // the bundle's are better.
        let text = std::fs::read_to_string(log("resnet_18")).unwrap();
        let slow: Vec<String> = text
            .lines()
            .map(|l| {
                let mut r = Record::parse(l).unwrap();
                for c in &mut r.result.costs {
                    *c *= 10.0;
                }
                r.to_line()
            })
            .collect();
        let slow_path = dir.path().join("slow.json");
        std::fs::write(&slow_path, slow.join("\n") + "\n").unwrap();
        let mut ours = backend.store();
        import(&mut ours, &slow_path);
        let plans = bundle::plan(&ours, &a).unwrap();
        let better = plans
            .iter()
            .filter(|p| p.verdict == bundle::Verdict::Better)
            .count();
        assert!(better >= 10, "{plans:#?}");
        let p = plans
            .iter()
            .find(|p| p.verdict == bundle::Verdict::Better)
            .unwrap();
        let (t, o) = (p.theirs_s.unwrap(), p.ours_s.unwrap());
        assert!((o / t - 10.0).abs() < 0.01, "theirs {t}, ours {o}");
    }
}

on_both_backends! {
    fn inspect_output(backend) {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = two_bundles(dir.path(), backend);
        let mut key_store = backend.store();
        // Ours: bundle B (alexnet is then a duplicate, resnet_18 new).
        bundle::import(&mut key_store, Path::new("b.ttdb"), &b).unwrap();
        let plans = bundle::plan(&key_store, &a).unwrap();
        let signer = ttdb::cli::SignerView {
            status: "unsigned",
            public_key: None,
            trusted_as: None,
        };
        // The search trial's record carries the time it was stored: its hash, and so the
        // bundle's, changes from run to run.
        let text = ttdb::cli::render_inspect(&a, &signer, &plans).replace(&a.sha256, "<sha256>");
        insta::assert_snapshot!("inspect_output", text);
    }
}
