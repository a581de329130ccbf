//! Ansor's layout rewrite, option 2 `RewriteForPreTransformed` (spec §4.8; TVM v0.18
//! `compute_dag.cc`: `ComputeDAG::RewriteLayout`, `GetOrigLayout`, `GetNewLayout`,
//! `IndexRewriter`; TOPI `auto_scheduler_layout_transform`).
//!
//! Relay-extracted tasks were measured with their layout-free weights (the placeholders a
//! conv2d NHWC, dense / matmul, batch_matmul or winograd bgemm declares in
//! `layout_free_placeholders`) already packed into the layout the final schedule walks: the
//! packing is a constant-folded transform outside the timed kernel. This module derives that
//! layout from the replayed state the way TVM does, rewrites the kernel's loads of the weight
//! ([`PackedWeight::index`], TVM's `IndexRewriter`: `(idx / div) % extent` per new dimension)
//! and packs a weight in plain Rust ([`pack_weight`]).
//!
//! The layout (`GetNewLayout`): the loops of the stage that reads the weight directly and
//! carries the attribute (after cache_write the `.local` stage; cache_read and rfactor stages
//! carry none, so those schedules keep the original layout), preceded by the attach target's
//! loops up to the attach point when that stage is computed at a loop; fused loops expand to
//! the loops they fused (with the extents those had when they were fused, 1 when undefined);
//! every loop whose original axis (`AxisBaseName` of its name) indexes the weight becomes a
//! dimension `<extent><axis>`, outer to inner, with the extent bound inference gives it. The
//! attach target's loops take the axis name of the consumer's loop at the same position
//! (`new_axis_names[i + iters_before_attach]`: the target's `ax3.0` of a relu stands for the
//! conv's `ff.0`).
//!
//! Where TVM's derivation would abort (index expressions that are not plain axis variables,
//! an axis used twice, nested fused names), [`derive`] returns [`LowerError::Unsupported`].
//! A derived layout whose extents for some axis multiply to less than that axis's extent
//! would alias weight elements (TVM computed it regardless, without checking results): it is
//! refused too, so a pre-packed kernel is always exact.
use super::bound::{interval, Bounds};
use super::convert;
use super::LowerError;
use crate::loopnest::{BinOp, Expr};
use std::collections::{HashMap, HashSet};
use std::fmt;
use ttdb_algo::ir::eval::TensorData;
use ttdb_algo::ir::{self, Dag, TensorId};
use ttdb_algo::schedule::te::{LOp, TSchedule};
use ttdb_algo::schedule::State;

/// Which layout the layout-free weights have in the kernel's parameters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum WeightLayoutMode {
    /// The DAG's layout (layout rewrite option 0).
    #[default]
    Original,
    /// Pre-packed into the layout the final state derives (option 2, what TVM measured for
    /// relay tasks on llvm). DAGs without layout-free placeholders are unaffected.
    PrePacked,
}

/// One dimension of a packed weight: `(original index along axis / div) % extent`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedDim {
    /// The weight dimension (in the DAG's layout) this one slices.
    pub axis: usize,
    /// Axis base name (`ff`, `rc`, `j`).
    pub name: String,
    pub extent: i64,
    /// Product of the extents of the inner dimensions slicing the same axis.
    pub div: i64,
}

/// Two weight dimensions that one axis `v` indexes as `floordiv(v, block)` (outer) and
/// `floormod(v, block)` (inner): an NCHWc kernel's input-channel chunk and block. The packed
/// layout slices `v` itself, so its dimensions name the outer dimension and none the inner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitAxis {
    pub outer: usize,
    pub inner: usize,
    pub block: i64,
}

/// A layout-free weight and the layout it is packed into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedWeight {
    /// The DAG placeholder.
    pub tensor: TensorId,
    /// Its position among the DAG's placeholders (= among the kernel's inputs).
    pub input: usize,
    /// The stage whose loops define the layout (`conv2d_nhwc`, `T_matmul_NT.local`).
    pub consumer: String,
    pub orig_shape: Vec<i64>,
    /// Axis name per original dimension (`IntImm` for a dimension indexed by a constant 0).
    pub orig_names: Vec<String>,
    /// Outer to inner.
    pub dims: Vec<PackedDim>,
    /// A dimension pair read through one split axis (NCHWc kernels; TVM's layout-free
    /// weights have none).
    pub split: Option<SplitAxis>,
}

impl PackedWeight {
    /// The packed shape, outer to inner.
    pub fn shape(&self) -> Vec<i64> {
        self.dims.iter().map(|d| d.extent).collect()
    }

    /// TVM's layout string of the original layout (`1ry1rx1024rc512ff`).
    pub fn orig_layout(&self) -> String {
        self.orig_shape
            .iter()
            .zip(&self.orig_names)
            .map(|(e, n)| format!("{e}{n}"))
            .collect()
    }

    /// TVM's layout string of the packed layout (`2ff32ff1ry1rx128rc1ff1ry1rx8rc8ff`).
    pub fn new_layout(&self) -> String {
        self.dims
            .iter()
            .map(|d| format!("{}{}", d.extent, d.name))
            .collect()
    }

    /// The extent of the axis that dimension `axis` stands for: a split pair's outer one
    /// stands for the whole axis.
    fn axis_extent(&self, axis: usize) -> i64 {
        let e = self.orig_shape[axis];
        match self.split {
            Some(s) if s.outer == axis => e.saturating_mul(s.block),
            _ => e,
        }
    }

    /// The packed coordinates of an access given in the DAG's coordinates (`IndexRewriter`).
    pub fn index(&self, idx: &[Expr]) -> Vec<Expr> {
        let mut idx = idx.to_vec();
        if let Some(s) = self.split {
            if let (Some(o), Some(i)) = (idx.get(s.outer), idx.get(s.inner)) {
                idx[s.outer] = join_split(o, i, s.block);
            }
        }
        self.dims
            .iter()
            .map(|d| {
                let i = idx.get(d.axis).cloned().unwrap_or_else(|| Expr::int(0));
                let q = if d.div == 1 {
                    i
                } else {
                    Expr::floordiv(i, Expr::int(d.div))
                };
                Expr::floormod(q, Expr::int(d.extent))
            })
            .collect()
    }
}

impl fmt::Display for PackedWeight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} -> {} (loops of {})",
            self.orig_layout(),
            self.new_layout(),
            self.consumer
        )
    }
}

/// Packs `original` (the weight in the DAG's layout) into `layout`; holes of padded tiles are 0.
pub fn pack_weight(layout: &PackedWeight, original: &TensorData) -> TensorData {
    assert_eq!(
        original.shape, layout.orig_shape,
        "packing a tensor of another shape"
    );
    TensorData::new(&layout.shape(), pack_values(layout, &original.data))
}

/// [`pack_weight`] on the values alone (row-major in the DAG's layout), of any element
/// type: a model's f32 weights are packed at load without a copy in f64.
pub fn pack_values<T: Copy + Default + Send + Sync>(
    layout: &PackedWeight,
    original: &[T],
) -> Vec<T> {
    assert_eq!(
        original.len() as i64,
        layout.orig_shape.iter().product::<i64>(),
        "packing a tensor of another size"
    );
    let shape = layout.shape();
    let total = shape.iter().product::<i64>() as usize;
    let axes = layout.orig_shape.len();
    let strides = TensorData::strides(&layout.orig_shape);
    let extents: Vec<i64> = (0..axes).map(|a| layout.axis_extent(a)).collect();
    // the element at an axis position (each packed coordinate steps its axis by its
    // dimension's `div`, as the kernel's rewritten loads read it), None in a hole (a padded
    // tile past the axis's end); a split pair's inner axis stays at 0
    let offset = |at: &[i64]| -> Option<usize> {
        let mut off = 0i64;
        for a in 0..axes {
            let x = at[a];
            if x >= extents[a] {
                return None;
            }
            off += match layout.split {
                Some(s) if s.outer == a => {
                    (x / s.block) * strides[a] + (x % s.block) * strides[s.inner]
                }
                _ => x * strides[a],
            };
        }
        Some(off as usize)
    };
    let mut data = vec![T::default(); total];
    // runs of whole innermost rows, packed in parallel: a model's weights at load are
    // hundreds of MB
    let row = shape.last().map_or(1, |&e| e.max(1) as usize);
    let run = row * (16384 / row).max(1);
    use rayon::prelude::*;
    data.par_chunks_mut(run)
        .enumerate()
        .for_each(|(ci, chunk)| {
            let mut coords = vec![0i64; shape.len()];
            let mut flat = (ci * run) as i64;
            for k in (0..shape.len()).rev() {
                coords[k] = flat % shape[k];
                flat /= shape[k];
            }
            let mut at = vec![0i64; axes];
            for (d, &c) in layout.dims.iter().zip(&coords) {
                at[d.axis] += c * d.div;
            }
            for v in chunk.iter_mut() {
                if let Some(o) = offset(&at) {
                    *v = original[o];
                }
                for (k, d) in layout.dims.iter().enumerate().rev() {
                    coords[k] += 1;
                    at[d.axis] += d.div;
                    if coords[k] < shape[k] {
                        break;
                    }
                    coords[k] = 0;
                    at[d.axis] -= shape[k] * d.div;
                }
            }
        });
    data
}

/// The packing as a kernel DAG of its own (TOPI's `auto_scheduler_layout_transform`), for
/// a "weight" computed at run time: a batch_matmul's right operand is an activation, so it
/// cannot be packed at load like a constant, and its kernel read unpacked ran 4-6x slower
/// than the tuner measured it. Input `p0` in the DAG's layout (elements of `dtype`), output
/// the packed layout; holes of padded tiles are 0, as [`pack_values`] gives them.
pub fn pack_dag(layout: &PackedWeight, dtype: ir::DType) -> Dag {
    let mut b = ir::DagBuilder::new();
    let src = b.placeholder("p0", &layout.orig_shape, dtype);
    let axes = (layout.dims.iter().enumerate())
        .map(|(i, d)| ir::IterVar::new(format!("ax{i}"), d.extent))
        .collect();
    let out = b.elementwise("T_layout_rewrite", "injective", axes, |vars| {
        // per original axis, Horner over the packed dimensions that slice it, outer to inner
        let mut index: Vec<Option<ir::Expr>> = vec![None; layout.orig_shape.len()];
        let mut spans = vec![1i64; layout.orig_shape.len()];
        for (d, v) in layout.dims.iter().zip(vars) {
            index[d.axis] = Some(match index[d.axis].take() {
                Some(outer) => outer * d.extent + v.clone(),
                None => v.clone(),
            });
            spans[d.axis] = spans[d.axis].saturating_mul(d.extent);
        }
        let mut index: Vec<ir::Expr> = index
            .into_iter()
            .map(|i| i.unwrap_or_else(|| ir::Expr::int(0)))
            .collect();
        let extents: Vec<i64> = (0..index.len()).map(|a| layout.axis_extent(a)).collect();
        let in_bounds = ir::Expr::all(
            (index.iter().zip(&extents).zip(&spans))
                .filter(|((_, &extent), &span)| span > extent)
                .map(|((i, &extent), _)| ir::Expr::lt(i.clone(), extent))
                .collect(),
        );
        if let Some(s) = layout.split {
            let v = index[s.outer].clone();
            index[s.outer] = ir::Expr::floordiv(v.clone(), s.block);
            index[s.inner] = ir::Expr::floormod(v, s.block);
        }
        let value = src.at(index);
        match in_bounds {
            Some(c) => ir::Expr::select(c, value, ir::Expr::constant(0.0, dtype)),
            None => value,
        }
    });
    b.finish(&[&out])
}

/// `v` from `floordiv(v, block)` and `floormod(v, block)` (how a split pair is read), else
/// `outer * block + inner`, which is `v` too.
fn join_split(outer: &Expr, inner: &Expr, block: i64) -> Expr {
    if let (Expr::Bin(BinOp::FloorDiv, a, b), Expr::Bin(BinOp::FloorMod, c, d)) = (outer, inner) {
        if a == c && b.as_int() == Some(block) && d.as_int() == Some(block) {
            return (**a).clone();
        }
    }
    Expr::add(Expr::mul(outer.clone(), Expr::int(block)), inner.clone())
}

/// Layout of the layout-free weights (spec §4.8) in the kernel's parameters.
///
/// [`WeightLayout::param_shape`] gives a parameter's shape and [`WeightLayout::rewrite_index`]
/// maps every load of a weight to its packed coordinates.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum WeightLayout {
    #[default]
    Original,
    /// The listed weights are pre-packed; the other inputs keep their layout.
    PrePacked(Vec<PackedWeight>),
}

impl WeightLayout {
    /// The packed weights (none for [`WeightLayout::Original`]).
    pub fn packed(&self) -> &[PackedWeight] {
        match self {
            WeightLayout::Original => &[],
            WeightLayout::PrePacked(v) => v,
        }
    }

    fn find(&self, t: TensorId) -> Option<&PackedWeight> {
        self.packed().iter().find(|p| p.tensor == t)
    }

    /// Is placeholder `t` packed?
    pub fn is_packed(&self, t: TensorId) -> bool {
        self.find(t).is_some()
    }

    /// Shape of placeholder `t`'s kernel parameter.
    pub fn param_shape(&self, dag: &Dag, t: TensorId) -> Vec<i64> {
        match self.find(t) {
            Some(p) => p.shape(),
            None => dag.stage(t).shape(),
        }
    }

    /// Indices of a load of placeholder `t` (given in the DAG's coordinates).
    pub fn rewrite_index(&self, _dag: &Dag, t: TensorId, idx: Vec<Expr>) -> Vec<Expr> {
        match self.find(t) {
            Some(p) => p.index(&idx),
            None => idx,
        }
    }

    /// The kernel inputs for the DAG's inputs (placeholders in stage order): the packed
    /// weights packed, the others unchanged.
    pub fn pack_inputs(&self, inputs: &[TensorData]) -> Vec<TensorData> {
        inputs
            .iter()
            .enumerate()
            .map(|(i, t)| match self.packed().iter().find(|p| p.input == i) {
                Some(p) => pack_weight(p, t),
                None => t.clone(),
            })
            .collect()
    }
}

/// `CleanName` + `AxisBaseName` (auto_scheduler `utils.h`): the axis a TE variable stands for.
fn axis_base_name(te_name: &str) -> String {
    let clean = ir::clean_name(te_name);
    match clean.rfind('_') {
        Some(p) => clean[..p].to_string(),
        None => clean,
    }
}

/// The axis a TE variable stands for: TVM's [`axis_base_name`] for its layout-free weights;
/// for ttdb's packable ones only a cache stage's `_c` comes off, since an NCHWc kernel's
/// `oc_chunk` and `oc_block` are two axes (TVM's rule makes both `oc`).
fn axis_name(te_name: &str, own: bool) -> String {
    if !own {
        return axis_base_name(te_name);
    }
    let clean = ir::clean_name(te_name);
    match clean.strip_suffix("_c") {
        Some(base) => base.to_string(),
        None => clean,
    }
}

/// `ExtractOriginalIterators`: the primitive names in a split (`.`) / fused (`@`) name.
fn original_iterators(name: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let b = name.as_bytes();
    let mut last = 0;
    let take = |from: usize, to: usize, out: &mut Vec<String>| {
        if from < b.len() && !b[from].is_ascii_digit() && b[from] != b'@' && b[from] != b'.' {
            let s = name[from..to].to_string();
            if !out.contains(&s) {
                out.push(s);
            }
        }
    };
    for (i, &c) in b.iter().enumerate() {
        if c == b'@' || c == b'.' {
            take(last, i, &mut out);
            last = i + 1;
        }
    }
    if last < b.len() {
        take(last, b.len(), &mut out);
    }
    out
}

/// Axis names of the single read of stage `ps` in `op` (`GetOrigLayout`), and the split
/// pair when `split_ok` allows one: `floordiv(v, b)` and `floormod(v, b)` of one axis
/// variable, `b` the inner dimension's extent (an NCHWc kernel, which TVM never rewrites).
fn read_names(
    op: &LOp,
    ps: usize,
    weight: &str,
    shape: &[i64],
    split_ok: bool,
) -> Result<(Vec<String>, Option<SplitAxis>), LowerError> {
    let mut reads = Vec::new();
    for e in op.exprs() {
        convert::loads_of(e, TensorId(ps), &mut reads);
    }
    let unsupported = |m: String| {
        Err(LowerError::Unsupported(format!(
            "layout rewrite of {weight} in {}: {m}",
            op.name
        )))
    };
    if reads.len() != 1 {
        return unsupported(format!(
            "{} reads of the weight (TVM handles exactly one)",
            reads.len()
        ));
    }
    let split_of = |e: &ir::Expr, want: ir::BinOp| match e {
        ir::Expr::Binary { op, a, b } if *op == want => match (&**a, b.as_int()) {
            (ir::Expr::Var(v), Some(k)) if k > 0 => Some((axis_name(v, split_ok), k)),
            _ => None,
        },
        _ => None,
    };
    let idx = &reads[0];
    let mut split = None;
    if split_ok {
        for (o, e) in idx.iter().enumerate() {
            let Some((v, block)) = split_of(e, ir::BinOp::FloorDiv) else {
                continue;
            };
            let inner = idx.iter().position(|f| {
                split_of(f, ir::BinOp::FloorMod).is_some_and(|(w, k)| w == v && k == block)
            });
            if let Some(i) = inner.filter(|&i| shape.get(i) == Some(&block)) {
                split = Some(SplitAxis {
                    outer: o,
                    inner: i,
                    block,
                });
                break;
            }
        }
    }
    let mut names = Vec::new();
    for (d, i) in idx.iter().enumerate() {
        let in_split = split.is_some_and(|s| s.outer == d || s.inner == d);
        let n = match i {
            ir::Expr::Var(v) => axis_name(v, split_ok),
            ir::Expr::IntImm { value: 0, .. } => "IntImm".to_string(),
            e if in_split => match split_of(e, ir::BinOp::FloorDiv)
                .or_else(|| split_of(e, ir::BinOp::FloorMod))
            {
                Some((v, _)) => v,
                None => return unsupported(format!("index {e:?} is not an axis variable")),
            },
            other => return unsupported(format!("index {other:?} is not an axis variable")),
        };
        if !in_split && n != "IntImm" && names.contains(&n) {
            return unsupported(format!("axis {n} indexes two dimensions"));
        }
        names.push(n);
    }
    Ok((names, split))
}

/// The layout-free weights' packed layouts (`RewriteLayout` with `RewriteForPreTransformed`).
///
/// `ops` are the stages' ops before inlining (TVM looks at the state's ops), `sch` the
/// schedule (checked against `state`), `bounds` its bound inference.
pub fn derive(
    dag: &Dag,
    state: &State,
    ops: &[LOp],
    sch: &TSchedule,
    bounds: &Bounds,
) -> Result<WeightLayout, LowerError> {
    let ss = state.stages();
    if ss.len() != sch.stages.len() || ops.len() != sch.stages.len() {
        return Err(LowerError::Internal(
            "layout rewrite: state and schedule differ in stages".into(),
        ));
    }
    let placeholders = dag.placeholders();
    let mut handled: HashSet<TensorId> = HashSet::new();
    let mut out = Vec::new();
    for (s, op) in ops.iter().enumerate() {
        let Some(a) = op.attrs_of else { continue };
        if op.is_placeholder() {
            continue;
        }
        let Some(c) = dag.stages.get(a).and_then(|x| x.compute()) else {
            continue;
        };
        // TVM's layout-free weights (its derivation aborts where it cannot pack them), then
        // ttdb's packable ones (kept in the DAG's layout where they cannot be packed)
        let tvm = c.attrs.layout_free_placeholders.iter().map(|&p| (p, false));
        let own = c.attrs.packable_placeholders.iter().map(|&p| (p, true));
        for (p, packable) in tvm.chain(own) {
            if handled.contains(&p) {
                continue;
            }
            let weight = &dag.stage(p).name;
            let ps = ops
                .iter()
                .position(|o| o.is_placeholder() && o.dag_tensor == Some(p.0));
            let ps = ps.ok_or_else(|| {
                LowerError::Internal(format!("layout rewrite: no stage for placeholder {weight}"))
            })?;
            // only a direct consumer (not the copy stage of a cache_write, not after a cache_read)
            if !op.inputs().contains(&TensorId(ps)) {
                continue;
            }
            handled.insert(p);
            let input = placeholders.iter().position(|&t| t == p).unwrap_or(0);
            let packed = packed_weight(dag, state, sch, bounds, (s, op), (p, ps, input), packable);
            match packed {
                Ok(pw) => out.push(pw),
                Err(LowerError::Unsupported(_) | LowerError::TooLarge(_)) if packable => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(if out.is_empty() {
        WeightLayout::Original
    } else {
        WeightLayout::PrePacked(out)
    })
}

/// The packed layout of weight `p` (placeholder stage `ps`, kernel input `input`) read by
/// `op` (stage `s`).
fn packed_weight(
    dag: &Dag,
    state: &State,
    sch: &TSchedule,
    bounds: &Bounds,
    (s, op): (usize, &LOp),
    (p, ps, input): (TensorId, usize, usize),
    split_ok: bool,
) -> Result<PackedWeight, LowerError> {
    let weight = &dag.stage(p).name;
    let orig_shape = dag.stage(p).shape();
    let (orig_names, split) = read_names(op, ps, weight, &orig_shape, split_ok)?;
    if orig_names.len() != orig_shape.len() {
        return Err(LowerError::Internal(format!(
            "layout rewrite: {weight} read with {} indices",
            orig_names.len()
        )));
    }
    // the split pair's inner dimension gets no packed dimension of its own
    let mut match_names = orig_names.clone();
    if let Some(sp) = split {
        match_names[sp.inner] = String::new();
    }
    let dims = new_layout(state, sch, bounds, s, &match_names, split_ok)?;
    let pw = PackedWeight {
        tensor: p,
        input,
        consumer: op.name.clone(),
        orig_shape,
        orig_names,
        dims,
        split,
    };
    check_covers(&pw)?;
    Ok(pw)
}

/// `GetNewLayout` for the consumer at stage `s`.
fn new_layout(
    state: &State,
    sch: &TSchedule,
    bounds: &Bounds,
    s: usize,
    names: &[String],
    own: bool,
) -> Result<Vec<PackedDim>, LowerError> {
    let ss = state.stages();
    let st_name = &ss[s].op.name;
    let unsupported =
        |m: String| LowerError::Unsupported(format!("layout rewrite at {st_name}: {m}"));
    // (stage, loop position) of the loops walked, outer to inner
    let mut walked: Vec<(usize, usize)> = Vec::new();
    let attach = state
        .attach_map()
        .attach_point(s)
        .map(|p| (p.stage, p.iter));
    if let Some((t, pos)) = attach {
        walked.extend((0..=pos).map(|k| (t, k)));
    }
    walked.extend((0..ss[s].iters.len()).map(|k| (s, k)));
    // expanded iterators: (name, extent)
    let mut iters: Vec<(String, i64)> = Vec::new();
    let mut before_attach = 0;
    for (n, &(x, k)) in walked.iter().enumerate() {
        let it = ss[x]
            .iters
            .get(k)
            .ok_or_else(|| LowerError::Internal("layout rewrite: loop out of range".into()))?;
        if it.orig_iters.is_empty() {
            let leaf = sch.stages[x].leaves.get(k).copied();
            let ext = leaf.and_then(|l| bounds.stages[x].as_ref().and_then(|b| b.ext[l].as_ref()));
            let ext = ext.ok_or_else(|| {
                LowerError::Internal(format!(
                    "layout rewrite: no extent for loop {k} of stage {x}"
                ))
            })?;
            let e = ext.as_const().ok_or_else(|| {
                unsupported(format!("loop {} has a non-constant extent", it.name))
            })?;
            iters.push((it.name.clone(), e));
        } else {
            // TVM keeps the extents the loops had when they were fused (1 when undefined)
            iters.extend(
                it.orig_iters
                    .iter()
                    .map(|o| (o.name.clone(), o.extent.unwrap_or(1))),
            );
        }
        if attach.is_some_and(|(_, pos)| n == pos) {
            before_attach = iters.len();
        }
    }
    let mut axis_names = Vec::with_capacity(iters.len());
    for (name, _) in &iters {
        let orig = original_iterators(name);
        if orig.len() != 1 {
            return Err(unsupported(format!(
                "loop {name} stands for {} axes",
                orig.len()
            )));
        }
        axis_names.push(axis_name(&orig[0], own));
    }
    let mut dims: Vec<PackedDim> = Vec::new();
    for (i, (_, extent)) in iters.iter().enumerate() {
        let name = if i < before_attach {
            axis_names.get(i + before_attach).ok_or_else(|| {
                unsupported(format!(
                    "{before_attach} loops outside the attach point, {} loops in all",
                    iters.len()
                ))
            })?
        } else {
            &axis_names[i]
        };
        if let Some(axis) = (names.iter()).position(|n| n == name && !n.is_empty() && n != "IntImm")
        {
            dims.push(PackedDim {
                axis,
                name: name.clone(),
                extent: *extent,
                div: 1,
            });
        }
    }
    let mut acc: HashMap<usize, i64> = HashMap::new();
    for d in dims.iter_mut().rev() {
        let a = acc.entry(d.axis).or_insert(1);
        d.div = *a;
        *a = a.saturating_mul(d.extent.max(1));
    }
    Ok(dims)
}

/// Every weight element must have its own packed position.
fn check_covers(p: &PackedWeight) -> Result<(), LowerError> {
    for (a, name) in p.orig_names.iter().enumerate() {
        if name == "IntImm" || p.split.is_some_and(|s| s.inner == a) {
            continue;
        }
        let e = p.axis_extent(a);
        let covered = p
            .dims
            .iter()
            .filter(|d| d.axis == a)
            .fold(1i64, |acc, d| acc.saturating_mul(d.extent));
        if covered < e {
            return Err(LowerError::Unsupported(format!(
                "layout rewrite of {}: the derived layout {} covers {covered} of the {e} values of axis {name}",
                p.consumer,
                p.new_layout()
            )));
        }
    }
    let total = p
        .dims
        .iter()
        .try_fold(1i64, |acc, d| acc.checked_mul(d.extent));
    if total.is_none_or(|t| t > ttdb_algo::schedule::MAX_EXTENT) {
        return Err(LowerError::TooLarge(format!(
            "packed weight {}",
            p.new_layout()
        )));
    }
    Ok(())
}

/// Range-aware folding of a packed index (TVM's simplifier with the loop ranges):
/// `floordiv(x, c)` and `floormod(x, c)` of an `x` whose range stays within one multiple of
/// `c` become a constant and `x - k*c`. Exact for every value of the loop variables within
/// their ranges, so the weight's inner dimensions index with plain loop variables.
pub fn fold_index(e: &Expr, ranges: &HashMap<String, (i128, i128)>) -> Expr {
    let mut cur = convert::simplify_index(e);
    for _ in 0..8 {
        let next = convert::simplify_index(&fold_once(&cur, ranges));
        if next == cur {
            break;
        }
        cur = next;
    }
    cur
}

fn fold_once(e: &Expr, r: &HashMap<String, (i128, i128)>) -> Expr {
    e.map(&mut |x| match x {
        Expr::Bin(op @ (BinOp::FloorDiv | BinOp::FloorMod), a, b) => {
            let c = b.as_int().filter(|&c| c > 0)? as i128;
            let a = fold_once(a, r);
            if let Some((lo, hi)) = interval(&a, r) {
                let q = lo.div_euclid(c);
                if q == hi.div_euclid(c) && i64::try_from(q * c).is_ok() {
                    return Some(match op {
                        BinOp::FloorDiv => Expr::int(q as i64),
                        _ if q == 0 => a,
                        _ => Expr::sub(a, Expr::int((q * c) as i64)),
                    });
                }
            }
            Some(Expr::bin(*op, a, (**b).clone()))
        }
        _ => None,
    })
}

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
