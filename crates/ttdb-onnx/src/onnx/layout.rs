//! Layout selection, as TVM does it before FuseOps, by each op's
//! [`LayoutRule`](super::relay::LayoutRule):
//!
//! * [`LayoutMode::Nchwc`]: x86 `AlterOpLayout`. Every conv becomes `conv2d_NCHWc` (data
//!   `NCHW{ic_bn}c`, kernel `OIHW{ic_bn}i{oc_bn}o`, output `NCHW{oc_bn}c`), depthwise convs
//!   `depthwise_conv2d_NCHWc` (kernel `OIHW1i{oc_bn}o`); grouped convs stay NCHW (x86's
//!   grouped spatial pack) unless the caller blocks them ([`LayoutOptions::grouped_nchwc`],
//!   or a blocking named for the conv): then they become TVM's grouped `conv2d_NCHWc`
//!   (v0.10 on), whose blocks divide each group's channels. Blocks come from a per-conv
//!   override, else the TopHub config, else the fallback rule ([`super::tophub`]). Pools
//!   and element-wise ops keep their producer's layout; a binary op takes its first
//!   operand's layout (BinaryBroadcastLayout); concat keeps a common input
//!   layout or falls back to NCHW; everything else wants NCHW. Where a consumer wants another
//!   layout than its producer gives, one `layout_transform` op is inserted (constants are
//!   re-laid-out at compile time and need none).
//! * [`LayoutMode::Nhwc`]: `ConvertLayout({"nn.conv2d": ["NHWC", "default"]})`: kernels HWIO
//!   (depthwise HWOI); 3x3 stride-1 convs with 64 < CO < 512 become winograd NHWC with the
//!   pre-transformed `[6, 6, CO, CI]` kernel (tile size 4), like the x86 auto-scheduler path.
//! * [`LayoutMode::Nchw`]: no layout change (plain `conv2d_nchw`).
use super::error::{OnnxError, Result};
use super::relay::{
    ConstOp, ConvWeightLayout, Derived, Layout, LayoutRule, OpGraph, OpId, OpKind, ValId,
};
use super::tophub::{fallback_blocking, ConvWorkload, TopHub};
use std::collections::HashMap;
use ttdb_algo::ops::group_conv2d_nchw::GroupBlocking;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LayoutMode {
    Nchwc,
    Nhwc,
    Nchw,
}

impl LayoutMode {
    pub fn parse(s: &str) -> Option<LayoutMode> {
        match s.to_ascii_lowercase().as_str() {
            "nchwc" => Some(LayoutMode::Nchwc),
            "nhwc" => Some(LayoutMode::Nhwc),
            "nchw" => Some(LayoutMode::Nchw),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LayoutMode::Nchwc => "nchwc",
            LayoutMode::Nhwc => "nhwc",
            LayoutMode::Nchw => "nchw",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockingSource {
    TopHub,
    Fallback,
    /// Chosen by the caller ([`super::Options::blocking`]).
    Override,
}

/// Channel blocking of one NCHWc conv.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Blocking {
    pub ic_bn: i64,
    pub oc_bn: i64,
    pub source: BlockingSource,
}

/// How a conv op was laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvChoice {
    pub blocking: Option<Blocking>,
    pub depthwise: bool,
    pub winograd: bool,
    /// A grouped conv kept in NCHW: x86's `group_conv2d_nchw.x86` packs it in these blocks.
    pub group_packing: Option<GroupBlocking>,
}

pub struct LayoutOptions<'a> {
    pub mode: LayoutMode,
    pub lanes: i64,
    pub tophub: Option<&'a TopHub>,
    /// Per conv (by the ONNX node name of the conv): (ic_bn, oc_bn). A grouped conv named
    /// here is blocked (grouped `conv2d_NCHWc`) with blocks dividing its groups' channels.
    pub blocking: &'a HashMap<String, (i64, i64)>,
    /// Whether grouped convs the caller names no blocking for are blocked too, by the
    /// fallback rule on their groups' channels: the layout planner's candidates. TVM's
    /// AlterOpLayout leaves them NCHW, so TopHub's choice keeps this off.
    pub grouped_nchwc: bool,
}

/// The op graph after layout selection: physical shapes, inserted transforms.
pub struct Laid {
    pub graph: OpGraph,
    pub convs: HashMap<OpId, ConvChoice>,
}

struct Pass<'a> {
    src: &'a OpGraph,
    opts: &'a LayoutOptions<'a>,
    out: OpGraph,
    /// old value -> new value in its own layout
    map: Vec<Option<ValId>>,
    /// (new value, layout) -> converted new value
    converted: HashMap<(ValId, Layout), ValId>,
    convs: HashMap<OpId, ConvChoice>,
}

/// Whether a conv of `groups` on data `[N, C, H, W]` with weight `[O, C/groups, KH, KW]` is
/// depthwise (one channel a group, as many out as in).
pub(super) fn is_depthwise(data: &[i64], weight: &[i64], groups: i64) -> bool {
    groups > 1 && groups == data[1] && weight[0] == data[1] && weight[1] == 1
}

/// The channels an NCHWc blocking of such a conv must divide: (in, out); a grouped (not
/// depthwise) conv's are a group's.
pub(super) fn blocked_channels(data: &[i64], weight: &[i64], groups: i64) -> (i64, i64) {
    if groups > 1 && !is_depthwise(data, weight, groups) {
        (weight[1], weight[0] / groups)
    } else {
        (data[1], weight[0])
    }
}

/// Is a constant of `shape` (numpy-broadcast, right-aligned) a per-channel vector for an
/// NCHW `out` (`[C,1,1]`, `[1,C,1,1]`; a bias_add `[C]` is lowered to `[1,C,1,1]`)?
pub fn is_channel_vector(shape: &[i64], out: &[i64]) -> bool {
    if out.len() != 4 || shape.len() > 4 || shape.is_empty() {
        return false;
    }
    let mut s = vec![1; 4 - shape.len()];
    s.extend_from_slice(shape);
    s[0] == 1 && s[2] == 1 && s[3] == 1 && s[1] == out[1] && out[1] > 1
}

impl<'a> Pass<'a> {
    fn new_value(&mut self, old: ValId) -> ValId {
        if let Some(v) = self.map[old] {
            return v;
        }
        let src = &self.src.values[old];
        let v = self
            .out
            .add_value(src.name.clone(), src.shape.clone(), src.constant);
        self.out.values[v].data = src.data.clone();
        self.out.values[v].dtype = src.dtype;
        self.out.values[v].channel_vector = src.channel_vector;
        self.map[old] = Some(v);
        if let Some(d) = self.src.values[old].derived {
            let from = self.new_value(d.from);
            let op = match d.op {
                ConstOp::Scale(c) => ConstOp::Scale(self.new_value(c)),
                op => op,
            };
            self.out.values[v].derived = Some(Derived { from, op });
        }
        v
    }

    /// `v` (a new value) in layout `want`; inserts one layout_transform per (value, layout).
    fn as_layout(&mut self, v: ValId, want: Layout, nodes: &[String]) -> ValId {
        let have = self.out.values[v].layout;
        let rank = self.out.values[v].shape.len();
        if have == want || rank != 4 {
            return v;
        }
        if let Some(&c) = self.converted.get(&(v, want)) {
            return c;
        }
        let shape = self.out.values[v].shape.clone();
        let name = format!("{}::{}", self.out.values[v].name, want.name(4));
        let c = if self.out.values[v].constant {
            self.out
                .derive_const(v, ConstOp::Relayout, name, shape.clone())
        } else {
            self.out.add_op(
                OpKind::LayoutTransform {
                    src: have,
                    dst: want,
                },
                vec![v],
                name,
                shape.clone(),
                nodes.to_vec(),
            )
        };
        self.out.values[c].layout = want;
        self.out.values[c].phys = want.physical(&shape);
        self.converted.insert((v, want), c);
        c
    }

    /// A constant operand of an element-wise op whose output is laid out as `layout`.
    fn const_operand(&mut self, v: ValId, layout: Layout, out_shape: &[i64]) -> ValId {
        let shape = self.out.values[v].shape.clone();
        if layout == Layout::Plain {
            if is_channel_vector(&shape, out_shape) {
                // canonicalized bias: full rank [1, C, 1, 1]
                let c = self.out.derive_const(
                    v,
                    ConstOp::Reshape,
                    self.out.values[v].name.clone(),
                    vec![1, out_shape[1], 1, 1],
                );
                return c;
            }
            return v;
        }
        let phys = if is_channel_vector(&shape, out_shape) {
            let chan = vec![1, out_shape[1], 1, 1];
            Some(layout.physical(&chan))
        } else if shape.as_slice() == out_shape {
            Some(layout.physical(&shape))
        } else {
            None
        };
        match phys {
            Some(p) => {
                let name = format!("{}::{}", self.out.values[v].name, layout.name(4));
                let c = self.out.derive_const(v, ConstOp::Relayout, name, shape);
                self.out.values[c].layout = layout;
                self.out.values[c].phys = p;
                c
            }
            None => v,
        }
    }

    /// A conv's blocking; `in_c` and `out_c` are the channels its blocks must divide (a
    /// group's, for a grouped conv). `wkl` is what TopHub is asked, if anything.
    fn blocking(
        &self,
        op_nodes: &[String],
        wkl: Option<ConvWorkload>,
        in_c: i64,
        out_c: i64,
    ) -> Result<Blocking> {
        if let Some(&(ic_bn, oc_bn)) = op_nodes.first().and_then(|n| self.opts.blocking.get(n)) {
            if ic_bn <= 0 || oc_bn <= 0 || in_c % ic_bn != 0 || out_c % oc_bn != 0 {
                return Err(OnnxError::Layout(format!(
                    "blocking ({ic_bn}, {oc_bn}) for conv `{}` does not divide its channels ({in_c} in, {out_c} out{})",
                    op_nodes[0],
                    if wkl.is_none() { " per group" } else { "" }
                )));
            }
            return Ok(Blocking {
                ic_bn,
                oc_bn,
                source: BlockingSource::Override,
            });
        }
        if let Some((ic_bn, oc_bn)) = wkl.and_then(|w| self.opts.tophub?.lookup(&w)) {
            if in_c % ic_bn == 0 && out_c % oc_bn == 0 {
                return Ok(Blocking {
                    ic_bn,
                    oc_bn,
                    source: BlockingSource::TopHub,
                });
            }
        }
        let (ic_bn, oc_bn) = fallback_blocking(in_c, out_c, self.opts.lanes);
        Ok(Blocking {
            ic_bn,
            oc_bn,
            source: BlockingSource::Fallback,
        })
    }

    fn emit(&mut self, old_op: OpId, kind: OpKind, inputs: Vec<ValId>, layout: Layout) -> ValId {
        let op = &self.src.ops[old_op];
        let ov = &self.src.values[op.output];
        let layout = if ov.shape.len() == 4 {
            layout
        } else {
            Layout::Plain
        };
        let v = self.out.add_op(
            kind,
            inputs,
            ov.name.clone(),
            ov.shape.clone(),
            op.nodes.clone(),
        );
        self.out.values[v].layout = layout;
        self.out.values[v].phys = layout.physical(&ov.shape);
        self.out.values[v].dtype = ov.dtype;
        self.map[op.output] = Some(v);
        v
    }

    fn conv(&mut self, i: OpId) -> Result<()> {
        let op = self.src.ops[i].clone();
        let OpKind::Conv { window, groups } = op.kind else {
            unreachable!("conv op")
        };
        let x = self.new_value(op.inputs[0]);
        let w = self.new_value(op.inputs[1]);
        let xs = self.out.values[x].shape.clone();
        let ws = self.out.values[w].shape.clone();
        let (cin, cout) = (xs[1], ws[0]);
        let depthwise = is_depthwise(&xs, &ws, groups);
        let grouped = groups > 1 && !depthwise;
        let named = op
            .nodes
            .first()
            .is_some_and(|n| self.opts.blocking.contains_key(n));
        let blocked = !grouped || named || self.opts.grouped_nchwc;
        let mut choice = ConvChoice {
            blocking: None,
            depthwise,
            winograd: false,
            group_packing: None,
        };
        let (data, weight_phys, out_layout, packing) = match self.opts.mode {
            LayoutMode::Nchwc if blocked => {
                let wkl = (!grouped).then(|| ConvWorkload {
                    template: if depthwise {
                        "depthwise_conv2d_NCHWc.x86"
                    } else {
                        "conv2d_NCHWc.x86"
                    }
                    .into(),
                    data: xs.clone(),
                    kernel: ws.clone(),
                    strides: window.stride,
                    padding: window.padding,
                    dilation: window.dilation,
                });
                let (in_c, out_c) = blocked_channels(&xs, &ws, groups);
                let b = self.blocking(&op.nodes, wkl, in_c, out_c)?;
                choice.blocking = Some(b);
                let data = self.as_layout(x, Layout::Nchwc(b.ic_bn), &op.nodes);
                let (wp, packing) = if depthwise {
                    (
                        vec![cout / b.oc_bn, 1, ws[2], ws[3], 1, b.oc_bn],
                        ConvWeightLayout::DepthwiseNchwc { oc_bn: b.oc_bn },
                    )
                } else {
                    (
                        vec![
                            cout / b.oc_bn,
                            ws[1] / b.ic_bn,
                            ws[2],
                            ws[3],
                            b.ic_bn,
                            b.oc_bn,
                        ],
                        ConvWeightLayout::Nchwc {
                            ic_bn: b.ic_bn,
                            oc_bn: b.oc_bn,
                        },
                    )
                };
                (data, wp, Layout::Nchwc(b.oc_bn), packing)
            }
            LayoutMode::Nhwc => {
                let data = self.as_layout(x, Layout::Nhwc, &op.nodes);
                let winograd = groups == 1
                    && ws[2] == 3
                    && ws[3] == 3
                    && window.stride == [1, 1]
                    && window.dilation == [1, 1]
                    && cout > 64
                    && cout < 512;
                choice.winograd = winograd;
                let (wp, packing) = if winograd {
                    (vec![6, 6, cout, cin], ConvWeightLayout::Winograd)
                } else if depthwise {
                    (vec![ws[2], ws[3], cout, 1], ConvWeightLayout::DepthwiseHwo1)
                } else {
                    (vec![ws[2], ws[3], ws[1], cout], ConvWeightLayout::Hwio)
                };
                (data, wp, Layout::Nhwc, packing)
            }
            _ => {
                if groups > 1 && !depthwise {
                    // AutoTVM's fallback config: Ansor tunes the template without a log
                    choice.group_packing = Some(GroupBlocking::fallback(
                        self.opts.lanes,
                        ws[1],
                        cout / groups,
                    ));
                }
                let data = self.as_layout(x, Layout::Plain, &op.nodes);
                (data, ws.clone(), Layout::Plain, ConvWeightLayout::Oihw)
            }
        };
        let wv = if self.out.values[w].constant {
            let name = self.out.values[w].name.clone();
            let c = self
                .out
                .derive_const(w, ConstOp::ConvWeight(packing), name, ws.clone());
            self.out.values[c].phys = weight_phys;
            c
        } else {
            // a run-time weight is packed by a layout_transform kernel
            let name = format!("{}::packed", self.out.values[w].name);
            let c = self.out.add_op(
                OpKind::LayoutTransform {
                    src: Layout::Plain,
                    dst: out_layout,
                },
                vec![w],
                name,
                ws.clone(),
                op.nodes.clone(),
            );
            self.out.values[c].phys = weight_phys;
            c
        };
        self.emit(i, op.kind.clone(), vec![data, wv], out_layout);
        let new_id = self.out.ops.len() - 1;
        self.convs.insert(new_id, choice);
        Ok(())
    }

    fn op(&mut self, i: OpId) -> Result<()> {
        let op = self.src.ops[i].clone();
        match op.kind.layout_rule() {
            LayoutRule::Conv => return self.conv(i),
            LayoutRule::FollowsData => {
                let x = self.new_value(op.inputs[0]);
                let l = self.out.values[x].layout;
                let mut ins = vec![x];
                for &extra in &op.inputs[1..] {
                    let e = self.new_value(extra);
                    ins.push(self.as_layout(e, Layout::Plain, &op.nodes));
                }
                self.emit(i, op.kind.clone(), ins, l);
            }
            LayoutRule::Broadcast => {
                let ins: Vec<ValId> = op.inputs.iter().map(|&v| self.new_value(v)).collect();
                let out_shape = self.src.values[op.output].shape.clone();
                let tensors: Vec<usize> = (0..ins.len())
                    .filter(|&k| !self.out.values[ins[k]].constant)
                    .collect();
                // BinaryBroadcastLayout keeps a blocked layout for operands of the output's
                // rank that broadcast on spatial axes only (SE gates `[1, C, 1, 1]`)
                let rank_ok = tensors.iter().all(|&k| {
                    let s = &self.out.values[ins[k]].shape;
                    s.len() == out_shape.len()
                        && s.iter()
                            .zip(&out_shape)
                            .enumerate()
                            .all(|(axis, (&d, &o))| d == o || (d == 1 && axis != 1))
                });
                let mut layout = match tensors.first() {
                    Some(&k) if rank_ok => self.out.values[ins[k]].layout,
                    _ => Layout::Plain,
                };
                if out_shape.len() != 4 {
                    layout = Layout::Plain;
                }
                // constants that cannot follow a blocked layout force NCHW
                let consts_ok = ins
                    .iter()
                    .filter(|&&v| self.out.values[v].constant)
                    .all(|&v| {
                        let s = &self.out.values[v].shape;
                        is_channel_vector(s, &out_shape)
                            || s.as_slice() == out_shape.as_slice()
                            || s.iter().all(|&d| d == 1)
                    });
                if !consts_ok {
                    layout = Layout::Plain;
                }
                let mut new_ins = Vec::with_capacity(ins.len());
                for &v in &ins {
                    let nv = if self.out.values[v].constant {
                        self.const_operand(v, layout, &out_shape)
                    } else {
                        self.as_layout(v, layout, &op.nodes)
                    };
                    new_ins.push(nv);
                }
                self.emit(i, op.kind.clone(), new_ins, layout);
            }
            LayoutRule::Concat => {
                let ins: Vec<ValId> = op.inputs.iter().map(|&v| self.new_value(v)).collect();
                let layouts: Vec<Layout> = ins.iter().map(|&v| self.out.values[v].layout).collect();
                let l = if layouts.iter().all(|&l| l == layouts[0])
                    && ins.iter().all(|&v| !self.out.values[v].constant)
                {
                    layouts[0]
                } else {
                    Layout::Plain
                };
                let new_ins: Vec<ValId> = ins
                    .iter()
                    .map(|&v| self.as_layout(v, l, &op.nodes))
                    .collect();
                self.emit(i, op.kind.clone(), new_ins, l);
            }
            LayoutRule::Logical => {
                let ins: Vec<ValId> = op.inputs.iter().map(|&v| self.new_value(v)).collect();
                let new_ins: Vec<ValId> = ins
                    .iter()
                    .map(|&v| self.as_layout(v, Layout::Plain, &op.nodes))
                    .collect();
                self.emit(i, op.kind.clone(), new_ins, Layout::Plain);
            }
        }
        Ok(())
    }
}

/// Assigns layouts and inserts layout transforms.
pub fn assign(src: &OpGraph, opts: &LayoutOptions) -> Result<Laid> {
    let mut p = Pass {
        src,
        opts,
        out: OpGraph::default(),
        map: vec![None; src.values.len()],
        converted: HashMap::new(),
        convs: HashMap::new(),
    };
    for &v in &src.inputs {
        let nv = p.new_value(v);
        p.out.inputs.push(nv);
    }
    for i in 0..src.ops.len() {
        p.op(i)?;
    }
    for &v in &src.outputs {
        let nv = p.new_value(v);
        // graph outputs are returned in their original layout
        let back = p.as_layout(
            nv,
            Layout::Plain,
            &[format!("output {}", src.values[v].name)],
        );
        // the graph output keeps its ONNX name (a run writes it under that name); a constant
        // keeps its own, which is how its values are found
        if back != nv && !p.out.values[nv].constant {
            let (a, b) = (
                p.out.values[nv].name.clone(),
                p.out.values[back].name.clone(),
            );
            p.out.values[nv].name = b;
            p.out.values[back].name = a;
        }
        p.out.outputs.push(back);
    }
    Ok(Laid {
        graph: p.out,
        convs: p.convs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_vectors() {
        assert!(
            !is_channel_vector(&[64], &[1, 64, 56, 56]),
            "[C] broadcasts along W"
        );
        assert!(is_channel_vector(&[64, 1, 1], &[1, 64, 56, 56]));
        assert!(is_channel_vector(&[1, 64, 1, 1], &[1, 64, 56, 56]));
        assert!(!is_channel_vector(&[56], &[1, 64, 56, 56]));
        assert!(!is_channel_vector(&[1, 64, 56, 56], &[1, 64, 56, 56]));
    }

    #[test]
    fn physical_shapes() {
        assert_eq!(
            Layout::Nchwc(32).physical(&[1, 64, 56, 56]),
            [1, 2, 56, 56, 32]
        );
        assert_eq!(Layout::Nhwc.physical(&[1, 64, 56, 56]), [1, 56, 56, 64]);
        assert_eq!(Layout::Plain.physical(&[1, 1000]), [1, 1000]);
    }
}
