//! The single-op workloads the search benches tune (same DAGs as `ttdb tune` builds).
#![allow(dead_code)]
use ttdb::ir::Dag;
use ttdb::ops::{Anchor, EpilogueOp, Era, Window2d, WorkloadSpec};

/// A `k`x`k` conv `cin`->`cout` at `hw`x`hw` (stride 1, same padding) with bias and relu,
/// NCHW[x]c with `lanes` as the channel block.
pub fn conv_nchwc(lanes: i64, cin: i64, cout: i64, hw: i64, k: i64) -> Dag {
    let (bi, bo) = (cin / lanes, cout / lanes);
    WorkloadSpec::new(
        Anchor::Conv2dNchwc(Window2d::simple(1, k / 2)),
        vec![
            EpilogueOp::Add {
                operand_first: false,
            },
            EpilogueOp::Relu,
        ],
    )
    .build(
        Era::V010,
        &[
            vec![1, bi, hw, hw, lanes],
            vec![bo, bi, k, k, lanes, lanes],
            vec![1, bo, 1, 1, lanes],
        ],
    )
    .expect("conv builds")
}

/// A 512x512x512 matmul (ttdb: dense, A x B^T).
pub fn matmul_512() -> Dag {
    WorkloadSpec::new(Anchor::Dense, vec![])
        .build(Era::V010, &[vec![512, 512], vec![512, 512]])
        .expect("dense builds")
}
