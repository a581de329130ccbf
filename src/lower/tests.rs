//! Unit tests of lowering: small DAGs from ttdb's op builders, schedules exercising one
//! feature each, every kernel run in the checked interpreter against `ir::eval`.
use super::check::interpret_against_reference;
use super::*;
use crate::ansor::Step;
use crate::ir::Dag;
use crate::loopnest::{kernel_to_string, Attr, ForKind, Stmt};
use crate::ops::{registered, Anchor, EpilogueOp, Era, PoolAttrs, PoolKind, PoolLayout, Window2d, WorkloadSpec};
use crate::schedule::{replay, stage_inits_from_dag};

pub(crate) fn steps(json: &str) -> Vec<Step> {
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    v.as_array().unwrap().iter().map(|s| Step::from_json(s).unwrap()).collect()
}

/// Replays, lowers, interprets and compares; returns the kernel.
pub(crate) fn lowered_ok(dag: &Dag, json: &str) -> Kernel {
    let st = steps(json);
    let state = replay(&stage_inits_from_dag(dag), &st).unwrap_or_else(|e| panic!("replay: {e}"));
    let k = lower(dag, &state, &LowerOptions::default()).unwrap_or_else(|e| panic!("lower: {e}"));
    let cmp = interpret_against_reference(dag, &k, 11, Some(200_000_000))
        .unwrap_or_else(|e| panic!("{e}\n{}", kernel_to_string(&k)));
    assert!(cmp.rel_err < 1e-5, "relative error {} \n{}", cmp.rel_err, kernel_to_string(&k));
    k
}

fn lower_err(dag: &Dag, json: &str) -> LowerError {
    let state = replay(&stage_inits_from_dag(dag), &steps(json)).unwrap_or_else(|e| panic!("replay: {e}"));
    match lower(dag, &state, &LowerOptions::default()) {
        Ok(k) => panic!("lowered:\n{}", kernel_to_string(&k)),
        Err(e) => e,
    }
}

fn matmul(n: i64, l: i64, m: i64) -> Dag {
    registered::matmul_add(n, l, m, crate::ir::DType::F32).unwrap()
}

fn conv_bias_relu(data: [i64; 4], kernel: [i64; 4], stride: i64, pad: i64) -> Dag {
    let spec = WorkloadSpec::new(Anchor::Conv2dNhwc(Window2d::simple(stride, pad)), vec![EpilogueOp::Add { operand_first: false }, EpilogueOp::Relu]);
    spec.build(Era::V07, &[data.to_vec(), kernel.to_vec(), vec![1, 1, 1, kernel[3]]]).unwrap()
}

fn dense(m: i64, n: i64, k: i64) -> Dag {
    WorkloadSpec::new(Anchor::Dense, vec![]).build(Era::V08, &[vec![m, k], vec![n, k]]).unwrap()
}

fn softmax(n: i64) -> Dag {
    WorkloadSpec::new(Anchor::Softmax { axis: 1 }, vec![]).build(Era::V08, &[vec![1, n]]).unwrap()
}

fn count(s: &Stmt, f: &dyn Fn(&Stmt) -> bool) -> usize {
    let here = f(s) as usize;
    here + match s {
        Stmt::For { body, .. } | Stmt::Attr { body, .. } | Stmt::Allocate { body, .. } => count(body, f),
        Stmt::Seq(v) => v.iter().map(|x| count(x, f)).sum(),
        Stmt::IfThenElse { then_, else_, .. } => count(then_, f) + else_.as_ref().map_or(0, |e| count(e, f)),
        _ => 0,
    }
}

#[test]
fn default_schedules_match_the_reference() {
    let dags = [
        matmul(8, 5, 6),
        conv_bias_relu([1, 6, 6, 3], [3, 3, 3, 4], 1, 1),
        conv_bias_relu([1, 7, 7, 4], [1, 1, 4, 8], 2, 0),
        dense(3, 5, 7),
        softmax(10),
    ];
    for dag in &dags {
        let k = lower_default(dag).unwrap();
        let cmp = interpret_against_reference(dag, &k, 3, None).unwrap();
        assert!(cmp.rel_err < 1e-5, "{}", kernel_to_string(&k));
        // every stage at root: one allocation per non-output compute stage
        let temps = dag.stages.iter().filter(|s| !s.is_placeholder()).count() - dag.outputs.len();
        assert_eq!(count(&k.body, &|s| matches!(s, Stmt::Allocate { .. })), temps);
    }
}

/// The spec's worked example (§2.5, `matmul_add` 1024^3), re-targeted to 32x48x16: tiles,
/// reorder, compute_at into a fused parallel loop, vectorize, auto_unroll pragma.
const MATMUL_EXAMPLE: &str = r#"[["SP", 2, 0, 1024, [2, 1, 4], 1], ["SP", 2, 4, 1024, [1, 1, 8], 1], ["SP", 2, 8, 1024, [4], 1],
 ["RE", 2, [0, 4, 1, 5, 8, 2, 6, 9, 3, 7]], ["FSP", 4, 0, 0, 2], ["FSP", 4, 3, 1, 2], ["RE", 4, [0, 3, 1, 4, 2, 5]],
 ["CA", 2, 4, 3], ["FU", 4, [0, 1]], ["AN", 4, 0, 3], ["PR", 2, 0, "auto_unroll_max_step$8"], ["AN", 2, 9, 2], ["AN", 4, 4, 2]]"#;

#[test]
fn tiled_matmul_with_compute_at_and_annotations() {
    let dag = matmul(32, 16, 48);
    let r = retarget_steps(&stage_inits_from_dag(&dag), &steps(MATMUL_EXAMPLE)).unwrap();
    let json = format!("[{}]", r.steps.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(","));
    let k = lowered_ok(&dag, &json);
    assert_eq!(count(&k.body, &|s| matches!(s, Stmt::For { kind: ForKind::Parallel, .. })), 1);
    assert!(count(&k.body, &|s| matches!(s, Stmt::For { kind: ForKind::Vectorized, .. })) >= 2);
    assert_eq!(count(&k.body, &|s| matches!(s, Stmt::Attr { attr: Attr::AutoUnroll { max_step: 8, explicit: true }, .. })), 1);
    // matmul is computed per tile: its temporary is the tile, not the whole matrix
    let temp = find_alloc(&k.body, "matmul").unwrap();
    assert_eq!(temp.shape, vec![4, 8], "{}", kernel_to_string(&k));
    // the unrolled/ JIT-ready form is still correct
    let unrolled = crate::loopnest::unroll_loops(&k).unwrap();
    let cmp = interpret_against_reference(&dag, &unrolled, 5, None).unwrap();
    assert!(cmp.rel_err < 1e-5);
}

fn find_alloc(s: &Stmt, name: &str) -> Option<crate::loopnest::Buffer> {
    match s {
        Stmt::Allocate { buffer, body } => if buffer.name == name { Some(buffer.clone()) } else { find_alloc(body, name) },
        Stmt::For { body, .. } | Stmt::Attr { body, .. } => find_alloc(body, name),
        Stmt::Seq(v) => v.iter().find_map(|x| find_alloc(x, name)),
        Stmt::IfThenElse { then_, else_, .. } => find_alloc(then_, name).or_else(|| else_.as_ref().and_then(|e| find_alloc(e, name))),
        _ => None,
    }
}

#[test]
fn non_divisible_splits_are_guarded() {
    // 7 = 2*4 - 1, 5 split by 3, k 6 split by 4
    let dag = matmul(7, 6, 5);
    let k = lowered_ok(&dag, r#"[["SP", 2, 0, 7, [4], 1], ["SP", 2, 2, 5, [3], 1], ["SP", 2, 4, 6, [4], 1], ["RE", 2, [0, 2, 4, 1, 3, 5]]]"#);
    assert!(count(&k.body, &|s| matches!(s, Stmt::IfThenElse { .. })) >= 2, "{}", kernel_to_string(&k));
    // nparts splits, and a split of the output with a factor larger than the extent
    lowered_ok(&dag, r#"[["SP", 4, 0, 7, [3, 2], 0], ["SP", 4, 3, 5, [8], 1], ["SP", 2, 2, 6, [5], 0]]"#);
}

#[test]
#[ignore]
fn print_example() {
    let dag = matmul(32, 16, 48);
    let r = retarget_steps(&stage_inits_from_dag(&dag), &steps(MATMUL_EXAMPLE)).unwrap();
    let k = lower(&dag, &r.state, &LowerOptions::default()).unwrap();
    println!("{}", kernel_to_string(&k));
    let dag = matmul(7, 6, 5);
    let k = lowered_ok(&dag, r#"[["SP", 2, 0, 7, [4], 1], ["SP", 2, 2, 5, [3], 1], ["SP", 2, 4, 6, [4], 1], ["RE", 2, [0, 2, 4, 1, 3, 5]]]"#);
    println!("{}", kernel_to_string(&k));
}
