//! Graph-level NCHWc blocking: each conv's (ic_bn, oc_bn) chosen for the whole graph, as
//! NeoCPU (Liu et al., USENIX ATC'19) does, instead of one conv at a time as TopHub does.
//!
//! The cost of a choice is the convs' estimated time plus that of the layout transforms it
//! forces (a conv whose input block differs from its producer's output block needs one).
//! TopHub picks each conv's blocking alone, so ResNet-50 goes NCHW32c -> NCHW16c ->
//! NCHW64c in its first three kernels, and models whose convs TopHub lacks get the 4-lane
//! fallback rule on a 16-lane host.
//!
//! The search: start from the cheapest of TopHub's blocking and the uniform blockings (every
//! conv blocked by the largest divisor of its channels up to `b`, for `b` from 4 to twice
//! the host's lanes), then sweep the convs, trying each power-of-two block for a conv's
//! output together with the same block for the input of every conv that reads it (through
//! element-wise ops, pools and transforms), keeping a move when the estimate drops. Each
//! candidate is laid out by [`super::layout::assign`] itself, so the transforms counted are
//! the ones extraction will insert. Grouped convs, which TVM leaves NCHW, are blocked by
//! the uniform starts as grouped `conv2d_NCHWc` (blocks dividing a group's channels), so
//! the plan weighs them against the transforms around an NCHW one. NeoCPU's dynamic
//! programming over a chain is exact for chains; the sweep handles the residual and SE
//! branches of real graphs, which break chains.
//!
//! The estimate (documented, not measured): a conv takes the longer of its FLOPs at the
//! host's peak times the share of vector lanes its output block fills, and its bytes at the
//! memory bandwidth; a depthwise conv whose input and output blocks differ gathers its
//! input (half speed); a transform moves its tensor in and out at the bandwidth, after a
//! kernel launch.
//!
//! Measured costs ([`KernelCosts`], the caller's: ttdb's timings in the database) replace a
//! conv's estimate where its kernel under a candidate blocking has one. The estimate of
//! everything else is scaled by the measured convs' total time over their estimated total
//! (those of the starting blockings), so measured and estimated costs are in one unit; an
//! unmeasured conv also carries [`UNMEASURED_PREMIUM`], so that a blocking whose estimate
//! merely ties a measured one (32- and 16-blocks on 16 lanes) does not replace it.
use super::error::Result;
use super::fuse::fuse;
use super::kernel::{group_kernel, Kernel};
use super::layout::{assign, blocked_channels, Laid, LayoutOptions};
use super::relay::{LayoutRule, OpGraph, OpId, OpKind};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

/// Measured seconds of a kernel on the host the plan is for, where the caller has them.
pub trait KernelCosts {
    fn seconds(&self, kernel: &Kernel) -> Option<f64>;
}

/// What the estimate knows of the host.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostEstimates {
    /// fp32 SIMD lanes.
    pub lanes: i64,
    /// Peak fp32 GFLOP/s over the threads a run uses.
    pub gflops: f64,
    /// Memory bandwidth, GB/s.
    pub gbytes_per_s: f64,
    /// What launching one more kernel costs, seconds: a transform is a kernel of its own.
    pub launch_s: f64,
}

impl HostEstimates {
    /// `threads` cores with `lanes`-wide FMA units (two per core at ~2.5 GHz: what x86 cores
    /// of the last decade issue), ~10 GB/s of bandwidth per core, and 10 us per kernel (a
    /// small glue kernel's time in `ttdb run --repeat` on mobilenet_v3_small).
    pub fn typical(lanes: i64, threads: usize) -> HostEstimates {
        let t = threads.max(1) as f64;
        HostEstimates {
            lanes: lanes.max(1),
            gflops: lanes.max(1) as f64 * 2.0 * 2.0 * 2.5 * t,
            gbytes_per_s: 10.0 * t,
            launch_s: 10e-6,
        }
    }
}

/// A planned blocking and what it leaves.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LayoutPlan {
    /// Per NCHWc conv, by its ONNX node name: (ic_bn, oc_bn).
    pub blocking: BTreeMap<String, (i64, i64)>,
    /// Where the sweep started: `tophub` or `uniform <b>`.
    pub start: String,
    /// Layout transforms between ops (not at the graph's inputs or outputs), planned and
    /// with TopHub's blocking.
    pub transforms: usize,
    pub transforms_tophub: usize,
    /// The cost (milliseconds, convs plus transforms), planned and with TopHub's: measured
    /// where the caller had timings, else the estimate times `estimate_scale`.
    pub estimated_ms: f64,
    pub estimated_ms_tophub: f64,
    /// NCHWc convs, and those whose blocking differs from TopHub's.
    pub convs: usize,
    pub changed: usize,
    /// Convs of the plan whose cost was measured rather than estimated.
    #[serde(default)]
    pub measured_convs: usize,
    /// Measured over estimated time: the starting blockings' measured convs, their total
    /// over their estimate (1 when none was measured).
    #[serde(default = "one")]
    pub estimate_scale: f64,
    /// Where the plan came from, as its caller says (pinned when, planned now).
    #[serde(default)]
    pub origin: String,
}

fn one() -> f64 {
    1.0
}

/// Fraction of `lanes` vector lanes a block of `b` channels keeps busy.
fn lane_fill(b: i64, lanes: i64) -> f64 {
    let vectors = (b + lanes - 1) / lanes;
    b as f64 / (vectors * lanes) as f64
}

/// Whether a block of `b` channels is whole vectors of `lanes`, or a power-of-two part
/// of one. A depthwise conv has no reduction over channels to hide its loads behind: on a
/// 24-channel block of a 16-lane host every load and store is a 16- and an 8-lane one, and
/// mobilenet_v2's 144-channel depthwise conv at 56 x 56 ran at 14 GB/s in 24-blocks.
fn whole_vectors(b: i64, lanes: i64) -> bool {
    b % lanes == 0 || (lanes % b == 0 && (b as u64).is_power_of_two())
}

/// What an unmeasured conv costs over its scaled estimate once some convs are measured: a
/// measured kernel is replaced only by a blocking estimated to be clearly faster, not by
/// one whose estimate ties it (the estimate's error is larger than that).
pub const UNMEASURED_PREMIUM: f64 = 1.1;

/// One conv of a candidate: its estimated seconds, and its measured ones where known.
#[derive(Clone, Debug)]
struct ConvCost {
    /// (node, ic_bn, oc_bn): the same kernel in every candidate.
    kernel: Option<(String, i64, i64)>,
    estimated: f64,
    measured: Option<f64>,
}

/// How estimates are put in measured units.
#[derive(Clone, Copy, Debug)]
struct Scale {
    /// Measured over estimated time.
    ratio: f64,
    /// What an unmeasured conv costs over `ratio` times its estimate.
    unmeasured: f64,
}

/// The cost of a candidate blocking, before the estimate is scaled.
#[derive(Clone, Debug, Default)]
struct Breakdown {
    convs: Vec<ConvCost>,
    /// Estimated seconds of the layout transforms.
    transforms_s: f64,
    /// Transforms between ops (not at the graph's inputs or outputs).
    transforms: usize,
}

impl Breakdown {
    fn seconds(&self, scale: Scale) -> f64 {
        let convs: f64 = self
            .convs
            .iter()
            .map(|c| {
                c.measured
                    .unwrap_or(c.estimated * scale.ratio * scale.unmeasured)
            })
            .sum();
        convs + self.transforms_s * scale.ratio
    }

    fn measured(&self) -> usize {
        self.convs.iter().filter(|c| c.measured.is_some()).count()
    }
}

/// Measured conv costs by (node, ic_bn, oc_bn), asked of the caller once each: a conv's
/// kernel under a blocking is the same in every candidate.
struct Measured<'a> {
    costs: Option<&'a dyn KernelCosts>,
    known: RefCell<HashMap<(String, i64, i64), Option<f64>>>,
}

impl Measured<'_> {
    /// Measured seconds of conv `op` of `laid`, whose kernel there is `key`.
    fn of(
        &self,
        laid: &Laid,
        groups: &mut Option<Vec<Vec<OpId>>>,
        op: OpId,
        key: &(String, i64, i64),
    ) -> Option<f64> {
        let costs = self.costs?;
        if let Some(known) = self.known.borrow().get(key) {
            return *known;
        }
        let groups = groups.get_or_insert_with(|| fuse(&laid.graph));
        let seconds = groups
            .iter()
            .find(|g| g.contains(&op))
            .map(|g| group_kernel(&laid.graph, g, &laid.convs))
            .and_then(|k| costs.seconds(&k))
            .filter(|s| s.is_finite() && *s > 0.0);
        self.known.borrow_mut().insert(key.clone(), seconds);
        seconds
    }
}

/// The convs and layout transforms of `laid`, estimated (and measured where `measured` knows).
fn estimate(laid: &Laid, host: &HostEstimates, measured: &Measured) -> Breakdown {
    let g = &laid.graph;
    let elems = |v: usize| g.values[v].shape.iter().product::<i64>().max(0) as f64;
    let bandwidth = host.gbytes_per_s * 1e9;
    let mut out = Breakdown::default();
    let mut groups = None;
    for (i, op) in g.ops.iter().enumerate() {
        match &op.kind {
            OpKind::Conv { .. } => {
                let (x, w) = (op.inputs[0], op.inputs[1]);
                let ws = &g.values[w].shape;
                let outs = elems(op.output);
                let flops = 2.0 * outs * (ws[1] * ws[2] * ws[3]) as f64;
                let bytes = 4.0 * (elems(x) + outs + elems(w));
                let mut rate = host.gflops * 1e9;
                let mut bandwidth = bandwidth;
                if let Some(choice) = laid.convs.get(&i) {
                    // x86's grouped NCHW conv vectorizes its packing's output block
                    if let Some(p) = choice.group_packing {
                        rate *= lane_fill(p.oc_bn, host.lanes);
                    }
                    if let Some(b) = choice.blocking {
                        rate *= lane_fill(b.oc_bn, host.lanes);
                        if choice.depthwise && b.ic_bn != b.oc_bn {
                            rate *= 0.5;
                        }
                        if choice.depthwise && !whole_vectors(b.oc_bn, host.lanes) {
                            bandwidth *= 0.5;
                        }
                    }
                }
                let kernel = laid.convs.get(&i).and_then(|c| {
                    let b = c.blocking?;
                    Some((op.nodes.first()?.clone(), b.ic_bn, b.oc_bn))
                });
                let measured = kernel
                    .as_ref()
                    .and_then(|k| measured.of(laid, &mut groups, i, k));
                out.convs.push(ConvCost {
                    kernel,
                    estimated: (flops / rate).max(bytes / bandwidth),
                    measured,
                });
            }
            OpKind::LayoutTransform { .. } => {
                let src = op.inputs[0];
                let between_ops = g.values[src].producer.is_some()
                    && !g.outputs.contains(&op.output)
                    && !g.values[src].constant;
                if between_ops {
                    out.transforms += 1;
                }
                out.transforms_s += 8.0 * elems(src) / bandwidth + host.launch_s;
            }
            _ => {}
        }
    }
    out
}

/// Estimates in measured units: the measured convs of `starts` (each kernel once), their
/// measured total over their estimated total; 1 and no premium when none is measured.
fn estimate_scale(starts: &[&Breakdown]) -> Scale {
    let mut seen = std::collections::HashSet::new();
    let (mut measured, mut estimated) = (0.0, 0.0);
    for c in starts.iter().flat_map(|b| b.convs.iter()) {
        if let (Some(m), Some(k)) = (c.measured, &c.kernel) {
            if c.estimated > 0.0 && seen.insert(k) {
                measured += m;
                estimated += c.estimated;
            }
        }
    }
    if estimated > 0.0 && measured > 0.0 {
        Scale {
            ratio: measured / estimated,
            unmeasured: UNMEASURED_PREMIUM,
        }
    } else {
        Scale {
            ratio: 1.0,
            unmeasured: 1.0,
        }
    }
}

/// The blocking each NCHWc conv got in `laid`, by node name.
fn blocking_of(laid: &Laid) -> BTreeMap<String, (OpId, i64, i64)> {
    let mut out = BTreeMap::new();
    for (&op, choice) in &laid.convs {
        if let (Some(b), Some(node)) = (choice.blocking, laid.graph.ops[op].nodes.first()) {
            out.insert(node.clone(), (op, b.ic_bn, b.oc_bn));
        }
    }
    out
}

/// The convs (ops of `laid`) whose data input is `conv`'s output, reached through ops that
/// keep their input's layout and through layout transforms (`consumers`: the graph's).
fn reading_convs(laid: &Laid, consumers: &[Vec<(OpId, usize)>], conv: OpId) -> Vec<OpId> {
    let g = &laid.graph;
    let mut seen = vec![false; g.values.len()];
    let mut stack = vec![g.ops[conv].output];
    let mut out = Vec::new();
    while let Some(v) = stack.pop() {
        if std::mem::replace(&mut seen[v], true) {
            continue;
        }
        for &(c, slot) in &consumers[v] {
            let op = &g.ops[c];
            match op.kind.layout_rule() {
                LayoutRule::Conv if slot == 0 => out.push(c),
                LayoutRule::FollowsData | LayoutRule::Broadcast => stack.push(op.output),
                _ if matches!(op.kind, OpKind::LayoutTransform { .. }) => stack.push(op.output),
                _ => {}
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The channels conv op `op` of `laid` blocks: (in, out); a grouped conv's, per group.
fn channels(laid: &Laid, op: OpId) -> (i64, i64) {
    let g = &laid.graph;
    let ws = &g.values[g.ops[op].inputs[1]].shape;
    let xs = &g.values[g.ops[op].inputs[0]].shape;
    let groups = match g.ops[op].kind {
        OpKind::Conv { groups, .. } => groups,
        _ => 1,
    };
    blocked_channels(xs, ws, groups)
}

/// Which convs a candidate layout blocks and how.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Start {
    /// TopHub's config, else the fallback rule; grouped convs NCHW.
    TopHub,
    /// The fallback rule for every conv, grouped ones too.
    Uniform,
    /// The blocking named; grouped convs it does not name stay NCHW.
    Named,
}

/// Plans the NCHWc blocking of `src` (an op graph before layout selection) for `host`.
/// `base` is TopHub's configuration (its `blocking` overrides are kept as they are);
/// `costs`, where given, are measured kernel times that replace the estimate.
pub fn plan(
    src: &OpGraph,
    base: &LayoutOptions,
    host: &HostEstimates,
    costs: Option<&dyn KernelCosts>,
) -> Result<LayoutPlan> {
    let measured = Measured {
        costs,
        known: RefCell::new(HashMap::new()),
    };
    // TopHub's start keeps grouped convs NCHW as TVM does; the uniform starts block them
    // too; later layouts block exactly the convs their blocking names.
    let lay = |blocking: &HashMap<String, (i64, i64)>, start: Start, lanes: i64| {
        let opts = LayoutOptions {
            mode: base.mode,
            lanes,
            tophub: (start == Start::TopHub).then_some(base.tophub).flatten(),
            blocking,
            grouped_nchwc: start == Start::Uniform,
        };
        assign(src, &opts)
    };
    let as_map = |laid: &Laid| -> HashMap<String, (i64, i64)> {
        let mut m: HashMap<String, (i64, i64)> = blocking_of(laid)
            .into_iter()
            .map(|(n, (_, ic, oc))| (n, (ic, oc)))
            .collect();
        m.extend(base.blocking.iter().map(|(k, v)| (k.clone(), *v)));
        m
    };

    // Starts: TopHub's blocking and the uniform ones; they also calibrate the estimate.
    let tophub = lay(base.blocking, Start::TopHub, base.lanes)?;
    let tophub_cost = estimate(&tophub, host, &measured);
    let tophub_blocking = blocking_of(&tophub);
    let mut starts = vec![(as_map(&tophub), tophub_cost.clone(), "tophub".to_string())];
    let mut b = 4;
    while b <= 2 * host.lanes.max(4) {
        let laid = lay(base.blocking, Start::Uniform, b)?;
        starts.push((
            as_map(&laid),
            estimate(&laid, host, &measured),
            format!("uniform {b}"),
        ));
        b *= 2;
    }
    let scale = estimate_scale(&starts.iter().map(|s| &s.1).collect::<Vec<_>>());
    let mut best = 0;
    for (i, s) in starts.iter().enumerate() {
        if s.1.seconds(scale) < starts[best].1.seconds(scale) * 0.999 {
            best = i;
        }
    }
    let (mut blocking, start_cost, start) = starts.swap_remove(best);
    let mut cost = start_cost.seconds(scale);

    // Sweeps: a conv's output block and the input block of the convs reading it, together.
    let fixed = |node: &str| base.blocking.contains_key(node);
    for _sweep in 0..3 {
        let mut improved = false;
        let laid = lay(&blocking, Start::Named, base.lanes)?;
        let consumers = laid.graph.consumers();
        let convs = blocking_of(&laid);
        for (node, &(op, _, _)) in &convs {
            if fixed(node) {
                continue;
            }
            let (_, cout) = channels(&laid, op);
            let readers: Vec<(String, i64)> = reading_convs(&laid, &consumers, op)
                .into_iter()
                .filter_map(|r| {
                    let n = laid.graph.ops[r].nodes.first()?.clone();
                    convs.contains_key(&n).then(|| (n, channels(&laid, r).0))
                })
                .filter(|(n, _)| !fixed(n))
                .collect();
            let mut cand = 4;
            while cand <= 64 {
                // the current block too: readers that block its output otherwise align
                if cout % cand == 0 {
                    let mut trial = blocking.clone();
                    if let Some(e) = trial.get_mut(node) {
                        e.1 = cand;
                        if laid.convs[&op].depthwise {
                            e.0 = cand;
                        }
                    }
                    for (r, cin) in &readers {
                        if cin % cand == 0 {
                            if let Some(e) = trial.get_mut(r) {
                                e.0 = cand;
                            }
                        }
                    }
                    let s = estimate(&lay(&trial, Start::Named, base.lanes)?, host, &measured)
                        .seconds(scale);
                    if s < cost * 0.999 {
                        blocking = trial;
                        cost = s;
                        improved = true;
                    }
                }
                cand *= 2;
            }
        }
        if !improved {
            break;
        }
    }
    let planned = lay(&blocking, Start::Named, base.lanes)?;
    let planned_cost = estimate(&planned, host, &measured);
    let planned_blocking = blocking_of(&planned);
    let changed = planned_blocking
        .iter()
        .filter(|(n, (_, ic, oc))| {
            tophub_blocking
                .get(*n)
                .is_none_or(|(_, tic, toc)| (tic, toc) != (ic, oc))
        })
        .count();
    Ok(LayoutPlan {
        blocking: blocking.into_iter().collect(),
        start,
        transforms: planned_cost.transforms,
        transforms_tophub: tophub_cost.transforms,
        estimated_ms: planned_cost.seconds(scale) * 1e3,
        estimated_ms_tophub: tophub_cost.seconds(scale) * 1e3,
        convs: planned_blocking.len(),
        changed,
        measured_convs: planned_cost.measured(),
        estimate_scale: scale.ratio,
        origin: "planned now".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_vectors_are_multiples_or_power_of_two_parts() {
        assert!(whole_vectors(16, 16) && whole_vectors(32, 16) && whole_vectors(8, 16));
        assert!(!whole_vectors(24, 16) && !whole_vectors(12, 16) && !whole_vectors(29, 16));
        assert!(whole_vectors(24, 8) && !whole_vectors(12, 8));
    }

    #[test]
    fn lane_fill_counts_the_vectors_a_block_needs() {
        assert_eq!(lane_fill(16, 16), 1.0);
        assert_eq!(lane_fill(32, 16), 1.0);
        assert_eq!(lane_fill(4, 16), 0.25);
        assert_eq!(lane_fill(24, 16), 0.75);
        assert_eq!(lane_fill(8, 8), 1.0);
    }
}
