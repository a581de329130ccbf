//! Hostile schedules in a well-formed bundle: they import, fail replay cleanly, and every
//! command that reads them finishes. What is stored and ranked is checked on SQLite and on
//! PostgreSQL; compiling and running the schedules, which is the same whichever database
//! they came from, on SQLite.
use super::*;
use common::new_db;
use ttdb::store::testing::Backend;
use ttdb_store::on_both_backends;

/// The real records the hostile ones are made from: workloads of the classes
/// fixtures/models/tiny_resnet.onnx has (so `match` and `apply` consider them).
fn victims() -> Vec<String> {
    let path = common::corpus_dir().join("ansor/tvm_ansor_bench_nchwc/resnet_18.best.json");
    let text = std::fs::read_to_string(path).unwrap();
    let mut out: Vec<String> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for line in text.lines() {
        let r = Record::parse(line).unwrap();
        let key = WorkloadKey::parse(&r.task.workload_key).unwrap();
        let class = ttdb::recognize::recognize(&key).unwrap().signature.op_class;
        let want = [
            "conv2d_nchwc+add+relu",
            "conv2d_nchwc+add+add+relu",
            "adaptive_pool_avg",
        ];
        if want.contains(&class.as_str()) && seen.insert(class) {
            out.push(line.to_string());
        }
    }
    assert_eq!(out.len(), 3, "a record of each class");
    out
}

/// `steps` with the first step of tag `tag` edited by `f` (None if there is none).
fn edit_first(steps: &Value, tag: &str, f: impl Fn(&mut Vec<Value>)) -> Option<Value> {
    let mut s = steps.clone();
    let step = s.as_array_mut()?.iter_mut().find(|x| x[0] == tag)?;
    f(step.as_array_mut()?);
    Some(s)
}

/// Step lists that must fail replay: (what, steps).
fn hostile_steps(steps: &Value) -> Vec<(&'static str, Value)> {
    let max = i32::MAX as i64;
    let mut out = Vec::new();
    let mut push = |what, s: Option<Value>| out.extend(s.map(|s| (what, s)));
    push("stage id out of range", {
        let mut s = steps.clone();
        s[0][1] = 1000.into();
        Some(s)
    });
    push("stage id i32::MAX", {
        let mut s = steps.clone();
        s[0][1] = max.into();
        Some(s)
    });
    push(
        "split iterator out of range",
        edit_first(steps, "SP", |a| a[2] = 100_000.into()),
    );
    push(
        "split extent absurd",
        edit_first(steps, "SP", |a| a[3] = max.into()),
    );
    push(
        "split lengths absurd",
        edit_first(steps, "SP", |a| {
            a[4] = serde_json::json!([max, max, max]);
        }),
    );
    push(
        "split length zero",
        edit_first(steps, "SP", |a| a[4] = serde_json::json!([0, 1, 1])),
    );
    push(
        "annotation iterator out of range",
        edit_first(steps, "AN", |a| a[2] = 5000.into()),
    );
    push(
        "fuse out of range",
        edit_first(steps, "FU", |a| a[2] = serde_json::json!([0, 70000])),
    );
    push(
        "reorder repeats",
        edit_first(steps, "RE", |a| {
            let n = a[2].as_array().unwrap().len();
            a[2] = Value::from(vec![0; n]);
        }),
    );
    push(
        "compute-at a missing stage",
        edit_first(steps, "CA", |a| {
            a[2] = 999.into();
            a[3] = max.into();
        }),
    );
    push(
        "unroll pragma not a number",
        edit_first(steps, "PR", |a| {
            a[3] = "auto_unroll_max_step$99999999999999999999".into();
        }),
    );
    out
}

/// Unroll values past any TVM's search writes (it picks 0, 16, 64 or 512): they replay,
/// and lowering and codegen must cope.
const LARGE_UNROLLS: [i64; 2] = [0, 4096];

/// (victim, unroll) pairs that unroll a 3x3x512 reduction far enough to hang codegen (see
/// the ignored test below).
const HUGE_UNROLLS: [(usize, i64); 3] = [(1, 65_536), (0, 1 << 20), (0, i32::MAX as i64)];

fn with_unroll(steps: &Value, n: i64) -> Option<Value> {
    edit_first(steps, "PR", |a| {
        a[3] = format!("auto_unroll_max_step${n}").into()
    })
}

/// Replays a record on its workload's DAG, as `verify` and the matcher do.
fn replays(line: &str) -> Result<(), String> {
    let r = Record::parse(line).unwrap();
    let key = WorkloadKey::parse(&r.task.workload_key).unwrap();
    let dag = ttdb::recognize::recognize(&key).unwrap().dag;
    let inits = ttdb::schedule::stage_inits_from_dag(&dag);
    ttdb::schedule::replay(&inits, &r.steps)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Replays a record on its workload's DAG with split lengths re-targeted, as the matcher's
/// class tier does.
fn retargets(line: &str) -> Result<(), String> {
    let r = Record::parse(line).unwrap();
    let key = WorkloadKey::parse(&r.task.workload_key).unwrap();
    let dag = ttdb::recognize::recognize(&key).unwrap().dag;
    let inits = ttdb::schedule::stage_inits_from_dag(&dag);
    ttdb::matcher::adapt::retarget(&inits, &r.steps)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Runs ttdb on `db`, failing if it panics, fails, or takes longer than `seconds`.
fn ttdb_within(db: &std::path::Path, args: &[&str], seconds: u64) -> String {
    let (ok, out, err) = ttdb_status_within(db, args, seconds);
    assert!(ok, "ttdb {args:?} failed\n{err}");
    out
}

/// Runs ttdb on `db`, failing if it panics or takes longer than `seconds`: (success,
/// stdout, stderr).
fn ttdb_status_within(db: &std::path::Path, args: &[&str], seconds: u64) -> (bool, String, String) {
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_ttdb"))
        .arg("--db")
        .arg(db)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Drain the pipes while waiting, so a chatty child never blocks on a full pipe.
    let mut out_pipe = child.stdout.take().unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut out_pipe, &mut s).unwrap();
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut err_pipe, &mut s).unwrap();
        s
    });
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed().as_secs() >= seconds {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!(
                "ttdb {args:?} did not finish in {seconds} s:\n{}",
                err.join().unwrap()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    assert!(!err.contains("panicked"), "ttdb {args:?} panicked:\n{err}");
    (status.success(), out, err)
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The hostile bundle's lines: the victims, each with large unrolls (which replay) and
/// hostile step lists (each checked to fail replay), and one in a few of every single
/// perturbation of its steps; all well-formed records.
fn hostile_schedule_lines() -> Vec<String> {
    let mut lines = Vec::new();
    let mut must_fail = 0;
    for (k, v) in victims().iter().enumerate() {
        assert!(replays(v).is_ok(), "the real record replays");
        lines.push(v.clone());
        let steps = steps_of(v);
        // The hostile records claim the best costs, so every ranking tries them first:
        // those that must fail replay and the large unrolls (which replay), in turns by
        // workload, then every single perturbation of the record (tests/common/mutate.rs),
        // one in a few.
        let (fail_cost, unroll_cost) = if k == 1 { (1e-7, 1e-8) } else { (1e-8, 1e-7) };
        for (i, n) in LARGE_UNROLLS.into_iter().enumerate() {
            let s = with_unroll(&steps, n).expect("an unroll pragma");
            lines.push(with_steps(v, &s, unroll_cost * (1.0 + i as f64 / 100.0)));
        }
        for (i, (what, s)) in hostile_steps(&steps).into_iter().enumerate() {
            let l = with_steps(v, &s, fail_cost * (1.0 + i as f64 / 100.0));
            let e = replays(&l).expect_err(what);
            assert!(!e.is_empty(), "{what}: an empty message");
            lines.push(l);
            must_fail += 1;
        }
        let mutants = mutate::step_mutants(&steps);
        for (i, s) in mutants.into_iter().step_by(5 + k).enumerate() {
            lines.push(with_steps(v, &s, 2e-7 * (1.0 + i as f64 / 1000.0)));
        }
    }
    assert!(must_fail >= 25, "{must_fail} hostile records");
    // Only well-formed records: the bundle must import, not be refused by the parser.
    lines.retain(|l| Record::parse(l).is_ok());
    lines.sort();
    lines.dedup();
    lines
}

const TINY_RESNET: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/fixtures/models/tiny_resnet.onnx"
);

on_both_backends! {
    fn hostile_schedules_import_fail_replay_and_crash_nothing(backend) {
        let lines = hostile_schedule_lines();
        let dir = tempfile::tempdir().unwrap();
        let db = new_db(backend, dir.path(), "h.db");
        let file = dir.path().join("hostile.ttdb");
        let b = Bundle::new(
            lines.iter().map(|l| record(l)).collect(),
            &[],
            Creation::default(),
        );
        std::fs::write(&file, b.to_bytes(true).unwrap()).unwrap();
        let ttdb = |args: &[&str]| ttdb_within(&db, args, 120);
        let import = || json(&ttdb(&["bundle", "import", file.to_str().unwrap(), "--json"]));
        let first = import();
        assert_eq!(first[0]["inserted"], lines.len(), "{first}");
        assert_eq!(first[0]["rejected"], serde_json::json!([]), "{first}");
        let again = import();
        assert_eq!(again[0]["duplicates"], lines.len(), "a second import stores nothing: {again}");

        // Matching replays the best records of the nearest workloads: the hostile ones are
        // rejected with the replay's reason, and every kernel still gets an answer.
        let m = json(&ttdb(&["match", TINY_RESNET, "--json"]));
        let rejections = m["kernels"].to_string();
        assert!(rejections.contains("replay failed"), "{m}");
        let explain = ttdb(&["match", TINY_RESNET, "--explain", "/layer1.conv1/Conv"]);
        assert!(explain.contains("replay failed"), "{explain}");
        if backend == Backend::Sqlite {
            hostile_schedules_compile_run_and_seed_searches(&db);
        }
    }
}

/// `apply`, `refine` and `tune` on the database of hostile schedules: each finishes, with
/// verified kernels, re-timed workloads and searches seeded from them.
fn hostile_schedules_compile_run_and_seed_searches(db: &std::path::Path) {
    let ttdb = |args: &[&str]| ttdb_within(db, args, 120);
    let model = TINY_RESNET;
    let apply = json(&ttdb(&[
        "apply",
        model,
        "--top-k",
        "3",
        "--transfer-only",
        "--json",
    ]));
    for k in apply["kernels"].as_array().unwrap() {
        assert_eq!(k["verified"], true, "{k}");
    }

    // The workloads themselves: refine re-times their best stored records (the hostile
    // ones first), tune seeds its search with them.
    for v in &victims()[..2] {
        let key = WorkloadKey::parse(&Record::parse(v).unwrap().task.workload_key).unwrap();
        let sig = ttdb::recognize::recognize(&key)
            .unwrap()
            .signature
            .sha256_hex();
        let refine = json(&ttdb(&[
            "refine",
            "--workload",
            &sig[..16],
            "--trials-per-kernel",
            "8",
            "--json",
        ]));
        assert_eq!(refine["kernels"].as_array().unwrap().len(), 1, "{refine}");
        let tune = json(&ttdb(&[
            "tune",
            "--workload",
            &sig[..16],
            "--trials",
            "8",
            "--batch",
            "8",
            "--population",
            "8",
            "--json",
        ]));
        let k = &tune["kernels"][0];
        assert_eq!(k["trials"], 8, "{tune}");
        assert!(k["best_ms"].as_f64().is_some_and(|t| t > 0.0), "{tune}");
    }
}

/// A large `auto_unroll_max_step` on a real 3x3x512 conv of resnet-18 once passed the
/// unroll guard (then 2,000,000 statements), and `verify` (like `refine` and `tune`, which
/// compile the same record) ran for more than 300 s, at up to 3 GB: 65,536 on
/// `d45cd47001ab`, 2^20 and 2^31-1 on `39b63bc5efe1`. The guard is now 16,384 statements
/// (`CostLimits::max_stmt_nodes`): such records are refused, with the reason, in seconds.
#[test]
fn a_huge_unroll_pragma_is_refused_or_compiled_in_seconds() {
    let victims = victims();
    for (k, n) in HUGE_UNROLLS {
        let v = &victims[k];
        let s = with_unroll(&steps_of(v), n).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (db, log) = (dir.path().join("u.db"), dir.path().join("u.json"));
        std::fs::write(&log, with_steps(v, &s, 1e-8) + "\n").unwrap();
        ttdb_within(&db, &["import", log.to_str().unwrap()], 60);
        // Exit status 1: the kernel failed verification.
        let (_, out, _) = ttdb_status_within(&db, &["verify", "--all", "--json"], 60);
        let v = json(&out);
        let row = &v["rows"][0];
        assert!(
            row["verified"] == true
                || row["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("statements (limit 16384)")),
            "unroll {n}: {v}"
        );
    }
}

/// The candidates of every kernel of `model`: (tier, source file, line), best first.
fn match_sources(db: &std::path::Path, model: &str) -> Vec<Vec<(String, String, i64)>> {
    let m = json(&ttdb_within(db, &["match", model, "--json"], 120));
    m["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            k["candidates"]
                .as_array()
                .map(|cs| {
                    cs.iter()
                        .map(|c| {
                            let s = &c["source"];
                            let file = s["source_path"].as_str().unwrap();
                            let file = std::path::Path::new(file).file_name().unwrap();
                            (
                                c["tier"].as_str().unwrap().to_string(),
                                file.to_string_lossy().into_owned(),
                                s["line"].as_i64().unwrap(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect()
}

/// The models whose matches `records_that_fail_replay_do_not_hide_the_valid_ones` compares:
/// on SQLite, resnet-18 (exact and class tiers on its own log) and tiny_resnet; on
/// PostgreSQL, where the question is the database's ranking and not the replays (resnet-18's
/// take most of the test's time), tiny_resnet, whose kernels take the class tier.
fn fall_through_models(backend: Backend) -> Vec<std::path::PathBuf> {
    let tiny = std::path::PathBuf::from(TINY_RESNET);
    match backend {
        Backend::Sqlite => vec![
            common::corpus_dir().join("onnx/torchvision_graph_only/resnet18.onnx"),
            tiny,
        ],
        Backend::Postgres => vec![tiny],
    }
}

on_both_backends! {
    /// Records that fail replay (and re-targeting) yet claim the best costs fall through to
    /// the workload's next record: matching (exact and class tiers) picks the same
    /// candidates as without them, and `refine` starts from the real record (on SQLite:
    /// refine compiles and times it).
    fn records_that_fail_replay_do_not_hide_the_valid_ones(backend) {
        let path = common::corpus_dir().join("ansor/tvm_ansor_bench_nchwc/resnet_18.best.json");
        let real = std::fs::read_to_string(&path).unwrap();
        let mut hostile = String::new();
        for line in real.lines() {
            let steps = steps_of(line);
            for (i, (_, s)) in hostile_steps(&steps).into_iter().enumerate() {
                let l = with_steps(line, &s, 1e-8 * (1.0 + i as f64 / 100.0));
                // Retargeting repairs split lengths (a class candidate may take such a record
                // legitimately), so only records no tier can use.
                if Record::parse(&l).is_ok() && replays(&l).is_err() && retargets(&l).is_err() {
                    hostile.push_str(&l);
                    hostile.push('\n');
                }
            }
        }
        assert!(
            hostile.lines().count() > 100,
            "hostile records of every workload"
        );
        let dir = tempfile::tempdir().unwrap();
        let (clean, dirty) = (dir.path().join("clean"), dir.path().join("dirty"));
        let mut dbs = Vec::new();
        for (d, text) in [(&clean, real.clone()), (&dirty, real.clone() + &hostile)] {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join("log.json"), text).unwrap();
            let db = new_db(backend, d, "t.db");
            ttdb_within(&db, &["import", d.join("log.json").to_str().unwrap()], 60);
            dbs.push(db);
        }
        let (clean_db, dirty_db) = (&dbs[0], &dbs[1]);
        for model in fall_through_models(backend) {
            let model = model.to_str().unwrap();
            let want = match_sources(clean_db, model);
            assert!(
                want.iter().flatten().any(|c| c.0 == "exact") || !model.contains("resnet18"),
                "resnet18 has exact matches: {want:?}"
            );
            assert!(want.iter().flatten().any(|c| c.0 == "class"), "{want:?}");
            assert_eq!(match_sources(dirty_db, model), want, "{model}");
        }
        if backend == Backend::Sqlite {
            refine_starts_from_the_real_record(dirty_db, &real);
        }
    }
}

/// `refine` of the first victim's workload on `db` (its log `real` and hostile records
/// that claim to be faster) starts from the real record.
fn refine_starts_from_the_real_record(db: &std::path::Path, real: &str) {
    let v = &victims()[0];
    let key = WorkloadKey::parse(&Record::parse(v).unwrap().task.workload_key).unwrap();
    let sig = ttdb::recognize::recognize(&key)
        .unwrap()
        .signature
        .sha256_hex();
    let line = 1 + real.lines().position(|l| l == v).unwrap();
    let refine = json(&ttdb_within(
        db,
        &[
            "refine",
            "--workload",
            &sig[..16],
            "--trials-per-kernel",
            "2",
            "--json",
        ],
        120,
    ));
    let start = refine["kernels"][0]["start_source"].as_str().unwrap_or("");
    assert!(
        start.contains(&format!("log.json:{line}")),
        "refine starts from the real record (line {line}): {refine}"
    );
}
