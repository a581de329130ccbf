//! Snapshots of the human-readable outputs (review changes with `cargo insta review`).
use crate::common;
use std::path::Path;
use ttdb::cli::{render_import_summary, render_stats, render_workloads, ImportSummary};
use ttdb::store::import::import_file;
use ttdb::store::Store;

const FILE: &str = "../shared/corpus/ansor/tvm_gallery/resnet-50-NHWC-B1-llvm.json";

fn imported() -> (Store, ImportSummary) {
    common::corpus_dir();
    let mut store = Store::open_in_memory().unwrap();
    let mut summary = ImportSummary::default();
    summary.add(import_file(&mut store, Path::new(FILE), &|_| {}).unwrap());
    summary.count_workloads(&store).unwrap();
    (store, summary)
}

#[test]
fn import_summary_of_the_gallery_resnet50_log() {
    let (_, summary) = imported();
    insta::assert_snapshot!(render_import_summary(&summary));
}

#[test]
fn stats_after_importing_the_gallery_resnet50_log() {
    let (store, _) = imported();
    insta::assert_snapshot!(render_stats(&ttdb::store::query::stats(&store).unwrap()));
}

#[test]
fn workloads_of_the_gallery_resnet50_log() {
    let (store, _) = imported();
    insta::assert_snapshot!(render_workloads(
        &ttdb::store::query::workloads(&store, None).unwrap()
    ));
}

/// A test host of `cores` cores (its class names the cores: two hosts, two classes).
fn host(cores: usize) -> ttdb::host::HostFingerprint {
    ttdb::host::HostFingerprint {
        cpu_model: "Test CPU".into(),
        isa_flags: vec!["avx".into(), "avx2".into(), "fma".into()],
        llvm_cpu: "haswell".into(),
        llvm_features: "+avx2,+fma".into(),
        cores,
        ttdb_version: "0.1.0".into(),
    }
}

/// A queue with something in every column: a tune with pending, leased, done and failed
/// jobs, a cancelled one, and a live, a stopped and a silent worker. Ages are the
/// database clock's (milliseconds here); they are pinned, so that every form of an age
/// shows and the snapshot does not depend on how fast the test runs.
fn queue_store() -> Store {
    use std::time::Duration;
    use ttdb::store::queue::{Finished, TuneEnd};
    let store = Store::open_in_memory().unwrap();
    let (two, eight) = (host(2), host(8));
    let class = two.class();
    let lease = Duration::from_secs(60);
    let alpha = store.register_worker("alpha", &two, 4).unwrap();
    let beta = store.register_worker("beta", &two, 2).unwrap();
    store.register_worker("gamma", &eight, 8).unwrap();
    let schedules = |n: usize| -> Vec<String> { (0..n).map(|i| format!("[\"s{i}\"]")).collect() };

    let tune = store.begin_tune(&class, "--class dense_small").unwrap();
    store
        .enqueue(tune, &class, "{}", Duration::from_secs(10), &schedules(6))
        .unwrap();
    // Two idle workers of the class: alpha takes its share, 3 of 6.
    let claim = store.claim(alpha, &class, 4, lease).unwrap().unwrap();
    assert_eq!(claim.jobs.len(), 3);
    let measured = ttdb::store::measurement::NewMeasurement {
        workload_key: r#"["218090bc617f9a36fbabdf253ec28064", [14, 3072], [768, 3072], [14, 768]]"#
            .into(),
        steps: vec![ttdb::ansor::Step::parse(r#"["SP", 2, 0, 14, [1, 1, 14], 1]"#).unwrap()],
        samples: vec![1e-4],
        error_no: 0,
        error: None,
        verified: true,
        max_rel_error: Some(1e-6),
        median_s: Some(1e-4),
        min_s: Some(1e-4),
        max_s: Some(1e-4),
        gflops: None,
        compile_ms: Some(1.0),
        wall_s: 0.1,
        origin_record_id: None,
        provenance: "snapshot".into(),
    };
    let done = Finished {
        job_id: claim.jobs[0].0,
        result: "{}".into(),
        measurement: measured,
    };
    assert_eq!(
        store
            .complete_jobs(alpha, &two, "search", 0.01, &[done])
            .unwrap(),
        1
    );
    assert_eq!(
        store
            .fail_jobs(alpha, &[claim.jobs[1].0], "unreadable")
            .unwrap(),
        1
    );
    store
        .worker_heartbeat(alpha, lease, Some("tune 1: 1 job(s) of 218090bc617f"))
        .unwrap();
    store.worker_stopped(beta).unwrap();

    let cancelled = store.begin_tune(&class, "resnet18.onnx").unwrap();
    store
        .enqueue(
            cancelled,
            &class,
            "{}",
            Duration::from_secs(10),
            &schedules(2),
        )
        .unwrap();
    assert_eq!(store.end_tune(cancelled, TuneEnd::Cancelled).unwrap(), 2);
    store
}

#[test]
fn workers_with_live_stopped_and_silent_workers() {
    let store = queue_store();
    let mut rows = store.workers().unwrap();
    assert!(rows.iter().all(|w| w.heartbeat_age_s < 60.0), "{rows:?}");
    // Newest first: gamma (silent for 3 h), beta (stopped 5 min ago), alpha (live).
    for (w, age) in rows.iter_mut().zip([10_800.0, 300.0, 4.0]) {
        w.heartbeat_age_s = age;
    }
    insta::assert_snapshot!(ttdb::cli::render_workers(&rows));
}

#[test]
fn queue_with_a_running_and_a_cancelled_tune() {
    let store = queue_store();
    let mut rows = store.queue().unwrap();
    assert!(rows.iter().all(|t| t.age_s < 60.0), "{rows:?}");
    for (t, age) in rows.iter_mut().zip([30.0, 900.0]) {
        t.age_s = age;
    }
    insta::assert_snapshot!(ttdb::cli::render_queue(&rows));
}
