//! The prologue of a reduction group: element-wise ops FuseOps fused *before* the anchor.
//!
//! In `src/relay/transforms/fuse_ops.cc` (`FuseMutator` / `GraphPartitioner::RunFuse`,
//! phase 0) an element-wise or broadcast op whose immediate post-dominator is a
//! `kCommReduce` op is fused into it: LayerNorm's `mean(power(x - m, 2f))` is one group
//! `{power, mean}` with the reduction as anchor. Relay's TE lowering then builds
//! `T_power(p0, compile_engine_const)` and reduces `T_power` (`T_power_red`, `T_divide`).
//!
//! The prologue is read back from the anchor's data input: a chain of ops, each with one
//! fused input, whose first op reads a value from outside the group. Operands other than
//! rank-0 constants (a tensor operand would be another task input) and branches are
//! refused with the reason.
use super::chain::{chain_op, simplify_scalars};
use super::relay::{OpGraph, OpId};
use ttdb_algo::ops::{Anchor, EpilogueOp};

/// The prologue ops of `anchor_op` in application order: (op, position of the chain value
/// among the op's inputs, its registry op or None when relay removes it).
pub(super) fn prologue_of(
    g: &OpGraph,
    group: &[OpId],
    anchor_op: OpId,
    anchor: &Anchor,
) -> Result<Vec<(OpId, usize, Option<EpilogueOp>)>, String> {
    let in_group = |v: usize| g.values[v].producer.filter(|p| group.contains(p));
    let a = &g.ops[anchor_op];
    if let Some(i) = a.inputs.iter().skip(1).position(|&v| in_group(v).is_some()) {
        return Err(format!(
            "input {} of {} is computed inside the fused group",
            i + 1,
            a.kind.name()
        ));
    }
    let mut out = Vec::new();
    let Some(&data) = a.inputs.first() else {
        return Ok(out);
    };
    let mut cur = data;
    while let Some(op) = in_group(cur) {
        let o = &g.ops[op];
        let name = o.nodes.first().map(String::as_str).unwrap_or("?");
        if !anchor.takes_prologue() {
            return Err(format!(
                "`{name}` ({}) is fused before {}, which takes no prologue",
                o.kind.name(),
                a.kind.name()
            ));
        }
        let readers = group
            .iter()
            .filter(|&&r| g.ops[r].inputs.contains(&cur))
            .count();
        if readers != 1 {
            return Err(format!(
                "the value of `{name}` ({}) is read by {readers} fused ops (not a chain)",
                o.kind.name()
            ));
        }
        // the chain value: the input that is not a rank-0 constant
        let scalar = |v: usize| g.values[v].constant && g.values[v].shape.is_empty();
        let pos = match o.inputs.as_slice() {
            [_] => 0,
            [x, y] if scalar(*y) && !scalar(*x) => 0,
            [x, y] if scalar(*x) && !scalar(*y) => 1,
            _ => {
                return Err(format!(
                "`{name}` ({}) is fused before {} with a tensor operand: not in ttdb's op registry",
                o.kind.name(),
                a.kind.name()
            ))
            }
        };
        let mut operands = Vec::new();
        let e = chain_op(g, group, op, pos, None, &mut operands)?;
        if !operands.is_empty() {
            // a shared scalar is a rank-0 parameter: another task input
            return Err(format!(
                "`{name}` ({}) before {} reads a constant other groups read too: a prologue operand is not in ttdb's op registry",
                o.kind.name(),
                a.kind.name()
            ));
        }
        out.push((op, pos, e));
        cur = o.inputs[pos];
    }
    out.reverse();
    Ok(out)
}

/// The registry ops of a prologue found by [`prologue_of`], as SimplifyExpr leaves them.
pub(super) fn prologue_ops(found: Vec<(OpId, usize, Option<EpilogueOp>)>) -> Vec<EpilogueOp> {
    let mut ops: Vec<EpilogueOp> = found.into_iter().filter_map(|(_, _, e)| e).collect();
    simplify_scalars(&mut ops);
    ops
}
