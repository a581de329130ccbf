//! Lowering of a loaded ONNX graph to a Relay-like op graph, as TVM's `from_onnx` plus its
//! pre-fusion simplifications would leave it: constant sub-graphs folded away (FoldConstant),
//! conv bias as a broadcast `add` of a channel vector (bias_add canonicalized), leftover
//! BatchNormalization as `multiply` + `add` (SimplifyInference), Gemm / 2-D MatMul as
//! `dense` with an `[N, K]` weight, N-D MatMul as `batch_matmul`. Every op carries Relay's
//! fusion pattern kind.
use super::error::{OnnxError, Result};
use super::graph::{Graph, Node};
use super::shape::{conv_params, pool_params};
use std::collections::HashMap;
use ttdb_algo::ops::{PoolKind, Window2d};
mod hard;

mod op_graph;
pub use op_graph::*;

struct Lowering<'g> {
    g: &'g Graph,
    og: OpGraph,
    vals: HashMap<String, ValId>,
}

impl<'g> Lowering<'g> {
    fn value(&mut self, name: &str) -> Result<ValId> {
        if let Some(&v) = self.vals.get(name) {
            return Ok(v);
        }
        let t = self
            .g
            .tensor(name)
            .ok_or_else(|| OnnxError::Invalid(format!("unknown tensor `{name}`")))?;
        let v = self
            .og
            .add_value(name.to_string(), t.shape.clone(), t.constant);
        self.og.values[v].data = t.data.clone();
        self.vals.insert(name.to_string(), v);
        Ok(v)
    }

    /// A constant channel vector `[C]` used as `[1, C, 1, 1]` (bias_add / BN on axis 1).
    fn channel_const(&mut self, name: &str, rank: usize) -> Result<ValId> {
        let v = self.value(name)?;
        let c = self.og.values[v].shape.iter().product::<i64>();
        let mut shape = vec![1; rank.max(2)];
        shape[1] = c;
        let nv = self.og.add_value(format!("{name}::expanded"), shape, true);
        self.og.values[nv].channel_vector = true;
        Ok(nv)
    }

    fn out(&self, node: &Node, i: usize) -> Result<(String, Vec<i64>)> {
        let name = node.outputs.get(i).cloned().unwrap_or_default();
        let shape = self
            .g
            .shape(&name)
            .map(<[i64]>::to_vec)
            .ok_or_else(|| OnnxError::Invalid(format!("no shape for `{name}`")))?;
        Ok((name, shape))
    }

    fn emit(&mut self, node: &Node, kind: OpKind, inputs: Vec<ValId>) -> Result<ValId> {
        let (name, shape) = self.out(node, 0)?;
        let v = self
            .og
            .add_op(kind, inputs, name.clone(), shape, node.covered());
        self.vals.insert(name, v);
        Ok(v)
    }

    fn emit_named(
        &mut self,
        node: &Node,
        kind: OpKind,
        inputs: Vec<ValId>,
        name: String,
        shape: Vec<i64>,
    ) -> ValId {
        self.og.add_op(kind, inputs, name, shape, node.covered())
    }

    fn lower(&mut self, node: &Node) -> Result<()> {
        let op = node.op_type.as_str();
        // constant sub-graphs (shape arithmetic, weight generators) are folded away
        let outs_constant = node
            .outputs
            .iter()
            .filter(|o| !o.is_empty())
            .all(|o| self.g.tensor(o).is_some_and(|t| t.constant));
        if outs_constant || matches!(op, "Constant" | "ConstantOfShape" | "Shape" | "Size") {
            return Ok(());
        }
        let input = |l: &mut Self, i: usize| -> Result<ValId> {
            let name = node.input(i).ok_or_else(|| OnnxError::Shape {
                node: node.name.clone(),
                op: node.op_type.clone(),
                msg: format!("input {i} missing"),
            })?;
            l.value(name)
        };
        match op {
            "Identity" | "Dropout" => {
                let v = input(self, 0)?;
                self.vals.insert(node.outputs[0].clone(), v);
            }
            "Conv" => {
                let x = input(self, 0)?;
                let w = input(self, 1)?;
                let xs = self.og.values[x].shape.clone();
                let ws = self.og.values[w].shape.clone();
                if xs.len() != 4 {
                    let v = self.emit(
                        node,
                        OpKind::Opaque(format!("conv{}d", xs.len().saturating_sub(2))),
                        vec![x, w],
                    )?;
                    let _ = v;
                    return Ok(());
                }
                let p = conv_params(node, &xs, &ws)?;
                let window = Window2d {
                    stride: [p.window.strides[0], p.window.strides[1]],
                    padding: [
                        p.window.pads[0].0,
                        p.window.pads[1].0,
                        p.window.pads[0].1,
                        p.window.pads[1].1,
                    ],
                    dilation: [p.window.dilations[0], p.window.dilations[1]],
                };
                let kind = OpKind::Conv {
                    window,
                    groups: p.group,
                };
                match node.input(2) {
                    None => {
                        self.emit(node, kind, vec![x, w])?;
                    }
                    Some(b) => {
                        let (name, shape) = self.out(node, 0)?;
                        let conv = self.emit_named(
                            node,
                            kind,
                            vec![x, w],
                            format!("{name}::conv"),
                            shape.clone(),
                        );
                        let bias = self.channel_const(b, 4)?;
                        let v = self.og.add_op(
                            OpKind::Binary(BinKind::Add),
                            vec![conv, bias],
                            name.clone(),
                            shape,
                            node.covered(),
                        );
                        self.vals.insert(name, v);
                    }
                }
            }
            "BatchNormalization" => {
                let x = input(self, 0)?;
                let rank = self.og.values[x].shape.len();
                let (name, shape) = self.out(node, 0)?;
                let scale = self.channel_const(node.input(1).unwrap_or_default(), rank)?;
                let shift = self.channel_const(node.input(2).unwrap_or_default(), rank)?;
                let m = self.emit_named(
                    node,
                    OpKind::Binary(BinKind::Multiply),
                    vec![x, scale],
                    format!("{name}::scaled"),
                    shape.clone(),
                );
                let v = self.og.add_op(
                    OpKind::Binary(BinKind::Add),
                    vec![m, shift],
                    name.clone(),
                    shape,
                    node.covered(),
                );
                self.vals.insert(name, v);
            }
            "Relu" => {
                let x = input(self, 0)?;
                self.emit(node, OpKind::Unary(UnaryKind::Relu), vec![x])?;
            }
            "HardSigmoid" | "HardSwish" => hard::lower(self, node)?,
            "Tanh" => {
                let x = input(self, 0)?;
                self.emit(node, OpKind::Unary(UnaryKind::Tanh), vec![x])?;
            }
            "Clip" => {
                let x = input(self, 0)?;
                let bound = |l: &Self, i: usize, attr: &str, default: f64| -> Option<f64> {
                    if l.g.opset < 11 {
                        return Some(node.float(attr).map(|v| v as f64).unwrap_or(default));
                    }
                    match node.input(i) {
                        None => Some(default),
                        Some(n) => {
                            l.g.tensor(n)
                                .and_then(|t| t.data.as_ref())
                                .map(|d| d.as_floats())
                                .and_then(|v| v.first().copied())
                        }
                    }
                };
                let kind = match (
                    bound(self, 1, "min", f32::MIN as f64),
                    bound(self, 2, "max", f32::MAX as f64),
                ) {
                    (Some(lo), Some(hi)) => UnaryKind::Clip { lo, hi },
                    _ => UnaryKind::Other("clip_dynamic".into()),
                };
                self.emit(node, OpKind::Unary(kind), vec![x])?;
            }
            "Add" | "Sub" | "Mul" | "Div" | "Sum" | "PRelu" | "Pow" | "Max" | "Min" | "Equal"
            | "Less" | "Greater" | "And" | "Or" | "Where" | "Mod" => {
                let kind = |op: &str| match op {
                    "Add" | "Sum" => BinKind::Add,
                    "Sub" => BinKind::Subtract,
                    "Mul" => BinKind::Multiply,
                    "Div" => BinKind::Divide,
                    "Pow" => BinKind::Power,
                    other => BinKind::Other(other.to_lowercase()),
                };
                let ins: Vec<ValId> = (0..node.inputs.len())
                    .filter(|&i| node.input(i).is_some())
                    .map(|i| input(self, i))
                    .collect::<Result<_>>()?;
                match ins.len() {
                    0 => {
                        return Err(OnnxError::Shape {
                            node: node.name.clone(),
                            op: op.into(),
                            msg: "no inputs".into(),
                        })
                    }
                    1 => {
                        self.vals.insert(node.outputs[0].clone(), ins[0]);
                    }
                    2 => {
                        self.emit(node, OpKind::Binary(kind(op)), ins)?;
                    }
                    _ if op == "Sum" => {
                        let (name, shape) = self.out(node, 0)?;
                        let mut acc = ins[0];
                        for (k, &v) in ins[1..].iter().enumerate() {
                            let last = k + 2 == ins.len();
                            let nm = if last {
                                name.clone()
                            } else {
                                format!("{name}::partial{k}")
                            };
                            acc = self.emit_named(
                                node,
                                OpKind::Binary(BinKind::Add),
                                vec![acc, v],
                                nm,
                                shape.clone(),
                            );
                        }
                        self.vals.insert(name, acc);
                    }
                    _ => {
                        self.emit(node, OpKind::Binary(kind(op)), ins)?;
                    }
                }
            }
            "MaxPool" | "AveragePool" => {
                let x = input(self, 0)?;
                let xs = self.og.values[x].shape.clone();
                if xs.len() != 4 {
                    self.emit(
                        node,
                        OpKind::Opaque(format!(
                            "{}{}d",
                            op.to_lowercase(),
                            xs.len().saturating_sub(2)
                        )),
                        vec![x],
                    )?;
                    return Ok(());
                }
                let p = pool_params(node, &xs)?;
                let w = &p.window;
                let kind = if op == "MaxPool" {
                    PoolKind::Max
                } else {
                    PoolKind::Avg {
                        count_include_pad: p.count_include_pad,
                    }
                };
                let pool = Pool2d {
                    kind,
                    kernel: [w.kernel[0], w.kernel[1]],
                    stride: [w.strides[0], w.strides[1]],
                    dilation: [w.dilations[0], w.dilations[1]],
                    padding: [w.pads[0].0, w.pads[1].0, w.pads[0].1, w.pads[1].1],
                    ceil_mode: p.ceil_mode,
                };
                self.emit(node, OpKind::Pool(pool), vec![x])?;
            }
            "GlobalAveragePool" | "GlobalMaxPool" => {
                let x = input(self, 0)?;
                let kind = if op == "GlobalMaxPool" {
                    PoolKind::Max
                } else {
                    PoolKind::Avg {
                        count_include_pad: true,
                    }
                };
                if self.og.values[x].shape.len() != 4 {
                    self.emit(node, OpKind::Opaque(op.to_lowercase()), vec![x])?;
                } else {
                    self.emit(node, OpKind::GlobalPool(kind), vec![x])?;
                }
            }
            "Gemm" => {
                let mut a = input(self, 0)?;
                let b = input(self, 1)?;
                let (name, shape) = self.out(node, 0)?;
                if node.int("transA").unwrap_or(0) != 0 {
                    let s = self.og.values[a].shape.clone();
                    a = self.emit_named(
                        node,
                        OpKind::Injective("transpose".into()),
                        vec![a],
                        format!("{name}::a_t"),
                        vec![s[1], s[0]],
                    );
                }
                let alpha = node.float("alpha").unwrap_or(1.0);
                if alpha != 1.0 {
                    let s = self.og.values[a].shape.clone();
                    let c = self.og.add_value(format!("{name}::alpha"), vec![], true);
                    a = self.emit_named(
                        node,
                        OpKind::Binary(BinKind::Multiply),
                        vec![a, c],
                        format!("{name}::a_scaled"),
                        s,
                    );
                }
                let w = self.dense_weight(node, b, node.int("transB").unwrap_or(0) != 0, &name);
                match node.input(2) {
                    None => {
                        let v =
                            self.emit_named(node, OpKind::Dense, vec![a, w], name.clone(), shape);
                        self.vals.insert(name, v);
                    }
                    Some(cn) => {
                        let d = self.emit_named(
                            node,
                            OpKind::Dense,
                            vec![a, w],
                            format!("{name}::dense"),
                            shape.clone(),
                        );
                        let c = self.value(cn)?;
                        let v = self.og.add_op(
                            OpKind::Binary(BinKind::Add),
                            vec![d, c],
                            name.clone(),
                            shape,
                            node.covered(),
                        );
                        self.vals.insert(name, v);
                    }
                }
            }
            "MatMul" => self.matmul(node)?,
            "Softmax" => {
                let x = input(self, 0)?;
                let r = self.og.values[x].shape.len();
                let axis = node
                    .int("axis")
                    .unwrap_or(if self.g.opset >= 13 { -1 } else { 1 });
                let axis = if axis < 0 { axis + r as i64 } else { axis } as usize;
                if self.g.opset >= 13 || axis + 1 == r {
                    self.emit(
                        node,
                        OpKind::Softmax {
                            axis: axis.min(r.saturating_sub(1)),
                        },
                        vec![x],
                    )?;
                } else {
                    // opset < 13: softmax over the flattened trailing dims
                    let s = self.og.values[x].shape.clone();
                    let (name, shape) = self.out(node, 0)?;
                    let flat = vec![s[..axis].iter().product(), s[axis..].iter().product()];
                    let f = self.emit_named(
                        node,
                        OpKind::Injective("reshape".into()),
                        vec![x],
                        format!("{name}::flat"),
                        flat.clone(),
                    );
                    let sm = self.emit_named(
                        node,
                        OpKind::Softmax { axis: 1 },
                        vec![f],
                        format!("{name}::softmax"),
                        flat,
                    );
                    let v = self.og.add_op(
                        OpKind::Injective("reshape".into()),
                        vec![sm],
                        name.clone(),
                        shape,
                        node.covered(),
                    );
                    self.vals.insert(name, v);
                }
            }
            "ReduceMean" => {
                let x = input(self, 0)?;
                let (_, out) = self.out(node, 0)?;
                let xs = self.og.values[x].shape.clone();
                let keepdims = node.int("keepdims").unwrap_or(1) != 0;
                let axes: Vec<usize> = match node.ints("axes") {
                    Some(a) => a
                        .iter()
                        .map(|&a| {
                            if a < 0 {
                                (a + xs.len() as i64) as usize
                            } else {
                                a as usize
                            }
                        })
                        .collect(),
                    None if keepdims => (0..xs.len())
                        .filter(|&i| xs[i] != out.get(i).copied().unwrap_or(1))
                        .collect(),
                    None => (0..xs.len()).collect(),
                };
                self.emit(node, OpKind::Mean { axes, keepdims }, vec![x])?;
            }
            "Flatten" => {
                let x = input(self, 0)?;
                let name = if node.int("axis").unwrap_or(1) == 1 {
                    "batch_flatten"
                } else {
                    "reshape"
                };
                self.emit(node, OpKind::Injective(name.into()), vec![x])?;
            }
            "Concat" => {
                let ins: Vec<ValId> = (0..node.inputs.len())
                    .filter(|&i| node.input(i).is_some())
                    .map(|i| input(self, i))
                    .collect::<Result<_>>()?;
                let r = self.og.values[ins[0]].shape.len() as i64;
                let a = node.int("axis").unwrap_or(0);
                let axis = if a < 0 { a + r } else { a } as usize;
                if ins.len() == 1 {
                    self.vals.insert(node.outputs[0].clone(), ins[0]);
                } else {
                    self.emit(node, OpKind::Concat { axis }, ins)?;
                }
            }
            "LRN"
            | "LogSoftmax"
            | "InstanceNormalization"
            | "LpNormalization"
            | "Hardmax"
            | "LpPool"
            | "GlobalLpPool"
            | "MeanVarianceNormalization" => {
                let x = input(self, 0)?;
                let name = match op {
                    "LRN" => "lrn".to_string(),
                    "LogSoftmax" => "log_softmax".to_string(),
                    other => other.to_lowercase(),
                };
                self.emit(node, OpKind::Opaque(name), vec![x])?;
            }
            _ if op.starts_with("Reduce") || op == "ArgMax" || op == "ArgMin" => {
                let x = input(self, 0)?;
                self.emit(node, OpKind::Reduce(op.to_lowercase()), vec![x])?;
            }
            _ => {
                // element-wise unary ops and injective data movement, by their Relay class
                let x = input(self, 0)?;
                let kind = match op {
                    "Sigmoid" | "LeakyRelu" | "Elu" | "Selu" | "Celu" | "Exp" | "Log" | "Sqrt"
                    | "Neg" | "Abs" | "Erf" | "Softplus" | "Softsign" | "Floor" | "Ceil"
                    | "Round" | "Reciprocal" | "Not" | "Sin" | "Cos" | "Sign" | "Mish" | "Gelu"
                    | "Cast" | "Shrink" | "ThresholdedRelu" | "IsNaN" | "IsInf" => {
                        OpKind::Unary(UnaryKind::Other(op.to_lowercase()))
                    }
                    "Reshape" | "Squeeze" | "Unsqueeze" | "Transpose" | "Pad" | "Slice"
                    | "Expand" | "Tile" | "Gather" | "Resize" | "Upsample" => {
                        OpKind::Injective(match op {
                            "Squeeze" => "squeeze".into(),
                            "Unsqueeze" => "expand_dims".into(),
                            "Pad" => "pad".into(),
                            "Slice" => "strided_slice".into(),
                            "Expand" => "broadcast_to".into(),
                            "Gather" => "take".into(),
                            "Resize" | "Upsample" => "resize2d".into(),
                            other => other.to_lowercase(),
                        })
                    }
                    "Split" => {
                        for i in 0..node.outputs.len() {
                            let (name, shape) = self.out(node, i)?;
                            if name.is_empty() {
                                continue;
                            }
                            let v = self.og.add_op(
                                OpKind::Injective("split".into()),
                                vec![x],
                                name.clone(),
                                shape,
                                node.covered(),
                            );
                            self.vals.insert(name, v);
                        }
                        return Ok(());
                    }
                    other => OpKind::Opaque(other.to_lowercase()),
                };
                let extra: Vec<ValId> = (1..node.inputs.len())
                    .filter_map(|i| node.input(i))
                    .filter(|n| !self.g.tensor(n).is_some_and(|t| t.constant))
                    .map(|n| self.value(n))
                    .collect::<Result<_>>()?;
                let mut ins = vec![x];
                ins.extend(extra);
                self.emit(node, kind, ins)?;
            }
        }
        Ok(())
    }

    /// The dense weight `[N, K]`: a constant is transposed at compile time; a run-time
    /// `[K, N]` tensor gets a `transpose` op.
    fn dense_weight(&mut self, node: &Node, b: ValId, trans_b: bool, name: &str) -> ValId {
        if trans_b {
            return b;
        }
        let s = self.og.values[b].shape.clone();
        let t = vec![s[1], s[0]];
        if self.og.values[b].constant {
            let v = self
                .og
                .add_value(format!("{}::T", self.og.values[b].name), t, true);
            return v;
        }
        self.emit_named(
            node,
            OpKind::Injective("transpose".into()),
            vec![b],
            format!("{name}::b_t"),
            t,
        )
    }

    fn matmul(&mut self, node: &Node) -> Result<()> {
        let a = self.value(node.input(0).unwrap_or_default())?;
        let b = self.value(node.input(1).unwrap_or_default())?;
        let (name, shape) = self.out(node, 0)?;
        let sa = self.og.values[a].shape.clone();
        let sb = self.og.values[b].shape.clone();
        if sa.len() < 2 || sb.len() < 2 {
            self.emit(node, OpKind::Opaque("matmul".into()), vec![a, b])?;
            return Ok(());
        }
        let k = sa[sa.len() - 1];
        let m: i64 = sa[..sa.len() - 1].iter().product();
        if sb.len() == 2 {
            // dense over the flattened leading dims
            let a2 = if sa.len() > 2 {
                self.emit_named(
                    node,
                    OpKind::Injective("reshape".into()),
                    vec![a],
                    format!("{name}::a2d"),
                    vec![m, k],
                )
            } else {
                a
            };
            let w = self.dense_weight(node, b, false, &name);
            let n = sb[1];
            if sa.len() > 2 {
                let d = self.emit_named(
                    node,
                    OpKind::Dense,
                    vec![a2, w],
                    format!("{name}::dense"),
                    vec![m, n],
                );
                let v = self.og.add_op(
                    OpKind::Injective("reshape".into()),
                    vec![d],
                    name.clone(),
                    shape,
                    node.covered(),
                );
                self.vals.insert(name, v);
            } else {
                let v = self.emit_named(node, OpKind::Dense, vec![a2, w], name.clone(), shape);
                self.vals.insert(name, v);
            }
            return Ok(());
        }
        let batch = |s: &[i64]| -> i64 { s[..s.len() - 2].iter().product() };
        let (ba, bb) = (batch(&sa), batch(&sb));
        let (mm, n) = (sa[sa.len() - 2], sb[sb.len() - 1]);
        let a3 = if sa.len() != 3 {
            self.emit_named(
                node,
                OpKind::Injective("reshape".into()),
                vec![a],
                format!("{name}::a3d"),
                vec![ba, mm, k],
            )
        } else {
            a
        };
        let bt = if self.og.values[b].constant {
            self.og.add_value(
                format!("{}::T", self.og.values[b].name),
                vec![bb, n, k],
                true,
            )
        } else {
            self.emit_named(
                node,
                OpKind::Injective("transpose".into()),
                vec![b],
                format!("{name}::b_t"),
                vec![bb, n, k],
            )
        };
        let out3 = vec![ba.max(bb), mm, n];
        if out3 == shape {
            let v = self.emit_named(node, OpKind::BatchMatmul, vec![a3, bt], name.clone(), shape);
            self.vals.insert(name, v);
        } else {
            let bm = self.emit_named(
                node,
                OpKind::BatchMatmul,
                vec![a3, bt],
                format!("{name}::bmm"),
                out3,
            );
            let v = self.og.add_op(
                OpKind::Injective("reshape".into()),
                vec![bm],
                name.clone(),
                shape,
                node.covered(),
            );
            self.vals.insert(name, v);
        }
        Ok(())
    }
}

/// Lowers a (shape-inferred, pass-processed) graph.
pub fn lower(g: &Graph) -> Result<OpGraph> {
    let mut l = Lowering {
        g,
        og: OpGraph::default(),
        vals: HashMap::new(),
    };
    for name in &g.inputs {
        let v = l.value(name)?;
        l.og.inputs.push(v);
    }
    for node in &g.nodes {
        l.lower(node)?;
    }
    for o in &g.outputs {
        let v = l.value(o)?;
        l.og.outputs.push(v);
    }
    Ok(l.og)
}
