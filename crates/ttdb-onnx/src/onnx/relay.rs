//! Lowering of a loaded ONNX graph to a Relay-like op graph, as TVM's `from_onnx` plus its
//! pre-fusion simplifications would leave it: constant sub-graphs folded away (FoldConstant),
//! conv bias as a broadcast `add` of a channel vector (bias_add canonicalized), leftover
//! BatchNormalization as `multiply` + `add` (SimplifyInference), Gemm / 2-D MatMul as
//! `dense` with an `[N, K]` weight, N-D MatMul as `batch_matmul`. Every op carries Relay's
//! fusion pattern kind and layout rule. Each ONNX op's own lowering is its descriptor's
//! ([`super::ops`]); this module holds the graph being built and the helpers they share.
use super::error::{OnnxError, Result};
use super::graph::{Graph, Node, TensorInfo};
use super::ops;
use std::collections::HashMap;

mod op_graph;
pub use op_graph::*;

/// The lowering in progress: each ONNX node's descriptor ([`ops::OnnxOp::lower`]) adds its
/// Relay ops to `og` and maps its outputs in `vals`.
pub(crate) struct Lowering<'g> {
    pub(crate) g: &'g Graph,
    pub(crate) og: OpGraph,
    /// ONNX tensor name -> its value in `og`.
    pub(crate) vals: HashMap<String, ValId>,
    /// N-D MatMul as `batch_matmul` with a transposed right operand (TVM's
    /// `use_nt_batch_matmul`).
    pub(crate) nt_batch_matmul: bool,
}

impl<'g> Lowering<'g> {
    pub(crate) fn value(&mut self, name: &str) -> Result<ValId> {
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
        self.og.values[v].dtype = t.dtype;
        self.vals.insert(name.to_string(), v);
        Ok(v)
    }

    /// A constant channel vector `[C]` used as `[1, C, 1, 1]` (bias_add / BN on axis 1).
    pub(crate) fn channel_const(&mut self, name: &str, rank: usize) -> Result<ValId> {
        let v = self.value(name)?;
        let c = self.og.values[v].shape.iter().product::<i64>();
        let mut shape = vec![1; rank.max(2)];
        shape[1] = c;
        let nv = self
            .og
            .derive_const(v, ConstOp::Reshape, format!("{name}::expanded"), shape);
        self.og.values[nv].channel_vector = true;
        Ok(nv)
    }

    pub(crate) fn out(&self, node: &Node, i: usize) -> Result<(String, Vec<i64>)> {
        let name = node.outputs.get(i).cloned().unwrap_or_default();
        let shape = self
            .g
            .shape(&name)
            .map(<[i64]>::to_vec)
            .ok_or_else(|| OnnxError::Invalid(format!("no shape for `{name}`")))?;
        Ok((name, shape))
    }

    pub(crate) fn emit(&mut self, node: &Node, kind: OpKind, inputs: Vec<ValId>) -> Result<ValId> {
        let (name, shape) = self.out(node, 0)?;
        let v = self
            .og
            .add_op(kind, inputs, name.clone(), shape, node.covered());
        self.vals.insert(name, v);
        Ok(v)
    }

    pub(crate) fn emit_named(
        &mut self,
        node: &Node,
        kind: OpKind,
        inputs: Vec<ValId>,
        name: String,
        shape: Vec<i64>,
    ) -> ValId {
        self.og.add_op(kind, inputs, name, shape, node.covered())
    }

    /// Input `i` of `node` as a value of the op graph.
    pub(crate) fn input(&mut self, node: &Node, i: usize) -> Result<ValId> {
        let name = node.input(i).ok_or_else(|| OnnxError::Shape {
            node: node.name.clone(),
            op: node.op_type.clone(),
            msg: format!("input {i} missing"),
        })?;
        self.value(name)
    }

    /// The types of `node`'s inputs (None: omitted) as its shape rule saw them, for a
    /// lowering that needs what the rule computed (a Slice's normalized starts).
    pub(crate) fn input_types(&self, node: &Node) -> Vec<Option<TensorInfo>> {
        node.inputs
            .iter()
            .map(|n| (!n.is_empty()).then(|| self.g.tensor(n).cloned()).flatten())
            .collect()
    }

    /// The present inputs of `node`, in order.
    pub(crate) fn present_inputs(&mut self, node: &Node) -> Result<Vec<ValId>> {
        (0..node.inputs.len())
            .filter(|&i| node.input(i).is_some())
            .map(|i| self.input(node, i))
            .collect()
    }

    /// `kind` on input 0 plus the node's other inputs computed at run time (constant
    /// inputs, such as a Reshape's target shape, are attributes to Relay).
    pub(crate) fn emit_with_runtime_inputs(&mut self, node: &Node, kind: OpKind) -> Result<()> {
        let x = self.input(node, 0)?;
        let extra: Vec<ValId> = (1..node.inputs.len())
            .filter_map(|i| node.input(i))
            .filter(|n| !self.g.tensor(n).is_some_and(|t| t.constant))
            .map(|n| self.value(n))
            .collect::<Result<_>>()?;
        let mut ins = vec![x];
        ins.extend(extra);
        self.emit(node, kind, ins)?;
        Ok(())
    }

    /// `kind` on input 0 alone.
    pub(crate) fn emit_on_first(&mut self, node: &Node, kind: OpKind) -> Result<()> {
        let x = self.input(node, 0)?;
        self.emit(node, kind, vec![x])?;
        Ok(())
    }

    /// Output 0 of `node` is the value `v` itself (Identity, a one-input Sum).
    pub(crate) fn alias(&mut self, node: &Node, v: ValId) {
        self.vals.insert(node.outputs[0].clone(), v);
    }

    fn lower(&mut self, node: &Node) -> Result<()> {
        // constant sub-graphs (shape arithmetic, weight generators) are folded away
        let outs_constant = node
            .outputs
            .iter()
            .filter(|o| !o.is_empty())
            .all(|o| self.g.tensor(o).is_some_and(|t| t.constant));
        if outs_constant {
            return Ok(());
        }
        match ops::lookup(&node.op_type) {
            Some(op) => op.lower(self, node),
            // shape inference refuses ops without a descriptor, so only a graph built by hand
            // gets here
            None => {
                let name = node.op_type.to_lowercase();
                self.emit_with_runtime_inputs(node, OpKind::Opaque(name))
            }
        }
    }
}

/// Lowers a (shape-inferred, pass-processed) graph; `nt_batch_matmul` as
/// [`super::Options::nt_batch_matmul`].
pub fn lower(g: &Graph, nt_batch_matmul: bool) -> Result<OpGraph> {
    let mut l = Lowering {
        g,
        og: OpGraph::default(),
        vals: HashMap::new(),
        nt_batch_matmul,
    };
    for name in &g.inputs {
        let v = l.value(name)?;
        l.og.inputs.push(v);
    }
    for node in &g.nodes {
        let first_new = l.og.values.len();
        l.lower(node)?;
        // values named after a tensor of the graph have its type (a cast's, a comparison's)
        for v in &mut l.og.values[first_new..] {
            if let Some(t) = g.tensor(&v.name) {
                v.dtype = t.dtype;
            }
        }
    }
    for o in &g.outputs {
        let v = l.value(o)?;
        l.og.outputs.push(v);
    }
    Ok(l.og)
}
