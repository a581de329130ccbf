//! Compute DAGs: placeholders and compute stages in TVM's schedule order.
//!
//! Stage order matters: transform steps in Ansor records address stages by index. TVM
//! builds `ComputeDAG.ops` from `te.create_schedule(outputs).stages`, a post-order DFS from
//! the outputs that visits each op's input tensors in first-appearance order of a post-order
//! walk of its body (spec §2.1, `te/schedule/graph.cc::PostDFSOrder`,
//! `ComputeOpNode::InputTensors`). [`DagBuilder::finish`] reproduces exactly that order,
//! whatever order the stages were created in.
use super::dtype::DType;
use super::expr::Expr;
use super::TensorId;
use std::fmt;

/// An iteration axis `name in [0, extent)`. Spatial extents are constants; reduce extents
/// may be expressions of the spatial axes or even of loaded data (adaptive pooling,
/// sparse rows), as in TVM.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct IterVar {
    pub name: String,
    pub extent: Expr,
}

impl IterVar {
    pub fn new(name: impl Into<String>, extent: i64) -> IterVar {
        IterVar {
            name: name.into(),
            extent: Expr::int(extent),
        }
    }

    pub fn with_extent(name: impl Into<String>, extent: Expr) -> IterVar {
        IterVar {
            name: name.into(),
            extent,
        }
    }

    pub fn var(&self) -> Expr {
        Expr::var(self.name.clone())
    }

    /// The extent when it is a constant.
    pub fn const_extent(&self) -> Option<i64> {
        self.extent.as_int()
    }
}

/// The commutative reducer of a reduction body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Combiner {
    Sum,
    Max,
    Min,
}

impl Combiner {
    /// The identity element (TVM's `init` of the reduction) for a type.
    pub fn identity(self, dtype: DType) -> Expr {
        match self {
            Combiner::Sum => Expr::constant(0.0, dtype),
            Combiner::Max => Expr::min_value(dtype),
            Combiner::Min => match dtype {
                DType::Float(32) => Expr::FloatImm {
                    value: f32::MAX as f64,
                    dtype,
                },
                DType::Float(_) => Expr::FloatImm {
                    value: f64::MAX,
                    dtype,
                },
                _ => Expr::IntImm {
                    value: i64::MAX,
                    dtype,
                },
            },
        }
    }
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Body {
    /// An injective body: `out[axes] = expr`.
    Expr(Expr),
    /// `out[axes] = combine(init, source over the reduce axes)`.
    Reduce {
        combiner: Combiner,
        source: Expr,
        init: Expr,
    },
}

/// Stage attributes TVM attaches to compute ops that matter downstream.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ComputeAttrs {
    /// Inputs whose layout Ansor may rewrite (conv/dense weights).
    pub layout_free_placeholders: Vec<TensorId>,
    /// ttdb's own: constant inputs TVM reads in the DAG's layout (an NCHWc conv's kernel)
    /// that a run may pack into the layout its schedule walks, as it packs the layout-free
    /// ones; kept as they are where they cannot be packed. Not part of TVM's DAG.
    #[serde(default)]
    pub packable_placeholders: Vec<TensorId>,
    /// `auto_scheduler_simplify_const_tensor_indices` (winograd data_pack / inverse).
    pub simplify_const_tensor_indices: Vec<String>,
    /// A user-provided FLOP count (`attrs["FLOP"]`, e.g. sparse_dense) overriding the estimate.
    pub flop: Option<i64>,
    /// Set on `topi.utils.const_matrix` stages (winograd A/B).
    pub const_matrix: bool,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ComputeOp {
    pub axes: Vec<IterVar>,
    pub reduce_axes: Vec<IterVar>,
    pub body: Body,
    pub tag: String,
    pub attrs: ComputeAttrs,
}

impl ComputeOp {
    pub fn shape(&self) -> Vec<i64> {
        self.axes
            .iter()
            .map(|a| a.const_extent().expect("spatial extents are constant"))
            .collect()
    }

    /// Tensors read by the body, in TVM's `InputTensors` order: a post-order walk of the
    /// body where a reduction visits its axis extents first, then the source.
    pub fn input_tensors(&self) -> Vec<TensorId> {
        let mut out = Vec::new();
        match &self.body {
            Body::Expr(e) => e.input_tensors(&mut out),
            Body::Reduce { source, .. } => {
                for r in &self.reduce_axes {
                    r.extent.input_tensors(&mut out);
                }
                source.input_tensors(&mut out);
            }
        }
        out
    }
}

// Few stages per DAG: the size difference between the variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Operation {
    Placeholder { shape: Vec<i64> },
    Compute(ComputeOp),
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Stage {
    pub name: String,
    pub dtype: DType,
    pub op: Operation,
}

impl Stage {
    pub fn is_placeholder(&self) -> bool {
        matches!(self.op, Operation::Placeholder { .. })
    }

    pub fn compute(&self) -> Option<&ComputeOp> {
        match &self.op {
            Operation::Compute(c) => Some(c),
            Operation::Placeholder { .. } => None,
        }
    }

    pub fn shape(&self) -> Vec<i64> {
        match &self.op {
            Operation::Placeholder { shape } => shape.clone(),
            Operation::Compute(c) => c.shape(),
        }
    }
}

/// A compute DAG: stages in schedule order, plus which of them are outputs.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Dag {
    pub stages: Vec<Stage>,
    pub outputs: Vec<TensorId>,
}

/// Iterator kind in an Ansor state (spec §2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IterKind {
    Spatial,
    Reduction,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitialIter {
    /// CleanName'd axis name.
    pub name: String,
    /// None when the extent is not a constant (adaptive pooling, sparse rows): Ansor's
    /// state then has no integer range either (the simulator prints `?`).
    pub extent: Option<i64>,
    pub kind: IterKind,
}

/// One stage of the initial Ansor state (`State(ComputeDAG.ops)`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitialStage {
    pub name: String,
    pub is_placeholder: bool,
    /// Placeholder shape, or the output shape of a compute stage.
    pub shape: Vec<i64>,
    /// Spatial axes then reduce axes; empty for placeholders.
    pub iters: Vec<InitialIter>,
}

/// `CleanName` of `auto_scheduler/utils.h`: `.`→`_`, `@`→`_`, `outer`→`o`, `inner`→`i`.
pub fn clean_name(name: &str) -> String {
    name.replace(['.', '@'], "_")
        .replace("outer", "o")
        .replace("inner", "i")
}

impl Dag {
    pub fn stage(&self, id: TensorId) -> &Stage {
        &self.stages[id.0]
    }

    /// First stage with this name (names are not unique: several `T_add`, `placeholder`).
    pub fn find(&self, name: &str) -> Option<TensorId> {
        self.stages
            .iter()
            .position(|s| s.name == name)
            .map(TensorId)
    }

    /// All stages with this name, in order.
    pub fn find_all(&self, name: &str) -> Vec<TensorId> {
        (0..self.stages.len())
            .filter(|&i| self.stages[i].name == name)
            .map(TensorId)
            .collect()
    }

    /// Placeholders in stage order, which is also the order of the input shapes in a relay
    /// workload key (DFS discovery order of `traverse_to_get_io_tensors`).
    pub fn placeholders(&self) -> Vec<TensorId> {
        (0..self.stages.len())
            .filter(|&i| self.stages[i].is_placeholder())
            .map(TensorId)
            .collect()
    }

    /// The constant weights among the placeholders (TVM's layout-free ones and ttdb's
    /// packable ones), as positions in [`Dag::placeholders`].
    pub fn weight_inputs(&self) -> Vec<usize> {
        let weights: std::collections::HashSet<TensorId> = self
            .stages
            .iter()
            .filter_map(|s| s.compute())
            .flat_map(|c| {
                let a = &c.attrs;
                a.layout_free_placeholders
                    .iter()
                    .chain(&a.packable_placeholders)
                    .copied()
            })
            .collect();
        self.placeholders()
            .iter()
            .enumerate()
            .filter(|(_, t)| weights.contains(t))
            .map(|(i, _)| i)
            .collect()
    }

    pub fn placeholder_shapes(&self) -> Vec<Vec<i64>> {
        self.placeholders()
            .into_iter()
            .map(|t| self.stage(t).shape())
            .collect()
    }

    /// Shapes of the key arguments: placeholders then outputs.
    pub fn io_shapes(&self) -> Vec<Vec<i64>> {
        let mut v = self.placeholder_shapes();
        v.extend(self.outputs.iter().map(|t| self.stage(*t).shape()));
        v
    }

    pub fn output(&self) -> TensorId {
        self.outputs[0]
    }

    /// Ids of compute stages that read `id`.
    pub fn consumers(&self, id: TensorId) -> Vec<TensorId> {
        (0..self.stages.len())
            .filter(|&i| {
                self.stages[i]
                    .compute()
                    .is_some_and(|c| c.input_tensors().contains(&id))
            })
            .map(TensorId)
            .collect()
    }

    /// The stages of the initial Ansor state: per stage its name, kind and iterators.
    pub fn initial_stages(&self) -> Vec<InitialStage> {
        self.stages
            .iter()
            .map(|s| match &s.op {
                Operation::Placeholder { shape } => InitialStage {
                    name: s.name.clone(),
                    is_placeholder: true,
                    shape: shape.clone(),
                    iters: vec![],
                },
                Operation::Compute(c) => {
                    let mut iters: Vec<InitialIter> = c
                        .axes
                        .iter()
                        .map(|a| InitialIter {
                            name: clean_name(&a.name),
                            extent: a.const_extent(),
                            kind: IterKind::Spatial,
                        })
                        .collect();
                    iters.extend(c.reduce_axes.iter().map(|a| InitialIter {
                        name: clean_name(&a.name),
                        extent: a.const_extent(),
                        kind: IterKind::Reduction,
                    }));
                    InitialStage {
                        name: s.name.clone(),
                        is_placeholder: false,
                        shape: c.shape(),
                        iters,
                    }
                }
            })
            .collect()
    }
}

/// A handle on a tensor being built: its id (provisional until `finish`), shape and type.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub id: TensorId,
    pub name: String,
    pub shape: Vec<i64>,
    pub dtype: DType,
}

impl Tensor {
    /// `T[indices]`.
    pub fn at(&self, indices: Vec<Expr>) -> Expr {
        assert_eq!(
            indices.len(),
            self.shape.len(),
            "rank mismatch loading {}",
            self.name
        );
        Expr::Load {
            tensor: self.id,
            indices,
            dtype: self.dtype,
        }
    }

    pub fn ndim(&self) -> usize {
        self.shape.len()
    }
}

/// Error building a DAG (inconsistent shapes, unsupported attribute combinations).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildError(pub String);

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot build DAG: {}", self.0)
    }
}
impl std::error::Error for BuildError {}

/// Collects stages in creation order; [`DagBuilder::finish`] sorts them into TVM's
/// schedule order and rewrites tensor references accordingly.
#[derive(Default)]
pub struct DagBuilder {
    stages: Vec<Stage>,
}

impl DagBuilder {
    pub fn new() -> DagBuilder {
        DagBuilder::default()
    }

    pub fn placeholder(&mut self, name: impl Into<String>, shape: &[i64], dtype: DType) -> Tensor {
        let name = name.into();
        let id = TensorId(self.stages.len());
        self.stages.push(Stage {
            name: name.clone(),
            dtype,
            op: Operation::Placeholder {
                shape: shape.to_vec(),
            },
        });
        Tensor {
            id,
            name,
            shape: shape.to_vec(),
            dtype,
        }
    }

    /// Adds a compute stage; its type is the body's type.
    pub fn compute(
        &mut self,
        name: impl Into<String>,
        tag: impl Into<String>,
        axes: Vec<IterVar>,
        reduce_axes: Vec<IterVar>,
        body: Body,
        attrs: ComputeAttrs,
    ) -> Tensor {
        let name = name.into();
        let dtype = match &body {
            Body::Expr(e) => e.dtype(),
            Body::Reduce { source, .. } => source.dtype(),
        };
        let op = ComputeOp {
            axes,
            reduce_axes,
            body,
            tag: tag.into(),
            attrs,
        };
        let shape = op.shape();
        let id = TensorId(self.stages.len());
        self.stages.push(Stage {
            name: name.clone(),
            dtype,
            op: Operation::Compute(op),
        });
        Tensor {
            id,
            name,
            shape,
            dtype,
        }
    }

    /// An injective stage over `axes`: `f` receives the axis variables.
    pub fn elementwise(
        &mut self,
        name: &str,
        tag: &str,
        axes: Vec<IterVar>,
        f: impl FnOnce(&[Expr]) -> Expr,
    ) -> Tensor {
        let vars: Vec<Expr> = axes.iter().map(IterVar::var).collect();
        let body = f(&vars);
        self.compute(
            name,
            tag,
            axes,
            vec![],
            Body::Expr(body),
            ComputeAttrs::default(),
        )
    }

    /// A reduction stage.
    #[allow(clippy::too_many_arguments)]
    pub fn reduce(
        &mut self,
        name: &str,
        tag: &str,
        axes: Vec<IterVar>,
        reduce_axes: Vec<IterVar>,
        combiner: Combiner,
        attrs: ComputeAttrs,
        f: impl FnOnce(&[Expr], &[Expr]) -> Expr,
    ) -> Tensor {
        let vars: Vec<Expr> = axes.iter().map(IterVar::var).collect();
        let rvars: Vec<Expr> = reduce_axes.iter().map(IterVar::var).collect();
        let source = f(&vars, &rvars);
        let init = combiner.identity(source.dtype());
        self.compute(
            name,
            tag,
            axes,
            reduce_axes,
            Body::Reduce {
                combiner,
                source,
                init,
            },
            attrs,
        )
    }

    /// The stages reachable from `outputs`, in post-order DFS (schedule) order, with all
    /// tensor references renumbered to final stage indices.
    pub fn finish(self, outputs: &[&Tensor]) -> Dag {
        let n = self.stages.len();
        let mut order: Vec<usize> = Vec::with_capacity(n);
        let mut visited = vec![false; n];
        fn dfs(i: usize, stages: &[Stage], visited: &mut [bool], order: &mut Vec<usize>) {
            if visited[i] {
                return;
            }
            visited[i] = true;
            if let Operation::Compute(c) = &stages[i].op {
                for t in c.input_tensors() {
                    dfs(t.0, stages, visited, order);
                }
            }
            order.push(i);
        }
        for o in outputs {
            dfs(o.id.0, &self.stages, &mut visited, &mut order);
        }
        let mut new_index = vec![usize::MAX; n];
        for (new, &old) in order.iter().enumerate() {
            new_index[old] = new;
        }
        let map = |t: TensorId| TensorId(new_index[t.0]);
        let mut slots: Vec<Option<Stage>> = self.stages.into_iter().map(Some).collect();
        let stages = order
            .iter()
            .map(|&old| {
                let mut s = slots[old].take().expect("each stage once");
                if let Operation::Compute(c) = &mut s.op {
                    c.body = match &c.body {
                        Body::Expr(e) => Body::Expr(e.remap_tensors(&map)),
                        Body::Reduce {
                            combiner,
                            source,
                            init,
                        } => Body::Reduce {
                            combiner: *combiner,
                            source: source.remap_tensors(&map),
                            init: init.clone(),
                        },
                    };
                    for r in &mut c.reduce_axes {
                        r.extent = r.extent.remap_tensors(&map);
                    }
                    let attrs = &mut c.attrs;
                    for t in (attrs.layout_free_placeholders.iter_mut())
                        .chain(attrs.packable_placeholders.iter_mut())
                    {
                        *t = map(*t);
                    }
                }
                s
            })
            .collect();
        Dag {
            stages,
            outputs: outputs.iter().map(|t| map(t.id)).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_name_matches_ansor() {
        assert_eq!(clean_name("k.outer"), "k_o");
        assert_eq!(clean_name("i.0@j.0@"), "i_0_j_0_");
        assert_eq!(clean_name("ff.inner.v"), "ff_i_v");
    }

    /// relu(add(conv(pad(data), kernel), bias)) -> [data, pad, kernel, conv, bias, add, relu]
    /// (spec §2.1), even when created in another order.
    #[test]
    fn finish_orders_stages_by_post_order_dfs() {
        let mut b = DagBuilder::new();
        let bias = b.placeholder("bias", &[4], DType::F32);
        let kernel = b.placeholder("kernel", &[4, 4], DType::F32);
        let data = b.placeholder("data", &[4], DType::F32);
        let pad = b.elementwise("pad", "", vec![IterVar::new("i", 4)], |v| {
            data.at(vec![v[0].clone()])
        });
        let conv = b.reduce(
            "conv",
            "",
            vec![IterVar::new("i", 4)],
            vec![IterVar::new("k", 4)],
            Combiner::Sum,
            ComputeAttrs {
                layout_free_placeholders: vec![kernel.id],
                ..Default::default()
            },
            |v, r| pad.at(vec![r[0].clone()]) * kernel.at(vec![v[0].clone(), r[0].clone()]),
        );
        let add = b.elementwise("add", "", vec![IterVar::new("i", 4)], |v| {
            conv.at(vec![v[0].clone()]) + bias.at(vec![v[0].clone()])
        });
        let relu = b.elementwise("relu", "", vec![IterVar::new("i", 4)], |v| {
            Expr::max(add.at(vec![v[0].clone()]), Expr::f32(0.0))
        });
        let dag = b.finish(&[&relu]);
        let names: Vec<&str> = dag.stages.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["data", "pad", "kernel", "conv", "bias", "add", "relu"]
        );
        assert_eq!(dag.output(), TensorId(6));
        let conv_op = dag.stage(TensorId(3)).compute().unwrap();
        assert_eq!(conv_op.input_tensors(), vec![TensorId(1), TensorId(2)]);
        assert_eq!(conv_op.attrs.layout_free_placeholders, vec![TensorId(2)]);
        assert_eq!(dag.placeholder_shapes(), vec![vec![4], vec![4, 4], vec![4]]);
        let init = dag.initial_stages();
        assert_eq!(init[3].iters.len(), 2);
        assert_eq!(init[3].iters[1].kind, IterKind::Reduction);
        assert_eq!(dag.consumers(TensorId(3)), vec![TensorId(5)]);
    }
}
