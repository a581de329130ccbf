//! The Relay-like op graph that lowering produces: values (logical and physical shapes,
//! layouts), ops with their Relay fusion pattern, and the graph that holds them in
//! topological order.
use crate::onnx::graph::{dtype, Data};
use ttdb_algo::ops::lrn::LrnAttrs;
use ttdb_algo::ops::{PoolKind, Window2d};

pub type ValId = usize;
pub type OpId = usize;

/// Relay's `OpPatternKind` (ordering matters: fusion compares with `<=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pattern {
    ElemWise = 0,
    Broadcast = 1,
    Injective = 2,
    CommReduce = 3,
    OutEWiseFusable = 4,
    Opaque = 8,
}

/// A tensor of the op graph. `shape` is the logical (ONNX, NCHW) shape; layout selection
/// assigns `layout` and the physical `phys` shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    pub name: String,
    pub shape: Vec<i64>,
    /// Element type, an ONNX `TensorProto.DataType` code ([`dtype`]); a value made by a
    /// pass has its source's.
    pub dtype: i32,
    pub constant: bool,
    /// For constants: broadcasts along the channel axis of an NCHW tensor only (a bias or BN
    /// scale / shift), so it is re-laid-out with its consumer.
    pub channel_vector: bool,
    pub data: Option<Data>,
    pub producer: Option<OpId>,
    pub layout: Layout,
    pub phys: Vec<i64>,
    /// For constants that a pass rewrote: the constant they come from and how. Kernel
    /// extraction never reads values; running the model computes these once, at load
    /// (docs/design/run.md). A constant without it is the graph tensor named `name`.
    pub derived: Option<Derived>,
}

/// A constant computed from another at load time, as TVM folds constants at compile time
/// (FoldConstant over a weight's `layout_transform`, FoldScaleAxis).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Derived {
    pub from: ValId,
    pub op: ConstOp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConstOp {
    /// The same values, row-major, under this value's shape (`[C]` as `[1, C, 1, 1]`).
    Reshape,
    /// The last two axes swapped (a dense or batch_matmul weight given as `[K, N]`).
    TransposeLast2,
    /// Multiplied by the scalar constant `ValId` (a scale folded into a conv or dense).
    Scale(ValId),
    /// The source's values (in the source's layout, read in logical row-major order) laid
    /// out as this value's `phys` in its `layout`; the logical NCHW shape is the one
    /// `layout` maps onto `phys` (a channel vector `[C]` becomes `[1, C, 1, 1]` first).
    Relayout,
    /// A conv weight (logical OIHW) packed into the conv kernel's weight layout (`phys`).
    ConvWeight(ConvWeightLayout),
}

/// The weight layouts of the conv kernels ([`crate::onnx::layout`] chooses them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvWeightLayout {
    /// OIHW as it is (plain NCHW convs, grouped convs).
    Oihw,
    /// `[O/oc_bn, I/ic_bn, H, W, ic_bn, oc_bn]` (conv2d_NCHWc).
    Nchwc { ic_bn: i64, oc_bn: i64 },
    /// `[O/oc_bn, 1, H, W, 1, oc_bn]` (depthwise_conv2d_NCHWc).
    DepthwiseNchwc { oc_bn: i64 },
    /// `[H, W, I, O]` (conv2d NHWC).
    Hwio,
    /// `[H, W, O, 1]` (depthwise NHWC).
    DepthwiseHwo1,
    /// `[6, 6, O, I]`: the winograd F(4x4, 3x3) kernel transform, precomputed.
    Winograd,
}

/// Data layout of a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// The logical layout (NCHW for 4-D tensors).
    Plain,
    /// NCHW[x]c.
    Nchwc(i64),
    Nhwc,
}

impl Layout {
    pub fn name(self, rank: usize) -> String {
        match (self, rank) {
            (Layout::Plain, 4) => "NCHW".into(),
            (Layout::Plain, 2) => "NC".into(),
            (Layout::Plain, _) => String::new(),
            (Layout::Nchwc(b), _) => format!("NCHW{b}c"),
            (Layout::Nhwc, _) => "NHWC".into(),
        }
    }

    /// Physical shape of a logical 4-D NCHW shape (other ranks stay).
    pub fn physical(self, s: &[i64]) -> Vec<i64> {
        match (self, s) {
            (Layout::Nchwc(b), [n, c, h, w]) if b > 0 => vec![*n, c / b, *h, *w, b],
            (Layout::Nhwc, [n, c, h, w]) => vec![*n, *h, *w, *c],
            _ => s.to_vec(),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum BinKind {
    Add,
    Multiply,
    Subtract,
    Divide,
    Power,
    Other(String),
}

#[derive(Clone, Debug, PartialEq)]
pub enum UnaryKind {
    Relu,
    Clip { lo: f64, hi: f64 },
    Tanh,
    Other(String),
}

/// Pool attributes in NCHW terms (2-D).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pool2d {
    pub kind: PoolKind,
    pub kernel: [i64; 2],
    pub stride: [i64; 2],
    pub dilation: [i64; 2],
    pub padding: [i64; 4],
    pub ceil_mode: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum OpKind {
    /// 2-D convolution; inputs (data, weight OIHW).
    Conv {
        window: Window2d,
        groups: i64,
    },
    /// inputs (data [M,K], weight [N,K]).
    Dense,
    /// inputs (A [B,M,K], B [B,N,K]), or B [B,K,N] without `transpose_b`.
    BatchMatmul {
        transpose_b: bool,
    },
    Pool(Pool2d),
    GlobalPool(PoolKind),
    Softmax {
        axis: usize,
    },
    Mean {
        axes: Vec<usize>,
        keepdims: bool,
    },
    Binary(BinKind),
    Unary(UnaryKind),
    /// Concatenation (along `axis` of the logical shape).
    Concat {
        axis: usize,
    },
    /// `transpose`: output axis `i` is axis `perm[i]` of the input viewed with `perm.len()`
    /// axes, its leading axes merged (MatMul's run-time `[..., K, N]` operand is transposed
    /// as `[B, K, N]`).
    Transpose {
        perm: Vec<usize>,
    },
    /// `strided_slice`: per input axis, the first index taken and the step to the next (the
    /// output's shape says how many); ONNX `Slice` normalized.
    StridedSlice {
        begin: Vec<i64>,
        strides: Vec<i64>,
    },
    /// One output of `split`: the part of the input from `begin` along `axis` (the output's
    /// shape says how long).
    Split {
        axis: usize,
        begin: i64,
    },
    /// `take` along `axis`: inputs (data, integer indices); ONNX `Gather`.
    Take {
        axis: usize,
    },
    /// Other injective ops, by Relay name (`reshape`, `batch_flatten`, `pad`, ...).
    Injective(String),
    LayoutTransform {
        src: Layout,
        dst: Layout,
    },
    /// Reductions other than mean (`sum`, `max`, ...).
    Reduce(String),
    /// `lrn` across channels (axis 1), ONNX's attributes; no fusion.
    Lrn(LrnAttrs),
    /// `cumsum` along `axis` (ONNX `CumSum` with a known axis); no fusion.
    CumSum {
        axis: usize,
        exclusive: bool,
        reverse: bool,
    },
    /// `gatherelements` along `axis`: inputs (data, integer indices); no fusion.
    GatherElements {
        axis: usize,
    },
    /// Ops with no fusion (unknown ops), by name.
    Opaque(String),
}

/// How layout selection ([`crate::onnx::layout`]) treats an op: TVM registers these rules
/// per Relay op (`FInferCorrectLayout`, x86 `AlterOpLayout` for conv2d).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutRule {
    /// Chooses its own data, kernel and output layouts (NCHWc blocking, NHWC, winograd).
    Conv,
    /// Keeps its data input's layout; other inputs are given in the logical layout.
    FollowsData,
    /// BinaryBroadcastLayout: a blocked layout survives operands that broadcast on spatial
    /// axes only and constants that can follow it.
    Broadcast,
    /// The layout its inputs share, else the logical one.
    Concat,
    /// Wants the logical layout (NCHW) for its inputs and output.
    Logical,
}

impl OpKind {
    pub fn layout_rule(&self) -> LayoutRule {
        match self {
            OpKind::Conv { .. } => LayoutRule::Conv,
            OpKind::Pool(_) | OpKind::GlobalPool(_) | OpKind::Unary(_) => LayoutRule::FollowsData,
            OpKind::Binary(_) => LayoutRule::Broadcast,
            OpKind::Concat { .. } => LayoutRule::Concat,
            OpKind::Dense
            | OpKind::BatchMatmul { .. }
            | OpKind::Softmax { .. }
            | OpKind::Mean { .. }
            | OpKind::Transpose { .. }
            | OpKind::StridedSlice { .. }
            | OpKind::Split { .. }
            | OpKind::Take { .. }
            | OpKind::Injective(_)
            | OpKind::LayoutTransform { .. }
            | OpKind::Reduce(_)
            | OpKind::Lrn(_)
            | OpKind::CumSum { .. }
            | OpKind::GatherElements { .. }
            | OpKind::Opaque(_) => LayoutRule::Logical,
        }
    }

    pub fn pattern(&self) -> Pattern {
        match self {
            OpKind::Conv { .. }
            | OpKind::Dense
            | OpKind::BatchMatmul { .. }
            | OpKind::Pool(_)
            | OpKind::GlobalPool(_) => Pattern::OutEWiseFusable,
            OpKind::Softmax { .. }
            | OpKind::Lrn(_)
            | OpKind::CumSum { .. }
            | OpKind::GatherElements { .. }
            | OpKind::Opaque(_) => Pattern::Opaque,
            OpKind::Mean { .. } | OpKind::Reduce(_) => Pattern::CommReduce,
            OpKind::Binary(_) => Pattern::Broadcast,
            OpKind::Unary(_) => Pattern::ElemWise,
            OpKind::Concat { .. }
            | OpKind::Transpose { .. }
            | OpKind::StridedSlice { .. }
            | OpKind::Split { .. }
            | OpKind::Take { .. }
            | OpKind::Injective(_)
            | OpKind::LayoutTransform { .. } => Pattern::Injective,
        }
    }

    /// Relay-style name for reports.
    pub fn name(&self) -> String {
        match self {
            OpKind::Conv { groups: 1, .. } => "conv2d".into(),
            OpKind::Conv { .. } => "group_conv2d".into(),
            OpKind::Dense => "dense".into(),
            OpKind::BatchMatmul { .. } => "batch_matmul".into(),
            OpKind::Pool(p) => match p.kind {
                PoolKind::Max => "max_pool2d".into(),
                PoolKind::Avg { .. } => "avg_pool2d".into(),
            },
            OpKind::GlobalPool(PoolKind::Max) => "global_max_pool2d".into(),
            OpKind::GlobalPool(_) => "global_avg_pool2d".into(),
            OpKind::Softmax { .. } => "softmax".into(),
            OpKind::Mean { .. } => "mean".into(),
            OpKind::Binary(b) => match b {
                BinKind::Add => "add".into(),
                BinKind::Multiply => "multiply".into(),
                BinKind::Subtract => "subtract".into(),
                BinKind::Divide => "divide".into(),
                BinKind::Power => "power".into(),
                BinKind::Other(s) => s.clone(),
            },
            OpKind::Unary(u) => match u {
                UnaryKind::Relu => "relu".into(),
                UnaryKind::Clip { .. } => "clip".into(),
                UnaryKind::Tanh => "tanh".into(),
                UnaryKind::Other(s) => s.clone(),
            },
            OpKind::Concat { .. } => "concatenate".into(),
            OpKind::Transpose { .. } => "transpose".into(),
            OpKind::StridedSlice { .. } => "strided_slice".into(),
            OpKind::Split { .. } => "split".into(),
            OpKind::Take { .. } => "take".into(),
            OpKind::Injective(s) | OpKind::Reduce(s) | OpKind::Opaque(s) => s.clone(),
            OpKind::LayoutTransform { .. } => "layout_transform".into(),
            OpKind::Lrn(_) => "lrn".into(),
            OpKind::CumSum { .. } => "cumsum".into(),
            OpKind::GatherElements { .. } => "gatherelements".into(),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    pub kind: OpKind,
    pub inputs: Vec<ValId>,
    pub output: ValId,
    /// ONNX node names this op comes from.
    pub nodes: Vec<String>,
}

/// Ops in topological order over values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpGraph {
    pub values: Vec<Value>,
    pub ops: Vec<Op>,
    pub inputs: Vec<ValId>,
    pub outputs: Vec<ValId>,
}

impl OpGraph {
    pub fn add_value(&mut self, name: String, shape: Vec<i64>, constant: bool) -> ValId {
        let phys = shape.clone();
        self.values.push(Value {
            name,
            shape,
            dtype: dtype::FLOAT,
            constant,
            channel_vector: false,
            data: None,
            producer: None,
            layout: Layout::Plain,
            phys,
            derived: None,
        });
        self.values.len() - 1
    }

    /// A new constant computed from `from` by `op` at load time.
    pub fn derive_const(
        &mut self,
        from: ValId,
        op: ConstOp,
        name: String,
        shape: Vec<i64>,
    ) -> ValId {
        let v = self.add_value(name, shape, true);
        self.values[v].derived = Some(Derived { from, op });
        self.values[v].dtype = self.values[from].dtype;
        v
    }

    pub fn add_op(
        &mut self,
        kind: OpKind,
        inputs: Vec<ValId>,
        out_name: String,
        out_shape: Vec<i64>,
        nodes: Vec<String>,
    ) -> ValId {
        let out = self.add_value(out_name, out_shape, false);
        // the caller sets another type where the op changes it (cast, comparisons)
        if let Some(&first) = inputs.first() {
            self.values[out].dtype = self.values[first].dtype;
        }
        self.values[out].producer = Some(self.ops.len());
        self.ops.push(Op {
            kind,
            inputs,
            output: out,
            nodes,
        });
        out
    }

    /// Readers of each value: (op, input position).
    pub fn consumers(&self) -> Vec<Vec<(OpId, usize)>> {
        let mut c = vec![Vec::new(); self.values.len()];
        for (i, op) in self.ops.iter().enumerate() {
            for (k, &v) in op.inputs.iter().enumerate() {
                c[v].push((i, k));
            }
        }
        c
    }
}
