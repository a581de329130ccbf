//! Relay's BackwardFoldScaleAxis (`src/relay/transforms/fold_scale_axis.cc`, run by
//! `relay.build` before SimplifyExpr and AlterOpLayout) for rank-0 scales: `multiply(y, c)`
//! with a scalar constant `c`, where `y` is a conv2d (groups 1 or depthwise) or dense output,
//! possibly through one bias add and (for `c > 0`) one relu, goes into the weights (and the bias), so the multiply
//! leaves the graph: the scale of a hardsigmoid right after a conv
//! (`clip(conv(x) * 1/6 + 0.5, 0, 1)`) is no stage of its task.
//!
//! As TVM does it: the scale passes backward only through values read once (BackwardPrep's
//! reference count), through a bias add of a constant that varies along the channel axis
//! alone (`BiasAddBackwardPrep`, `AddSubBackwardPrep`), and a scalar matches any channel
//! axis (`MatchBroadcastToLeftAxes`). Not modelled: per-channel scales (BN is folded by
//! [`super::fold`]), leaky_relu, adds of two scaled values, and the forward direction.
use super::relay::{BinKind, ConstOp, OpGraph, OpId, OpKind, UnaryKind, ValId};

/// Removes every foldable scalar multiply; returns how many.
pub fn fold_scalar_scales(g: &mut OpGraph) -> usize {
    let mut folded = 0;
    while let Some((m, x)) = find(g) {
        scale_constants(g, m, x);
        remove(g, m, x);
        folded += 1;
    }
    folded
}

fn uses(g: &OpGraph, v: ValId) -> usize {
    let reads: usize = g
        .ops
        .iter()
        .map(|o| o.inputs.iter().filter(|&&i| i == v).count())
        .sum();
    reads + g.outputs.iter().filter(|&&o| o == v).count()
}

/// A conv2d / dense whose output channels a scale can go into (`ConvBackwardPrep`: groups 1
/// or depthwise, `DenseBackwardPrep`).
fn takes_scale(g: &OpGraph, op: OpId) -> bool {
    let o = &g.ops[op];
    match o.kind {
        OpKind::Conv { groups, .. } => {
            let w = &g.values[o.inputs[1]].shape;
            groups == 1 || (w.len() == 4 && w[0] == groups && w[1] == 1)
        }
        OpKind::Dense => true,
        _ => false,
    }
}

/// A constant bias along the channel axis of `y` (dim 1 of an NCHW or `[M, N]` output).
fn is_channel_bias(g: &OpGraph, bias: ValId, y: ValId) -> bool {
    let b = &g.values[bias];
    let out = &g.values[y].shape;
    if !b.constant || out.len() < 2 || b.shape.len() > out.len() {
        return false;
    }
    let off = out.len() - b.shape.len();
    b.shape
        .iter()
        .enumerate()
        .all(|(i, &d)| d == 1 || (i + off == 1 && d == out[1]))
}

/// The first multiply to fold and its scaled input.
fn find(g: &OpGraph) -> Option<(OpId, ValId)> {
    (0..g.ops.len()).find_map(|m| {
        let o = &g.ops[m];
        if o.kind != OpKind::Binary(BinKind::Multiply) || o.inputs.len() != 2 {
            return None;
        }
        let scalar = |v: ValId| g.values[v].constant && g.values[v].shape.is_empty();
        let x = match (scalar(o.inputs[0]), scalar(o.inputs[1])) {
            (false, true) => o.inputs[0],
            (true, false) => o.inputs[1],
            _ => return None,
        };
        if uses(g, x) != 1 {
            return None;
        }
        let mut p = g.values[x].producer?;
        if takes_scale(g, p) {
            return Some((m, x));
        }
        // through a relu only a positive scale (ReluBackwardPrep: require_positive)
        if g.ops[p].kind == OpKind::Unary(UnaryKind::Relu) {
            let c = o.inputs[0] + o.inputs[1] - x;
            let positive = g.values[c]
                .data
                .as_ref()
                .is_some_and(|d| d.as_floats().first().is_some_and(|&v| v > 0.0));
            let r = g.ops[p].inputs[0];
            if !positive || uses(g, r) != 1 {
                return None;
            }
            p = g.values[r].producer?;
            if takes_scale(g, p) {
                return Some((m, x));
            }
        }
        let po = &g.ops[p];
        if po.kind != OpKind::Binary(BinKind::Add) || po.inputs.len() != 2 {
            return None;
        }
        let (y, bias) = if g.values[po.inputs[1]].constant {
            (po.inputs[0], po.inputs[1])
        } else {
            (po.inputs[1], po.inputs[0])
        };
        let anchor = g.values[y].producer?;
        (uses(g, y) == 1 && is_channel_bias(g, bias, y) && takes_scale(g, anchor)).then_some((m, x))
    })
}

/// The values of the fold: the anchor's weight and the bias (if any) between it and `x`
/// become constants scaled by multiply `m`'s scalar, computed at load.
fn scale_constants(g: &mut OpGraph, m: OpId, x: ValId) {
    let c = g.ops[m].inputs[0] + g.ops[m].inputs[1] - x;
    let mut p = g.values[x].producer.expect("find() checked the producer");
    if g.ops[p].kind == OpKind::Unary(UnaryKind::Relu) {
        p = g.values[g.ops[p].inputs[0]]
            .producer
            .expect("find() checked");
    }
    if !takes_scale(g, p) {
        // a bias add: scale its constant operand, then the anchor behind it
        let k = usize::from(g.values[g.ops[p].inputs[1]].constant);
        let bias = g.ops[p].inputs[k];
        g.ops[p].inputs[k] = scaled(g, bias, c);
        p = g.values[g.ops[p].inputs[1 - k]]
            .producer
            .expect("find() checked");
    }
    let w = g.ops[p].inputs[1];
    g.ops[p].inputs[1] = scaled(g, w, c);
}

fn scaled(g: &mut OpGraph, v: ValId, c: ValId) -> ValId {
    let name = format!("{}::scaled", g.values[v].name);
    let shape = g.values[v].shape.clone();
    let s = g.derive_const(v, ConstOp::Scale(c), name, shape);
    g.values[s].channel_vector = g.values[v].channel_vector;
    s
}

/// Drops op `m`; its readers read `x` instead, and `x`'s producer covers its ONNX nodes.
fn remove(g: &mut OpGraph, m: OpId, x: ValId) {
    let gone = g.ops.remove(m);
    for o in &mut g.ops {
        for i in &mut o.inputs {
            if *i == gone.output {
                *i = x;
            }
        }
    }
    for out in &mut g.outputs {
        if *out == gone.output {
            *out = x;
        }
    }
    g.values[gone.output].producer = None;
    for v in &mut g.values {
        if let Some(p) = v.producer.as_mut() {
            if *p > m {
                *p -= 1;
            }
        }
    }
    if let Some(p) = g.values[x].producer {
        for n in gone.nodes {
            if !g.ops[p].nodes.contains(&n) {
                g.ops[p].nodes.push(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ttdb_algo::ops::Window2d;

    /// conv (groups `groups`, weight `[8, 8/groups, 1, 1]`) + bias, `* c`, then relu.
    fn graph(groups: i64, bias_read_twice: bool) -> OpGraph {
        let mut g = OpGraph::default();
        let x = g.add_value("x".into(), vec![1, 8, 4, 4], false);
        let w = g.add_value("w".into(), vec![8, 8 / groups, 1, 1], true);
        let conv = g.add_op(
            OpKind::Conv {
                window: Window2d::simple(1, 0),
                groups,
            },
            vec![x, w],
            "conv".into(),
            vec![1, 8, 4, 4],
            vec!["/conv".into()],
        );
        let b = g.add_value("b".into(), vec![1, 8, 1, 1], true);
        let biased = g.add_op(
            OpKind::Binary(BinKind::Add),
            vec![conv, b],
            "biased".into(),
            vec![1, 8, 4, 4],
            vec!["/conv".into()],
        );
        let c = g.add_value("c".into(), vec![], true);
        let scaled = g.add_op(
            OpKind::Binary(BinKind::Multiply),
            vec![biased, c],
            "scaled".into(),
            vec![1, 8, 4, 4],
            vec!["/mul".into()],
        );
        let r = g.add_op(
            OpKind::Unary(UnaryKind::Relu),
            vec![scaled],
            "r".into(),
            vec![1, 8, 4, 4],
            vec!["/relu".into()],
        );
        g.outputs.push(r);
        if bias_read_twice {
            g.outputs.push(biased);
        }
        g
    }

    #[test]
    fn a_scalar_scale_after_conv_and_bias_goes_into_the_weights() {
        for groups in [1, 8] {
            let mut g = graph(groups, false);
            assert_eq!(fold_scalar_scales(&mut g), 1, "groups {groups}");
            assert_eq!(g.ops.len(), 3);
            assert_eq!(g.ops[2].kind, OpKind::Unary(UnaryKind::Relu));
            // the relu reads the bias add; the add covers the multiply's node
            assert_eq!(g.values[g.ops[2].inputs[0]].producer, Some(1));
            assert_eq!(
                g.ops[1].nodes,
                vec!["/conv".to_string(), "/mul".to_string()]
            );
            assert_eq!(g.values[g.outputs[0]].producer, Some(2));
        }
    }

    #[test]
    fn shared_values_and_grouped_convs_keep_the_multiply() {
        // the bias add read twice (hardswish's x): BackwardPrep sends no message
        let mut g = graph(1, true);
        assert_eq!(fold_scalar_scales(&mut g), 0);
        // grouped, not depthwise: ConvBackwardPrep gives no message
        let mut g = graph(2, false);
        assert_eq!(fold_scalar_scales(&mut g), 0);
        assert_eq!(g.ops.len(), 4);
    }
}
