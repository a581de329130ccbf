//! Static shape inference for the ops ttdb's corpus uses; the values of small constant
//! tensors are folded along ([`consteval`]), so that `Shape -> Gather -> Unsqueeze -> Concat
//! -> Reshape` chains and `ConstantOfShape` weights resolve. Unsupported ops are an error
//! naming the node.
//!
//! All arithmetic on numbers read from the file is checked: a hostile file gets an error,
//! never a panic or a huge allocation.
use super::error::{OnnxError, Result};
use super::graph::{dims_ok, dtype, numel, Attr, Data, Graph, Node, TensorInfo, MAX_KEPT_ELEMENTS};
pub use super::window::{conv_params, pool_params, spatial_out, ConvParams, PoolParams, Window};

#[path = "consteval.rs"]
mod consteval;
#[path = "shape_rules.rs"]
mod rules;
use rules::{binary, concat, gather, matmul, reshape, resize, split};

/// Infers every node's output types in order (ONNX requires topological order).
pub fn infer(g: &mut Graph) -> Result<()> {
    for idx in 0..g.nodes.len() {
        let node = &g.nodes[idx];
        let mut ins = Vec::with_capacity(node.inputs.len());
        for name in &node.inputs {
            if name.is_empty() {
                ins.push(None);
                continue;
            }
            let t = g.tensors.get(name).ok_or_else(|| OnnxError::Invalid(format!(
                "node `{}` ({}) reads `{name}`, which is neither a graph input, an initializer nor the output of an earlier node",
                node.name, node.op_type
            )))?;
            ins.push(Some(t.clone()));
        }
        let outs = infer_node(node, &ins, g.opset)?;
        let node = &g.nodes[idx];
        for (i, name) in node.outputs.iter().enumerate() {
            if name.is_empty() {
                continue;
            }
            let t = outs.get(i).cloned().ok_or_else(|| OnnxError::Shape {
                node: node.name.clone(),
                op: node.op_type.clone(),
                msg: format!("output {i} (`{name}`) is not produced by this op"),
            })?;
            if !dims_ok(&t.shape) {
                return Err(OnnxError::Shape {
                    node: node.name.clone(),
                    op: node.op_type.clone(),
                    msg: format!("output shape {:?} is negative or overflows", t.shape),
                });
            }
            g.tensors.insert(name.clone(), t);
        }
    }
    for o in &g.outputs {
        if !g.tensors.contains_key(o) {
            return Err(OnnxError::Invalid(format!(
                "graph output `{o}` is not produced by any node"
            )));
        }
    }
    Ok(())
}

struct Ctx<'a> {
    node: &'a Node,
    ins: &'a [Option<TensorInfo>],
    opset: i64,
}

impl<'a> Ctx<'a> {
    fn err<T>(&self, msg: impl Into<String>) -> Result<T> {
        Err(OnnxError::Shape {
            node: self.node.name.clone(),
            op: self.node.op_type.clone(),
            msg: msg.into(),
        })
    }

    fn unsupported<T>(&self, reason: impl Into<String>) -> Result<T> {
        Err(OnnxError::Unsupported {
            node: self.node.name.clone(),
            op: self.node.op_type.clone(),
            reason: reason.into(),
        })
    }

    fn input(&self, i: usize) -> Result<&'a TensorInfo> {
        match self.ins.get(i) {
            Some(Some(t)) => Ok(t),
            _ => self.err(format!("input {i} is missing")),
        }
    }

    fn opt(&self, i: usize) -> Option<&'a TensorInfo> {
        self.ins.get(i).and_then(|t| t.as_ref())
    }

    /// Integer values of input `i`, which must be known (a constant or folded shape tensor).
    fn ints(&self, i: usize, what: &str) -> Result<Vec<i64>> {
        let t = self.input(i)?;
        match t.data.as_ref().and_then(Data::as_ints) {
            Some(v) => Ok(v),
            None => {
                let name = self.node.input(i).unwrap_or_default();
                self.unsupported(consteval::unknown_values(t, name, what, i))
            }
        }
    }

    fn axis(&self, axis: i64, rank: usize) -> Result<usize> {
        let r = rank as i64;
        if axis < -r || axis >= r.max(1) {
            return self.err(format!("axis {axis} out of range for rank {rank}"));
        }
        Ok(if axis < 0 {
            (axis + r) as usize
        } else {
            axis as usize
        })
    }

    fn all_constant(&self) -> bool {
        self.ins.iter().flatten().all(|t| t.constant)
    }

    /// An output with the shape of input 0.
    fn same(&self) -> Result<TensorInfo> {
        let x = self.input(0)?;
        Ok(TensorInfo {
            shape: x.shape.clone(),
            dtype: x.dtype,
            data: None,
            constant: self.all_constant(),
        })
    }

    fn out(&self, shape: Vec<i64>, dtype: i32, data: Option<Data>) -> Result<TensorInfo> {
        let n = match numel(&shape) {
            Some(n) if dims_ok(&shape) => n,
            _ => return self.err(format!("output shape {shape:?} is negative or overflows")),
        };
        let data = data.filter(|d| d.len() as i64 == n && n <= MAX_KEPT_ELEMENTS);
        Ok(TensorInfo {
            shape,
            dtype,
            data,
            constant: self.all_constant(),
        })
    }
}

fn checked(ctx: &Ctx, v: Option<i64>) -> Result<i64> {
    match v {
        Some(v) => Ok(v),
        None => ctx.err("integer overflow in shape arithmetic"),
    }
}

/// Numpy-style broadcast of shapes.
pub fn broadcast(a: &[i64], b: &[i64]) -> Option<Vec<i64>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for (i, o) in out.iter_mut().enumerate() {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        *o = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return None;
        };
    }
    Some(out)
}

const UNARY: &[&str] = &[
    "Relu",
    "Sigmoid",
    "Tanh",
    "LeakyRelu",
    "Elu",
    "Selu",
    "Celu",
    "Exp",
    "Log",
    "Sqrt",
    "Neg",
    "Abs",
    "Erf",
    "HardSigmoid",
    "HardSwish",
    "Softplus",
    "Softsign",
    "Floor",
    "Ceil",
    "Round",
    "Reciprocal",
    "Not",
    "Sin",
    "Cos",
    "Sign",
    "Mish",
    "Gelu",
    "LRN",
    "Softmax",
    "LogSoftmax",
    "Hardmax",
    "Clip",
    "InstanceNormalization",
    "LpNormalization",
    "Shrink",
    "ThresholdedRelu",
    "MeanVarianceNormalization",
    "IsNaN",
    "IsInf",
];

const BINARY: &[&str] = &[
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Max",
    "Min",
    "Sum",
    "Mean",
    "Equal",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
    "And",
    "Or",
    "Xor",
    "Mod",
    "PRelu",
    "Where",
    "BitShift",
];

/// Output types of one node, with their values when its inputs' values are known.
pub fn infer_node(node: &Node, ins: &[Option<TensorInfo>], opset: i64) -> Result<Vec<TensorInfo>> {
    let mut outs = infer_rule(node, ins, opset)?;
    consteval::fold(&Ctx { node, ins, opset }, &mut outs)?;
    Ok(outs)
}

fn infer_rule(node: &Node, ins: &[Option<TensorInfo>], opset: i64) -> Result<Vec<TensorInfo>> {
    let ctx = Ctx { node, ins, opset };
    if !node.domain.is_empty() && node.domain != "ai.onnx" {
        return ctx.unsupported(format!(
            "custom-domain op `{}::{}`",
            node.domain, node.op_type
        ));
    }
    let subgraphs: Vec<String> = node
        .attrs
        .iter()
        .filter_map(|(name, a)| match a {
            Attr::Graph(ops) => {
                let mut kinds: Vec<&str> = ops.iter().map(String::as_str).collect();
                kinds.sort_unstable();
                kinds.dedup();
                Some(format!(
                    "`{name}`: {} nodes ({})",
                    ops.len(),
                    kinds.join(", ")
                ))
            }
            _ => None,
        })
        .collect();
    if !subgraphs.is_empty() {
        return ctx.unsupported(format!(
            "control flow with subgraphs is not supported ({}); kernels inside them cannot be extracted",
            subgraphs.join("; ")
        ));
    }
    let op = node.op_type.as_str();
    let one = |t: Result<TensorInfo>| t.map(|t| vec![t]);
    match op {
        "Identity" => one(Ok(ctx.input(0)?.clone())),
        "Dropout" => {
            let x = ctx.input(0)?.clone();
            let mask = TensorInfo::new(x.shape.clone(), dtype::BOOL);
            Ok(vec![x, mask])
        }
        "Cast" => {
            let x = ctx.input(0)?;
            let to = node.int("to").unwrap_or(dtype::FLOAT as i64) as i32;
            one(ctx.out(x.shape.clone(), to, None))
        }
        "BatchNormalization" => {
            let x = ctx.input(0)?;
            if x.shape.len() < 2 {
                return ctx.err(format!("input rank {} < 2", x.shape.len()));
            }
            let c = vec![x.shape[1]];
            for i in 1..5 {
                if let Some(p) = ctx.opt(i) {
                    if p.shape != c && numel(&p.shape) != Some(c[0]) {
                        return ctx.err(format!(
                            "parameter {i} has shape {:?}, expected [{}]",
                            p.shape, c[0]
                        ));
                    }
                }
            }
            Ok(vec![
                ctx.same()?,
                TensorInfo::new(c.clone(), x.dtype),
                TensorInfo::new(c.clone(), x.dtype),
                TensorInfo::new(c.clone(), x.dtype),
                TensorInfo::new(c, x.dtype),
            ])
        }
        _ if UNARY.contains(&op) => one(ctx.same()),
        _ if BINARY.contains(&op) => one(binary(&ctx)),
        "Conv" => {
            let x = ctx.input(0)?;
            let p = conv_params(node, &x.shape, &ctx.input(1)?.shape)?;
            let w = &ctx.input(1)?.shape;
            let mut shape = vec![x.shape[0], w[0]];
            shape.extend(spatial_out(node, &x.shape[2..], &p.window, false)?);
            if let Some(b) = ctx.opt(2) {
                if numel(&b.shape) != Some(w[0]) {
                    return ctx.err(format!(
                        "bias shape {:?} does not match {} output channels",
                        b.shape, w[0]
                    ));
                }
            }
            one(ctx.out(shape, x.dtype, None))
        }
        "MaxPool" | "AveragePool" | "LpPool" => {
            let x = ctx.input(0)?;
            let p = pool_params(node, &x.shape)?;
            let mut shape = x.shape[..2].to_vec();
            shape.extend(spatial_out(node, &x.shape[2..], &p.window, p.ceil_mode)?);
            let t = ctx.out(shape, x.dtype, None)?;
            let idx = TensorInfo::new(t.shape.clone(), dtype::INT64);
            Ok(vec![t, idx])
        }
        "GlobalAveragePool" | "GlobalMaxPool" | "GlobalLpPool" => {
            let x = ctx.input(0)?;
            if x.shape.len() < 3 {
                return ctx.err(format!("input rank {} < 3", x.shape.len()));
            }
            let mut shape = x.shape[..2].to_vec();
            shape.extend(std::iter::repeat_n(1, x.shape.len() - 2));
            one(ctx.out(shape, x.dtype, None))
        }
        "Gemm" => {
            let (a, b) = (ctx.input(0)?, ctx.input(1)?);
            if a.shape.len() != 2 || b.shape.len() != 2 {
                return ctx.err(format!(
                    "Gemm needs 2-D inputs, got {:?} and {:?}",
                    a.shape, b.shape
                ));
            }
            let ta = node.int("transA").unwrap_or(0) != 0;
            let tb = node.int("transB").unwrap_or(0) != 0;
            let (m, k) = if ta {
                (a.shape[1], a.shape[0])
            } else {
                (a.shape[0], a.shape[1])
            };
            let (k2, n) = if tb {
                (b.shape[1], b.shape[0])
            } else {
                (b.shape[0], b.shape[1])
            };
            if k != k2 {
                return ctx.err(format!(
                    "inner dims differ: A {:?} (transA={ta}), B {:?} (transB={tb})",
                    a.shape, b.shape
                ));
            }
            if let Some(c) = ctx.opt(2) {
                if broadcast(&c.shape, &[m, n]).as_deref() != Some(&[m, n][..]) {
                    return ctx.err(format!("C {:?} does not broadcast to [{m}, {n}]", c.shape));
                }
            }
            one(ctx.out(vec![m, n], a.dtype, None))
        }
        "MatMul" => one(matmul(&ctx)),
        "Flatten" => {
            let x = ctx.input(0)?;
            let r = x.shape.len();
            let axis = node.int("axis").unwrap_or(1);
            let a = if axis == r as i64 {
                r
            } else {
                ctx.axis(axis, r)?
            };
            let outer = checked(&ctx, numel(&x.shape[..a]))?;
            let inner = checked(&ctx, numel(&x.shape[a..]))?;
            one(ctx.out(vec![outer, inner], x.dtype, x.data.clone()))
        }
        "Reshape" => {
            let x = ctx.input(0)?;
            let target = if ctx.opset < 5 {
                node.ints("shape").map(<[i64]>::to_vec).unwrap_or_default()
            } else {
                ctx.ints(1, "the target shape")?
            };
            let allowzero = node.int("allowzero").unwrap_or(0) != 0;
            let shape = reshape(&ctx, &x.shape, &target, allowzero)?;
            one(ctx.out(shape, x.dtype, x.data.clone()))
        }
        "Concat" => one(concat(&ctx)),
        "Transpose" => {
            let x = ctx.input(0)?;
            let r = x.shape.len();
            let perm: Vec<i64> = node
                .ints("perm")
                .map(<[i64]>::to_vec)
                .unwrap_or_else(|| (0..r as i64).rev().collect());
            let mut seen = vec![false; r];
            let mut shape = Vec::with_capacity(r);
            for &p in &perm {
                if p < 0 || p as usize >= r || seen[p as usize] {
                    return ctx.err(format!("perm {perm:?} is not a permutation of rank {r}"));
                }
                seen[p as usize] = true;
                shape.push(x.shape[p as usize]);
            }
            if perm.len() != r {
                return ctx.err(format!("perm {perm:?} is not a permutation of rank {r}"));
            }
            let data = x.data.as_ref().and_then(|d| {
                let p: Vec<usize> = perm.iter().map(|&p| p as usize).collect();
                consteval::remap(d, &x.shape, &shape, |out| {
                    p.iter().enumerate().fold(vec![0; r], |mut c, (i, &pi)| {
                        c[pi] = out[i];
                        c
                    })
                })
            });
            one(ctx.out(shape, x.dtype, data))
        }
        "Shape" => {
            let x = ctx.input(0)?;
            let r = x.shape.len() as i64;
            let clamp = |v: i64| if v < 0 { (v + r).max(0) } else { v.min(r) };
            let start = clamp(node.int("start").unwrap_or(0)) as usize;
            let end = clamp(node.int("end").unwrap_or(r)) as usize;
            let dims = if start < end {
                x.shape[start..end].to_vec()
            } else {
                vec![]
            };
            Ok(vec![TensorInfo::constant(
                vec![dims.len() as i64],
                dtype::INT64,
                Some(Data::Ints(dims)),
            )])
        }
        "Size" => {
            let n = checked(&ctx, ctx.input(0)?.numel())?;
            Ok(vec![TensorInfo::constant(
                vec![],
                dtype::INT64,
                Some(Data::Ints(vec![n])),
            )])
        }
        "Gather" => one(gather(&ctx)),
        "Unsqueeze" => {
            let x = ctx.input(0)?;
            let axes = if ctx.opset < 13 {
                node.ints("axes").map(<[i64]>::to_vec).unwrap_or_default()
            } else {
                ctx.ints(1, "the axes")?
            };
            let r = x.shape.len() + axes.len();
            let mut norm = axes
                .iter()
                .map(|&a| ctx.axis(a, r))
                .collect::<Result<Vec<_>>>()?;
            norm.sort_unstable();
            norm.dedup();
            if norm.len() != axes.len() {
                return ctx.err(format!("repeated axes {axes:?}"));
            }
            let mut shape = x.shape.clone();
            for a in norm {
                shape.insert(a, 1);
            }
            one(ctx.out(shape, x.dtype, x.data.clone()))
        }
        "Squeeze" => {
            let x = ctx.input(0)?;
            let axes = if ctx.opset < 13 {
                node.ints("axes").map(<[i64]>::to_vec)
            } else if ctx.opt(1).is_some() {
                Some(ctx.ints(1, "the axes")?)
            } else {
                None
            };
            let r = x.shape.len();
            let drop: Vec<usize> = match axes {
                Some(a) => a
                    .iter()
                    .map(|&a| ctx.axis(a, r))
                    .collect::<Result<Vec<_>>>()?,
                None => (0..r).filter(|&i| x.shape[i] == 1).collect(),
            };
            if let Some(&i) = drop.iter().find(|&&i| x.shape[i] != 1) {
                return ctx.err(format!("cannot squeeze axis {i} of {:?}", x.shape));
            }
            let shape = (0..r)
                .filter(|i| !drop.contains(i))
                .map(|i| x.shape[i])
                .collect();
            one(ctx.out(shape, x.dtype, x.data.clone()))
        }
        "Constant" => {
            let (name, a) = match node.attrs.iter().next() {
                Some(kv) => kv,
                None => return ctx.err("Constant without a value attribute"),
            };
            let t = match (name.as_str(), a) {
                ("value", Attr::Tensor(t)) => t.clone(),
                ("value_float", Attr::Float(f)) => {
                    TensorInfo::constant(vec![], dtype::FLOAT, Some(Data::Floats(vec![*f as f64])))
                }
                ("value_floats", Attr::Floats(v)) => TensorInfo::constant(
                    vec![v.len() as i64],
                    dtype::FLOAT,
                    Some(Data::Floats(v.iter().map(|&x| x as f64).collect())),
                ),
                ("value_int", Attr::Int(i)) => {
                    TensorInfo::constant(vec![], dtype::INT64, Some(Data::Ints(vec![*i])))
                }
                ("value_ints", Attr::Ints(v)) => TensorInfo::constant(
                    vec![v.len() as i64],
                    dtype::INT64,
                    Some(Data::Ints(v.clone())),
                ),
                (other, _) => return ctx.unsupported(format!("Constant with attribute `{other}`")),
            };
            Ok(vec![t])
        }
        "ConstantOfShape" => {
            let dims = ctx.ints(0, "the shape")?;
            if let Some(d) = dims.iter().find(|&&d| d < 0) {
                return ctx.err(format!("negative dim {d}"));
            }
            let (dt, fill) = match node.attrs.get("value") {
                Some(Attr::Tensor(t)) => (t.dtype, t.data.clone()),
                _ => (dtype::FLOAT, Some(Data::Floats(vec![0.0]))),
            };
            let n = checked(&ctx, numel(&dims))?;
            let data = match fill {
                Some(Data::Ints(v)) if v.len() == 1 && n <= MAX_KEPT_ELEMENTS => {
                    Some(Data::Ints(vec![v[0]; n as usize]))
                }
                Some(Data::Floats(v)) if v.len() == 1 && n <= MAX_KEPT_ELEMENTS => {
                    Some(Data::Floats(vec![v[0]; n as usize]))
                }
                _ => None,
            };
            let mut t = ctx.out(dims, dt, data)?;
            t.constant = true;
            Ok(vec![t])
        }
        "Pad" => {
            let x = ctx.input(0)?;
            let pads = if ctx.opset < 11 {
                node.ints("pads")
                    .or_else(|| node.ints("paddings"))
                    .map(<[i64]>::to_vec)
                    .unwrap_or_default()
            } else {
                ctx.ints(1, "the pads")?
            };
            let r = x.shape.len();
            let axes: Vec<usize> = if ctx.opset >= 18 && ctx.opt(3).is_some() {
                ctx.ints(3, "the axes")?
                    .iter()
                    .map(|&a| ctx.axis(a, r))
                    .collect::<Result<_>>()?
            } else {
                (0..r).collect()
            };
            if pads.len() != 2 * axes.len() {
                return ctx.err(format!("{} pads for {} axes", pads.len(), axes.len()));
            }
            let mut shape = x.shape.clone();
            for (j, &a) in axes.iter().enumerate() {
                let v = checked(
                    &ctx,
                    shape[a]
                        .checked_add(pads[j])
                        .and_then(|v| v.checked_add(pads[j + axes.len()])),
                )?;
                if v < 0 {
                    return ctx.err(format!("negative padded dim on axis {a}"));
                }
                shape[a] = v;
            }
            one(ctx.out(shape, x.dtype, None))
        }
        "Slice" => one(consteval::slice(&ctx)),
        "Split" => split(&ctx),
        "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL1"
        | "ReduceL2" | "ReduceLogSumExp" | "ReduceSumSquare" => {
            let x = ctx.input(0)?;
            let axes_from_input = ctx.opset >= 18 || (op == "ReduceSum" && ctx.opset >= 13);
            let axes = if axes_from_input {
                if ctx.opt(1).is_some() {
                    Some(ctx.ints(1, "the axes")?)
                } else {
                    None
                }
            } else {
                node.ints("axes").map(<[i64]>::to_vec)
            };
            let keep = node.int("keepdims").unwrap_or(1) != 0;
            let r = x.shape.len();
            let axes: Vec<usize> = match axes {
                Some(a) if !a.is_empty() => {
                    a.iter().map(|&a| ctx.axis(a, r)).collect::<Result<_>>()?
                }
                _ if node.int("noop_with_empty_axes").unwrap_or(0) != 0 => vec![],
                _ => (0..r).collect(),
            };
            let mut shape = Vec::new();
            for (i, &d) in x.shape.iter().enumerate() {
                if axes.contains(&i) {
                    if keep {
                        shape.push(1);
                    }
                } else {
                    shape.push(d);
                }
            }
            one(ctx.out(shape, x.dtype, None))
        }
        "ArgMax" | "ArgMin" => {
            let x = ctx.input(0)?;
            let a = ctx.axis(node.int("axis").unwrap_or(0), x.shape.len())?;
            let mut shape = x.shape.clone();
            if node.int("keepdims").unwrap_or(1) != 0 {
                shape[a] = 1;
            } else {
                shape.remove(a);
            }
            one(ctx.out(shape, dtype::INT64, None))
        }
        "Expand" => {
            let x = ctx.input(0)?;
            let target = ctx.ints(1, "the shape")?;
            match broadcast(&x.shape, &target) {
                Some(s) => one(ctx.out(s, x.dtype, None)),
                None => ctx.err(format!("{:?} does not expand to {target:?}", x.shape)),
            }
        }
        "Tile" => {
            let x = ctx.input(0)?;
            let reps = ctx.ints(1, "the repeats")?;
            if reps.len() != x.shape.len() || reps.iter().any(|&r| r < 0) {
                return ctx.err(format!("repeats {reps:?} for shape {:?}", x.shape));
            }
            let shape = x
                .shape
                .iter()
                .zip(&reps)
                .map(|(&d, &r)| checked(&ctx, d.checked_mul(r)))
                .collect::<Result<Vec<_>>>()?;
            one(ctx.out(shape, x.dtype, None))
        }
        "Resize" | "Upsample" => one(resize(&ctx)),
        _ => match consteval::infer(&ctx) {
            Some(outs) => outs,
            None => ctx.unsupported("no shape rule for this op in ttdb's ONNX frontend"),
        },
    }
}

#[cfg(test)]
#[path = "shape_tests.rs"]
mod tests;
