//! ONNX frontend: from an `.onnx` file to the list of fused kernels TVM Relay would extract
//! on x86, each with the normalized signature ttdb computes for imported Ansor workload keys.
//!
//! Pipeline (one file per concern):
//! 1. [`load`]: prost decode ([`proto`]), dims of initializers (external data never read),
//!    input-shape overrides, then [`shape`] inference with constant folding of shape chains;
//!    each ONNX op's shape rule and lowering are its descriptor in [`ops`] (one file or
//!    registry line per op);
//! 2. [`fold`]: Identity/Dropout removal, `Conv -> BatchNormalization` folding;
//! 3. [`relay`]: lowering to Relay-like ops with fusion pattern kinds; [`scale_fold`]:
//!    scalar scales after a conv or dense go into its weights (FoldScaleAxis);
//! 4. [`layout`]: NCHWc (x86 AlterOpLayout, blocks from [`tophub`] or the fallback rule, or
//!    planned for the whole graph by [`layout_plan`]), NHWC (ConvertLayout, winograd) or
//!    plain NCHW, with layout_transform insertion;
//! 5. [`fuse`]: Relay FuseOps (post-dominator based, three phases);
//! 6. [`kernel`]: one [`Kernel`] per group, identical kernels counted once.
//!
//! [`extract`] runs 2-6 on a loaded graph; [`with_blocking`] re-runs them with one conv's
//! (ic_bn, oc_bn) chosen by the caller and returns the conv kernel plus the layout transforms
//! that choice implies.
pub mod chain;
pub mod constants;
pub mod error;
pub mod fill;
pub mod fold;
pub mod fuse;
pub mod graph;
pub mod kernel;
pub mod layout;
pub mod layout_plan;
pub mod load;
pub mod ops;
pub mod prologue;
pub mod proto;
pub mod relay;
pub mod reshape_sink;
pub mod scale_fold;
pub mod shape;
pub mod tophub;
mod tophub_table;
pub mod weights;
pub mod window;

pub use error::OnnxError;
pub use graph::{Graph, Node, TensorInfo};
pub use kernel::{Kernel, KernelKind};
pub use layout::{Blocking, BlockingSource, LayoutMode};
pub use layout_plan::{HostEstimates, KernelCosts, LayoutPlan};
pub use load::{load, load_bytes, InputShape};
pub use tophub::TopHub;

use error::Result;
use relay::{OpGraph, OpKind};
use std::collections::HashMap;
use std::sync::Arc;

/// Kernel extraction options.
#[derive(Clone, Debug)]
pub struct Options {
    pub layout: LayoutMode,
    /// SIMD 32-bit lanes of the target (16 AVX-512, 8 AVX2, 4 without -mcpu).
    pub lanes: i64,
    /// TopHub configs for NCHWc blocking (None: fallback rule only).
    pub tophub: Option<Arc<TopHub>>,
    /// Per-conv blocking chosen by the caller, by the conv's ONNX node name: (ic_bn, oc_bn).
    pub blocking: HashMap<String, (i64, i64)>,
    /// TVM's ONNX frontend option `use_nt_batch_matmul` (on by default): an N-D MatMul is a
    /// `batch_matmul` of the transposed right operand (`[B, N, K]`); off, of the operand as
    /// it is (`[B, K, N]`, transpose_b=False, as TVM's TensorFlow frontend emits too).
    pub nt_batch_matmul: bool,
    /// NCHWc only: every conv's blocking chosen for the whole graph ([`layout_plan`]),
    /// instead of TopHub's per-conv choice (None, TVM's way). A plan is ttdb's own
    /// partition: a dense also takes its element-wise tail across a reshape
    /// ([`reshape_sink`]).
    pub layout_plan: Option<LayoutPlanning>,
}

/// Where a whole-graph blocking comes from.
#[derive(Clone, Debug)]
pub enum LayoutPlanning {
    /// Planned during extraction, on these host estimates alone.
    Estimate(HostEstimates),
    /// Chosen before: by [`plan_layout`] with measured costs, or pinned in a database.
    Chosen(Arc<LayoutPlan>),
}

impl Default for Options {
    /// NCHWc, 4 lanes (a target without -mcpu, like tvm_ansor_bench), no TopHub.
    fn default() -> Options {
        Options {
            layout: LayoutMode::Nchwc,
            lanes: 4,
            tophub: None,
            blocking: HashMap::new(),
            nt_batch_matmul: true,
            layout_plan: None,
        }
    }
}

impl Options {
    /// Uses the TopHub table built into ttdb ([`TopHub::builtin`]).
    pub fn with_default_tophub(mut self) -> Result<Options> {
        self.tophub = Some(Arc::new(TopHub::builtin()));
        Ok(self)
    }
}

/// The distinct kernels of one model.
#[derive(Clone, Debug, serde::Serialize)]
pub struct KernelList {
    pub model: String,
    pub layout: String,
    pub lanes: i64,
    pub tophub: Option<String>,
    /// ONNX nodes in the file.
    pub onnx_nodes: usize,
    pub kernels: Vec<Kernel>,
    /// The graph-level blocking plan, when one was asked for.
    pub layout_plan: Option<LayoutPlan>,
}

impl KernelList {
    pub fn tuned(&self) -> impl Iterator<Item = &Kernel> {
        self.kernels.iter().filter(|k| k.is_tuned())
    }

    /// Kernel occurrences in total (the model's task count, simple ones included).
    pub fn occurrences(&self) -> usize {
        self.kernels.iter().map(Kernel::multiplicity).sum()
    }

    /// Layout transform kernels (occurrences), standalone or fused into other simple kernels.
    pub fn layout_transforms(&self) -> usize {
        self.kernels
            .iter()
            .filter(|k| k.class.contains("layout_transform"))
            .map(Kernel::multiplicity)
            .sum()
    }
}

/// The kernel of one conv under a chosen blocking, and the layout transforms it implies.
#[derive(Clone, Debug)]
pub struct BlockingChoice {
    pub kernel: Kernel,
    /// Kernels containing a layout_transform into this conv's data layout or out of its
    /// output layout (one entry per transform occurrence).
    pub transforms: Vec<Kernel>,
}

/// Everything extraction computes, for running the model (docs/design/run.md).
pub struct Extracted {
    pub list: KernelList,
    /// The ONNX graph after its passes (identities removed, BNs folded), whose
    /// [`graph::Recipe`]s give the folded tensors' values.
    pub folded: Graph,
    /// The laid-out op graph the groups index.
    pub graph: OpGraph,
    /// The fused groups, each a list of ops in topological order.
    pub groups: Vec<Vec<usize>>,
    /// Per group: its kernel (one occurrence, before dedup).
    pub group_kernels: Vec<Kernel>,
}

/// Kernel extraction, keeping the graphs and groups it went through.
pub fn extract_all(graph: &Graph, opts: &Options) -> Result<Extracted> {
    run(graph, opts)
}

/// Passes 2-3: the folded ONNX graph and the op graph layout selection starts from.
fn op_graph(graph: &Graph, opts: &Options) -> Result<(Graph, OpGraph)> {
    let mut g = graph.clone();
    fold::remove_identities(&mut g);
    fold::fold_batchnorm(&mut g);
    fold::simplify_batchnorms(&mut g);
    let mut og = relay::lower(&g, opts.nt_batch_matmul)?;
    scale_fold::fold_scalar_scales(&mut og);
    Ok((g, og))
}

fn tophub_options<'a>(opts: &'a Options) -> layout::LayoutOptions<'a> {
    layout::LayoutOptions {
        mode: opts.layout,
        lanes: opts.lanes,
        tophub: opts.tophub.as_deref(),
        blocking: &opts.blocking,
        grouped_nchwc: false,
    }
}

/// Plans the NCHWc blocking of `graph` for the whole graph on `host`, with measured kernel
/// times from `costs` where it has them ([`layout_plan::plan`]).
pub fn plan_layout(
    graph: &Graph,
    opts: &Options,
    host: &HostEstimates,
    costs: Option<&dyn KernelCosts>,
) -> Result<LayoutPlan> {
    let (_, og) = op_graph(graph, opts)?;
    let base = layout::LayoutOptions {
        mode: LayoutMode::Nchwc,
        ..tophub_options(opts)
    };
    layout_plan::plan(&og, &base, host, costs)
}

/// What a layout plan of `graph` depends on, as a hex sha256: the op graph's structure
/// (ops, attributes, shapes, node names; no weights) and the options that shape it (lanes,
/// TopHub's source, the caller's blockings). A plan pinned under this key fits any model
/// with the same architecture and input shapes.
pub fn layout_plan_key(graph: &Graph, opts: &Options) -> Result<String> {
    use sha2::{Digest, Sha256};
    use std::fmt::Write;
    let (_, og) = op_graph(graph, opts)?;
    let mut text = format!(
        "ttdb layout plan key 1\nlanes {}\ntophub {:?}\nnt_batch_matmul {}\n",
        opts.lanes,
        opts.tophub.as_ref().map(|t| &t.source),
        opts.nt_batch_matmul
    );
    let fixed: std::collections::BTreeMap<_, _> = opts.blocking.iter().collect();
    let _ = writeln!(text, "blocking {fixed:?}");
    for v in &og.values {
        let _ = writeln!(
            text,
            "v {:?} {} {} {}",
            v.shape, v.dtype, v.constant, v.channel_vector
        );
    }
    for op in &og.ops {
        let _ = writeln!(
            text,
            "op {:?} {:?} {} {:?}",
            op.kind, op.inputs, op.output, op.nodes
        );
    }
    let _ = writeln!(text, "io {:?} {:?}", og.inputs, og.outputs);
    let digest = Sha256::digest(text.as_bytes());
    Ok(digest.iter().map(|b| format!("{b:02x}")).collect())
}

fn run(graph: &Graph, opts: &Options) -> Result<Extracted> {
    let (g, mut og) = op_graph(graph, opts)?;
    let tophub = tophub_options(opts);
    let plan = match &opts.layout_plan {
        Some(LayoutPlanning::Estimate(host)) if opts.layout == LayoutMode::Nchwc => {
            Some(layout_plan::plan(&og, &tophub, host, None)?)
        }
        Some(LayoutPlanning::Chosen(p)) if opts.layout == LayoutMode::Nchwc => {
            Some(p.as_ref().clone())
        }
        _ => None,
    };
    if plan.is_some() {
        // ttdb's own partition: a dense takes its element-wise tail across the reshape
        reshape_sink::sink(&mut og);
    }
    let planned: Option<HashMap<String, (i64, i64)>> = plan
        .as_ref()
        .map(|p| p.blocking.iter().map(|(k, v)| (k.clone(), *v)).collect());
    let lo = layout::LayoutOptions {
        blocking: planned.as_ref().unwrap_or(&opts.blocking),
        ..tophub
    };
    let laid = layout::assign(&og, &lo)?;
    let groups = fuse::fuse(&laid.graph);
    let group_kernels: Vec<Kernel> = groups
        .iter()
        .map(|grp| kernel::group_kernel(&laid.graph, grp, &laid.convs))
        .collect();
    let list = KernelList {
        model: graph.name.clone(),
        layout: opts.layout.as_str().into(),
        lanes: opts.lanes,
        tophub: opts.tophub.as_ref().map(|h| h.source.clone()),
        onnx_nodes: graph.nodes.len(),
        kernels: kernel::dedup(group_kernels.clone()),
        layout_plan: plan,
    };
    Ok(Extracted {
        list,
        folded: g,
        graph: laid.graph,
        groups,
        group_kernels,
    })
}

/// Kernel extraction on a loaded graph.
pub fn extract(graph: &Graph, opts: &Options) -> Result<KernelList> {
    Ok(run(graph, opts)?.list)
}

/// Loads `path` and extracts its kernels.
pub fn kernels_for_file(
    path: impl AsRef<std::path::Path>,
    overrides: &[InputShape],
    opts: &Options,
) -> Result<KernelList> {
    let g = load(path, overrides)?;
    extract(&g, opts)
}

/// Re-extracts with conv `conv_node` (its ONNX node name) blocked as (ic_bn, oc_bn) and
/// returns its kernel and the layout transforms on its input and output. Only meaningful in
/// [`LayoutMode::Nchwc`].
pub fn with_blocking(
    graph: &Graph,
    opts: &Options,
    conv_node: &str,
    ic_bn: i64,
    oc_bn: i64,
) -> Result<BlockingChoice> {
    if opts.layout != LayoutMode::Nchwc {
        return Err(OnnxError::Layout(
            "a conv blocking choice needs the NCHWc layout".into(),
        ));
    }
    let mut o = opts.clone();
    o.blocking.insert(conv_node.to_string(), (ic_bn, oc_bn));
    let ex = run(graph, &o)?;
    let g = &ex.graph;
    let conv_op = g
        .ops
        .iter()
        .position(|op| {
            matches!(op.kind, OpKind::Conv { .. })
                && op.nodes.first().map(String::as_str) == Some(conv_node)
        })
        .ok_or_else(|| OnnxError::Layout(format!("no conv node named `{conv_node}`")))?;
    let group_of = |op: usize| ex.groups.iter().position(|grp| grp.contains(&op));
    let gi = group_of(conv_op).expect("every op is in a group");
    let kernel = ex.group_kernels[gi].clone();
    if kernel.blocking.is_none() {
        return Err(OnnxError::Layout(format!(
            "conv `{conv_node}` is not an NCHWc conv"
        )));
    }
    let mut transforms = Vec::new();
    let push = |op: usize, transforms: &mut Vec<Kernel>| {
        if let Some(gj) = group_of(op) {
            if gj != gi {
                transforms.push(ex.group_kernels[gj].clone());
            }
        }
    };
    // into the conv: the data input's producer
    if let Some(p) = g.values[g.ops[conv_op].inputs[0]].producer {
        if matches!(g.ops[p].kind, OpKind::LayoutTransform { .. }) {
            push(p, &mut transforms);
        }
    }
    // out of the conv's group: transforms reading any value the group produces
    let consumers = g.consumers();
    for &op in &ex.groups[gi] {
        for &(c, _) in &consumers[g.ops[op].output] {
            if matches!(g.ops[c].kind, OpKind::LayoutTransform { .. }) {
                push(c, &mut transforms);
            }
        }
    }
    Ok(BlockingChoice { kernel, transforms })
}
