//! Tests of the knob space ([`super`]).
use super::*;
use std::collections::HashSet;
use ttdb_algo::ir::Dag;
use ttdb_algo::ops::{Anchor, EpilogueOp, Era, Window2d, WorkloadSpec};
use ttdb_algo::schedule::stage_inits_from_dag;
use ttdb_backend::lower::check::interpret_against_reference;
use ttdb_backend::lower::{lower_steps, LowerOptions};

/// An NHWC conv + bias + relu, 3x3 from 8 to 16 channels, on an 8-row image `columns` wide.
fn conv_dag(columns: i64) -> Dag {
    let spec = WorkloadSpec::new(
        Anchor::Conv2dNhwc(Window2d::simple(1, 1)),
        vec![
            EpilogueOp::Add {
                operand_first: false,
            },
            EpilogueOp::Relu,
        ],
    );
    spec.build(
        Era::V010,
        &[vec![1, 8, columns, 8], vec![3, 3, 8, 16], vec![1, 1, 1, 16]],
    )
    .unwrap()
}

/// The conv on an 8x8 image with the usual CPU sketch (spec §4.1): SSRSRS tiles, the conv
/// at the relu's fused parallel loop, vectorized inner loops.
pub fn conv_and_sketch() -> (Dag, Vec<Step>) {
    let dag = conv_dag(8);
    let sketch = r#"[["CI", 5], ["SP", 3, 0, 1, [1, 1, 1], 1], ["SP", 3, 4, 8, [1, 2, 2], 1], ["SP", 3, 8, 8, [2, 1, 2], 1],
 ["SP", 3, 12, 16, [2, 2, 4], 1], ["SP", 3, 16, 3, [3], 1], ["SP", 3, 18, 3, [1], 1], ["SP", 3, 20, 8, [4], 1],
 ["RE", 3, [0, 4, 8, 12, 1, 5, 9, 13, 16, 18, 20, 2, 6, 10, 14, 17, 19, 21, 3, 7, 11, 15]],
 ["FSP", 6, 0, 1, 2], ["FSP", 6, 3, 2, 2], ["FSP", 6, 6, 3, 2], ["FSP", 6, 9, 4, 2], ["RE", 6, [0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11]],
 ["CA", 3, 6, 7], ["CI", 1], ["FU", 6, [0, 1, 2, 3, 4, 5, 6, 7]], ["AN", 6, 0, 3], ["PR", 3, 0, "auto_unroll_max_step$64"],
 ["AN", 3, 21, 2], ["AN", 6, 4, 2]]"#;
    let v: serde_json::Value = serde_json::from_str(sketch).unwrap();
    let steps = v
        .as_array()
        .unwrap()
        .iter()
        .map(|s| Step::from_json(s).unwrap())
        .collect();
    (dag, steps)
}

fn space() -> (Dag, Space) {
    let (dag, steps) = conv_and_sketch();
    let space = Space::new(&stage_inits_from_dag(&dag), &steps, 8).unwrap();
    (dag, space)
}

#[test]
fn the_sketch_has_split_unroll_parallel_and_vector_knobs() {
    let (_, sp) = space();
    let labels: Vec<String> = sp.knobs.iter().map(Knob::label).collect();
    // SP lengths of loops of extent > 1 (the batch loop of extent 1 has none).
    assert!(labels.contains(&"SP@2[0]".to_string()), "{labels:?}");
    assert!(!labels.iter().any(|l| l.starts_with("SP@1[")), "{labels:?}");
    assert!(labels.contains(&"unroll@18".to_string()));
    assert!(labels.contains(&"parallel@17".to_string()));
    assert!(labels.contains(&"vectorize@19".to_string()));
    assert!(labels.contains(&"vectorize@20".to_string()));
    // The extent-8 loop split [1, 2, 2]: powers of two, multiples of 8 lanes, divisors.
    let k = &sp.knobs[labels.iter().position(|l| l == "SP@2[0]").unwrap()];
    assert_eq!(k.values, [1, 2, 4, 8]);
    let par = &sp.knobs[labels.iter().position(|l| l == "parallel@17").unwrap()];
    assert_eq!(par.values, (1..=8).collect::<Vec<_>>());
    assert_eq!(sp.start.len(), sp.knobs.len());
}

#[test]
fn the_start_point_gives_the_steps_back() {
    let (dag, sp) = space();
    let (_, steps) = conv_and_sketch();
    assert_eq!(sp.steps_at(&sp.start).unwrap(), steps);
    assert_eq!(sp.describe(&sp.start), "start");
    assert!(lower_steps(&dag, &steps, &LowerOptions::default()).is_ok());
}

/// Every single-knob move, up and down: it replays (or is refused as invalid), and what
/// replays lowers to a kernel that matches the reference in the checked interpreter.
#[test]
fn every_single_knob_move_is_a_correct_schedule() {
    let (dag, sp) = space();
    let (mut valid, mut invalid) = (0, 0);
    for (i, size) in sp.sizes().into_iter().enumerate() {
        for delta in [1, size - 1] {
            let mut p = sp.start.clone();
            p[i] = ((p[i] as usize + delta) % size) as u16;
            match sp.steps_at(&p) {
                Ok(steps) => {
                    valid += 1;
                    let k = lower_steps(&dag, &steps, &LowerOptions::default())
                        .unwrap_or_else(|e| panic!("{}: {e}", sp.describe(&p)));
                    let c = interpret_against_reference(&dag, &k, 3, Some(50_000_000))
                        .unwrap_or_else(|e| panic!("{}: {e}", sp.describe(&p)));
                    assert!(
                        c.rel_err <= ttdb_backend::loopnest::verify::RTOL,
                        "{}",
                        sp.describe(&p)
                    );
                }
                Err(_) => invalid += 1,
            }
        }
    }
    assert!(
        valid > 2 * sp.knobs.len() * 3 / 4,
        "{valid} valid, {invalid} invalid"
    );
}

#[test]
fn fuse_counts_rewrite_the_fu_and_later_loop_ids() {
    let (_, sp) = space();
    let par = sp
        .knobs
        .iter()
        .position(|k| k.label() == "parallel@17")
        .unwrap();
    // Fuse 3 outer loops instead of 8: the vectorized loop of the stage moves from 4 to 9.
    let mut p = sp.start.clone();
    p[par] = 2;
    let steps = sp.steps_at(&p).unwrap();
    assert_eq!(steps[16].to_string(), r#"["FU", 6, [0, 1, 2]]"#);
    assert_eq!(steps[20].to_string(), r#"["AN", 6, 9, 2]"#);
    // One loop: no FU at all (later steps move up by one).
    p[par] = 0;
    let steps = sp.steps_at(&p).unwrap();
    assert_eq!(steps.len(), 20);
    assert_eq!(steps[16].to_string(), r#"["AN", 6, 0, 3]"#);
    assert_eq!(steps[19].to_string(), r#"["AN", 6, 11, 2]"#);
    // Vectorizing two inner loops of the conv inserts a FU before its AN.
    let vec3 = sp
        .knobs
        .iter()
        .position(|k| k.label() == "vectorize@19")
        .unwrap();
    let mut p = sp.start.clone();
    p[vec3] = 1;
    let steps = sp.steps_at(&p).unwrap();
    assert_eq!(steps.len(), 22);
    assert_eq!(steps[19].to_string(), r#"["FU", 3, [20, 21]]"#);
    assert_eq!(steps[20].to_string(), r#"["AN", 3, 20, 2]"#);
}

/// Ansor's tile-size moves: a prime factor passes between two lengths of one split (its
/// product, the tile, stays) or to and from the outer loop (one length moves by a prime).
#[test]
fn factor_moves_pass_a_prime_between_lengths_of_one_split() {
    let (_, sp) = space();
    let moves = sp.factor_moves(&sp.start);
    let lengths = |p: &[u16]| -> Vec<(usize, i64)> {
        sp.knobs
            .iter()
            .zip(p)
            .filter_map(|(k, &i)| match k.kind {
                KnobKind::SplitLength { step, .. } => Some((step, k.values[i as usize])),
                _ => None,
            })
            .collect()
    };
    let start = lengths(&sp.start);
    let (mut within, mut outer) = (0, 0);
    for m in &moves {
        let changed: Vec<usize> = (0..m.len()).filter(|&i| m[i] != sp.start[i]).collect();
        let now = lengths(m);
        let diffs: Vec<(usize, i64, i64)> = start
            .iter()
            .zip(&now)
            .filter(|(a, b)| a.1 != b.1)
            .map(|(a, b)| (a.0, a.1, b.1))
            .collect();
        assert_eq!(diffs.len(), changed.len(), "{}", sp.describe(m));
        let ratio = |(_, a, b): (usize, i64, i64)| if a > b { a / b } else { b / a };
        match diffs[..] {
            [d] => {
                assert!(is_prime(ratio(d)), "{}", sp.describe(m));
                outer += 1;
            }
            [a, b] => {
                assert_eq!(a.0, b.0, "two splits moved: {}", sp.describe(m));
                assert_eq!(a.1 * b.1, a.2 * b.2, "tile changed: {}", sp.describe(m));
                within += 1;
            }
            _ => panic!("{} knobs moved: {}", diffs.len(), sp.describe(m)),
        }
    }
    assert!(within > 0 && outer > 0, "{within} within, {outer} outer");
    // SP@3 [2, 1, 2] of extent 8: a 2 passes from length 0 to length 1.
    assert!(
        moves
            .iter()
            .any(|m| sp.describe(m) == "SP@3[0] 2->1, SP@3[1] 1->2"),
        "{:?}",
        moves.iter().map(|m| sp.describe(m)).collect::<Vec<_>>()
    );
}

/// Distinct points give distinct step lists: the visited set keyed by points is exact.
#[test]
fn points_map_injectively_to_step_lists() {
    let (_, sp) = space();
    let sizes = sp.sizes();
    let mut seen = HashSet::new();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut points = HashSet::new();
    for _ in 0..300 {
        let p: Point = sizes
            .iter()
            .map(|&n| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state % n as u64) as u16
            })
            .collect();
        if !points.insert(p.clone()) {
            continue;
        }
        if let Ok(steps) = sp.steps_at(&p) {
            let text: Vec<String> = steps.iter().map(|s| s.to_string()).collect();
            assert!(
                seen.insert(text.join(",")),
                "two points, one step list: {p:?}"
            );
        }
    }
    assert!(seen.len() > 50, "only {} valid random points", seen.len());
}

/// The sketch vectorizes a 4-long loop: on an 8-lane host, the widening moves fuse more
/// inner loops (changing an innermost length where needed) to one or two full vectors;
/// on a 4-lane host there is nothing to widen.
#[test]
fn widening_moves_fill_the_hosts_vector() {
    let (dag, sp) = space();
    let vector_of_stage_3 = |p: &[u16]| {
        let mut steps = sp.steps_at(p).unwrap();
        steps.retain(|s| !matches!(s, Step::ComputeAt(_)));
        let state = replay(&stage_inits_from_dag(&dag), &steps).unwrap();
        state.stages()[3]
            .iters
            .iter()
            .find(|it| it.annotation == Annotation::Vectorize)
            .and_then(|it| it.extent)
    };
    assert_eq!(vector_of_stage_3(&sp.start), Some(4));
    let moves = sp.widening_moves(&sp.start, 100);
    assert!(!moves.is_empty());
    for m in &moves {
        let w = vector_of_stage_3(m).unwrap();
        assert!(w == 8 || w == 16, "{}: {w} lanes", sp.describe(m));
        assert!(sp.describe(m).contains("vectorize@"), "{}", sp.describe(m));
    }
    // One full vector first, and `max` bounds the list.
    assert_eq!(vector_of_stage_3(&moves[0]), Some(8));
    assert_eq!(sp.widening_moves(&sp.start, 2).len(), 2.min(moves.len()));
    let (_, steps) = conv_and_sketch();
    let narrow = Space::new(&stage_inits_from_dag(&dag), &steps, 4).unwrap();
    assert!(narrow.widening_moves(&narrow.start, 100).is_empty());
}

/// The conv sketch on a 14-column image (the column split [7, 1, 2]).
fn conv_14_columns() -> (Dag, Space) {
    let (_, mut steps) = conv_and_sketch();
    let dag = conv_dag(14);
    assert_eq!(steps[3].to_string(), r#"["SP", 3, 8, 8, [2, 1, 2], 1]"#);
    if let Step::Split(sp) = &mut steps[3] {
        sp.extent = 14;
        sp.lengths = vec![7, 1, 2];
    }
    let space = Space::new(&stage_inits_from_dag(&dag), &steps, 8).unwrap();
    (dag, space)
}

/// Widening a 14-column conv: 4 of 14 columns is a candidate, whose last tile's guard
/// differs between the fused lanes. Every widening move compiles to vector bodies only (the
/// codegen masks the lanes; it used to scalarize the loop, 20-30x slower) and computes what
/// the interpreter computes.
#[test]
fn widening_moves_give_vector_bodies() {
    let (dag, sp) = conv_14_columns();
    let moves = sp.widening_moves(&sp.start, 100);
    let overruns =
        |m: &Point| (0..sp.knobs.len()).any(|k| m[k] != sp.start[k] && !sp.split_is_exact(m, k));
    assert!(
        moves.iter().any(overruns),
        "no overrunning widening move to compile"
    );
    for m in &moves {
        let steps = sp.steps_at(m).unwrap();
        let k = lower_steps(&dag, &steps, &LowerOptions::default()).unwrap();
        let c =
            ttdb_backend::codegen::compile(&k, &ttdb_backend::codegen::CodegenOptions::default())
                .unwrap_or_else(|e| panic!("{}: {e}", sp.describe(m)));
        assert_eq!(c.stats.scalarized_loops, 0, "{}", sp.describe(m));
        ttdb_backend::measure::verify::verify_against_interpreter(&c, 3)
            .unwrap_or_else(|e| panic!("{}: {e}", sp.describe(m)));
    }
}
