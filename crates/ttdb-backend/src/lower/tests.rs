//! Unit tests of lowering: small DAGs from ttdb's op builders, schedules exercising one
//! feature each, every kernel run in the checked interpreter against `ir::eval`.
use super::check::interpret_against_reference;
use super::*;
use crate::loopnest::Expr;
use crate::loopnest::{kernel_to_string, Attr, ForKind, Stmt};
use ttdb_algo::ir::Dag;
use ttdb_algo::ops::{
    registered, Anchor, EpilogueOp, Era, PoolAttrs, PoolKind, PoolLayout, Window2d, WorkloadSpec,
};
use ttdb_algo::schedule::{replay, retarget_steps, stage_inits_from_dag};
use ttdb_format::ansor::Step;

pub fn steps(json: &str) -> Vec<Step> {
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| Step::from_json(s).unwrap())
        .collect()
}

/// Replays, lowers, interprets and compares; returns the kernel.
pub fn lowered_ok(dag: &Dag, json: &str) -> Kernel {
    let st = steps(json);
    let state = replay(&stage_inits_from_dag(dag), &st).unwrap_or_else(|e| panic!("replay: {e}"));
    let k = lower(dag, &state, &LowerOptions::default()).unwrap_or_else(|e| panic!("lower: {e}"));
    let cmp = interpret_against_reference(dag, &k, 11, Some(200_000_000))
        .unwrap_or_else(|e| panic!("{e}\n{}", kernel_to_string(&k)));
    assert!(
        cmp.rel_err < 1e-5,
        "relative error {} \n{}",
        cmp.rel_err,
        kernel_to_string(&k)
    );
    k
}

fn lower_err(dag: &Dag, json: &str) -> LowerError {
    let state =
        replay(&stage_inits_from_dag(dag), &steps(json)).unwrap_or_else(|e| panic!("replay: {e}"));
    match lower(dag, &state, &LowerOptions::default()) {
        Ok(k) => panic!("lowered:\n{}", kernel_to_string(&k)),
        Err(e) => e,
    }
}

fn matmul(n: i64, l: i64, m: i64) -> Dag {
    registered::matmul_add(n, l, m, ttdb_algo::ir::DType::F32).unwrap()
}

fn conv_bias_relu(data: [i64; 4], kernel: [i64; 4], stride: i64, pad: i64) -> Dag {
    let spec = WorkloadSpec::new(
        Anchor::Conv2dNhwc(Window2d::simple(stride, pad)),
        vec![
            EpilogueOp::Add {
                operand_first: false,
            },
            EpilogueOp::Relu,
        ],
    );
    spec.build(
        Era::V07,
        &[data.to_vec(), kernel.to_vec(), vec![1, 1, 1, kernel[3]]],
    )
    .unwrap()
}

fn dense(m: i64, n: i64, k: i64) -> Dag {
    WorkloadSpec::new(Anchor::Dense, vec![])
        .build(Era::V08, &[vec![m, k], vec![n, k]])
        .unwrap()
}

fn softmax(n: i64) -> Dag {
    WorkloadSpec::new(Anchor::Softmax { axis: 1 }, vec![])
        .build(Era::V08, &[vec![1, n]])
        .unwrap()
}

fn count(s: &Stmt, f: &dyn Fn(&Stmt) -> bool) -> usize {
    let here = f(s) as usize;
    here + match s {
        Stmt::For { body, .. } | Stmt::Attr { body, .. } | Stmt::Allocate { body, .. } => {
            count(body, f)
        }
        Stmt::Seq(v) => v.iter().map(|x| count(x, f)).sum(),
        Stmt::IfThenElse { then_, else_, .. } => {
            count(then_, f) + else_.as_ref().map_or(0, |e| count(e, f))
        }
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
        assert_eq!(
            count(&k.body, &|s| matches!(s, Stmt::Allocate { .. })),
            temps
        );
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
    let json = format!(
        "[{}]",
        r.steps
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let k = lowered_ok(&dag, &json);
    assert_eq!(
        count(&k.body, &|s| matches!(
            s,
            Stmt::For {
                kind: ForKind::Parallel,
                ..
            }
        )),
        1
    );
    assert!(
        count(&k.body, &|s| matches!(
            s,
            Stmt::For {
                kind: ForKind::Vectorized,
                ..
            }
        )) >= 2
    );
    assert_eq!(
        count(&k.body, &|s| matches!(
            s,
            Stmt::Attr {
                attr: Attr::AutoUnroll {
                    max_step: 8,
                    explicit: true
                },
                ..
            }
        )),
        1
    );
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
        Stmt::Allocate { buffer, body } => {
            if buffer.name == name {
                Some(buffer.clone())
            } else {
                find_alloc(body, name)
            }
        }
        Stmt::For { body, .. } | Stmt::Attr { body, .. } => find_alloc(body, name),
        Stmt::Seq(v) => v.iter().find_map(|x| find_alloc(x, name)),
        Stmt::IfThenElse { then_, else_, .. } => {
            find_alloc(then_, name).or_else(|| else_.as_ref().and_then(|e| find_alloc(e, name)))
        }
        _ => None,
    }
}

#[test]
fn non_divisible_splits_are_guarded() {
    // 7 = 2*4 - 1, 5 split by 3, k 6 split by 4
    let dag = matmul(7, 6, 5);
    let k = lowered_ok(
        &dag,
        r#"[["SP", 2, 0, 7, [4], 1], ["SP", 2, 2, 5, [3], 1], ["SP", 2, 4, 6, [4], 1], ["RE", 2, [0, 2, 4, 1, 3, 5]]]"#,
    );
    assert!(
        count(&k.body, &|s| matches!(s, Stmt::IfThenElse { .. })) >= 2,
        "{}",
        kernel_to_string(&k)
    );
    // nparts splits, and a split of the output with a factor larger than the extent
    lowered_ok(
        &dag,
        r#"[["SP", 4, 0, 7, [3, 2], 0], ["SP", 4, 3, 5, [8], 1], ["SP", 2, 2, 6, [5], 0]]"#,
    );
}

/// Split lengths whose product is 3x the extent (what Droplet search emits), factor and nparts:
/// TE tightens each inner loop to its parent's extent and guards the rest, as TVM lowers them.
#[test]
fn over_long_splits_are_guarded() {
    let dag = matmul(8, 6, 5);
    // i 8 by [4, 6] (24: loops 1 x 2 x 6, guarded), j 5 by [15] (one length 3x the extent,
    // tightened to 5), k 6 by nparts [4, 6] (loops 4 x 2 x 1, guarded); the output follows
    // with FSP and holds the matmul at its outermost loop
    let k = lowered_ok(
        &dag,
        r#"[["SP", 2, 0, 8, [4, 6], 1], ["SP", 2, 3, 5, [15], 1], ["SP", 2, 5, 6, [4, 6], 0],
            ["RE", 2, [0, 3, 5, 1, 4, 6, 2, 7]], ["FSP", 4, 0, 0, 1], ["FSP", 4, 2, 1, 1],
            ["CA", 2, 4, 0]]"#,
    );
    assert!(
        count(&k.body, &|s| matches!(s, Stmt::IfThenElse { .. })) >= 1,
        "{}",
        kernel_to_string(&k)
    );
    // no loop runs past the extent of the axis it splits
    let longest = max_for_extent(&k.body);
    assert!(longest <= 8, "{longest}\n{}", kernel_to_string(&k));
    // the output by nparts [4, 6] and factors [2, 8], over-long parts fused into a parallel
    // loop and vectorized; the matmul's k by [18]
    lowered_ok(
        &dag,
        r#"[["SP", 4, 0, 8, [4, 6], 0], ["SP", 4, 3, 5, [2, 8], 1], ["FU", 4, [0, 1]],
            ["AN", 4, 0, 3], ["AN", 4, 4, 2], ["SP", 2, 2, 6, [18], 1]]"#,
    );
}

/// An NHWC conv sketch whose every SP has lengths with a product 3x the extent; FSP follows
/// them, the conv is computed in the relu's tile.
#[test]
fn conv_sketch_with_over_long_splits() {
    let dag = conv_bias_relu([1, 8, 8, 8], [3, 3, 8, 16], 1, 1);
    let sketch = CONV_SKETCH
        .replace(r#"[1, 2, 2]"#, r#"[2, 3, 4]"#)
        .replace(r#"[2, 1, 2]"#, r#"[4, 2, 3]"#)
        .replace(r#"[2, 2, 4]"#, r#"[4, 4, 3]"#)
        .replace(
            r#"["SP", 3, 20, 8, [4], 1]"#,
            r#"["SP", 3, 20, 8, [24], 1]"#,
        );
    assert_ne!(sketch, CONV_SKETCH);
    lowered_ok(&dag, &sketch);
}

fn max_for_extent(s: &Stmt) -> i64 {
    match s {
        Stmt::For { extent, body, .. } => extent
            .as_int()
            .unwrap_or(i64::MAX)
            .max(max_for_extent(body)),
        Stmt::Attr { body, .. } | Stmt::Allocate { body, .. } => max_for_extent(body),
        Stmt::Seq(v) => v.iter().map(max_for_extent).max().unwrap_or(0),
        Stmt::IfThenElse { then_, else_, .. } => {
            max_for_extent(then_).max(else_.as_deref().map_or(0, max_for_extent))
        }
        _ => 0,
    }
}

/// The usual CPU sketch of an NHWC conv (spec §4.1): bias add inlined, SSRSRS tiles, the conv
/// computed at the relu's fused parallel tile loop, padding inlined, vectorized inner loops.
const CONV_SKETCH: &str = r#"[["CI", 5], ["SP", 3, 0, 1, [1, 1, 1], 1], ["SP", 3, 4, 8, [1, 2, 2], 1], ["SP", 3, 8, 8, [2, 1, 2], 1],
 ["SP", 3, 12, 16, [2, 2, 4], 1], ["SP", 3, 16, 3, [3], 1], ["SP", 3, 18, 3, [1], 1], ["SP", 3, 20, 8, [4], 1],
 ["RE", 3, [0, 4, 8, 12, 1, 5, 9, 13, 16, 18, 20, 2, 6, 10, 14, 17, 19, 21, 3, 7, 11, 15]],
 ["FSP", 6, 0, 1, 2], ["FSP", 6, 3, 2, 2], ["FSP", 6, 6, 3, 2], ["FSP", 6, 9, 4, 2], ["RE", 6, [0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11]],
 ["CA", 3, 6, 7], ["CI", 1], ["FU", 6, [0, 1, 2, 3, 4, 5, 6, 7]], ["AN", 6, 0, 3], ["PR", 3, 0, "auto_unroll_max_step$64"],
 ["AN", 3, 21, 2], ["AN", 6, 4, 2]]"#;

#[test]
fn conv_tile_computed_at_the_epilogue() {
    let dag = conv_bias_relu([1, 8, 8, 8], [3, 3, 8, 16], 1, 1);
    let k = lowered_ok(&dag, CONV_SKETCH);
    // the conv tile: yy 4 (2*2), xx 2 (1*2), ff 8 (2*4)
    assert_eq!(
        find_alloc(&k.body, "Conv2dOutput").unwrap().shape,
        vec![1, 4, 2, 8],
        "{}",
        kernel_to_string(&k)
    );
    // pad and bias add inlined: no other temporary; padding reads are selects
    assert_eq!(count(&k.body, &|s| matches!(s, Stmt::Allocate { .. })), 1);
    assert!(kernel_to_string(&k).contains("select("));
    // the pragma wraps the conv's nest, inside the relu's parallel loop
    let par = find_for(&k.body, ForKind::Parallel).unwrap();
    assert_eq!(
        count(par, &|s| matches!(
            s,
            Stmt::Attr {
                attr: Attr::AutoUnroll { max_step: 64, .. },
                ..
            }
        )),
        1
    );
}

fn find_for(s: &Stmt, kind: ForKind) -> Option<&Stmt> {
    match s {
        Stmt::For { kind: k, .. } if *k == kind => Some(s),
        Stmt::For { body, .. } | Stmt::Attr { body, .. } | Stmt::Allocate { body, .. } => {
            find_for(body, kind)
        }
        Stmt::Seq(v) => v.iter().find_map(|x| find_for(x, kind)),
        Stmt::IfThenElse { then_, .. } => find_for(then_, kind),
        _ => None,
    }
}

/// BERT dense with cache_write (spec §1 sample): the `.local` stage computes the reduction per
/// tile of the copy stage.
#[test]
fn cache_write_dense() {
    let dag = dense(6, 16, 24);
    let json = r#"[["CHW", 2, "local"], ["SP", 2, 0, 6, [1, 1, 6], 1], ["SP", 2, 4, 16, [2, 1, 4], 1], ["SP", 2, 8, 24, [8], 1],
        ["RE", 2, [0, 4, 1, 5, 8, 2, 6, 9, 3, 7]], ["FSP", 3, 0, 1, 2], ["FSP", 3, 3, 2, 2], ["RE", 3, [0, 3, 1, 4, 2, 5]],
        ["CA", 2, 3, 3], ["FU", 3, [0, 1, 2, 3]], ["AN", 3, 0, 3], ["PR", 2, 0, "auto_unroll_max_step$16"], ["AN", 2, 9, 2], ["AN", 3, 2, 2]]"#;
    let k = lowered_ok(&dag, json);
    assert_eq!(
        find_alloc(&k.body, "T_matmul_NT_local").unwrap().shape,
        vec![6, 4],
        "{}",
        kernel_to_string(&k)
    );
    assert_eq!(k.params.last().unwrap().name, "T_matmul_NT");
}

/// resnet-50 softmax (`d7b65649`): two rfactors, `.repl` stages computed inside consumers.
#[test]
fn rfactor_softmax() {
    let dag = softmax(60);
    let json = r#"[["SP", 3, 1, 60, [6], 1], ["RF", 3, 2, 1], ["RE", 3, [0, 2, 1]], ["SP", 1, 1, 60, [4], 1], ["RF", 1, 2, 1],
        ["RE", 1, [0, 2, 1]], ["CR", 6], ["CA", 5, 6, 1], ["CR", 4], ["CA", 2, 3, 1], ["AN", 1, 0, 3], ["FU", 3, [0, 1]], ["AN", 3, 0, 3],
        ["AN", 4, 0, 3], ["FU", 6, [0, 1]], ["AN", 6, 0, 3], ["PR", 1, 0, "auto_unroll_max_step$16"], ["PR", 2, 0, "auto_unroll_max_step$16"],
        ["PR", 4, 0, "auto_unroll_max_step$16"], ["PR", 5, 0, "auto_unroll_max_step$64"]]"#;
    let k = lowered_ok(&dag, json);
    // T_softmax_expsum.rf: [i0, k_i] = [1, 6] at root; maxelem.rf [1, 4]
    assert_eq!(
        find_alloc(&k.body, "T_softmax_expsum_rf").unwrap().shape,
        vec![1, 6]
    );
    assert_eq!(
        find_alloc(&k.body, "T_softmax_maxelem_rf").unwrap().shape,
        vec![1, 4]
    );
    // the .repl stages are computed per element of their consumer
    assert_eq!(
        find_alloc(&k.body, "T_softmax_maxelem_repl").unwrap().shape,
        vec![1]
    );
    // a non-divisible rfactor split gets the predicate on the partial reduction
    let k = lowered_ok(&dag, r#"[["SP", 1, 1, 60, [7], 1], ["RF", 1, 2, 1]]"#);
    assert!(
        kernel_to_string(&k).contains("< 60)"),
        "{}",
        kernel_to_string(&k)
    );
    // the outer part factored, at position 0
    lowered_ok(
        &dag,
        r#"[["SP", 3, 1, 60, [8], 1], ["RF", 3, 1, 0], ["CA", 3, 4, 0]]"#,
    );
}

/// alexnet NCHWc max pool (`51c977fb`): FU of the window, SP, RF, CA of the partial result.
#[test]
fn pool_window_fused_split_rfactored() {
    let attrs = PoolAttrs {
        kind: PoolKind::Max,
        kernel: [3, 3],
        stride: [2, 2],
        dilation: [1, 1],
        padding: [0; 4],
        ceil_mode: false,
        layout: PoolLayout::Nchwc,
    };
    let dag = WorkloadSpec::new(Anchor::Pool(attrs), vec![])
        .build(Era::V010, &[vec![1, 2, 7, 7, 4]])
        .unwrap();
    let json = r#"[["FU", 1, [5, 6]], ["SP", 1, 5, 9, [9], 1], ["RF", 1, 5, 5], ["CA", 1, 2, 2], ["FU", 2, [0, 1, 2]], ["AN", 2, 0, 3],
        ["PR", 1, 0, "auto_unroll_max_step$16"], ["PR", 2, 0, "auto_unroll_max_step$512"]]"#;
    let k = lowered_ok(&dag, json);
    // the record factors the outer part of the [9] split (extent 1) and reduces the 9 window
    // positions in the rf stage, computed per output row (ax2) of the repl stage
    assert_eq!(
        find_alloc(&k.body, "pool_max_rf").unwrap().shape,
        vec![1, 1, 1, 3, 4, 1],
        "{}",
        kernel_to_string(&k)
    );
    // factoring the inner part instead keeps the 9 window positions as an axis
    let k = lowered_ok(
        &dag,
        r#"[["FU", 1, [5, 6]], ["SP", 1, 5, 9, [9], 1], ["RF", 1, 6, 5], ["CA", 1, 2, 2]]"#,
    );
    assert_eq!(
        find_alloc(&k.body, "pool_max_rf").unwrap().shape,
        vec![1, 1, 1, 3, 4, 9],
        "{}",
        kernel_to_string(&k)
    );
}

/// Adaptive pooling windows have extents that depend on the output index: the loop extent
/// is an expression and the window loads are guarded.
#[test]
fn adaptive_pool_windows() {
    let a = Anchor::AdaptivePool {
        kind: PoolKind::Avg {
            count_include_pad: true,
        },
        layout: PoolLayout::Nchw,
        out_hw: [3, 2],
    };
    let dag = WorkloadSpec::new(a, vec![])
        .build(Era::V010, &[vec![1, 3, 7, 5]])
        .unwrap();
    lowered_ok(&dag, "[]");
    let k = lowered_ok(
        &dag,
        r#"[["SP", 2, 2, 3, [2], 1], ["CA", 1, 2, 2], ["FU", 2, [0, 1]], ["AN", 2, 0, 3]]"#,
    );
    assert!(
        count(
            &k.body,
            &|s| matches!(s, Stmt::For { extent, .. } if extent.as_int().is_none())
        ) >= 2
    );
    // a global pool's windows fold to constants
    let g = Anchor::AdaptivePool {
        kind: PoolKind::Avg {
            count_include_pad: true,
        },
        layout: PoolLayout::Nhwc,
        out_hw: [1, 1],
    };
    let dag = WorkloadSpec::new(g, vec![])
        .build(Era::V010, &[vec![1, 4, 4, 3]])
        .unwrap();
    let k = lowered_ok(&dag, r#"[["CA", 1, 2, 3]]"#);
    assert_eq!(
        count(
            &k.body,
            &|s| matches!(s, Stmt::For { extent, .. } if extent.as_int().is_none())
        ),
        0,
        "{}",
        kernel_to_string(&k)
    );
}

/// TE's init placement: just outside the first loop that touches a reduce axis, over the
/// spatial loops that follow it.
#[test]
fn reduction_init_placement() {
    let dag = matmul(4, 3, 5);
    // k outermost: the init is a separate nest over i, j before it
    let k = lowered_ok(&dag, r#"[["RE", 2, [2, 0, 1]]]"#);
    let top = kernel_to_string(&k);
    let init_pos = top.find("matmul_i_init").unwrap();
    let k_pos = top.find("for (matmul_k,").unwrap();
    assert!(init_pos < k_pos, "{top}");
    // k innermost: the init sits inside the j loop, no init loops
    let k = lowered_ok(&dag, "[]");
    assert!(!kernel_to_string(&k).contains("_init"));
}

/// Fused loops are decomposed with TVM's div/mod order (the last fused loop is the fastest).
#[test]
fn fused_index_order() {
    let dag = matmul(4, 3, 5);
    let k = lowered_ok(&dag, r#"[["FU", 4, [0, 1]]]"#);
    let text = kernel_to_string(&k);
    assert!(
        text.contains("out[floordiv(out_i_j_fused, 5), floormod(out_i_j_fused, 5)]"),
        "{text}"
    );
}

/// A region that reaches past the producer's domain (the consumer's last tile is partial):
/// the producer only computes inside its domain.
#[test]
fn region_beyond_the_domain_is_guarded() {
    let dag = matmul(7, 6, 5);
    let k = lowered_ok(
        &dag,
        r#"[["SP", 4, 0, 7, [3], 1], ["SP", 4, 2, 5, [4], 1], ["RE", 4, [0, 2, 1, 3]], ["CA", 2, 4, 1]]"#,
    );
    let text = kernel_to_string(&k);
    assert!(text.contains(">= 0") || text.contains("< 7)"), "{text}");
    assert_eq!(find_alloc(&k.body, "matmul").unwrap().shape, vec![3, 4]);
}

#[test]
fn cache_read_then_compute_at() {
    let dag = matmul(6, 8, 5);
    let k = lowered_ok(
        &dag,
        r#"[["CHR", 1, "local", [2]], ["SP", 3, 2, 8, [2], 1], ["CA", 2, 3, 2]]"#,
    );
    // B.local holds what one k.0 iteration reads: 2 rows of one column (j is outside)
    assert_eq!(
        find_alloc(&k.body, "B_local").unwrap().shape,
        vec![2, 1],
        "{}",
        kernel_to_string(&k)
    );
}

#[test]
fn invalid_schedules_are_refused() {
    let dag = conv_bias_relu([1, 5, 5, 4], [3, 3, 4, 6], 1, 1);
    // conv computed inside the relu, but T_add (at root) also reads it
    assert!(matches!(
        lower_err(&dag, r#"[["CA", 3, 6, 2]]"#),
        LowerError::InvalidSchedule(_)
    ));
    // a state that does not belong to the DAG
    let other = matmul(4, 3, 5);
    let st = replay(&stage_inits_from_dag(&other), &[]).unwrap();
    assert!(matches!(
        lower(&dag, &st, &LowerOptions::default()),
        Err(LowerError::Mismatch(_))
    ));
}

#[test]
fn weight_layout_hook_keeps_the_original_layout() {
    let dag = conv_bias_relu([1, 5, 5, 4], [3, 3, 4, 6], 1, 1);
    let k = lower_default(&dag).unwrap();
    assert_eq!(k.params[1].shape, vec![3, 3, 4, 6]);
    let idx = vec![Expr::int(1)];
    assert_eq!(
        WeightLayout::Original.rewrite_index(&dag, ttdb_algo::ir::TensorId(2), idx.clone()),
        idx
    );
    assert_eq!(param_tensors(&dag).len(), k.params.len());
}

/// Lowers with pre-packed weights, runs on packed inputs and compares with the reference.
fn lowered_packed(dag: &Dag, json: &str) -> Lowered {
    let state =
        replay(&stage_inits_from_dag(dag), &steps(json)).unwrap_or_else(|e| panic!("replay: {e}"));
    let opts = LowerOptions {
        weight_layout: WeightLayoutMode::PrePacked,
        ..LowerOptions::default()
    };
    let l = lower_detailed(dag, &state, &opts).unwrap_or_else(|e| panic!("lower: {e}"));
    assert_eq!(packed_layout(dag, &state).unwrap(), l.weight_layout);
    let cmp = check::interpret_with_layout(dag, &l.kernel, &l.weight_layout, 11, Some(200_000_000))
        .unwrap_or_else(|e| panic!("{e}\n{}", kernel_to_string(&l.kernel)));
    assert!(
        cmp.rel_err < 1e-5,
        "relative error {} \n{}",
        cmp.rel_err,
        kernel_to_string(&l.kernel)
    );
    l
}

fn new_layouts(l: &Lowered) -> Vec<String> {
    l.weight_layout
        .packed()
        .iter()
        .map(|w| w.new_layout())
        .collect()
}

/// The conv computed at the relu's fused tile loop: the relu's loops up to the attach point
/// come first, named after the conv's loops at the same positions (`ax3.*` stand for `ff.*`);
/// the conv's outer tile loops have extent 1 inside the tile.
#[test]
fn prepacked_conv_computed_at_the_epilogue() {
    let dag = conv_bias_relu([1, 8, 8, 8], [3, 3, 8, 16], 1, 1);
    let l = lowered_packed(&dag, CONV_SKETCH);
    assert_eq!(new_layouts(&l), ["1ff2ff1ff1ff1ry3rx2rc2ff3ry1rx4rc4ff"]);
    assert_eq!(l.weight_layout.packed()[0].orig_layout(), "3ry3rx8rc16ff");
    assert_eq!(
        l.kernel.params[1].shape,
        vec![1, 2, 1, 1, 1, 3, 2, 2, 3, 1, 4, 4]
    );
    // the original layout still lowers the same schedule
    let k = lowered_ok(&dag, CONV_SKETCH);
    assert_eq!(k.params[1].shape, vec![3, 3, 8, 16]);
}

/// cache_write: the `.local` stage reads the weight and carries the attribute; the copy
/// stage's fused tile loops come first.
#[test]
fn prepacked_dense_cache_write() {
    let dag = dense(6, 16, 24);
    let json = r#"[["CHW", 2, "local"], ["SP", 2, 0, 6, [1, 1, 6], 1], ["SP", 2, 4, 16, [2, 1, 4], 1], ["SP", 2, 8, 24, [8], 1],
        ["RE", 2, [0, 4, 1, 5, 8, 2, 6, 9, 3, 7]], ["FSP", 3, 0, 1, 2], ["FSP", 3, 3, 2, 2], ["RE", 3, [0, 3, 1, 4, 2, 5]],
        ["CA", 2, 3, 3], ["FU", 3, [0, 1, 2, 3]], ["AN", 3, 0, 3], ["PR", 2, 0, "auto_unroll_max_step$16"], ["AN", 2, 9, 2], ["AN", 3, 2, 2]]"#;
    let l = lowered_packed(&dag, json);
    assert_eq!(new_layouts(&l), ["2j2j1j1j3k1j8k4j"]);
    assert_eq!(l.weight_layout.packed()[0].consumer, "T_matmul_NT.local");
}

/// Schedules that read the weight through a cache_read or an rfactor stage: those stages carry
/// no `layout_free_placeholders`, the attributed op no longer reads the weight directly, and
/// TVM keeps the layout; so does ttdb.
#[test]
fn prepacking_skips_cache_read_and_rfactor_readers() {
    let dag = matmul(6, 8, 5);
    let l = lowered_packed(
        &dag,
        r#"[["CHR", 1, "local", [2]], ["SP", 3, 2, 8, [2], 1], ["CA", 2, 3, 2]]"#,
    );
    assert_eq!(l.weight_layout, WeightLayout::Original);
    let d = dense(4, 6, 16);
    let l = lowered_packed(&d, r#"[["SP", 2, 2, 16, [4], 1], ["RF", 2, 3, 2]]"#);
    assert_eq!(l.weight_layout, WeightLayout::Original);
    // without those steps both weights are packed (B[k, j]: loops i, j, k.0, k.1)
    assert_eq!(
        new_layouts(&lowered_packed(&dag, r#"[["SP", 2, 2, 8, [2], 1]]"#)),
        ["5j4k2k"]
    );
    assert_eq!(new_layouts(&lowered_packed(&d, "[]")), ["6j16k"]);
}

/// A DAG without layout-free weights is unaffected by the mode.
#[test]
fn prepacking_leaves_other_dags_alone() {
    let l = lowered_packed(&softmax(12), "[]");
    assert_eq!(l.weight_layout, WeightLayout::Original);
}

/// An index read from data is left to the bounds checker: `take`'s clipped index is proven,
/// so its loads get no guard (a vector loop over the other axes loads without masks); an
/// index read from data and used as it is cannot be proven and is guarded (the guard is
/// `0 <= i && i < n` per index, printed `>= 0`).
#[test]
fn data_dependent_indices_are_guarded_only_when_unproven() {
    use ttdb_algo::ir::{DType, DagBuilder, IterVar};
    let mut b = DagBuilder::new();
    let data = b.placeholder("p0", &[3, 8, 16], DType::F32);
    let idx = b.placeholder("p1", &[1], DType::I64);
    let out = ttdb_algo::ops::take::take(&mut b, &data, &idx, 0).unwrap();
    let take = b.finish(&[&out]);
    let k = lowered_ok(&take, r#"[["SP", 2, 2, 16, [8], 1], ["AN", 2, 3, 2]]"#);
    let text = kernel_to_string(&k);
    assert!(
        text.contains("vectorized") && !text.contains(">= 0"),
        "{text}"
    );

    let mut b = DagBuilder::new();
    let data = b.placeholder("p0", &[8], DType::F32);
    let idx = b.placeholder("p1", &[4], DType::I64);
    let raw = b.elementwise("T_pick", "injective", vec![IterVar::new("ax0", 4)], |v| {
        data.at(vec![idx.at(vec![v[0].clone()])])
    });
    let pick = b.finish(&[&raw]);
    let state = replay(&stage_inits_from_dag(&pick), &[]).unwrap();
    let k = lower(&pick, &state, &LowerOptions::default()).unwrap();
    let text = kernel_to_string(&k);
    assert!(text.contains(">= 0") && text.contains("< 8"), "{text}");
}

fn conv_nchwc(data: [i64; 5], kernel: [i64; 6]) -> Dag {
    WorkloadSpec::new(Anchor::Conv2dNchwc(Window2d::simple(1, 1)), vec![])
        .build(Era::V08, &[data.to_vec(), kernel.to_vec()])
        .unwrap()
}

/// An NCHWc kernel (which TVM reads as AlterOpLayout left it) is packed into the order its
/// schedule walks: the input channel, read as `ic / ib` and `ic % ib`, is packed as the one
/// axis `ic` (the split pair), and `oc_chunk` and `oc_block` stay two axes. Exact tiles and
/// a split of `ic` that overhangs it (holes) both compute the reference.
#[test]
fn nchwc_kernels_are_packed_in_the_order_the_schedule_reads_them() {
    let dag = conv_nchwc([1, 2, 6, 6, 4], [3, 2, 3, 3, 4, 4]);
    let reorder = r#"["RE", 3, [0, 1, 5, 2, 3, 7, 8, 6, 4]]"#;
    let l = lowered_packed(&dag, &format!(r#"[["SP", 3, 5, 8, [2], 1], {reorder}]"#));
    assert_eq!(new_layouts(&l), ["3oc_chunk4ic3kh3kw2ic4oc_block"]);
    let w = &l.weight_layout.packed()[0];
    assert_eq!(
        w.split,
        Some(SplitAxis {
            outer: 1,
            inner: 4,
            block: 4
        })
    );
    assert_eq!(l.kernel.params[1].shape, vec![3, 4, 3, 3, 2, 4]);
    let l = lowered_packed(&dag, &format!(r#"[["SP", 3, 5, 8, [3], 1], {reorder}]"#));
    assert_eq!(new_layouts(&l), ["3oc_chunk3ic3kh3kw3ic4oc_block"]);
    // no schedule: the loops' order is the kernel's own, with `ic` whole
    let l = lowered_packed(&dag, "[]");
    assert_eq!(new_layouts(&l), ["3oc_chunk4oc_block8ic3kh3kw"]);
}

/// Where an NCHWc kernel cannot be packed (read through a cache_read stage) it keeps its
/// layout; TVM's layout-free weights would make the same schedule an error.
#[test]
fn an_nchwc_kernel_that_cannot_be_packed_keeps_its_layout() {
    let dag = conv_nchwc([1, 2, 6, 6, 4], [3, 2, 3, 3, 4, 4]);
    let l = lowered_packed(&dag, r#"[["CHR", 2, "local", [3]]]"#);
    assert_eq!(l.weight_layout, WeightLayout::Original);
}
