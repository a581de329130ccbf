//! batch_matmul with `transpose_b = False` (weights `[B, K, N]`): what TVM >= 0.8 builds for a
//! BERT's 3-D dense layers and attention products when the frontend keeps the right operand
//! as it is (TensorFlow's, or ONNX's with `use_nt_batch_matmul=False`). Its keys are
//! recognized by md5, records ttdb writes for it replay, compile and verify, and the ONNX
//! frontend produces it under `Options::nt_batch_matmul = false` only.
use crate::common;
use ttdb::ansor::{Record, WorkloadKey};
use ttdb::evaluate::{evaluate_steps, EvalOptions, Reference};
use ttdb::ir::{print_dag, Dag};
use ttdb::onnx::{self, Options};
use ttdb::ops::{Anchor, Era, WorkloadSpec};
use ttdb::recognize::{recognize_uncached, RecognizedBy};
use ttdb::schedule::{retarget_steps, stage_inits_from_dag};
use ttdb::tune::apply::workload_key_of;
use ttdb_testkit::onnx_model::ModelBuilder;

/// The two shapes: a 3-D dense layer and an attention product.
const SHAPES: [[[i64; 3]; 2]; 2] = [
    [[1, 128, 768], [1, 768, 3072]],
    [[12, 128, 64], [12, 64, 128]],
];

fn nn(transpose_b: bool) -> WorkloadSpec {
    WorkloadSpec::new(Anchor::BatchMatmul { transpose_b }, vec![])
}

fn build(era: Era, a: &[i64], b: &[i64]) -> Dag {
    nn(false).build(era, &[a.to_vec(), b.to_vec()]).unwrap()
}

#[test]
fn nn_dag_prints_like_tvm() {
    let text = print_dag(&build(Era::V010, &SHAPES[1][0], &SHAPES[1][1]));
    assert!(
        text.contains("T_batch_matmul_NN(b, i, j) += (p0[b, i, k]*p1[b, k, j])"),
        "{text}"
    );
    // a batch of 1 is indexed with 0 (TOPI's `b if XB != 1 else 0`)
    let text = print_dag(&build(Era::V08, &SHAPES[0][0], &SHAPES[0][1]));
    assert!(
        text.contains("T_batch_matmul_NN(b, i, j) += (placeholder[0, i, k]*placeholder[0, k, j])"),
        "{text}"
    );
    // TVM 0.7 had no transpose_b
    let old = nn(false).build(Era::V07, &[SHAPES[1][0].to_vec(), SHAPES[1][1].to_vec()]);
    assert!(old.is_err());
}

#[test]
fn nn_keys_are_recognized_by_md5() {
    for [a, b] in SHAPES {
        for era in [Era::V08, Era::V09, Era::V010, Era::V015] {
            let dag = build(era, &a, &b);
            let key = WorkloadKey::parse(&workload_key_of(&dag)).unwrap();
            let r = recognize_uncached(&key).unwrap_or_else(|e| panic!("{a:?} x {b:?}: {e}"));
            assert_eq!(r.recognized_by, RecognizedBy::Md5, "{a:?} x {b:?} {era}");
            assert_eq!(r.spec, Some(nn(false)));
            assert_eq!(r.signature.layout, "BKN");
            assert_eq!(print_dag(&r.dag), print_dag(&dag));
        }
    }
    // a square weight fits both layouts: the md5 tells them apart, and so do the signatures
    let (a, b) = (vec![4, 16, 32], vec![4, 32, 32]);
    let mut sigs = Vec::new();
    for transpose_b in [true, false] {
        let dag = nn(transpose_b)
            .build(Era::V010, &[a.clone(), b.clone()])
            .unwrap();
        let key = WorkloadKey::parse(&workload_key_of(&dag)).unwrap();
        let r = recognize_uncached(&key).unwrap();
        assert_eq!(r.spec, Some(nn(transpose_b)));
        sigs.push(r.signature.sha256_hex());
    }
    assert_ne!(sigs[0], sigs[1]);
}

/// A real batch_matmul record of the BERT log (TVM 0.7, NT), its steps re-targeted onto the
/// NN DAG (same stages), written by ttdb's writer with the NN key, read back, recognized,
/// replayed, compiled and verified at both shapes.
#[test]
fn records_written_by_ttdb_replay_and_verify() {
    let path = common::corpus_dir().join("ansor/bert_cpu/ansor-bert-tuning.stage1.log");
    let text = std::fs::read_to_string(path).unwrap();
    let real = text
        .lines()
        .map(|l| Record::parse(l).unwrap())
        .find(|r| r.result.is_valid() && r.task.workload_key.contains("32a5ff20"))
        .expect("a batch_matmul record in the BERT log");
    for [a, b] in SHAPES {
        let dag = build(Era::V010, &a, &b);
        let steps = retarget_steps(&stage_inits_from_dag(&dag), &real.steps)
            .unwrap()
            .steps;
        let mut record = real.clone();
        record.task.workload_key = workload_key_of(&dag);
        record.steps = steps;
        let back = Record::parse(&record.to_line()).unwrap();
        let key = WorkloadKey::parse(&back.task.workload_key).unwrap();
        let r = recognize_uncached(&key).unwrap();
        assert_eq!(r.recognized_by, RecognizedBy::Md5);
        let reference = Reference::new(&r.dag, 3).unwrap();
        let opts = EvalOptions {
            verify_only: true,
            ..EvalOptions::default()
        };
        let e = evaluate_steps(&r.dag, &back.steps, &reference, &opts);
        assert!(e.verified(), "{a:?} x {b:?}: {:?}", e.failure);
    }
}

/// `x [1, 16, 32] -> MatMul(x, w [1, 32, 24]) -> MatMul(., y [1, 24, 8])`: a 3-D weight, then
/// an activation x activation product.
fn model() -> Vec<u8> {
    let mut m = ModelBuilder::new("bmm", 13);
    m.input("x", &[1, 16, 32]).input("y", &[1, 24, 8]);
    m.weight("w", &[1, 32, 24]);
    m.node("MatMul", "/mm1", &["x", "w"], &["h"], vec![]);
    m.node("MatMul", "/mm2", &["h", "y"], &["out"], vec![]);
    m.output("out");
    m.encode()
}

#[test]
fn onnx_matmuls_are_nn_kernels_without_nt_batch_matmul() {
    let g = onnx::load_bytes(&model(), &[]).unwrap();
    for nt in [true, false] {
        let opts = Options {
            nt_batch_matmul: nt,
            ..Options::default()
        };
        let list = onnx::extract(&g, &opts).unwrap();
        let bmm: Vec<_> = list.kernels.iter().filter(|k| k.is_anchored()).collect();
        assert_eq!(bmm.len(), 2, "{list:#?}");
        let (n1, n2) = if nt {
            ([1, 24, 32], [1, 8, 24])
        } else {
            ([1, 32, 24], [1, 24, 8])
        };
        for (k, w) in bmm.iter().zip([n1, n2]) {
            assert_eq!(k.spec, Some(nn(nt)), "{}", k.class);
            assert_eq!(k.inputs[1], w);
            let r = common::recognized_by_md5(k, &common::kernel_dag(k));
            assert_eq!(r.signature.layout, if nt { "BNK" } else { "BKN" });
        }
        // the default keeps the transposed right operand: a `transpose` kernel for `y`
        let transposes = list
            .kernels
            .iter()
            .filter(|k| k.class == "transpose")
            .count();
        assert_eq!(transposes, usize::from(nt), "{list:#?}");
    }
}
