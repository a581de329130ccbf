//! Reductions with an element-wise prologue: LayerNorm's variance `mean(power(x, 2f))`,
//! which relay's FuseOps fuses into one task (an element-wise producer of a `kCommReduce`
//! op). The DAG is TOPI's: `compile_engine_const()` for the exponent, `T_power`, then
//! relay `mean` as `topi::sum` named `<input>_red` (here `T_power_red`) and `T_divide` by
//! the element count; its PrintDAG text follows the real BERT `mean` key of
//! `bert_cpu/` (md5 `2dde9ffc...`), a key with that text's md5 is recognized, the reference
//! evaluator computes the definition, and the default schedule compiles and verifies.
use ttdb::ansor::WorkloadKey;
use ttdb::evaluate::{evaluate_default, EvalOptions, Reference};
use ttdb::ir::eval::{evaluate, random_inputs};
use ttdb::ir::printdag::md5_hex;
use ttdb::ir::{dag_hash, print_dag};
use ttdb::ops::{Anchor, EpilogueOp, Era, ScalarOp, WorkloadSpec};
use ttdb::recognize::{recognize_uncached, RecognizedBy};

fn square() -> EpilogueOp {
    EpilogueOp::Scalar {
        op: ScalarOp::Power,
        value: 2.0,
        operand_first: false,
    }
}

fn mean_last(prologue: Vec<EpilogueOp>) -> WorkloadSpec {
    WorkloadSpec::new(
        Anchor::Mean {
            axes: vec![2],
            keepdims: true,
        },
        vec![],
    )
    .with_prologue(prologue)
}

fn key(md5: &str, shapes: &[Vec<i64>]) -> WorkloadKey {
    let v: Vec<serde_json::Value> = std::iter::once(serde_json::json!(md5))
        .chain(shapes.iter().map(|s| serde_json::json!(s)))
        .collect();
    WorkloadKey::parse(&serde_json::to_string(&v).unwrap()).unwrap()
}

/// The real `mean` key of the BERT log (TVM 0.8 names), then the same reduction of
/// `T_power`: the sum takes its input's name plus `_red`, the exponent is a rank-0
/// constant stage the post-order DFS meets after the placeholder.
#[test]
fn power_mean_prints_and_hashes_like_tvm() {
    let real = "placeholder = PLACEHOLDER \nplaceholder_red(ax0, ax1, ax2) += placeholder[ax0, ax1, k2]\nT_divide(ax0, ax1, ax2) = (placeholder_red[ax0, ax1, ax2]/768f)\n";
    assert_eq!(md5_hex(real), "2dde9ffcbf97381c0f0307643e09dac5");
    let ins = vec![vec![1, 14, 768]];
    assert_eq!(
        print_dag(&mean_last(vec![]).build(Era::V08, &ins).unwrap()),
        real
    );
    let want = "placeholder = PLACEHOLDER \n\
                compile_engine_const() = 2f\n\
                T_power(ax0, ax1, ax2) = Op(tir.pow)\n\
                T_power_red(ax0, ax1, ax2) += T_power[ax0, ax1, k2]\n\
                T_divide(ax0, ax1, ax2) = (T_power_red[ax0, ax1, ax2]/768f)\n";
    let spec = mean_last(vec![square()]);
    let dag = spec.build(Era::V08, &ins).unwrap();
    assert_eq!(print_dag(&dag), want);
    assert_eq!(dag_hash(&dag), md5_hex(want));
    assert_eq!(spec.op_class(), "power_scalar+mean");
    // a key of that hash is this kernel, by md5, in every era's names
    for era in [Era::V08, Era::V015] {
        let dag = spec.build(era, &ins).unwrap();
        let r =
            recognize_uncached(&key(&dag_hash(&dag), &[ins[0].clone(), vec![1, 14, 1]])).unwrap();
        assert_eq!(r.recognized_by, RecognizedBy::Md5, "{era}");
        assert_eq!(r.spec.as_ref().unwrap(), &spec);
        assert_eq!(r.signature.op_class, "power_scalar+mean");
        assert_eq!(
            r.signature.attrs["prologue_scalars"],
            serde_json::json!([2.0])
        );
    }
    // the plain mean of the same shapes keeps its own signature
    let plain = recognize_uncached(&key(real_md5(), &[ins[0].clone(), vec![1, 14, 1]])).unwrap();
    assert_eq!(plain.signature.op_class, "mean");
}

fn real_md5() -> &'static str {
    "2dde9ffcbf97381c0f0307643e09dac5"
}

/// The reference evaluator computes `mean(x^e)` over the last axis.
#[test]
fn power_mean_computes_the_mean_of_powers() {
    for e in [2.0, 3.0] {
        let p = EpilogueOp::Scalar {
            op: ScalarOp::Power,
            value: e,
            operand_first: false,
        };
        let dag = mean_last(vec![p])
            .build(Era::V015, &[vec![1, 3, 8]])
            .unwrap();
        let ins = random_inputs(&dag, 5);
        let out = evaluate(&dag, &ins).unwrap().remove(0);
        assert_eq!(out.shape, vec![1, 3, 1]);
        for r in 0..3 {
            let want = ins[0].data[r * 8..(r + 1) * 8]
                .iter()
                .map(|x| x.powf(e))
                .sum::<f64>()
                / 8.0;
            assert!(
                (out.data[r] - want).abs() < 1e-9,
                "{} vs {want}",
                out.data[r]
            );
        }
    }
}

/// Only reductions take a prologue, and only operand-free ops.
#[test]
fn prologues_are_refused_where_relay_has_none() {
    let dense = WorkloadSpec::new(Anchor::Dense, vec![]).with_prologue(vec![square()]);
    let e = dense
        .build(Era::V015, &[vec![2, 3], vec![4, 3]])
        .unwrap_err();
    assert!(e.0.contains("takes no fused prologue"), "{}", e.0);
    let tensor = mean_last(vec![EpilogueOp::Multiply {
        operand_first: false,
    }]);
    let e = tensor.build(Era::V015, &[vec![1, 3, 8]]).unwrap_err();
    assert!(e.0.contains("tensor operand"), "{}", e.0);
}

/// The default schedule (power and constant stages at root) lowers, compiles and verifies.
#[test]
fn power_mean_default_schedule_verifies() {
    let opts = EvalOptions {
        verify_only: true,
        ..EvalOptions::default()
    };
    for (shape, axes) in [(vec![1, 14, 768], vec![2]), (vec![1, 7, 7, 96], vec![3])] {
        let spec = WorkloadSpec::new(
            Anchor::Mean {
                axes,
                keepdims: true,
            },
            vec![],
        )
        .with_prologue(vec![square()]);
        let dag = spec.build(Era::V015, &[shape]).unwrap();
        let reference = Reference::new(&dag, 3).unwrap();
        let e = evaluate_default(&dag, &reference, &opts);
        assert!(e.verified(), "{}: {:?}", spec.op_class(), e.failure);
    }
}

/// Ansor's sketch rules on the kernel: the power and its constant are strictly inlinable
/// (`RuleAlwaysInline`), so every sketch inlines both into the reduction.
#[test]
fn sketches_inline_the_prologue() {
    use ttdb::ansor::Step;
    use ttdb::search::sketch::{generate_sketches, HardwareParams};
    let dag = mean_last(vec![square()])
        .build(Era::V015, &[vec![1, 128, 768]])
        .unwrap();
    let power = dag.find("T_power").unwrap();
    let constant = dag.find("compile_engine_const").unwrap();
    let sketches = generate_sketches(
        &dag,
        &HardwareParams {
            num_cores: 2,
            vector_lanes: 8,
        },
    )
    .unwrap();
    assert!(!sketches.is_empty());
    for sk in &sketches {
        let inlined: Vec<usize> = sk
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::ComputeInline(ci) => Some(ci.stage_id as usize),
                _ => None,
            })
            .collect();
        assert!(inlined.contains(&power.0), "{:?}", sk.steps);
        assert!(inlined.contains(&constant.0), "{:?}", sk.steps);
    }
}
