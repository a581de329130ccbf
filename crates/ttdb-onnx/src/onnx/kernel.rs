//! Kernels: one per fused group, as Relay would hand them to the TE compiler / Ansor.
//!
//! A group around an anchor (conv, depthwise conv, dense, batch_matmul, pool, global pool,
//! softmax, mean) whose epilogue is a DAG of registry ops (add / subtract / multiply /
//! divide / power with an outside or scalar operand, relu, clip and the unary math ops:
//! [`super::chain`]; a binary op on two fused values, as in SiLU `x * sigmoid(x)`, is an
//! [`EpilogueOp::Rejoin`]), and for a mean whose operand-free element-wise producers FuseOps fused
//! into it a prologue ([`super::prologue`]: LayerNorm's `mean(x^2)`), becomes a *tuned*
//! kernel: a [`WorkloadSpec`], its inputs in
//! canonical order (anchor inputs, then epilogue operands in chain order), the output shape
//! and the normalized [`WorkloadSignature`] (`spec_signature`), which is what ttdb computes
//! for imported Ansor keys. Anchored groups the registry cannot express are *untunable*
//! with the reason; groups without an anchor (concat, reshape, layout_transform, plain
//! element-wise) are *simple* kernels (Ansor does not tune them).
use super::chain::{chain_op, rejoin_op, simplify_scalars};
use super::layout::{Blocking, ConvChoice};
use super::prologue::{prologue_of, prologue_ops};
use super::relay::{Layout, OpGraph, OpId, OpKind, ValId};
use serde::Serialize;
use std::collections::HashMap;
use ttdb_algo::ops::{Anchor, EpilogueOp, Era, PoolAttrs, PoolLayout, WorkloadSpec};
use ttdb_algo::recognize::signature::spec_signature;
use ttdb_format::signature::WorkloadSignature;

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum KernelKind {
    /// An Ansor task ttdb can match: spec and signature are set.
    Tuned,
    /// An anchored task ttdb's op registry cannot express.
    Untunable { reason: String },
    /// Injective / element-wise only: not tuned.
    Simple,
}

/// One distinct kernel of a model, with how often it occurs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Kernel {
    /// ONNX node name of the anchor (or first op) of the first occurrence.
    pub name: String,
    /// `conv2d_nchwc+add+relu`, `layout_transform`, `concatenate+multiply+add+relu`, ...
    pub class: String,
    pub kind: KernelKind,
    /// For layout transforms: `NCHW32c->NCHW64c`; otherwise empty.
    pub detail: String,
    #[serde(skip)]
    pub spec: Option<WorkloadSpec>,
    pub signature: Option<WorkloadSignature>,
    /// sha256 of the signature's canonical JSON (tuned kernels).
    pub signature_hash: Option<String>,
    /// Input shapes: canonical order for anchored kernels, group inputs for simple ones.
    pub inputs: Vec<Vec<i64>>,
    pub output: Vec<i64>,
    /// Data layout (`NCHW4c`, `NHWC`, `NC`, ...).
    pub layout: String,
    /// NCHWc conv blocking and where it came from.
    #[serde(skip)]
    pub blocking: Option<Blocking>,
    pub winograd: bool,
    /// ONNX node names covered, one list per occurrence.
    pub occurrences: Vec<Vec<String>>,
    /// The op-graph values of the first occurrence: its inputs, in the order of `inputs`,
    /// and its output. What running the model passes to the kernel.
    #[serde(skip)]
    pub values: KernelValues,
}

/// A kernel occurrence's inputs and output as values of the laid-out op graph.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelValues {
    pub inputs: Vec<ValId>,
    pub output: ValId,
}

impl Kernel {
    pub fn multiplicity(&self) -> usize {
        self.occurrences.len()
    }

    pub fn is_tuned(&self) -> bool {
        self.kind == KernelKind::Tuned
    }

    pub fn is_anchored(&self) -> bool {
        !matches!(self.kind, KernelKind::Simple)
    }

    /// Identity used to count occurrences.
    fn dedup_key(&self) -> String {
        match &self.signature {
            Some(s) => s.canonical_json(),
            None => format!(
                "{}|{}|{:?}|{:?}|{:?}",
                self.class, self.detail, self.inputs, self.output, self.kind
            ),
        }
    }
}

fn pool_layout(l: Layout) -> PoolLayout {
    match l {
        Layout::Plain => PoolLayout::Nchw,
        Layout::Nchwc(_) => PoolLayout::Nchwc,
        Layout::Nhwc => PoolLayout::Nhwc,
    }
}

fn anchor_of(g: &OpGraph, op: OpId, conv: Option<&ConvChoice>) -> Result<Anchor, String> {
    let o = &g.ops[op];
    let data_layout = o
        .inputs
        .first()
        .map(|&v| g.values[v].layout)
        .unwrap_or(Layout::Plain);
    Ok(match &o.kind {
        OpKind::Conv { window, groups } => {
            let c = conv.copied().unwrap_or(ConvChoice {
                blocking: None,
                depthwise: false,
                winograd: false,
                group_packing: None,
            });
            match data_layout {
                Layout::Nchwc(_) if c.depthwise => Anchor::DepthwiseNchwc(*window),
                Layout::Nchwc(_) => Anchor::Conv2dNchwc(*window),
                Layout::Nhwc if c.winograd => Anchor::WinogradNhwc {
                    padding: window.padding,
                },
                Layout::Nhwc if c.depthwise => Anchor::DepthwiseNhwc(*window),
                Layout::Nhwc if *groups == 1 => Anchor::Conv2dNhwc(*window),
                Layout::Nhwc => Anchor::GroupConv2dNhwc {
                    window: *window,
                    groups: *groups,
                },
                Layout::Plain => match c.group_packing {
                    Some(blocking) => Anchor::GroupConv2dNchwSpatialPack {
                        window: *window,
                        groups: *groups,
                        blocking,
                    },
                    None => Anchor::Conv2dNchw {
                        window: *window,
                        groups: *groups,
                    },
                },
            }
        }
        OpKind::Dense => Anchor::Dense,
        OpKind::BatchMatmul { transpose_b } => Anchor::BatchMatmul {
            transpose_b: *transpose_b,
        },
        OpKind::Pool(p) => Anchor::Pool(PoolAttrs {
            kind: p.kind,
            kernel: p.kernel,
            stride: p.stride,
            dilation: p.dilation,
            padding: p.padding,
            // with stride 1 ceil mode adds no padding (TOPI pads by stride - 1): the same kernel
            ceil_mode: p.ceil_mode && p.stride.iter().any(|&s| s > 1),
            layout: pool_layout(data_layout),
        }),
        OpKind::GlobalPool(kind) => Anchor::AdaptivePool {
            kind: *kind,
            layout: pool_layout(data_layout),
            out_hw: [1, 1],
        },
        OpKind::Softmax { axis } => Anchor::Softmax { axis: *axis },
        OpKind::Mean { axes, keepdims } => Anchor::Mean {
            axes: axes.clone(),
            keepdims: *keepdims,
        },
        other => return Err(format!("{} is not an anchor op", other.name())),
    })
}

fn is_anchor(kind: &OpKind) -> bool {
    matches!(
        kind,
        OpKind::Conv { .. }
            | OpKind::Dense
            | OpKind::BatchMatmul { .. }
            | OpKind::Pool(_)
            | OpKind::GlobalPool(_)
            | OpKind::Softmax { .. }
            | OpKind::Mean { .. }
    )
}

/// Builds the kernel of one fused group (one occurrence).
pub fn group_kernel(g: &OpGraph, group: &[OpId], convs: &HashMap<OpId, ConvChoice>) -> Kernel {
    let names: Vec<String> = {
        let mut v: Vec<String> = Vec::new();
        for &o in group {
            for n in &g.ops[o].nodes {
                if !v.contains(n) {
                    v.push(n.clone());
                }
            }
        }
        v
    };
    let last = *group.last().expect("non-empty group");
    let out_val = &g.values[g.ops[last].output];
    let mut k = Kernel {
        name: names.first().cloned().unwrap_or_default(),
        class: group
            .iter()
            .map(|&o| g.ops[o].kind.name())
            .collect::<Vec<_>>()
            .join("+"),
        kind: KernelKind::Simple,
        detail: String::new(),
        spec: None,
        signature: None,
        signature_hash: None,
        inputs: Vec::new(),
        output: out_val.phys.clone(),
        layout: out_val.layout.name(out_val.shape.len()),
        blocking: None,
        winograd: false,
        occurrences: vec![names],
        values: KernelValues {
            inputs: Vec::new(),
            output: g.ops[last].output,
        },
    };
    let in_group = |v: usize| g.values[v].producer.is_some_and(|p| group.contains(&p));
    let Some(&anchor_op) = group.iter().find(|&&o| is_anchor(&g.ops[o].kind)) else {
        // simple kernel: its non-constant inputs from outside the group
        for &o in group {
            for &v in &g.ops[o].inputs {
                if !in_group(v) && !g.values[v].constant {
                    k.inputs.push(g.values[v].phys.clone());
                    k.values.inputs.push(v);
                }
            }
            if let OpKind::LayoutTransform { src, dst } = g.ops[o].kind {
                let r = g.values[g.ops[o].output].shape.len();
                let d = format!("{}->{}", src.name(r), dst.name(r));
                k.detail = if k.detail.is_empty() {
                    d
                } else {
                    format!("{}, {d}", k.detail)
                };
            }
        }
        return k;
    };
    let conv = convs.get(&anchor_op);
    k.blocking = conv.and_then(|c| c.blocking);
    k.winograd = conv.is_some_and(|c| c.winograd);
    let a = &g.ops[anchor_op];
    if let Some(n) = a.nodes.first() {
        k.name = n.clone();
    }
    let untunable = |mut k: Kernel, reason: String| {
        k.kind = KernelKind::Untunable { reason };
        k
    };
    let anchor = match anchor_of(g, anchor_op, conv) {
        Ok(a) => a,
        Err(reason) => return untunable(k, reason),
    };
    let mut canonical: Vec<ValId> = a.inputs.clone();
    let prologue = match prologue_of(g, group, anchor_op, &anchor) {
        Ok(p) => p,
        Err(reason) => return untunable(k, reason),
    };
    if let Some(&(first, pos, _)) = prologue.first() {
        canonical[0] = g.ops[first].inputs[pos];
    }
    let shapes_of = |vals: &[ValId]| -> Vec<Vec<i64>> {
        vals.iter().map(|&v| g.values[v].phys.clone()).collect()
    };
    k.inputs = shapes_of(&canonical);
    let after: Vec<OpId> = group
        .iter()
        .copied()
        .filter(|&o| prologue.iter().all(|p| p.0 != o))
        .collect();
    let (epilogue, cur) = match walk_epilogue(g, &after, anchor_op, &mut canonical) {
        Ok(found) => found,
        Err(reason) => return untunable(k, reason),
    };
    k.values = KernelValues {
        inputs: canonical.clone(),
        output: cur,
    };
    let canonical = shapes_of(&canonical);
    let output = g.values[cur].phys.clone();
    let spec = WorkloadSpec::new(anchor, epilogue).with_prologue(prologue_ops(prologue));
    k.class = spec.op_class();
    k.inputs = canonical.clone();
    k.output = output.clone();
    k.layout = spec.anchor.layout(&canonical[0]);
    match spec.build(Era::V010, &canonical) {
        Ok(dag) => {
            let built = dag.io_shapes().last().cloned().unwrap_or_default();
            if built != output {
                return untunable(
                    k,
                    format!(
                        "ttdb's {} DAG gives output {built:?}, the graph has {output:?}",
                        spec.op_class()
                    ),
                );
            }
        }
        Err(e) => return untunable(k, format!("ttdb cannot build {}: {}", spec.op_class(), e.0)),
    }
    let sig = spec_signature(&spec, &canonical, &output);
    k.signature_hash = Some(sig.sha256_hex());
    k.signature = Some(sig);
    k.spec = Some(spec);
    k.kind = KernelKind::Tuned;
    k
}

/// The epilogue of a group as FuseOps formed it: its ops in topological order, each reading
/// the value before it and, for a binary op on two fused values, an earlier one
/// ([`EpilogueOp::Rejoin`]: diamonds such as `x * sigmoid(x)`). Returns the ops after
/// SimplifyExpr and the group's output value. An op whose only fused input is not the
/// value before it (two branches of unary ops) is refused: the registry has no such form.
fn walk_epilogue(
    g: &OpGraph,
    group: &[OpId],
    anchor_op: OpId,
    canonical: &mut Vec<ValId>,
) -> Result<(Vec<EpilogueOp>, usize), String> {
    let mut rest: Vec<OpId> = group.iter().copied().filter(|&o| o != anchor_op).collect();
    // ops are numbered in topological order
    rest.sort_unstable();
    // value -> its epilogue number (0: the anchor's output, i: after epilogue op i - 1)
    let mut number: HashMap<usize, usize> = HashMap::from([(g.ops[anchor_op].output, 0)]);
    let mut epilogue: Vec<EpilogueOp> = Vec::new();
    let (mut cur, mut latest) = (g.ops[anchor_op].output, 0);
    let mut visited = vec![anchor_op];
    for op in rest {
        let o = &g.ops[op];
        let fused: Vec<(usize, usize)> = o
            .inputs
            .iter()
            .enumerate()
            .filter_map(|(pos, v)| number.get(v).map(|&n| (pos, n)))
            .collect();
        let e = match fused.as_slice() {
            [] => continue, // reported below as fused outside the epilogue
            [(pos, n)] if *n == latest => {
                chain_op(g, group, op, *pos, epilogue.last().copied(), canonical)
                    .map_err(|e| at_node(o, e))?
            }
            [_, _] if fused.iter().any(|&(_, n)| n == latest) => {
                // the latest value is the op's own input; the other one is read again
                let (other_pos, with) = if fused[1].1 == latest {
                    fused[0]
                } else {
                    fused[1]
                };
                Some(rejoin_op(g, op, other_pos, with).map_err(|e| at_node(o, e))?)
            }
            _ => {
                return Err(format!(
                    "`{}` ({}) reads a fused value other than the one before it: a branch ttdb's epilogue cannot express",
                    o.nodes.first().map(String::as_str).unwrap_or("?"),
                    o.kind.name()
                ))
            }
        };
        visited.push(op);
        // None: SimplifyExpr removed it, its output is its input.
        if let Some(e) = e {
            epilogue.push(e);
            latest = epilogue.len();
        }
        number.insert(o.output, latest);
        cur = o.output;
    }
    if visited.len() != group.len() {
        let extra: Vec<String> = group
            .iter()
            .filter(|o| !visited.contains(o))
            .map(|&o| g.ops[o].kind.name())
            .collect();
        return Err(format!(
            "ops fused outside the anchor's epilogue chain: {}",
            extra.join(", ")
        ));
    }
    simplify_scalars(&mut epilogue);
    Ok((epilogue, cur))
}

/// Merges identical kernels (same signature, or same class / shapes for the others),
/// keeping first-occurrence order.
pub fn dedup(kernels: Vec<Kernel>) -> Vec<Kernel> {
    let mut out: Vec<Kernel> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for k in kernels {
        let key = k.dedup_key();
        match index.get(&key) {
            Some(&i) => out[i].occurrences.extend(k.occurrences),
            None => {
                index.insert(key, out.len());
                out.push(k);
            }
        }
    }
    out
}

/// `why`, naming the ONNX node of fused op `o` that causes it.
fn at_node(o: &super::relay::Op, why: String) -> String {
    format!(
        "node `{}` ({}): {why}",
        o.nodes.first().map(String::as_str).unwrap_or("?"),
        o.kind.name()
    )
}
