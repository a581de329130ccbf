//! `ttdb run`'s executor: one arena for the intermediate tensors, reused run after run, and
//! `--repeat`'s timing report.
use crate::common;

use serde_json::Value;
use std::collections::HashMap;
use ttdb::loopnest::ir::DType;
use ttdb::loopnest::BufferData;
use ttdb::onnx::{fill, LayoutMode, Options};
use ttdb::run::{ModelRun, ModelRunOptions};
use ttdb::target::Target;

fn mnasnet() -> std::path::PathBuf {
    common::corpus_dir().join("onnx/torchvision_more/mnasnet1_0.onnx")
}

fn inputs_of(run: &ModelRun) -> HashMap<String, BufferData> {
    run.inputs
        .iter()
        .map(|p| {
            assert_eq!(p.dtype, DType::F32, "{}", p.name);
            let n = p.shape.iter().product::<i64>() as usize;
            (
                p.name.clone(),
                BufferData::F32(fill::input_floats(&p.name, n)),
            )
        })
        .collect()
}

#[test]
fn the_arena_is_smaller_than_the_tensors_and_reruns_give_identical_outputs() {
    let opts = ModelRunOptions {
        layout: LayoutMode::Nchwc,
        input_shapes: vec![],
        extract: Options::default().with_default_tophub().unwrap(),
        target: Target::detect(),
        weight_limits: Default::default(),
        naive: false,
        records: Default::default(),
    };
    let run = ModelRun::load(&mnasnet(), &opts, None).unwrap();
    let m = &run.memory;
    println!("{m:?}");
    assert!(m.intermediates > 40, "{m:?}");
    // a chain of convs needs a few tensors at a time, not all of them
    assert!(m.arena_bytes * 3 < m.intermediates_bytes, "{m:?}");
    assert!(m.weights_bytes > 4_000_000, "{m:?}");

    let given = inputs_of(&run);
    let (first, _) = run.run(&given, None).unwrap();
    // the same workspace again, and again on 1 thread: the arena's stale contents from the
    // previous run never leak into the outputs
    let inputs: Vec<&BufferData> = run.inputs.iter().map(|p| &given[&p.name]).collect();
    let mut ws = run.workspace().unwrap();
    for threads in [None, Some(1), None] {
        let times = run.run_in(&mut ws, &inputs, threads).unwrap();
        assert_eq!(times.len(), run.plan.len());
        assert_eq!(ws.outputs, first, "threads {threads:?}");
    }
    // a different input changes the output (the input is read from the caller's buffer)
    let other: Vec<BufferData> = run
        .inputs
        .iter()
        .map(|p| {
            let n = p.shape.iter().product::<i64>() as usize;
            BufferData::F32(fill::input_floats("another input", n))
        })
        .collect();
    let refs: Vec<&BufferData> = other.iter().collect();
    run.run_in(&mut ws, &refs, None).unwrap();
    assert_ne!(ws.outputs, first);

    // inputs of the wrong dtype or count are refused, naming the input
    let wrong = BufferData::I64(vec![0; 3 * 224 * 224]);
    let e = run.run_in(&mut ws, &[&wrong], None).unwrap_err();
    assert!(e.contains("input `input` is int64"), "{e}");
    let short = BufferData::F32(vec![0.0; 10]);
    let e = run.run_in(&mut ws, &[&short], None).unwrap_err();
    assert!(e.contains("input `input` has 10 values"), "{e}");
    let e = run.run_in(&mut ws, &[], None).unwrap_err();
    assert!(e.contains("takes 1 inputs, got 0"), "{e}");
}

#[test]
fn repeat_reports_the_latency_and_where_it_goes() {
    let dir = tempfile::tempdir().unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_ttdb"))
        .args(["run", mnasnet().to_str().unwrap(), "--deterministic-inputs"])
        .args(["--repeat", "3", "--threads", "2", "--json", "-o"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let r = &v["repeat"];
    assert_eq!(r["runs"], 3);
    assert_eq!(r["threads"], 2);
    let f = |k: &str| r[k].as_f64().unwrap();
    assert!(0.0 < f("min_ms") && f("min_ms") <= f("median_ms"), "{r}");
    assert!(f("median_ms") <= f("p90_ms"), "{r}");
    assert!(
        (0.0..1.0).contains(&f("glue_share")) && f("glue_share") > 0.0,
        "{r}"
    );
    let kernels = r["kernels"].as_array().unwrap();
    assert_eq!(kernels.len(), v["kernels"].as_u64().unwrap() as usize);
    let sum: f64 = kernels
        .iter()
        .map(|k| k["median_ms"].as_f64().unwrap())
        .sum();
    assert!((sum - f("anchored_ms") - f("glue_ms")).abs() < 1e-6 * sum.max(1.0));
    let m = &v["memory"];
    assert!(m["arena_bytes"].as_u64().unwrap() < m["intermediates_bytes"].as_u64().unwrap());

    // the text report names the figures
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_ttdb"))
        .args(["run", mnasnet().to_str().unwrap(), "--deterministic-inputs"])
        .args(["--repeat", "2", "-o"])
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for needle in ["2 runs on", "median", "p90", "glue", "memory: arena"] {
        assert!(text.contains(needle), "`{needle}` missing:\n{text}");
    }

    let o = std::process::Command::new(env!("CARGO_BIN_EXE_ttdb"))
        .args(["run", mnasnet().to_str().unwrap(), "--deterministic-inputs"])
        .args(["--repeat", "0"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--repeat 0"));
}

/// A schedule that reads its right operand packed (Ansor's layout rewrite), on a
/// batch_matmul whose right operand is an activation: the run packs it every time, in a
/// step of its own before the kernel (it cannot be packed at load like a weight), and the
/// outputs equal the naive loop nest's. The j split does not divide 10, so the packed layout
/// has holes.
#[test]
fn an_activation_the_schedule_reads_packed_is_packed_by_a_step_of_its_own() {
    use ttdb::ops::{Anchor, Era, WorkloadSpec};
    use ttdb::run::Schedule;
    use ttdb::tune::apply::workload_key_of;
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("attention_scores.onnx");
    let mut b = ttdb_testkit::onnx_model::ModelBuilder::new("attention_scores", 13);
    b.input("q", &[1, 3, 10, 8])
        .input("kt", &[1, 3, 8, 10])
        .node("MatMul", "scores", &["q", "kt"], &["y"], vec![])
        .output("y");
    std::fs::write(&model, b.encode()).unwrap();

    // the shape of a real vit_b_16 record, scaled down: b 3, i 10, j 10 (split 2 x 3 x 2,
    // padded to 12), k 8
    let dag = WorkloadSpec::new(Anchor::BatchMatmul { transpose_b: true }, vec![])
        .build(Era::V010, &[vec![3, 10, 8], vec![3, 10, 8]])
        .unwrap();
    let steps = r#"[["CHW", 2, "local"], ["SP", 2, 0, 3, [1, 1, 1], 1], ["SP", 2, 4, 10, [1, 2, 1], 1], ["SP", 2, 8, 10, [1, 3, 2], 1], ["SP", 2, 12, 8, [4], 1], ["RE", 2, [0, 4, 8, 1, 5, 9, 12, 2, 6, 10, 13, 3, 7, 11]], ["FSP", 3, 0, 1, 2], ["FSP", 3, 3, 2, 2], ["FSP", 3, 6, 3, 2], ["RE", 3, [0, 3, 6, 1, 4, 7, 2, 5, 8]], ["CA", 2, 3, 5], ["FU", 3, [0, 1]], ["AN", 3, 0, 3], ["PR", 2, 0, "auto_unroll_max_step$16"], ["AN", 2, 13, 2]]"#;
    let record = serde_json::json!({
        "i": [[workload_key_of(&dag), "llvm -keys=cpu", [2, 64, 64, 0, 0, 0, 0, 0], "", 2, []],
              [[], serde_json::from_str::<Value>(steps).unwrap()]],
        "r": [[1e-5], 0, 0.1, 1],
        "v": "v0.6"
    });
    let log = dir.path().join("scores.json");
    std::fs::write(&log, format!("{record}\n")).unwrap();
    let db = dir.path().join("t.db");
    let (code, _, err) = common::ttdb_on(&db, &["import", log.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");

    let mut opts = ModelRunOptions {
        layout: LayoutMode::Nchwc,
        input_shapes: vec![],
        extract: Options::default(),
        target: Target::detect(),
        weight_limits: Default::default(),
        naive: false,
        records: Default::default(),
    };
    let store = common::open_db(&db);
    let run = ModelRun::load(&model, &opts, Some(&store)).unwrap();
    let at = |class: &str| run.plan.iter().position(|k| k.class == class);
    let (pack, kernel) = (at("layout_rewrite").unwrap(), at("batch_matmul").unwrap());
    assert_eq!(pack + 1, kernel, "{:?}", run.plan);
    assert!(matches!(run.plan[kernel].schedule, Schedule::Stored(_)));
    assert_eq!(run.packed_weights, 0, "nothing is a constant");
    let given = inputs_of(&run);
    let (tuned, _) = run.run(&given, None).unwrap();

    opts.naive = true;
    let naive = ModelRun::load(&model, &opts, None).unwrap();
    assert!(
        at("layout_rewrite").is_some() && naive.plan.iter().all(|k| k.class != "layout_rewrite")
    );
    let (want, _) = naive.run(&given, None).unwrap();
    let (BufferData::F32(got), BufferData::F32(want)) = (&tuned[0], &want[0]) else {
        panic!("f32 outputs")
    };
    assert_eq!(got.len(), 300);
    let worst = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst < 1e-5, "worst difference {worst}");
}
