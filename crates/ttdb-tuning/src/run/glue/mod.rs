//! The DAG of a glue group (one without an anchor: layout transforms, data movement,
//! element-wise ops), built from its ops the way a Relay primitive function composes them:
//! one stage per op, reading the stages before it. Each op's stage comes from its
//! ttdb-algo builder: data movement in [`movement`], element-wise ops in [`elementwise`].
use std::collections::HashMap;
use ttdb_algo::ir::{BuildError, DType, Dag, DagBuilder, IterVar, Tensor};
use ttdb_onnx::onnx::graph::dtype;
use ttdb_onnx::onnx::relay::{BinKind, Op, OpGraph, OpId, OpKind, ValId, Value};

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

/// The type ttdb runs a value in: int64 for every integer and bool type (as the constant
/// folder gives integer constants, and as truth values are stored), float32 otherwise.
fn run_dtype(v: &Value) -> DType {
    if dtype::is_integer(v.dtype) {
        DType::I64
    } else {
        DType::F32
    }
}

/// Ops that give the same elements in the same row-major order under another shape.
fn is_reshape(kind: &OpKind) -> bool {
    matches!(kind, OpKind::Injective(name) if matches!(
        name.as_str(),
        "reshape" | "batch_flatten" | "squeeze" | "expand_dims"
    ))
}

/// The run-time value group `group` only views under another shape: one reshape (or
/// flatten, squeeze, expand_dims) of a run-time value whose elements keep their row-major
/// order, in the same run type. Its output is the same bytes as that value (`ttdb run`
/// reads the value in its place; a kernel's buffers are placed by element count).
pub fn view_source(g: &OpGraph, group: &[OpId], inputs: &[ValId]) -> Option<ValId> {
    let &[op] = group else { return None };
    let o = &g.ops[op];
    let (&[x], Some(&data)) = (inputs, o.inputs.first()) else {
        return None;
    };
    let (src, out) = (&g.values[x], &g.values[o.output]);
    let same = x == data
        && is_reshape(&o.kind)
        && o.inputs[1..].iter().all(|&v| g.values[v].constant)
        && src.phys.iter().product::<i64>() == out.phys.iter().product::<i64>()
        && run_dtype(src) == run_dtype(out);
    same.then_some(x)
}

/// A reshape that must still be a kernel (its output is a graph output, see
/// [`view_source`]) moves no element: it is a copy between flat views of `N` elements, one
/// loop with no index arithmetic, which the default schedule vectorizes and splits over the
/// cores whatever the last axis's extent. (Built on the two shapes with TOPI's indexing it
/// took 1.8 ms per reshape of 2.4 MB in vit_b_16; the glue's own segment-wise indexing,
/// `movement::reshape_view`, since keeps fused reshapes contiguous too.)
fn flat_copy(g: &OpGraph, group: &[OpId], inputs: &[ValId]) -> Option<(Dag, Vec<ValId>)> {
    let x = view_source(g, group, inputs)?;
    let src = &g.values[x];
    let n: i64 = src.phys.iter().product();
    let mut b = DagBuilder::new();
    let p0 = b.placeholder("p0".to_string(), &[n], run_dtype(src));
    let t = b.elementwise(
        "T_reshape",
        "injective",
        vec![IterVar::new("ax0", n)],
        |v| p0.at(vec![v[0].clone()]),
    );
    Some((b.finish(&[&t]), vec![x]))
}

/// The DAG of glue group `group` whose run-time inputs are `inputs`, and every value its
/// placeholders `p0, p1, ...` stand for, in order: `inputs`, then the constants the ops read.
/// Err names the op ttdb cannot run yet.
pub fn glue_dag(
    g: &OpGraph,
    group: &[OpId],
    inputs: &[ValId],
) -> Result<(Dag, Vec<ValId>), String> {
    if let Some(flat) = flat_copy(g, group, inputs) {
        return Ok(flat);
    }
    let mut b = DagBuilder::new();
    let mut tensors: HashMap<ValId, Tensor> = HashMap::new();
    let mut params: Vec<ValId> = inputs.to_vec();
    for (i, &v) in inputs.iter().enumerate() {
        let t = b.placeholder(format!("p{i}"), &g.values[v].phys, run_dtype(&g.values[v]));
        tensors.insert(v, t);
    }
    // the constants the ops read become placeholders too
    for &op in group {
        let o = &g.ops[op];
        for &v in &o.inputs {
            if g.values[v].constant && !tensors.contains_key(&v) {
                let name = format!("p{}", params.len());
                let t = b.placeholder(name, &g.values[v].phys, run_dtype(&g.values[v]));
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
        if t.dtype != run_dtype(cx.out()) {
            return Err(cx.refused(format!(
                "gives {}, the graph has {}",
                t.dtype,
                dtype::name(cx.out().dtype)
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
        kind if is_reshape(kind) => movement::reshape(b, cx),
        OpKind::Concat { axis } => movement::concat(b, cx, *axis),
        OpKind::Transpose { perm } => movement::transpose(b, cx, perm),
        OpKind::StridedSlice { begin, strides } => movement::strided_slice(b, cx, begin, strides),
        OpKind::Split { axis, begin } => movement::split(b, cx, *axis, *begin),
        OpKind::Take { axis } => movement::take(b, cx, *axis),
        OpKind::Injective(name) if name == "broadcast_to" => movement::broadcast_to(b, cx),
        OpKind::GatherElements { axis } => movement::gather_elements(b, cx, *axis),
        OpKind::Lrn(attrs) => elementwise::lrn(b, cx, *attrs),
        OpKind::CumSum {
            axis,
            exclusive,
            reverse,
        } => elementwise::cumsum(b, cx, *axis, *exclusive, *reverse),
        OpKind::Binary(kind) => elementwise::binary(b, cx, kind),
        OpKind::Unary(kind) => elementwise::unary(b, cx, kind),
        // comparisons ttdb's frontend leaves opaque
        OpKind::Opaque(name) if name == "greaterorequal" || name == "lessorequal" => {
            elementwise::binary(b, cx, &BinKind::Other(name.clone()))
        }
        _ => Err(cx.unsupported()),
    }
}
