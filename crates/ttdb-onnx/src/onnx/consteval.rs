//! Load-time constant folding of shape sub-graphs, the part of TVM's `FoldConstant` (and of
//! Relay's ONNX frontend, which folds `Shape`-rooted sub-graphs with `infer_value`) that
//! kernel extraction needs: when every input of a node has known values, the values of its
//! outputs, computed as the ONNX operator definitions say, so that graphs
//! that compute their own shapes (`Shape -> Gather -> Mod -> Slice`, `ConstantOfShape ->
//! Where -> Expand`, position ids from `Range` or `CumSum`) load with static shapes.
//!
//! Also here: the shape rules of the ops that mostly live in those sub-graphs (`Range`,
//! `CumSum`, `GatherElements`, `NonZero`), which stay run-time ops when their inputs are not
//! known, and `Slice` (its index normalization is shared by the shape and the values); their
//! descriptors in [`crate::onnx::ops`] call them.
//!
//! Bounds: values are computed only for outputs of at most [`MAX_KEPT_ELEMENTS`] elements,
//! checked before anything is allocated. A larger constant keeps its shape and no values; a
//! node that needs them is refused with an error naming it ([`unknown_values`]). Integer
//! arithmetic wraps to the output's ONNX type, like onnxruntime's C++ kernels; an integer
//! division by zero (undefined in ONNX) leaves the values unknown rather than guessing.
use super::{checked, Ctx};
use crate::onnx::error::Result;
use crate::onnx::graph::{dtype, numel, Data, TensorInfo, MAX_KEPT_ELEMENTS};

/// Why the values of `t` (input `i` of a node, described as `what`) are not known: the
/// message of the error a node that needs them gets.
pub(crate) fn unknown_values(t: &TensorInfo, name: &str, what: &str, i: usize) -> String {
    let n = t.numel().unwrap_or(i64::MAX);
    if t.data.is_some() {
        format!("{what} (input {i}, `{name}`) must be integers")
    } else if t.constant && n > MAX_KEPT_ELEMENTS {
        format!(
            "{what} (input {i}, `{name}`) is a constant of {n} elements, more than the \
             {MAX_KEPT_ELEMENTS} ttdb computes at load time"
        )
    } else if t.constant {
        format!(
            "{what} (input {i}, `{name}`) is a constant, but ttdb cannot compute its values at \
             load time"
        )
    } else {
        format!(
            "{what} (input {i}, `{name}`) must be a constant known at load time; it is computed \
             at run time"
        )
    }
}

/// Fills in the values of `outs` that the shape rule left unknown, when every present input
/// of the node has known values and every output is small enough.
pub(super) fn fold(ctx: &Ctx, outs: &mut [TensorInfo]) -> Result<()> {
    if outs.iter().all(|o| o.data.is_some())
        || outs
            .iter()
            .any(|o| o.numel().is_none_or(|n| n > MAX_KEPT_ELEMENTS))
        || ctx.ins.iter().flatten().any(|t| t.data.is_none())
    {
        return Ok(());
    }
    let op = ctx.node.op_type.as_str();
    let out = &outs[0];
    let values: Option<Vec<Data>> = match op {
        "Add" | "Sub" | "Mul" | "Div" | "Mod" | "Pow" | "Max" | "Min" | "Sum" | "Mean"
        | "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual" | "And" | "Or"
        | "Xor" => elementwise(ctx, out).map(|d| vec![d]),
        "Where" => where_(ctx, out).map(|d| vec![d]),
        "Not" | "Neg" | "Abs" | "Sign" | "Floor" | "Ceil" | "Round" | "Sqrt" | "Reciprocal"
        | "Relu" => unary(op, ctx.input(0)?, out).map(|d| vec![d]),
        "Cast" => cast(ctx.input(0)?.data.as_ref(), out.dtype).map(|d| vec![d]),
        "Gather" => gather(ctx, out)?.map(|d| vec![d]),
        "GatherElements" => gather_elements(ctx, out)?.map(|d| vec![d]),
        "Concat" => concat(ctx, out).map(|d| vec![d]),
        "Expand" => {
            let x = ctx.input(0)?;
            let src = broadcast_src(&x.shape, &out.shape);
            x.data
                .as_ref()
                .and_then(|d| remap(d, &x.shape, &out.shape, src))
                .map(|d| vec![d])
        }
        "Tile" => {
            let x = ctx.input(0)?;
            let src = |c: &[i64]| c.iter().zip(&x.shape).map(|(&c, &d)| c % d).collect();
            x.data
                .as_ref()
                .and_then(|d| remap(d, &x.shape, &out.shape, src))
                .map(|d| vec![d])
        }
        "Split" => split(ctx, outs),
        "CumSum" => cumsum(ctx)?.map(|d| vec![d]),
        _ => None,
    };
    if let Some(values) = values {
        for (o, d) in outs.iter_mut().zip(values) {
            if o.data.is_none() && Some(d.len() as i64) == o.numel() {
                o.data = Some(d);
                o.constant = true;
            }
        }
    }
    Ok(())
}

/// An integer value wrapped to ONNX type `dt` (two's complement, like a C++ cast).
pub(super) fn wrap(v: i64, dt: i32) -> i64 {
    match dt {
        dtype::BOOL => (v != 0) as i64,
        dtype::INT8 => v as i8 as i64,
        dtype::UINT8 => v as u8 as i64,
        4 => v as u16 as i64,
        5 => v as i16 as i64,
        dtype::INT32 => v as i32 as i64,
        12 => v as u32 as i64,
        _ => v,
    }
}

/// A float value rounded to ONNX type `dt` (float32 values are kept as f64).
fn round_to(v: f64, dt: i32) -> f64 {
    if dt == dtype::FLOAT {
        v as f32 as f64
    } else {
        v
    }
}

/// ONNX `Cast` of known values; None for targets ttdb does not model (float16, strings).
pub(super) fn cast(d: Option<&Data>, to: i32) -> Option<Data> {
    let d = d?;
    if dtype::is_integer(to) {
        let v: Vec<i64> = match d {
            Data::Ints(v) => v.clone(),
            Data::Floats(v) if to == dtype::BOOL => v.iter().map(|&f| (f != 0.0) as i64).collect(),
            // float to int truncates toward zero; NaN and out-of-range values are undefined
            Data::Floats(v) => v
                .iter()
                .map(|&f| (f.is_finite() && f.abs() < 9.2e18).then(|| f.trunc() as i64))
                .collect::<Option<_>>()?,
        };
        Some(Data::Ints(v.into_iter().map(|x| wrap(x, to)).collect()))
    } else if to == dtype::FLOAT || to == dtype::DOUBLE {
        Some(Data::Floats(
            d.as_floats().into_iter().map(|x| round_to(x, to)).collect(),
        ))
    } else {
        None
    }
}

/// Values of a data-movement op on a small known tensor: `src(out_coords)` gives the input
/// coordinates each output element reads (None for a coordinate out of range).
pub(crate) fn remap(
    d: &Data,
    in_shape: &[i64],
    out_shape: &[i64],
    src: impl Fn(&[i64]) -> Vec<i64>,
) -> Option<Data> {
    if numel(in_shape)? != d.len() as i64 {
        return None;
    }
    let idx = index_map(in_shape, out_shape, src)?;
    Some(pick(d, &idx))
}

fn pick(d: &Data, idx: &[usize]) -> Data {
    match d {
        Data::Ints(v) => Data::Ints(idx.iter().map(|&i| v[i]).collect()),
        Data::Floats(v) => Data::Floats(idx.iter().map(|&i| v[i]).collect()),
    }
}

/// For each output element (row-major), the flat index of the input element it reads.
fn index_map(
    in_shape: &[i64],
    out_shape: &[i64],
    src: impl Fn(&[i64]) -> Vec<i64>,
) -> Option<Vec<usize>> {
    let n = numel(out_shape)?;
    if n > MAX_KEPT_ELEMENTS {
        return None;
    }
    let mut idx = Vec::with_capacity(n as usize);
    let mut coords = vec![0i64; out_shape.len()];
    for flat in 0..n {
        let mut rem = flat;
        for i in (0..out_shape.len()).rev() {
            coords[i] = rem % out_shape[i].max(1);
            rem /= out_shape[i].max(1);
        }
        let c = src(&coords);
        if c.len() != in_shape.len() {
            return None;
        }
        let mut f = 0i64;
        for (i, &ci) in c.iter().enumerate() {
            if ci < 0 || ci >= in_shape[i] {
                return None;
            }
            f = f * in_shape[i] + ci;
        }
        idx.push(f as usize);
    }
    Some(idx)
}

/// Numpy broadcasting: the input coordinates an output element of `out` reads from `input`.
fn broadcast_src<'a>(input: &'a [i64], out: &'a [i64]) -> impl Fn(&[i64]) -> Vec<i64> + 'a {
    move |c: &[i64]| {
        let off = out.len() - input.len().min(out.len());
        input
            .iter()
            .enumerate()
            // an input of higher rank than the output reads out of range: no values
            .map(|(i, &d)| {
                if d == 1 {
                    0
                } else {
                    c.get(i + off).copied().unwrap_or(-1)
                }
            })
            .collect()
    }
}

/// Each present input's values, broadcast to `out`'s shape (flat, row-major).
fn broadcast_all<'a>(ctx: &Ctx<'a>, out: &TensorInfo) -> Option<Vec<Data>> {
    ctx.ins
        .iter()
        .flatten()
        .map(|t| {
            let src = broadcast_src(&t.shape, &out.shape);
            remap(t.data.as_ref()?, &t.shape, &out.shape, src)
        })
        .collect()
}

fn int_op(op: &str, fmod: bool, a: i64, b: i64) -> Option<i64> {
    let bit = |x: i64| x != 0;
    Some(match op {
        "Add" | "Sum" => a.wrapping_add(b),
        "Sub" => a.wrapping_sub(b),
        "Mul" => a.wrapping_mul(b),
        // C++ integer division: truncation toward zero
        "Div" if b != 0 => a.wrapping_div(b),
        "Mod" if b != 0 => {
            let r = a.wrapping_rem(b);
            // fmod=0: the result takes the divisor's sign (Python's %)
            if !fmod && r != 0 && (r < 0) != (b < 0) {
                r.wrapping_add(b)
            } else {
                r
            }
        }
        "Pow" => a.checked_pow(u32::try_from(b).ok()?)?,
        "Max" => a.max(b),
        "Min" => a.min(b),
        "Equal" => (a == b) as i64,
        "Less" => (a < b) as i64,
        "Greater" => (a > b) as i64,
        "LessOrEqual" => (a <= b) as i64,
        "GreaterOrEqual" => (a >= b) as i64,
        "And" => (bit(a) && bit(b)) as i64,
        "Or" => (bit(a) || bit(b)) as i64,
        "Xor" => (bit(a) != bit(b)) as i64,
        _ => return None,
    })
}

fn float_op(op: &str, fmod: bool, a: f64, b: f64) -> Option<f64> {
    let t = |c: bool| c as i64 as f64;
    Some(match op {
        "Add" | "Sum" | "Mean" => a + b,
        "Sub" => a - b,
        "Mul" => a * b,
        "Div" => a / b,
        // the spec requires fmod=1 for floats: C's fmod, the dividend's sign
        "Mod" if fmod => a % b,
        "Pow" => a.powf(b),
        // NaN propagates (std::max in onnxruntime keeps the first operand; the spec says NaN)
        "Max" if a.is_nan() || b.is_nan() => f64::NAN,
        "Min" if a.is_nan() || b.is_nan() => f64::NAN,
        "Max" => a.max(b),
        "Min" => a.min(b),
        "Equal" => t(a == b),
        "Less" => t(a < b),
        "Greater" => t(a > b),
        "LessOrEqual" => t(a <= b),
        "GreaterOrEqual" => t(a >= b),
        _ => return None,
    })
}

/// Broadcasting element-wise ops, variadic ones (Sum, Max, Min, Mean) folded left.
fn elementwise(ctx: &Ctx, out: &TensorInfo) -> Option<Data> {
    let op = ctx.node.op_type.as_str();
    let fmod = ctx.node.int("fmod").unwrap_or(0) != 0;
    let args = broadcast_all(ctx, out)?;
    let (first, rest) = args.split_first()?;
    let ints = args.iter().all(|d| matches!(d, Data::Ints(_)));
    if ints && op != "Mean" {
        let mut acc = first.as_ints()?;
        for d in rest {
            let b = d.as_ints()?;
            for (a, &b) in acc.iter_mut().zip(&b) {
                *a = wrap(int_op(op, fmod, *a, b)?, out.dtype);
            }
        }
        return Some(Data::Ints(acc));
    }
    let mut acc = first.as_floats();
    for d in rest {
        for (a, b) in acc.iter_mut().zip(d.as_floats()) {
            *a = round_to(float_op(op, fmod, *a, b)?, out.dtype);
        }
    }
    if op == "Mean" {
        let k = args.len() as f64;
        acc.iter_mut()
            .for_each(|a| *a = round_to(*a / k, out.dtype));
    }
    if dtype::is_integer(out.dtype) {
        // comparisons of floats: 0/1
        return Some(Data::Ints(acc.into_iter().map(|v| v as i64).collect()));
    }
    Some(Data::Floats(acc))
}

fn where_(ctx: &Ctx, out: &TensorInfo) -> Option<Data> {
    let args = broadcast_all(ctx, out)?;
    let [cond, x, y] = args.as_slice() else {
        return None;
    };
    let cond = cond.as_ints()?;
    Some(match (x, y) {
        (Data::Ints(x), Data::Ints(y)) => Data::Ints(
            cond.iter()
                .zip(x.iter().zip(y))
                .map(|(&c, (&a, &b))| if c != 0 { a } else { b })
                .collect(),
        ),
        _ => Data::Floats(
            cond.iter()
                .zip(x.as_floats().into_iter().zip(y.as_floats()))
                .map(|(&c, (a, b))| if c != 0 { a } else { b })
                .collect(),
        ),
    })
}

fn unary(op: &str, x: &TensorInfo, out: &TensorInfo) -> Option<Data> {
    match x.data.as_ref()? {
        Data::Ints(v) => {
            let f = |a: i64| -> Option<i64> {
                Some(match op {
                    "Not" => (a == 0) as i64,
                    "Neg" => a.wrapping_neg(),
                    "Abs" => a.wrapping_abs(),
                    "Sign" => a.signum(),
                    "Relu" => a.max(0),
                    "Floor" | "Ceil" | "Round" => a,
                    _ => return None,
                })
            };
            let v: Vec<i64> = v.iter().map(|&a| f(a)).collect::<Option<_>>()?;
            Some(Data::Ints(
                v.into_iter().map(|a| wrap(a, out.dtype)).collect(),
            ))
        }
        Data::Floats(v) => {
            let f = |a: f64| -> Option<f64> {
                Some(match op {
                    "Neg" => -a,
                    "Abs" => a.abs(),
                    "Sign" if a == 0.0 || a.is_nan() => a,
                    "Sign" => a.signum(),
                    "Relu" => a.max(0.0),
                    "Floor" => a.floor(),
                    "Ceil" => a.ceil(),
                    // ONNX Round: halves to even
                    "Round" => a.round_ties_even(),
                    "Sqrt" => a.sqrt(),
                    "Reciprocal" => 1.0 / a,
                    _ => return None,
                })
            };
            let v: Vec<f64> = v.iter().map(|&a| f(a)).collect::<Option<_>>()?;
            Some(Data::Floats(
                v.into_iter().map(|a| round_to(a, out.dtype)).collect(),
            ))
        }
    }
}

/// An index into a dim of `d` elements, negative ones counting from the end; None when out
/// of range.
fn index_in(i: i64, d: i64) -> Option<i64> {
    let j = if i < 0 { i.checked_add(d)? } else { i };
    (0..d).contains(&j).then_some(j)
}

fn gather(ctx: &Ctx, out: &TensorInfo) -> Result<Option<Data>> {
    let (x, idx) = (ctx.input(0)?, ctx.input(1)?);
    let (Some(d), Some(ix)) = (&x.data, idx.data.as_ref().and_then(Data::as_ints)) else {
        return Ok(None);
    };
    let axis = ctx.axis(ctx.node.int("axis").unwrap_or(0), x.shape.len())?;
    let n = x.shape[axis];
    let ix = match ix
        .iter()
        .map(|&i| index_in(i, n))
        .collect::<Option<Vec<_>>>()
    {
        Some(v) => v,
        None => return ctx.err(format!("indices {ix:?} out of range for a dim of {n}")),
    };
    let k = idx.shape.len();
    let src = |c: &[i64]| {
        // out coords: x's dims before axis, idx's dims, x's dims after axis
        let flat = c[axis..axis + k]
            .iter()
            .zip(&idx.shape)
            .fold(0i64, |f, (&ci, &di)| f * di + ci);
        let mut s = c[..axis].to_vec();
        s.push(ix[flat as usize]);
        s.extend(&c[axis + k..]);
        s
    };
    Ok(remap(d, &x.shape, &out.shape, src))
}

pub(crate) fn gather_elements_shape(ctx: &Ctx) -> Result<TensorInfo> {
    let (x, idx) = (ctx.input(0)?, ctx.input(1)?);
    if x.shape.len() != idx.shape.len() || x.shape.is_empty() {
        return ctx.err(format!(
            "data {:?} and indices {:?} must have the same rank (>= 1)",
            x.shape, idx.shape
        ));
    }
    ctx.axis(ctx.node.int("axis").unwrap_or(0), x.shape.len())?;
    ctx.out(idx.shape.clone(), x.dtype, None)
}

fn gather_elements(ctx: &Ctx, out: &TensorInfo) -> Result<Option<Data>> {
    let (x, idx) = (ctx.input(0)?, ctx.input(1)?);
    let (Some(d), Some(ix)) = (&x.data, idx.data.as_ref().and_then(Data::as_ints)) else {
        return Ok(None);
    };
    let axis = ctx.axis(ctx.node.int("axis").unwrap_or(0), x.shape.len())?;
    let n = x.shape[axis];
    if let Some(bad) = ix.iter().find(|&&i| index_in(i, n).is_none()) {
        return ctx.err(format!("index {bad} out of range for a dim of {n}"));
    }
    let src = |c: &[i64]| {
        let flat = c
            .iter()
            .zip(&idx.shape)
            .fold(0i64, |f, (&ci, &di)| f * di + ci);
        let mut s = c.to_vec();
        s[axis] = index_in(ix[flat as usize], n).unwrap_or(-1);
        s
    };
    Ok(remap(d, &x.shape, &out.shape, src))
}

fn concat(ctx: &Ctx, out: &TensorInfo) -> Option<Data> {
    let parts: Vec<&TensorInfo> = ctx.ins.iter().flatten().collect();
    let r = out.shape.len();
    let axis = ctx.axis(ctx.node.int("axis").unwrap_or(0), r).ok()?;
    let ints = parts.iter().all(|t| matches!(t.data, Some(Data::Ints(_))));
    let (mut iv, mut fv) = (Vec::new(), Vec::new());
    // row-major: for each outer index, each part's contiguous block along the axis
    let outer = numel(&out.shape[..axis])?;
    for o in 0..outer {
        for t in &parts {
            let block = numel(&t.shape[axis..])? as usize;
            let d = t.data.as_ref()?;
            let range = o as usize * block..(o as usize + 1) * block;
            match d {
                Data::Ints(v) if ints => iv.extend_from_slice(v.get(range)?),
                _ => fv.extend_from_slice(d.as_floats().get(range)?),
            }
        }
    }
    Some(if ints {
        Data::Ints(iv)
    } else {
        Data::Floats(fv)
    })
}

fn split(ctx: &Ctx, outs: &[TensorInfo]) -> Option<Vec<Data>> {
    let x = ctx.input(0).ok()?;
    let d = x.data.as_ref()?;
    let axis = ctx
        .axis(ctx.node.int("axis").unwrap_or(0), x.shape.len())
        .ok()?;
    let mut start = 0i64;
    outs.iter()
        .map(|o| {
            let s = start;
            start += o.shape[axis];
            remap(d, &x.shape, &o.shape, |c| {
                let mut c = c.to_vec();
                c[axis] += s;
                c
            })
        })
        .collect()
}

/// A scalar input's one value (rank 0, or a single element as onnxruntime accepts).
fn scalar<'a>(ctx: &Ctx<'a>, i: usize) -> Result<Option<&'a Data>> {
    let t = ctx.input(i)?;
    if t.numel() != Some(1) {
        return ctx.err(format!(
            "input {i} must be a scalar, got shape {:?}",
            t.shape
        ));
    }
    Ok(t.data.as_ref())
}

/// `Range(start, limit, delta)`: `max(ceil((limit - start) / delta), 0)` elements
/// `start, start + delta, ...` (accumulated, as the spec's function body does), in start's type.
pub(crate) fn range(ctx: &Ctx) -> Result<TensorInfo> {
    let dt = ctx.input(0)?.dtype;
    let (Some(s), Some(l), Some(d)) = (scalar(ctx, 0)?, scalar(ctx, 1)?, scalar(ctx, 2)?) else {
        return ctx.unsupported(
            "its start, limit and delta must be known at load time: the output length depends on them",
        );
    };
    let ints = [s, l, d].iter().all(|v| matches!(v, Data::Ints(_)));
    if ints && dtype::is_integer(dt) {
        let first = |v: &Data| v.as_ints().and_then(|v| v.first().copied()).unwrap_or(0);
        let (s, l, d) = (first(s), first(l), first(d));
        if d == 0 {
            return ctx.err("delta is 0");
        }
        let (span, step) = (l as i128 - s as i128, d as i128);
        let n = if (span > 0) == (step > 0) && span != 0 {
            (span.abs() + step.abs() - 1) / step.abs()
        } else {
            0
        };
        let n = checked(ctx, i64::try_from(n).ok())?;
        let data = (n <= MAX_KEPT_ELEMENTS).then(|| {
            Data::Ints(
                (0..n)
                    .map(|i| wrap(s.wrapping_add(i.wrapping_mul(d)), dt))
                    .collect(),
            )
        });
        return ctx.out(vec![n], dt, data);
    }
    let first = |v: &Data| v.as_floats().first().copied().unwrap_or(f64::NAN);
    let (s, l, d) = (first(s), first(l), first(d));
    let n = round_to(round_to(l - s, dt) / d, dt).ceil().max(0.0);
    if d == 0.0 || !n.is_finite() || n > i64::MAX as f64 / 2.0 {
        return ctx.err(format!("range({s}, {l}, {d}) has no finite length"));
    }
    let n = n as i64;
    let data = (n <= MAX_KEPT_ELEMENTS).then(|| {
        let mut v = Vec::with_capacity(n as usize);
        let mut x = round_to(s, dt);
        for _ in 0..n {
            v.push(x);
            x = round_to(x + d, dt);
        }
        Data::Floats(v)
    });
    ctx.out(vec![n], dt, data)
}

/// CumSum's axis (input 1, a scalar), normalized; None while it is computed at run time.
/// CumSum's axis, when its axis input is known.
pub(crate) fn cumsum_axis(ctx: &Ctx) -> Result<Option<usize>> {
    let r = ctx.input(0)?.shape.len();
    match scalar(ctx, 1)?.and_then(Data::as_ints) {
        Some(a) => Ok(Some(ctx.axis(a[0], r)?)),
        None => Ok(None),
    }
}

/// CumSum keeps its input's shape and type; over a run-time input (position ids from an
/// attention mask) it stays a run-time op.
pub(crate) fn cumsum_shape(ctx: &Ctx) -> Result<TensorInfo> {
    let x = ctx.input(0)?;
    if x.shape.is_empty() {
        return ctx.err("CumSum of a scalar");
    }
    cumsum_axis(ctx)?;
    ctx.out(x.shape.clone(), x.dtype, None)
}

fn cumsum(ctx: &Ctx) -> Result<Option<Data>> {
    let x = ctx.input(0)?;
    let (Some(axis), Some(d)) = (cumsum_axis(ctx)?, &x.data) else {
        return Ok(None);
    };
    let lines = Lines {
        n: x.shape[axis] as usize,
        inner: numel(&x.shape[axis + 1..]).unwrap_or(0) as usize,
        outer: numel(&x.shape[..axis]).unwrap_or(0) as usize,
        exclusive: ctx.node.int("exclusive").unwrap_or(0) != 0,
        reverse: ctx.node.int("reverse").unwrap_or(0) != 0,
    };
    let dt = x.dtype;
    // integers are scanned as integers: i64 through f64 would lose precision
    Ok(Some(match d {
        Data::Ints(v) => Data::Ints(lines.scan(v, 0, |a, b| wrap(a.wrapping_add(b), dt))),
        Data::Floats(v) => Data::Floats(lines.scan(v, 0.0, |a, b| round_to(a + b, dt))),
    }))
}

/// The lines of a tensor along one axis (`outer` x `n` x `inner`), for CumSum.
struct Lines {
    n: usize,
    inner: usize,
    outer: usize,
    exclusive: bool,
    reverse: bool,
}

impl Lines {
    fn scan<T: Copy>(&self, v: &[T], zero: T, add: impl Fn(T, T) -> T) -> Vec<T> {
        let mut out = vec![zero; v.len()];
        for o in 0..self.outer {
            for i in 0..self.inner {
                let mut acc = zero;
                for step in 0..self.n {
                    let k = if self.reverse {
                        self.n - 1 - step
                    } else {
                        step
                    };
                    let f = (o * self.n + k) * self.inner + i;
                    if self.exclusive {
                        out[f] = acc;
                        acc = add(acc, v[f]);
                    } else {
                        acc = add(acc, v[f]);
                        out[f] = acc;
                    }
                }
            }
        }
        out
    }
}

pub(crate) fn nonzero(ctx: &Ctx) -> Result<TensorInfo> {
    let x = ctx.input(0)?;
    let Some(d) = &x.data else {
        return ctx.unsupported(
            "its output shape depends on the values of its input, which are computed at run time",
        );
    };
    let hits: Vec<usize> = d
        .as_floats()
        .iter()
        .enumerate()
        .filter(|(_, &v)| v != 0.0)
        .map(|(i, _)| i)
        .collect();
    let r = x.shape.len();
    // [rank, count]: row k holds the k-th coordinate of every hit
    let mut out = vec![0i64; r * hits.len()];
    for (j, &h) in hits.iter().enumerate() {
        let mut rem = h as i64;
        for k in (0..r).rev() {
            out[k * hits.len() + j] = rem % x.shape[k].max(1);
            rem /= x.shape[k].max(1);
        }
    }
    ctx.out(
        vec![r as i64, hits.len() as i64],
        dtype::INT64,
        Some(Data::Ints(out)),
    )
}

/// ONNX Slice's index normalization for one axis of `d` elements: negative indices count
/// from the end; starts clamp to [0, d] (step > 0) or [0, d-1] (step < 0), ends to [0, d]
/// or [-1, d-1] (so INT64_MAX / INT64_MIN mean "to the end"). Returns (first index, length).
pub(super) fn slice_range(start: i64, end: i64, step: i64, d: i64) -> (i64, i64) {
    let norm = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
    if d == 0 {
        return (0, 0);
    }
    let (s, e) = if step > 0 {
        (norm(start).clamp(0, d), norm(end).clamp(0, d))
    } else {
        (norm(start).clamp(0, d - 1), norm(end).clamp(-1, d - 1))
    };
    let (span, st) = (
        (e as i128 - s as i128) * step.signum() as i128,
        (step as i128).abs(),
    );
    let len = if span > 0 { (span + st - 1) / st } else { 0 };
    (s, len as i64)
}

/// What a `Slice` takes along each axis of its input: elements `first[a] + k * stride[a]`
/// for `k < shape[a]` (axes it does not slice: all, in order).
pub(crate) struct SlicePlan {
    pub(crate) first: Vec<i64>,
    pub(crate) stride: Vec<i64>,
    pub(crate) shape: Vec<i64>,
}

/// `Slice`'s plan: starts/ends/axes as attributes before opset 10, as inputs (plus steps)
/// since.
pub(crate) fn slice_plan(ctx: &Ctx) -> Result<SlicePlan> {
    let x = ctx.input(0)?;
    let node = ctx.node;
    let (starts, ends, axes, steps) = if ctx.opset < 10 {
        let g = |n: &str| node.ints(n).map(<[i64]>::to_vec);
        (
            g("starts").unwrap_or_default(),
            g("ends").unwrap_or_default(),
            g("axes"),
            None,
        )
    } else {
        let opt = |i: usize, what: &str| -> Result<Option<Vec<i64>>> {
            match ctx.opt(i) {
                Some(_) => ctx.ints(i, what).map(Some),
                None => Ok(None),
            }
        };
        (
            ctx.ints(1, "the starts")?,
            ctx.ints(2, "the ends")?,
            opt(3, "the axes")?,
            opt(4, "the steps")?,
        )
    };
    let r = x.shape.len();
    let axes: Vec<usize> = match axes {
        Some(a) => a.iter().map(|&a| ctx.axis(a, r)).collect::<Result<_>>()?,
        None => (0..starts.len()).collect(),
    };
    let steps = steps.unwrap_or_else(|| vec![1; axes.len()]);
    if starts.len() != axes.len() || ends.len() != axes.len() || steps.len() != axes.len() {
        return ctx.err(format!(
            "starts {starts:?}, ends {ends:?}, axes {axes:?} and steps {steps:?} differ in length"
        ));
    }
    let mut seen = vec![false; r];
    for &a in &axes {
        if a >= r || std::mem::replace(&mut seen[a], true) {
            return ctx.err(format!("axes {axes:?} repeat an axis or exceed rank {r}"));
        }
    }
    let mut shape = x.shape.clone();
    let mut first = vec![0i64; r];
    let mut stride = vec![1i64; r];
    for (j, &a) in axes.iter().enumerate() {
        if steps[j] == 0 {
            return ctx.err("a step is 0");
        }
        let (s, len) = slice_range(starts[j], ends[j], steps[j], x.shape[a]);
        (first[a], stride[a], shape[a]) = (s, steps[j], len);
    }
    Ok(SlicePlan {
        first,
        stride,
        shape,
    })
}

/// `Slice`: the type of its output, and its values when the input's are known.
pub(crate) fn slice(ctx: &Ctx) -> Result<TensorInfo> {
    let x = ctx.input(0)?;
    let r = x.shape.len();
    let SlicePlan {
        first,
        stride,
        shape,
    } = slice_plan(ctx)?;
    let data = x.data.as_ref().and_then(|d| {
        remap(d, &x.shape, &shape, |out| {
            (0..r).map(|a| first[a] + out[a] * stride[a]).collect()
        })
    });
    ctx.out(shape, x.dtype, data)
}
