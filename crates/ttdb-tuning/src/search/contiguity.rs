//! How an injective kernel (the glue) reads its inputs along each of its output's axes, on
//! its loop nest with every other stage inlined: the default schedule's choice of the
//! innermost loop when the output's own innermost axis takes no vector
//! (`default_schedule::injective_steps`).
//!
//! A channel shuffle into NCHW29c blocks (shufflenet_v2) reads its NCHW input along `w`
//! and computes each channel with divisions by 2, 58 and 29: with the 29 channels of a
//! block innermost every element pays those divisions and a strided load; with `w`
//! innermost they are the same for the whole row, and the loads are contiguous.
use ttdb_algo::ir::Dag;
use ttdb_backend::loopnest::affine::linearize;
use ttdb_backend::loopnest::{Expr, Stmt};
use ttdb_backend::lower::{lower_steps, LowerOptions};
use ttdb_format::ansor::step::ComputeInlineStep;
use ttdb_format::ansor::Step;

/// How the loads of a kernel move as one output axis steps by one; ordered by `contiguous`,
/// then `affine` (the derived order, field by field, is the ranking).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct AxisReads {
    /// Loads whose last index steps by one and no other index moves.
    pub contiguous: usize,
    /// Loads whose indices are affine in the axis (no division or modulo of it): the rest
    /// of their address is the same along a loop over it.
    pub affine: usize,
}

/// For each axis of `dag`'s last stage (an injective one), how its loads move along it
/// (nothing for an axis of extent 1); None when the nest with every other stage inlined
/// does not lower to one loop per axis around a single store.
pub fn axis_reads(dag: &Dag) -> Option<Vec<AxisReads>> {
    let last = dag.stages.len().checked_sub(1)?;
    let extents: Vec<i64> = dag.stages[last]
        .compute()?
        .axes
        .iter()
        .map(|a| a.const_extent())
        .collect::<Option<_>>()?;
    let inline: Vec<Step> = (0..last)
        .filter(|&i| dag.stages[i].compute().is_some())
        .map(|i| Step::ComputeInline(ComputeInlineStep { stage_id: i as u32 }))
        .collect();
    let kernel = lower_steps(dag, &inline, &LowerOptions::default()).ok()?;
    let mut vars = Vec::new();
    let mut s = &kernel.body;
    let value = loop {
        match s {
            Stmt::For { var, body, .. } => {
                vars.push(var.clone());
                s = body;
            }
            Stmt::Attr { body, .. } => s = body,
            Stmt::Seq(v) if v.len() == 1 => s = &v[0],
            Stmt::Store { value, .. } => break value,
            _ => return None,
        }
    };
    // lowering drops the loops of extent 1; the rest are the axes in order
    if vars.len() != extents.iter().filter(|&&e| e > 1).count() {
        return None;
    }
    let mut vars = vars.into_iter();
    let mut loads = Vec::new();
    collect_loads(value, &mut loads);
    Some(
        extents
            .iter()
            .map(|&e| {
                let mut r = AxisReads::default();
                if e == 1 {
                    return r;
                }
                let v = vars.next().expect("counted");
                let v = v.as_str();
                for index in &loads {
                    let Some((last, rest)) = index.split_last() else {
                        continue;
                    };
                    let still = rest.iter().all(|e| !e.uses_var(v));
                    let step = linearize(last).coeff_of_var(v);
                    let affine = step.is_some()
                        && rest.iter().all(|e| linearize(e).coeff_of_var(v).is_some());
                    r.contiguous += usize::from(still && step == Some(1));
                    r.affine += usize::from(affine);
                }
                r
            })
            .collect(),
    )
}

/// The indices of every load in `e` (loads inside indices too).
fn collect_loads(e: &Expr, out: &mut Vec<Vec<Expr>>) {
    if let Expr::Load { index, .. } = e {
        out.push(index.clone());
    }
    e.for_each_child(|c| collect_loads(c, out));
}

/// The axis to run innermost instead of the last one (which takes no vector): the one whose
/// loads are read best (most contiguous, then most affine), when it reads them better than
/// the last axis does and is at least 4 long.
pub fn better_inner_axis(reads: &[AxisReads], extents: &[i64]) -> Option<usize> {
    let k = reads.len();
    if k < 2 || extents.len() != k {
        return None;
    }
    let inner = reads[k - 1];
    (0..k - 1)
        .filter(|&j| extents[j] >= 4 && reads[j] > inner)
        .max_by_key(|&j| (reads[j], j))
}
