//! Static shape inference: each node's rule is its op's descriptor's
//! ([`super::ops::OnnxOp::infer`], found in [`super::ops`]'s registry); the values of small
//! constant tensors are folded along ([`consteval`]), so that `Shape -> Gather -> Unsqueeze ->
//! Concat -> Reshape` chains and `ConstantOfShape` weights resolve. Unsupported ops are an
//! error naming the node.
//!
//! All arithmetic on numbers read from the file is checked: a hostile file gets an error,
//! never a panic or a huge allocation.
use super::error::{OnnxError, Result};
use super::graph::{dims_ok, numel, Attr, Data, Graph, Node, TensorInfo, MAX_KEPT_ELEMENTS};
pub use super::window::{conv_params, pool_params, spatial_out, ConvParams, PoolParams, Window};

#[path = "consteval.rs"]
pub(crate) mod consteval;

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

/// What a shape rule sees: the node, its inputs' types (None: an omitted optional input)
/// and the model's opset.
pub(crate) struct Ctx<'a> {
    pub(crate) node: &'a Node,
    pub(crate) ins: &'a [Option<TensorInfo>],
    pub(crate) opset: i64,
}

impl<'a> Ctx<'a> {
    pub(crate) fn err<T>(&self, msg: impl Into<String>) -> Result<T> {
        Err(OnnxError::Shape {
            node: self.node.name.clone(),
            op: self.node.op_type.clone(),
            msg: msg.into(),
        })
    }

    pub(crate) fn unsupported<T>(&self, reason: impl Into<String>) -> Result<T> {
        Err(OnnxError::Unsupported {
            node: self.node.name.clone(),
            op: self.node.op_type.clone(),
            reason: reason.into(),
        })
    }

    pub(crate) fn input(&self, i: usize) -> Result<&'a TensorInfo> {
        match self.ins.get(i) {
            Some(Some(t)) => Ok(t),
            _ => self.err(format!("input {i} is missing")),
        }
    }

    pub(crate) fn opt(&self, i: usize) -> Option<&'a TensorInfo> {
        self.ins.get(i).and_then(|t| t.as_ref())
    }

    /// Integer values of input `i`, which must be known (a constant or folded shape tensor).
    pub(crate) fn ints(&self, i: usize, what: &str) -> Result<Vec<i64>> {
        let t = self.input(i)?;
        match t.data.as_ref().and_then(Data::as_ints) {
            Some(v) => Ok(v),
            None => {
                let name = self.node.input(i).unwrap_or_default();
                self.unsupported(consteval::unknown_values(t, name, what, i))
            }
        }
    }

    pub(crate) fn axis(&self, axis: i64, rank: usize) -> Result<usize> {
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

    pub(crate) fn all_constant(&self) -> bool {
        self.ins.iter().flatten().all(|t| t.constant)
    }

    /// An output with the shape of input 0.
    pub(crate) fn same(&self) -> Result<TensorInfo> {
        let x = self.input(0)?;
        Ok(TensorInfo {
            shape: x.shape.clone(),
            dtype: x.dtype,
            data: None,
            constant: self.all_constant(),
        })
    }

    pub(crate) fn out(
        &self,
        shape: Vec<i64>,
        dtype: i32,
        data: Option<Data>,
    ) -> Result<TensorInfo> {
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

pub(crate) fn checked(ctx: &Ctx, v: Option<i64>) -> Result<i64> {
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
    match super::ops::lookup(&node.op_type) {
        Some(op) => op.infer(&ctx),
        None => ctx.unsupported("no shape rule for this op in ttdb's ONNX frontend"),
    }
}

#[cfg(test)]
#[path = "shape_tests.rs"]
mod tests;
