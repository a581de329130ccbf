//! The DAG of a glue group (one without an anchor: layout transforms, data movement,
//! element-wise ops), built from its ops the way a Relay primitive function composes them:
//! one stage per op, reading the stages before it. Each op's stage comes from its
//! ttdb-algo builder: data movement in [`movement`], element-wise ops in [`elementwise`].
use std::collections::HashMap;
use ttdb_algo::ir::{BuildError, DType, Dag, DagBuilder, Tensor};
use ttdb_onnx::onnx::graph::Data;
use ttdb_onnx::onnx::relay::{Op, OpGraph, OpId, OpKind, ValId, Value};

mod elementwise;
mod movement;

/// One op of a glue group being built: the graph, the op, and the stages of the values it
/// reads.
struct GlueOp<'a> {
    g: &'a OpGraph,
    op: &'a Op,
    tensors: &'a HashMap<ValId, Tensor>,
}

impl GlueOp<'_> {
    /// The ONNX node the op comes from, for messages.
    fn node(&self) -> &str {
        self.op.nodes.first().map(String::as_str).unwrap_or("?")
    }

    fn name(&self) -> String {
        self.op.kind.name()
    }

    /// The message for an op (or a form of it) ttdb has no builder for.
    fn unsupported(&self) -> String {
        format!(
            "`{}` (node `{}`) is not something ttdb run executes yet",
            self.name(),
            self.node()
        )
    }

    /// The message for a form of the op ttdb refuses, saying why.
    fn refused(&self, why: impl std::fmt::Display) -> String {
        format!("`{}` (node `{}`): {why}", self.name(), self.node())
    }

    /// A builder's refusal, naming the op and node.
    fn build_error(&self, e: BuildError) -> String {
        self.refused(e.0)
    }

    /// The stage of input `k`.
    fn input(&self, k: usize) -> Result<&Tensor, String> {
        self.op
            .inputs
            .get(k)
            .and_then(|v| self.tensors.get(v))
            .ok_or_else(|| self.refused(format!("has no input {k}")))
    }

    fn input_value(&self, k: usize) -> &Value {
        &self.g.values[self.op.inputs[k]]
    }

    fn out(&self) -> &Value {
        &self.g.values[self.op.output]
    }
}

/// The type a constant's placeholder has: its values are what the constant folder gives,
/// 64-bit integers for integer data (and for `take`'s indices, integers by ONNX's rule),
/// float32 otherwise.
fn constant_dtype(g: &OpGraph, op: &Op, k: usize) -> DType {
    let v = &g.values[op.inputs[k]];
    let take_indices = matches!(op.kind, OpKind::Take { .. }) && k == 1;
    if take_indices || matches!(v.data, Some(Data::Ints(_))) {
        DType::I64
    } else {
        DType::F32
    }
}

/// The DAG of glue group `group` whose run-time inputs are `inputs`, and every value its
/// placeholders `p0, p1, ...` stand for, in order: `inputs`, then the constants the ops read.
/// Err names the op ttdb cannot run yet.
pub fn glue_dag(
    g: &OpGraph,
    group: &[OpId],
    inputs: &[ValId],
) -> Result<(Dag, Vec<ValId>), String> {
    let mut b = DagBuilder::new();
    let mut tensors: HashMap<ValId, Tensor> = HashMap::new();
    let mut params: Vec<ValId> = inputs.to_vec();
    for (i, &v) in inputs.iter().enumerate() {
        let t = b.placeholder(format!("p{i}"), &g.values[v].phys, DType::F32);
        tensors.insert(v, t);
    }
    // the constants the ops read become placeholders too
    for &op in group {
        let o = &g.ops[op];
        for (k, &v) in o.inputs.iter().enumerate() {
            if g.values[v].constant && !tensors.contains_key(&v) {
                let name = format!("p{}", params.len());
                let t = b.placeholder(name, &g.values[v].phys, constant_dtype(g, o, k));
                tensors.insert(v, t);
                params.push(v);
            }
        }
    }
    let mut last = None;
    for &op in group {
        let cx = GlueOp {
            g,
            op: &g.ops[op],
            tensors: &tensors,
        };
        let t = build(&mut b, &cx)?;
        if t.shape != cx.out().phys {
            return Err(cx.refused(format!(
                "gives {:?}, the graph has {:?}",
                t.shape,
                cx.out().phys
            )));
        }
        let output = cx.op.output;
        tensors.insert(output, t.clone());
        last = Some(t);
    }
    let out = last.ok_or("an empty group")?;
    Ok((b.finish(&[&out]), params))
}

/// The stage of one op.
fn build(b: &mut DagBuilder, cx: &GlueOp) -> Result<Tensor, String> {
    match &cx.op.kind {
        OpKind::LayoutTransform { src, dst } => movement::layout_transform(b, cx, *src, *dst),
        // the same values in row-major order under another shape
        OpKind::Injective(name)
            if matches!(
                name.as_str(),
                "reshape" | "batch_flatten" | "squeeze" | "expand_dims"
            ) =>
        {
            movement::reshape(b, cx)
        }
        OpKind::Concat { axis } => movement::concat(b, cx, *axis),
        OpKind::Transpose { perm } => movement::transpose(b, cx, perm),
        OpKind::StridedSlice { begin, strides } => movement::strided_slice(b, cx, begin, strides),
        OpKind::Split { axis, begin } => movement::split(b, cx, *axis, *begin),
        OpKind::Take { axis } => movement::take(b, cx, *axis),
        OpKind::Lrn(attrs) => elementwise::lrn(b, cx, *attrs),
        OpKind::Binary(kind) => elementwise::binary(b, cx, kind),
        OpKind::Unary(kind) => elementwise::unary(b, cx, kind),
        _ => Err(cx.unsupported()),
    }
}
