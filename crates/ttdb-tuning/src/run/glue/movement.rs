//! Data movement glue: layout transforms, reshapes, concatenate, transpose, strided_slice,
//! split and take, each the stage of its ttdb-algo builder. Ops whose layout rule asks for
//! the logical layout get plain inputs; a blocked one here means a graph ttdb does not
//! expect, refused rather than guessed.
use super::GlueOp;
use ttdb_algo::ir::{DagBuilder, Expr, IterVar, Tensor};
use ttdb_algo::ops::broadcast::broadcast_to as broadcast_to_shape;
use ttdb_algo::ops::concat::concatenate;
use ttdb_algo::ops::layout_transform::{self as lt, DataLayout};
use ttdb_algo::ops::slice::strided_slice as slice_of;
use ttdb_algo::ops::take::{gather_elements as gather_elements_of, take as take_from};
use ttdb_algo::ops::transpose::transpose as transpose_by;
use ttdb_onnx::onnx::relay::Layout;

fn data_layout(l: Layout) -> DataLayout {
    match l {
        Layout::Plain => DataLayout::Nchw,
        Layout::Nchwc(b) => DataLayout::Nchwc(b),
        Layout::Nhwc => DataLayout::Nhwc,
    }
}

/// The physical axis of logical `axis` for tensors of logical `shapes` laid out in `layout`,
/// when joining along it keeps each tensor's layout: in NCHW[x]c the channel axis is the
/// block axis, which works only when every channel count is whole blocks.
fn physical_axis(layout: Layout, shapes: &[&[i64]], axis: usize) -> Option<usize> {
    let rank = shapes.first()?.len();
    if axis >= rank {
        return None;
    }
    match layout {
        Layout::Plain => Some(axis),
        // other ranks are stored as they are
        _ if rank != 4 => Some(axis),
        Layout::Nchwc(block) => {
            let whole_blocks = block > 0 && shapes.iter().all(|s| s[1] % block == 0);
            (axis != 1 || whole_blocks).then_some(axis)
        }
        Layout::Nhwc => Some([0, 3, 1, 2][axis]),
    }
}

/// Err unless the op's inputs and output are all stored in their logical shape.
fn require_plain(cx: &GlueOp) -> Result<(), String> {
    let values = cx.op.inputs.iter().chain([&cx.op.output]);
    match values.map(|&v| &cx.g.values[v]).find(|v| v.phys != v.shape) {
        Some(v) => Err(cx.refused(format!(
            "`{}` is in the {} layout, not the logical one",
            v.name,
            v.layout.name(v.shape.len())
        ))),
        None => Ok(()),
    }
}

pub(super) fn layout_transform(
    b: &mut DagBuilder,
    cx: &GlueOp,
    src: Layout,
    dst: Layout,
) -> Result<Tensor, String> {
    let logical = <[i64; 4]>::try_from(cx.out().shape.as_slice()).map_err(|_| cx.unsupported())?;
    lt::layout_transform(b, cx.input(0)?, logical, data_layout(src), data_layout(dst))
        .map_err(|e| cx.build_error(e))
}

/// `reshape`, `batch_flatten`, `squeeze`, `expand_dims`: the same elements in row-major
/// order under the output's shape.
pub(super) fn reshape(b: &mut DagBuilder, cx: &GlueOp) -> Result<Tensor, String> {
    require_plain(cx)?;
    reshape_view(b, cx.input(0)?, &cx.out().phys).map_err(|e| cx.refused(e))
}

/// The input coordinates of output element `v` of the row-major reshape `from` -> `to`,
/// factored where the shapes agree. Wherever the elements after an axis number the same in
/// both shapes, the coordinates on either side are independent, so each segment between
/// such boundaries decomposes only its own flat index; a segment that is one axis on both
/// sides copies its coordinate. (TOPI's reshape divides the whole flat index for every
/// coordinate: correct, but its innermost coordinate becomes a remainder the vector loads
/// of a fused glue kernel cannot see through. Glue has no workload key to keep, so it
/// takes this form.)
fn reshape_index(from: &[i64], to: &[i64], v: &[Expr]) -> Vec<Expr> {
    let suffix = |s: &[i64]| -> Vec<i64> {
        let mut p = vec![1; s.len() + 1];
        for i in (0..s.len()).rev() {
            p[i] = p[i + 1] * s[i];
        }
        p
    };
    let (sp_in, sp_out) = (suffix(from), suffix(to));
    let mut index = vec![Expr::int(0); from.len()];
    let (mut i, mut j) = (0, 0);
    while i < from.len() || j < to.len() {
        // the next boundary: the largest suffix product below both sides' current one that
        // both shapes have (1 at the end always is)
        let here = sp_in[i].min(sp_out[j]);
        let boundary = sp_in[i + 1..]
            .iter()
            .copied()
            .filter(|p| *p < here && sp_out[j + 1..].contains(p))
            .max()
            .unwrap_or(1);
        let i_end = (i + 1..=from.len())
            .find(|&k| sp_in[k] == boundary)
            .unwrap_or(from.len());
        let j_end = (j + 1..=to.len())
            .find(|&k| sp_out[k] == boundary)
            .unwrap_or(to.len());
        let outs: Vec<usize> = (j..j_end).filter(|&k| to[k] != 1).collect();
        let ins: Vec<usize> = (i..i_end).filter(|&k| from[k] != 1).collect();
        if let (&[o], &[d]) = (outs.as_slice(), ins.as_slice()) {
            index[d] = v[o].clone();
        } else {
            let mut flat = Expr::int(0);
            for &k in &outs {
                flat = flat * to[k] + v[k].clone();
            }
            for (n, &d) in ins.iter().enumerate() {
                let stride: i64 = ins[n + 1..].iter().map(|&k| from[k]).product();
                let q = if stride == 1 {
                    flat.clone()
                } else {
                    Expr::floordiv(flat.clone(), stride)
                };
                index[d] = if n == 0 {
                    q
                } else {
                    Expr::floormod(q, from[d])
                };
            }
        }
        i = i_end;
        j = j_end;
    }
    index
}

/// `x` in row-major order under `shape` ([`reshape_index`]).
fn reshape_view(b: &mut DagBuilder, x: &Tensor, shape: &[i64]) -> Result<Tensor, String> {
    let n_in: i64 = x.shape.iter().product();
    let n_out: i64 = shape.iter().product();
    if n_in != n_out || shape.iter().chain(&x.shape).any(|&d| d <= 0) {
        return Err(format!(
            "cannot reshape {:?} ({n_in} elements) to {shape:?}",
            x.shape
        ));
    }
    let axes: Vec<IterVar> = shape
        .iter()
        .enumerate()
        .map(|(k, &d)| IterVar::new(format!("ax{k}"), d))
        .collect();
    let from = x.shape.clone();
    let to = shape.to_vec();
    Ok(b.elementwise("T_reshape", "injective", axes, |v| {
        x.at(reshape_index(&from, &to, v))
    }))
}

/// Along the physical axis of the logical one, its inputs sharing the output's layout.
pub(super) fn concat(b: &mut DagBuilder, cx: &GlueOp, axis: usize) -> Result<Tensor, String> {
    let layout = cx.out().layout;
    let mut ins = Vec::with_capacity(cx.op.inputs.len());
    for k in 0..cx.op.inputs.len() {
        if cx.input_value(k).layout != layout {
            return Err(cx.refused("its inputs are in different layouts"));
        }
        ins.push(cx.input(k)?.clone());
    }
    let shapes: Vec<&[i64]> = (0..ins.len())
        .map(|k| cx.input_value(k).shape.as_slice())
        .collect();
    let rank = cx.out().shape.len();
    let phys_axis = physical_axis(layout, &shapes, axis).ok_or_else(|| {
        cx.refused(format!(
            "logical axis {axis} has no matching axis in the {} layout",
            layout.name(rank)
        ))
    })?;
    concatenate(b, &ins, phys_axis).map_err(|e| cx.build_error(e))
}

/// `shape` viewed with `rank` axes: leading axes merged, or leading 1s added.
fn viewed(shape: &[i64], rank: usize) -> Vec<i64> {
    if shape.len() >= rank {
        let merged = shape.len() + 1 - rank.max(1);
        let mut v = vec![shape[..merged].iter().product()];
        v.extend_from_slice(&shape[merged..]);
        v.truncate(rank);
        v
    } else {
        let mut v = vec![1; rank - shape.len()];
        v.extend_from_slice(shape);
        v
    }
}

/// Output axis `i` is axis `perm[i]` of the input viewed with `perm.len()` axes.
pub(super) fn transpose(b: &mut DagBuilder, cx: &GlueOp, perm: &[usize]) -> Result<Tensor, String> {
    require_plain(cx)?;
    let x = cx.input(0)?;
    let view = viewed(&x.shape, perm.len());
    let x = if view == x.shape {
        x.clone()
    } else {
        reshape_view(b, x, &view).map_err(|e| cx.refused(e))?
    };
    transpose_by(b, &x, perm).map_err(|e| cx.build_error(e))
}

pub(super) fn strided_slice(
    b: &mut DagBuilder,
    cx: &GlueOp,
    begin: &[i64],
    strides: &[i64],
) -> Result<Tensor, String> {
    require_plain(cx)?;
    let shape = &cx.out().phys;
    slice_of(b, cx.input(0)?, begin, strides, shape, "T_strided_slice")
        .map_err(|e| cx.build_error(e))
}

/// One part of a split: a unit-stride slice from `begin` along `axis`.
pub(super) fn split(
    b: &mut DagBuilder,
    cx: &GlueOp,
    axis: usize,
    begin: i64,
) -> Result<Tensor, String> {
    require_plain(cx)?;
    let x = cx.input(0)?;
    if axis >= x.ndim() {
        return Err(cx.refused(format!("axis {axis} out of range for {:?}", x.shape)));
    }
    let mut first = vec![0; x.ndim()];
    first[axis] = begin;
    let strides = vec![1; x.ndim()];
    slice_of(b, x, &first, &strides, &cx.out().phys, "T_split").map_err(|e| cx.build_error(e))
}

pub(super) fn take(b: &mut DagBuilder, cx: &GlueOp, axis: usize) -> Result<Tensor, String> {
    require_plain(cx)?;
    take_from(b, cx.input(0)?, cx.input(1)?, axis).map_err(|e| cx.build_error(e))
}

pub(super) fn gather_elements(
    b: &mut DagBuilder,
    cx: &GlueOp,
    axis: usize,
) -> Result<Tensor, String> {
    require_plain(cx)?;
    gather_elements_of(b, cx.input(0)?, cx.input(1)?, axis).map_err(|e| cx.build_error(e))
}

/// `broadcast_to` the output's shape (ONNX `Expand` at run time).
pub(super) fn broadcast_to(b: &mut DagBuilder, cx: &GlueOp) -> Result<Tensor, String> {
    require_plain(cx)?;
    broadcast_to_shape(b, cx.input(0)?, &cx.out().phys).map_err(|e| cx.build_error(e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ttdb_algo::ir::eval::{evaluate, TensorData};
    use ttdb_algo::ir::DType;

    #[test]
    fn views_merge_leading_axes_or_add_ones() {
        assert_eq!(viewed(&[2, 3, 4, 5], 3), [6, 4, 5]);
        assert_eq!(viewed(&[4, 5], 3), [1, 4, 5]);
        assert_eq!(viewed(&[4, 5], 2), [4, 5]);
    }

    #[test]
    fn joined_axes_follow_the_layout() {
        let s: &[i64] = &[1, 16, 8, 8];
        assert_eq!(physical_axis(Layout::Nhwc, &[s, s], 1), Some(3));
        assert_eq!(physical_axis(Layout::Nchwc(8), &[s, s], 1), Some(1));
        let odd: &[i64] = &[1, 12, 8, 8];
        assert_eq!(physical_axis(Layout::Nchwc(8), &[s, odd], 1), None);
        assert_eq!(physical_axis(Layout::Nchwc(8), &[s, odd], 2), Some(2));
        assert_eq!(physical_axis(Layout::Plain, &[s], 4), None);
    }

    /// Every element keeps its row-major position, across splits, merges, unit axes and
    /// shapes that share no boundary but the ends.
    #[test]
    fn factored_reshapes_keep_row_major_order() {
        let cases: &[(&[i64], &[i64])] = &[
            (&[2, 3, 4], &[24]),
            (&[24], &[2, 3, 4]),
            (&[1, 197, 3072], &[197, 3072]),
            (&[197, 768], &[1, 197, 12, 64]),
            (&[1, 12, 197, 64], &[12, 197, 64]),
            (&[2, 3, 4], &[4, 3, 2]),
            (&[6, 4], &[2, 12]),
            (&[2, 1, 3, 1], &[1, 6, 1]),
            (&[4, 6, 5], &[4, 3, 10]),
        ];
        for &(from, to) in cases {
            let n: i64 = from.iter().product();
            let x = TensorData::new(from, (0..n).map(|i| i as f64).collect());
            let mut b = DagBuilder::new();
            let p = b.placeholder("p0", from, DType::Float(32));
            let out = reshape_view(&mut b, &p, to).unwrap();
            let dag = b.finish(&[&out]);
            let y = evaluate(&dag, std::slice::from_ref(&x)).unwrap().remove(0);
            assert_eq!(y.shape, to);
            assert_eq!(y.data, x.data, "{from:?} -> {to:?}");
        }
        let mut b = DagBuilder::new();
        let p = b.placeholder("p0", &[2, 3], DType::Float(32));
        assert!(reshape_view(&mut b, &p, &[5]).is_err());
    }
}
