//! A dense's element-wise tail across the reshape that restores its leading dims: ttdb's own
//! choice under a layout plan, not TVM's.
//!
//! ONNX `MatMul` of a `[B, S, K]` activation by a `[K, N]` weight lowers as Relay's
//! frontend lowers it: `reshape` to `[B*S, K]`, `dense`, `reshape` back to `[B, S, N]`
//! ([`super::ops`]); GPT-2 reshapes to 2-D itself around a `Gemm`. The bias add and the
//! activation that follow (a transformer's GELU: `add`, `divide`, `erf`, `add`, `multiply`,
//! `multiply`) read the reshaped value, and
//! FuseOps fuses a dense only into element-wise consumers, never across an injective
//! `reshape`. So TVM runs them as a separate kernel, one more trip of the whole activation
//! through memory (distilbert_like: 1.3 of 2.9 ms of glue per run).
//!
//! The reshape only renames the leading dims of a row-major tensor, so every element-wise
//! op after it whose other operands are constants broadcast along the last axis (a bias, a
//! scalar) computes the same values on the dense's `[B*S, N]` output. [`sink`] moves those
//! ops in front of the reshape; fusion then gives them to the dense as its epilogue. Values
//! the moved ops produce that others read get the reshape back (a view when run); a reshape
//! reading one reads the flat value instead.
//!
//! Kernels change with it (their workload keys are no longer TVM's), so only a layout plan,
//! ttdb's own partition of the model, turns it on; TopHub's blocking keeps TVM's kernels.
use super::relay::{ConstOp, Op, OpGraph, OpId, OpKind, ValId};
use std::collections::{BTreeSet, HashMap, HashSet};

/// One dense output and the ops that move in front of its reshape.
struct Sink {
    /// The reshape after the dense.
    reshape: OpId,
    /// The dense's output `[M, N]`.
    flat: ValId,
    /// The moved ops, in graph order.
    moved: Vec<OpId>,
}

fn is_reshape(g: &OpGraph, o: &Op) -> bool {
    matches!(&o.kind, OpKind::Injective(s) if s == "reshape")
        && !o.inputs.is_empty()
        && o.inputs[1..].iter().all(|&v| g.values[v].constant)
}

/// A constant that broadcasts along the last axis of `shape` only (a bias) or not at all
/// (a scalar): it reads the same on the flat `[M, N]` value.
fn along_last_axis(g: &OpGraph, v: ValId, shape: &[i64]) -> bool {
    let c = &g.values[v];
    let Some((&last, lead)) = c.shape.split_last() else {
        return c.constant;
    };
    c.constant
        && c.derived.is_none()
        && c.shape.len() <= shape.len()
        && lead.iter().all(|&d| d == 1)
        && (last == 1 || Some(&last) == shape.last())
}

/// `v` is a dense's output, or an element-wise tail already after it (a Gemm's bias add),
/// each value on the way read once: fusion gives the dense all of it.
fn from_dense(g: &OpGraph, consumers: &[Vec<(OpId, usize)>], mut v: ValId) -> bool {
    loop {
        if consumers[v].len() != 1 || g.outputs.contains(&v) {
            return false;
        }
        let Some(p) = g.values[v].producer else {
            return false;
        };
        let o = &g.ops[p];
        match o.kind {
            OpKind::Dense => return true,
            OpKind::Unary(_) | OpKind::Binary(_) => {
                let mut fed = o.inputs.iter().filter(|&&i| !g.values[i].constant);
                match (fed.next(), fed.next()) {
                    (Some(&i), None) => v = i,
                    _ => return false,
                }
            }
            _ => return false,
        }
    }
}

/// The moved ops form an epilogue ttdb builds ([`super::chain`]): each reads the value
/// before it, and besides constants at most an earlier value of the chain (GELU's
/// `h * (1 + erf(h / sqrt2))`); only the last one's value is read outside it. Else
/// nothing moves: a partial move would leave the dense's value with readers on both sides
/// of the reshape, and FuseOps would fuse neither.
fn is_chain(g: &OpGraph, consumers: &[Vec<(OpId, usize)>], start: ValId, moved: &[OpId]) -> bool {
    if moved.is_empty() {
        return false;
    }
    let moved_ops: HashSet<OpId> = moved.iter().copied().collect();
    let mut earlier: HashSet<ValId> = HashSet::new();
    let mut prev = start;
    for &o in moved {
        let op = &g.ops[o];
        let fed: Vec<ValId> = op
            .inputs
            .iter()
            .copied()
            .filter(|&v| !g.values[v].constant)
            .collect();
        let others_earlier = fed.iter().all(|v| *v == prev || earlier.contains(v));
        if !fed.contains(&prev) || !others_earlier || fed.len() > 2 {
            return false;
        }
        earlier.insert(prev);
        prev = op.output;
    }
    // every value but the last is read inside the chain only
    earlier.iter().all(|&v| {
        !g.outputs.contains(&v) && consumers[v].iter().all(|(c, _)| moved_ops.contains(c))
    })
}

fn find(g: &OpGraph, consumers: &[Vec<(OpId, usize)>]) -> Vec<Sink> {
    let mut sinks = Vec::new();
    for (r, op) in g.ops.iter().enumerate() {
        if !is_reshape(g, op) {
            continue;
        }
        let flat = op.inputs[0];
        let fv = &g.values[flat];
        let shape = &g.values[op.output].shape;
        if !from_dense(g, consumers, flat)
            || fv.shape.len() != 2
            || shape.len() < 2
            || shape.last() != fv.shape.last()
            || fv.dtype != g.values[op.output].dtype
        {
            continue;
        }
        // forward from the reshape over readers only (in graph order), so the search
        // costs the tail's size, not the graph's
        let mut inside: HashSet<ValId> = HashSet::from([op.output]);
        let mut frontier: BTreeSet<OpId> = consumers[op.output].iter().map(|&(c, _)| c).collect();
        let mut moved = Vec::new();
        while let Some(o) = frontier.pop_first() {
            let cand = &g.ops[o];
            let elementwise = matches!(cand.kind, OpKind::Unary(_) | OpKind::Binary(_));
            if elementwise
                && g.values[cand.output].shape == *shape
                && cand
                    .inputs
                    .iter()
                    .all(|&v| inside.contains(&v) || along_last_axis(g, v, shape))
            {
                inside.insert(cand.output);
                moved.push(o);
                frontier.extend(consumers[cand.output].iter().map(|&(c, _)| c));
            }
        }
        if is_chain(g, consumers, op.output, &moved) {
            sinks.push(Sink {
                reshape: r,
                flat,
                moved,
            });
        }
    }
    sinks
}

/// Moves each dense's element-wise tail in front of its reshape (module docs); returns how
/// many ops moved. Ops keep their order and values their ids: a moved op's output becomes
/// `[M, N]`, renamed `<name>::flat`, and readers that did not move read a new value with its
/// name and shape, the reshape back (a reshape reads the flat value itself).
pub fn sink(g: &mut OpGraph) -> usize {
    let consumers = g.consumers();
    let sinks = find(g, &consumers);
    let mut moved_in: HashMap<OpId, usize> = HashMap::new();
    for (i, s) in sinks.iter().enumerate() {
        for &o in &s.moved {
            moved_in.insert(o, i);
        }
    }
    // the reshapes after the denses go (`is_chain`: only their moved ops read them), and
    // those ops read the dense's flat value instead
    let dropped: HashSet<OpId> = sinks.iter().map(|s| s.reshape).collect();
    let flat_of: HashMap<ValId, ValId> = sinks
        .iter()
        .map(|s| (g.ops[s.reshape].output, s.flat))
        .collect();
    let old = std::mem::take(&mut g.ops);
    // readers of a moved op's value that read it flat: ops moved with it, and reshapes
    let reads_flat = |g: &OpGraph, c: OpId, pos: usize, sink: usize| {
        moved_in.get(&c) == Some(&sink) || (pos == 0 && is_reshape(g, &old[c]))
    };
    // a moved op's output -> the reshape back, for the readers that did not move
    let mut back: HashMap<ValId, ValId> = HashMap::new();
    let mut squeezed: HashMap<ValId, ValId> = HashMap::new();
    for (i, mut op) in old.iter().cloned().enumerate() {
        if dropped.contains(&i) {
            g.values[op.output].producer = None;
            continue;
        }
        let Some(&si) = moved_in.get(&i) else {
            let reshape = is_reshape(g, &op);
            for (k, v) in op.inputs.iter_mut().enumerate() {
                if let Some(&b) = back.get(v).filter(|_| !(reshape && k == 0)) {
                    *v = b;
                }
            }
            g.values[op.output].producer = Some(g.ops.len());
            g.ops.push(op);
            continue;
        };
        let flat_shape = g.values[sinks[si].flat].shape.clone();
        for v in op.inputs.iter_mut() {
            if let Some(&f) = flat_of.get(v) {
                *v = f;
            } else if g.values[*v].constant && g.values[*v].shape.len() > 1 {
                // a [1, .., 1, N] constant as [N]
                let c = *v;
                let last = *g.values[c].shape.last().unwrap();
                *v = *squeezed.entry(c).or_insert_with(|| {
                    let name = format!("{}::flat", g.values[c].name);
                    g.derive_const(c, ConstOp::Reshape, name, vec![last])
                });
            }
        }
        let out = op.output;
        let shape = std::mem::replace(&mut g.values[out].shape, flat_shape.clone());
        g.values[out].phys = flat_shape;
        let name = std::mem::take(&mut g.values[out].name);
        g.values[out].name = format!("{name}::flat");
        g.values[out].producer = Some(g.ops.len());
        let nodes = op.nodes.clone();
        g.ops.push(op);
        let read_back = consumers[out]
            .iter()
            .any(|&(c, pos)| !reads_flat(g, c, pos, si))
            || g.outputs.contains(&out);
        if read_back {
            let r = g.add_op(
                OpKind::Injective("reshape".into()),
                vec![out],
                name,
                shape,
                nodes,
            );
            back.insert(out, r);
        }
    }
    for o in g.outputs.iter_mut() {
        if let Some(&b) = back.get(o) {
            *o = b;
        }
    }
    moved_in.len()
}
