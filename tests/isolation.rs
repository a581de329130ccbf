//! Crash isolation: candidates measured in a worker process. A candidate that kills its
//! worker (the hidden test hook makes the worker raise SIGSEGV on the N-th candidate, as a
//! faulting kernel would) costs that one trial, recorded with the signal; the worker is
//! restarted and the run finishes.
use crate::common;
use common::{corpus_dir, ttdb_on};
use ttdb::evaluate::{evaluate_steps, EvalOptions, Isolation, Reference, WorkerSpec};

fn log() -> std::path::PathBuf {
    corpus_dir().join("ansor/tvm_ansor_bench_nchwc/resnet_18.best.json")
}

#[test]
fn a_tune_survives_a_candidate_that_kills_its_worker() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let (code, _, err) = ttdb_on(&db, &["import", log().to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    // A 3x3 conv of ResNet-18's first stage.
    let args = [
        "tune",
        "--workload",
        "1451ca94536b",
        "--trials",
        "12",
        "--fault-candidate",
        "3",
        "--json",
    ];
    let (code, out, err) = ttdb_on(&db, &args);
    assert_eq!(code, 0, "the tune did not finish: {err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let k = &v["kernels"][0];
    assert_eq!(k["trials"], 12, "{out}");
    assert_eq!(k["failed_trials"], 1, "{out}");
    assert!(k["best_ms"].as_f64().is_some(), "{out}");
    let store = ttdb::store::Store::open(&db).unwrap();
    let errors: Vec<String> = store
        .connection_for_tests()
        .prepare("SELECT error FROM measurements WHERE kind = 'search' AND error IS NOT NULL")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        errors,
        vec!["the measuring worker was killed by SIGSEGV while running this candidate"],
    );
}

#[test]
fn one_candidate_at_a_time_in_a_worker_that_dies_and_restarts() {
    let text = std::fs::read_to_string(log()).unwrap();
    let line = text.lines().find(|l| l.starts_with('{')).unwrap();
    let record = ttdb::ansor::Record::parse(line).unwrap();
    let key = ttdb::ansor::WorkloadKey::parse(&record.task.workload_key).unwrap();
    let dag = ttdb::recognize::recognize(&key).unwrap().dag;
    let reference = Reference::new(&dag, 5).unwrap();
    let opts = |fault| EvalOptions {
        isolation: Isolation::Worker(WorkerSpec {
            exe: env!("CARGO_BIN_EXE_ttdb").into(),
            args: vec!["measure-worker".into()],
            fault_candidate: fault,
        }),
        ..EvalOptions::default()
    };
    // The first candidate of this spec's worker kills it; the second runs in a new one.
    let first = evaluate_steps(&dag, &record.steps, &reference, &opts(Some(0)));
    let f = first.failure.expect("the faulting candidate failed");
    assert_eq!(f.error_no, 4);
    assert!(f.message.contains("SIGSEGV"), "{}", f.message);
    let second = evaluate_steps(&dag, &record.steps, &reference, &opts(Some(0)));
    assert!(second.verified(), "{:?}", second.failure);
    // In-process gives the same verdict.
    let here = evaluate_steps(&dag, &record.steps, &reference, &EvalOptions::default());
    assert!(here.verified());
}
