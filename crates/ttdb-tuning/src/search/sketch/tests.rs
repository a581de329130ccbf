//! Sketch counts against TVM's own test expectations (`test_auto_scheduler_sketch_generation.py`,
//! 4 cores; `shared/spec/search.md` §1), on ttdb's DAGs of the same workloads.
use super::*;
use ttdb_algo::ir::{Combiner, ComputeAttrs, DType, DagBuilder, IterVar};
use ttdb_algo::ops::{
    Anchor, EpilogueOp, Era, PoolAttrs, PoolKind, PoolLayout, Window2d, WorkloadSpec,
};
use ttdb_format::ansor::Step;

const HW: HardwareParams = HardwareParams {
    num_cores: 4,
    vector_lanes: 16,
};

pub fn matmul(n: i64, m: i64, k: i64) -> Dag {
    let mut b = DagBuilder::new();
    let a = b.placeholder("A", &[n, k], DType::F32);
    let bb = b.placeholder("B", &[k, m], DType::F32);
    let c = b.reduce(
        "C",
        "",
        vec![IterVar::new("i", n), IterVar::new("j", m)],
        vec![IterVar::new("k", k)],
        Combiner::Sum,
        ComputeAttrs::default(),
        |v, r| a.at(vec![v[0].clone(), r[0].clone()]) * bb.at(vec![r[0].clone(), v[1].clone()]),
    );
    b.finish(&[&c])
}

fn double_matmul(n: i64) -> Dag {
    let mut b = DagBuilder::new();
    let a = b.placeholder("A", &[n, n], DType::F32);
    let bb = b.placeholder("B", &[n, n], DType::F32);
    let d = b.placeholder("D", &[n, n], DType::F32);
    let mm = |b: &mut DagBuilder,
              name: &str,
              x: &ttdb_algo::ir::Tensor,
              y: &ttdb_algo::ir::Tensor| {
        b.reduce(
            name,
            "",
            vec![IterVar::new("i", n), IterVar::new("j", n)],
            vec![IterVar::new("k", n)],
            Combiner::Sum,
            ComputeAttrs::default(),
            |v, r| x.at(vec![v[0].clone(), r[0].clone()]) * y.at(vec![r[0].clone(), v[1].clone()]),
        )
    };
    let c = mm(&mut b, "C", &a, &bb);
    let e = mm(&mut b, "E", &c, &d);
    b.finish(&[&e])
}

fn min_nm(n: i64, m: i64) -> Dag {
    let mut b = DagBuilder::new();
    let a = b.placeholder("A", &[n, m], DType::F32);
    let out = b.reduce(
        "C",
        "",
        vec![IterVar::new("i", n)],
        vec![IterVar::new("k", m)],
        Combiner::Min,
        ComputeAttrs::default(),
        |v, r| a.at(vec![v[0].clone(), r[0].clone()]),
    );
    b.finish(&[&out])
}

fn spec_dag(spec: WorkloadSpec, inputs: &[Vec<i64>]) -> Dag {
    spec.build(Era::V010, inputs).expect("workload builds")
}

fn count(dag: &Dag) -> usize {
    generate_sketches(dag, &HW).expect("sketches").len()
}

fn has(s: &Sketch, f: impl Fn(&Step) -> bool) -> bool {
    s.steps.iter().any(f)
}

#[test]
fn matmul_512_has_three_sketches() {
    let sk = generate_sketches(&matmul(512, 512, 512), &HW).unwrap();
    assert_eq!(sk.len(), 3);
    // No. 0: plain multi-level tiling; 1, 2: cache write fused at level 1 and 2.
    assert!(!has(&sk[0], |s| matches!(s, Step::CacheWrite(_))));
    for s in &sk[1..] {
        assert!(has(s, |s| matches!(s, Step::CacheWrite(_))));
        assert!(has(s, |s| matches!(s, Step::ComputeAt(_))));
    }
    assert_ne!(sk[1], sk[2]);
    // SSRSRS: three spatial... two spatial SPs of 3 lengths, one reduce SP of 1.
    let splits: Vec<usize> = sk[0]
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Split(sp) => Some(sp.lengths.len()),
            _ => None,
        })
        .collect();
    assert_eq!(splits, [3, 3, 1]);
    assert_eq!(sk[0].open_splits.len(), 3);
    // the j split (the second) is the one a vector runs along
    for s in &sk {
        assert_eq!(s.vector_splits, [s.open_splits[1]], "{:?}", s.steps);
    }
}

#[test]
fn small_matmul_adds_two_rfactor_sketches() {
    let sk = generate_sketches(&matmul(8, 8, 512), &HW).unwrap();
    assert_eq!(sk.len(), 5);
    assert!(has(&sk[0], |s| matches!(s, Step::Rfactor(_))));
    assert!(has(&sk[1], |s| matches!(s, Step::Rfactor(_))));
    assert_ne!(sk[0], sk[1]);
}

#[test]
fn double_matmul_multiplies() {
    assert_eq!(count(&double_matmul(512)), 9);
}

#[test]
fn conv2d_bn_relu_has_three_sketches() {
    let spec = WorkloadSpec::new(
        Anchor::Conv2dNchw {
            window: Window2d::simple(1, 1),
            groups: 1,
        },
        vec![
            EpilogueOp::Add {
                operand_first: false,
            },
            EpilogueOp::Multiply {
                operand_first: false,
            },
            EpilogueOp::Add {
                operand_first: false,
            },
            EpilogueOp::Relu,
        ],
    );
    let c = vec![1, 512, 1, 1];
    let dag = spec_dag(
        spec,
        &[
            vec![1, 512, 56, 56],
            vec![512, 512, 3, 3],
            c.clone(),
            c.clone(),
            c,
        ],
    );
    let sk = generate_sketches(&dag, &HW).unwrap();
    assert_eq!(sk.len(), 3);
    // The three element-wise epilogue ops are inlined in every sketch; the pad is not.
    for s in &sk {
        let inlined = s
            .steps
            .iter()
            .filter(|s| matches!(s, Step::ComputeInline(_)))
            .count();
        assert_eq!(inlined, 3, "{:?}", s.steps);
    }
    assert!(has(&sk[0], |s| matches!(s, Step::ComputeAt(_))));
    assert!(has(&sk[1], |s| matches!(s, Step::ComputeAt(_))));
    assert!(!has(&sk[2], |s| matches!(s, Step::ComputeAt(_))));
}

#[test]
fn max_pool_has_one_empty_sketch() {
    let spec = WorkloadSpec::new(
        Anchor::Pool(PoolAttrs {
            kind: PoolKind::Max,
            kernel: [2, 2],
            stride: [1, 1],
            dilation: [1, 1],
            padding: [1, 1, 1, 1],
            ceil_mode: false,
            layout: PoolLayout::Nchw,
        }),
        vec![],
    );
    let sk = generate_sketches(&spec_dag(spec, &[vec![1, 512, 56, 56]]), &HW).unwrap();
    assert_eq!(sk.len(), 1);
    assert!(sk[0].steps.is_empty());
}

#[test]
fn min_reduction_has_two_rfactor_sketches_and_the_default() {
    let sk = generate_sketches(&min_nm(10, 1024), &HW).unwrap();
    assert_eq!(sk.len(), 3);
    assert!(has(&sk[0], |s| matches!(s, Step::Rfactor(_))));
    assert!(has(&sk[1], |s| matches!(s, Step::Rfactor(_))));
    assert!(sk[2].steps.is_empty());
}

#[test]
fn softmax_has_nine_sketches() {
    for shape in [vec![1, 1024], vec![1, 12, 128, 128]] {
        let axis = shape.len() - 1;
        let spec = WorkloadSpec::new(Anchor::Softmax { axis }, vec![]);
        let sk = generate_sketches(&spec_dag(spec, std::slice::from_ref(&shape)), &HW).unwrap();
        assert_eq!(sk.len(), 9, "{shape:?}");
        assert!(sk[8].steps.is_empty());
    }
}

#[test]
fn winograd_tiles_only_the_batch_gemm() {
    let spec = WorkloadSpec::new(
        Anchor::WinogradNhwc {
            padding: [1, 1, 1, 1],
        },
        vec![],
    );
    let dag = spec_dag(spec, &[vec![1, 28, 28, 128], vec![4, 4, 128, 128]]);
    let sk = generate_sketches(&dag, &HW).unwrap();
    assert_eq!(sk.len(), 3);
    assert!(!has(&sk[0], |s| matches!(s, Step::CacheWrite(_))));
    assert!(has(&sk[1], |s| matches!(s, Step::CacheWrite(_))));
    assert!(has(&sk[2], |s| matches!(s, Step::CacheWrite(_))));
}
