//! Workloads registered by name in TVM's tutorials (`@auto_scheduler.register_workload`),
//! whose keys are `[func_name, *args]` and carry no hash (spec §3.1):
//! * `matmul_add(N, L, M, dtype)` (gallery `tune_matmul_x86`);
//! * `conv2d_layer(N, H, W, CO, CI, KH, KW, stride, padding)` (gallery `tune_conv2d_layer_cuda`:
//!   relu(conv2d_nchw + bias));
//! * `sparse_dense(M, N, K, w_data_shape, w_indices_shape, w_indptr_shape, dtype)`
//!   (gallery `tune_sparse_x86`: relu(sparse_dense_bsr(relu(X), W) + B)).
use super::conv2d::conv2d_nchw;
use super::epilogue::broadcast_binary;
use super::era::Era;
use super::util::{axes, check, named_axes, rank, Window2d};
use crate::ir::{
    BinOp, BuildError, Combiner, ComputeAttrs, DType, Dag, DagBuilder, Expr, IterVar, Tensor,
};

pub fn matmul_add(n: i64, l: i64, m: i64, dtype: DType) -> Result<Dag, BuildError> {
    check(n > 0 && l > 0 && m > 0, || {
        "matmul_add: sizes must be positive".into()
    })?;
    let mut b = DagBuilder::new();
    let a = b.placeholder("A", &[n, l], dtype);
    let bt = b.placeholder("B", &[l, m], dtype);
    let c = b.placeholder("C", &[n, m], dtype);
    let attrs = ComputeAttrs {
        layout_free_placeholders: vec![bt.id],
        ..Default::default()
    };
    let mm = b.reduce(
        "matmul",
        "",
        named_axes(&["i", "j"], &[n, m]),
        vec![IterVar::new("k", l)],
        Combiner::Sum,
        attrs,
        |v, r| a.at(vec![v[0].clone(), r[0].clone()]) * bt.at(vec![r[0].clone(), v[1].clone()]),
    );
    let out = b.elementwise("out", "", named_axes(&["i", "j"], &[n, m]), |v| {
        mm.at(v.to_vec()) + c.at(v.to_vec())
    });
    Ok(b.finish(&[&out]))
}

/// Python `topi.nn.relu`: an unnamed `compute` over `i*` axes.
fn python_relu(b: &mut DagBuilder, x: &Tensor) -> Tensor {
    b.elementwise("compute", "elemwise", axes("i", &x.shape), |v| {
        Expr::max(x.at(v.to_vec()), Expr::constant(0.0, x.dtype))
    })
}

/// The conv2d_layer tutorial. Its TOPI names depend on the TVM version that tuned it; the
/// tutorial logs date from v0.7 (op `compute`), pass `era` to pick another.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_layer(
    era: Era,
    n: i64,
    h: i64,
    w: i64,
    co: i64,
    ci: i64,
    kh: i64,
    kw: i64,
    stride: [i64; 2],
    padding: [i64; 2],
) -> Result<Dag, BuildError> {
    let mut b = DagBuilder::new();
    let data = b.placeholder("data", &[n, ci, h, w], DType::F32);
    let kernel = b.placeholder("kernel", &[co, ci, kh, kw], DType::F32);
    let bias = b.placeholder("bias", &[1, co, 1, 1], DType::F32);
    let window = Window2d {
        stride,
        padding: [padding[0], padding[1], padding[0], padding[1]],
        dilation: [1, 1],
    };
    let conv = conv2d_nchw(&mut b, era, &data, &kernel, &window, 1)?;
    let add = broadcast_binary(&mut b, BinOp::Add, &conv, &bias, "T_add")?;
    let out = python_relu(&mut b, &add);
    Ok(b.finish(&[&out]))
}

/// The sparse_dense tutorial with BSR weights: `w_data` [nnz_blocks, bs_r, bs_c],
/// `w_indices` [nnz_blocks], `w_indptr` [N/bs_r + 1].
pub fn sparse_dense(
    m: i64,
    n: i64,
    k: i64,
    w_data: &[i64],
    w_indices: &[i64],
    w_indptr: &[i64],
    dtype: DType,
) -> Result<Dag, BuildError> {
    rank(w_data, 3, "sparse_dense w_data")?;
    rank(w_indices, 1, "sparse_dense w_indices")?;
    rank(w_indptr, 1, "sparse_dense w_indptr")?;
    let (bs_r, bs_c) = (w_data[1], w_data[2]);
    let num_blocks = w_indptr[0] - 1;
    check(num_blocks * bs_r == n, || {
        format!("sparse_dense: {num_blocks} block rows x {bs_r} != N {n}")
    })?;
    let mut b = DagBuilder::new();
    let x = b.placeholder("placeholder", &[m, k], dtype);
    let wd = b.placeholder("placeholder", w_data, dtype);
    let wi = b.placeholder("placeholder", w_indices, DType::I32);
    let wp = b.placeholder("placeholder", w_indptr, DType::I32);
    let bias = b.placeholder("placeholder", &[m, n], dtype);
    let relu_x = python_relu(&mut b, &x);
    // _sparse_dense_sp_rhs_bsrmm: a block row's extent comes from the indptr data
    let nb_j = Expr::var("nb_j");
    let row_start = wp.at(vec![nb_j.clone()]);
    let row_end = wp.at(vec![nb_j + 1]);
    let attrs = ComputeAttrs {
        flop: Some(2 * m * num_blocks * bs_r * k),
        ..Default::default()
    };
    let block = b.reduce(
        "compute",
        "sparse_dense_sp_rhs_bsrmm_block",
        named_axes(&["i", "nb_j", "j"], &[m, num_blocks, bs_r]),
        vec![
            IterVar::with_extent("elem_idx", row_end - row_start.clone()),
            IterVar::new("c", bs_c),
        ],
        Combiner::Sum,
        attrs,
        |v, r| {
            let offset = row_start.clone() + r[0].clone();
            let block_j = wi.at(vec![offset.clone()]);
            wd.at(vec![offset, v[2].clone(), r[1].clone()])
                * relu_x.at(vec![v[0].clone(), Expr::int(bs_c) * block_j + r[1].clone()])
        },
    );
    let out = b.elementwise(
        "compute",
        "sparse_dense_sp_rhs_bsrmm",
        named_axes(&["m", "n"], &[m, n]),
        |v| {
            block.at(vec![
                v[0].clone(),
                Expr::floordiv(v[1].clone(), bs_r),
                Expr::floormod(v[1].clone(), bs_r),
            ])
        },
    );
    let add = b.elementwise("BiasAdd", "", named_axes(&["i", "j"], &[m, n]), |v| {
        out.at(v.to_vec()) + bias.at(v.to_vec())
    });
    let relu = python_relu(&mut b, &add);
    Ok(b.finish(&[&relu]))
}
