//! ONNX-level graph passes that mirror what Relay's optimizer does before fusion:
//!
//! * [`fold_batchnorm`]: `Conv -> BatchNormalization` becomes one `Conv` with a bias
//!   (SimplifyInference + FoldScaleAxis + FoldConstant: the BN scale goes into the weights,
//!   the shift becomes / is added to the conv bias). Only when the conv output feeds the BN
//!   alone; other BNs stay and are lowered to `multiply` + `add`.
//! * [`simplify_batchnorms`]: a BN left after that is `x * scale' + shift'` with Relay's
//!   SimplifyInference constants, `scale' = scale / sqrt(var + eps)` and
//!   `shift' = shift - mean * scale'`: new tensors whose recipes compute them from the BN's.
//! * [`remove_identities`]: `Identity` and inference-mode `Dropout` are pass-throughs.
use super::graph::{dtype, Graph, Recipe, TensorInfo};

/// Folds every `Conv -> BatchNormalization` pair whose conv output has no other reader.
/// Returns how many were folded. The conv keeps its name and records the BN in `folded`.
pub fn fold_batchnorm(g: &mut Graph) -> usize {
    let mut folded = 0;
    loop {
        let uses = g.use_counts();
        let producers = g.producers();
        let pair = g.nodes.iter().enumerate().find_map(|(bi, bn)| {
            if bn.op_type != "BatchNormalization"
                || bn
                    .outputs
                    .iter()
                    .skip(1)
                    .any(|o| !o.is_empty() && uses.get(o).copied().unwrap_or(0) > 0)
            {
                return None;
            }
            let x = bn.input(0)?;
            let ci = *producers.get(x)?;
            let conv = &g.nodes[ci];
            let single_use =
                uses.get(x).copied().unwrap_or(0) == 1 && !g.outputs.iter().any(|o| o == x);
            // TVM folds the scale into constant weights only (FoldScaleAxis).
            let constant_weight = conv
                .input(1)
                .and_then(|w| g.tensor(w))
                .is_some_and(|t| t.constant);
            (conv.op_type == "Conv"
                && conv.outputs.first().map(String::as_str) == Some(x)
                && single_use
                && constant_weight)
                .then_some((ci, bi))
        });
        let Some((ci, bi)) = pair else { break };
        let bn = g.nodes.remove(bi);
        let ci = if bi < ci { ci - 1 } else { ci };
        let conv_out = g.nodes[ci].outputs[0].clone();
        let out = bn.outputs[0].clone();
        let channels = g
            .shape(&conv_out)
            .and_then(|s| s.get(1).copied())
            .unwrap_or(0);
        // The folded weight and bias are new tensors, computed from the BN's when the model
        // runs; kernel extraction sees only their shapes.
        let conv = &mut g.nodes[ci];
        let bn_input = |k: usize| bn.input(k).unwrap_or_default().to_string();
        let eps = bn.float("epsilon").map_or(1e-5, f64::from);
        let old_bias = conv.input(2).map(str::to_string);
        let weight = conv.inputs[1].clone();
        let (new_weight, new_bias) = (
            format!("{}::folded_weight", bn.name),
            format!("{}::folded_bias", bn.name),
        );
        conv.inputs.resize(2, String::new());
        conv.inputs[1] = new_weight.clone();
        conv.inputs.push(new_bias.clone());
        let weight_shape = g.tensors[&weight].shape.clone();
        g.tensors.insert(
            new_weight.clone(),
            TensorInfo::constant(weight_shape, dtype::FLOAT, None),
        );
        g.tensors.insert(
            new_bias.clone(),
            TensorInfo::constant(vec![channels], dtype::FLOAT, None),
        );
        g.recipes.insert(
            new_weight,
            Recipe::BnWeight {
                weight,
                scale: bn_input(1),
                var: bn_input(4),
                eps,
            },
        );
        g.recipes.insert(
            new_bias,
            Recipe::BnBias {
                bias: old_bias,
                scale: bn_input(1),
                shift: bn_input(2),
                mean: bn_input(3),
                var: bn_input(4),
                eps,
            },
        );
        let conv = &mut g.nodes[ci];
        conv.outputs[0] = out;
        conv.folded.push(bn.name.clone());
        conv.folded.extend(bn.folded);
        g.tensors.remove(&conv_out);
        folded += 1;
    }
    folded
}

/// Points every `BatchNormalization`'s scale and shift inputs at its SimplifyInference
/// constants (new tensors with a [`Recipe`]), so that lowering it as `x * scale + shift`
/// computes the normalization. Run after [`fold_batchnorm`]. Returns how many were changed.
pub fn simplify_batchnorms(g: &mut Graph) -> usize {
    let mut changed = 0;
    for i in 0..g.nodes.len() {
        let bn = &g.nodes[i];
        if bn.op_type != "BatchNormalization" || bn.inputs.len() < 5 {
            continue;
        }
        let input = |k: usize| bn.input(k).unwrap_or_default().to_string();
        let (scale, shift, mean, var) = (input(1), input(2), input(3), input(4));
        let constant = |n: &str| g.tensor(n).is_some_and(|t| t.constant);
        if ![&scale, &shift, &mean, &var].iter().all(|n| constant(n)) {
            continue;
        }
        let Some(channels) = g.shape(&scale).map(<[i64]>::to_vec) else {
            continue;
        };
        let eps = bn.float("epsilon").map_or(1e-5, f64::from);
        let (new_scale, new_shift) = (
            format!("{}::inference_scale", bn.name),
            format!("{}::inference_shift", bn.name),
        );
        for name in [&new_scale, &new_shift] {
            g.tensors.insert(
                name.clone(),
                TensorInfo::constant(channels.clone(), dtype::FLOAT, None),
            );
        }
        g.recipes.insert(
            new_scale.clone(),
            Recipe::BnScale {
                scale: scale.clone(),
                var: var.clone(),
                eps,
            },
        );
        // BnBias without a conv bias is exactly `shift - mean * scale'`
        g.recipes.insert(
            new_shift.clone(),
            Recipe::BnBias {
                bias: None,
                scale,
                shift,
                mean,
                var,
                eps,
            },
        );
        let bn = &mut g.nodes[i];
        bn.inputs[1] = new_scale;
        bn.inputs[2] = new_shift;
        changed += 1;
    }
    changed
}

/// Removes `Identity` and `Dropout` nodes (inference), rewiring their readers to the input.
/// Returns how many were removed. A removed node's name is kept on the producer's `folded`.
pub fn remove_identities(g: &mut Graph) -> usize {
    let mut removed = 0;
    let mut i = 0;
    while i < g.nodes.len() {
        let n = &g.nodes[i];
        let passthrough = matches!(n.op_type.as_str(), "Identity" | "Dropout")
            && n.input(0).is_some()
            && !n.outputs.is_empty();
        let mask_used = n.op_type == "Dropout"
            && n.outputs
                .get(1)
                .is_some_and(|m| !m.is_empty() && g.use_counts().get(m).copied().unwrap_or(0) > 0);
        if !passthrough || mask_used {
            i += 1;
            continue;
        }
        let n = g.nodes.remove(i);
        let (src, dst) = (n.inputs[0].clone(), n.outputs[0].clone());
        for m in &mut g.nodes {
            for inp in &mut m.inputs {
                if *inp == dst {
                    *inp = src.clone();
                }
            }
        }
        let is_output = g.outputs.contains(&dst);
        if is_output {
            // keep the graph output's name: alias the tensor instead
            if let Some(t) = g.tensors.get(&src).cloned() {
                g.tensors.insert(dst.clone(), t);
            }
            for o in &mut g.outputs {
                if *o == dst {
                    *o = src.clone();
                }
            }
        } else {
            g.tensors.remove(&dst);
        }
        if let Some(p) = g.nodes.iter_mut().find(|m| m.outputs.contains(&src)) {
            p.folded.push(n.name.clone());
        }
        removed += 1;
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::graph::{Attr, Node};
    use crate::onnx::shape;
    use std::collections::BTreeMap;

    fn node(name: &str, op: &str, ins: &[&str], outs: &[&str]) -> Node {
        Node {
            name: name.into(),
            op_type: op.into(),
            domain: String::new(),
            inputs: ins.iter().map(|s| s.to_string()).collect(),
            outputs: outs.iter().map(|s| s.to_string()).collect(),
            attrs: BTreeMap::new(),
            folded: vec![],
        }
    }

    fn conv_bn_graph(extra_reader: bool, conv_bias: bool) -> Graph {
        let mut g = Graph {
            opset: 14,
            ..Graph::default()
        };
        g.inputs.push("x".into());
        g.tensors
            .insert("x".into(), TensorInfo::new(vec![1, 3, 8, 8], dtype::FLOAT));
        g.tensors.insert(
            "w".into(),
            TensorInfo::constant(vec![16, 3, 3, 3], dtype::FLOAT, None),
        );
        g.tensors.insert(
            "cb".into(),
            TensorInfo::constant(vec![16], dtype::FLOAT, None),
        );
        for p in ["g", "b", "m", "v"] {
            g.tensors
                .insert(p.into(), TensorInfo::constant(vec![16], dtype::FLOAT, None));
        }
        let mut conv = node(
            "conv",
            "Conv",
            if conv_bias {
                &["x", "w", "cb"]
            } else {
                &["x", "w"]
            },
            &["c"],
        );
        conv.attrs.insert("pads".into(), Attr::Ints(vec![1; 4]));
        g.nodes.push(conv);
        g.nodes.push(node(
            "bn",
            "BatchNormalization",
            &["c", "g", "b", "m", "v"],
            &["y"],
        ));
        g.nodes.push(node("relu", "Relu", &["y"], &["z"]));
        g.outputs.push("z".into());
        if extra_reader {
            g.nodes.push(node("tap", "Relu", &["c"], &["t"]));
            g.outputs.push("t".into());
        }
        shape::infer(&mut g).unwrap();
        g
    }

    #[test]
    fn conv_bn_folds_and_the_bias_appears() {
        let mut g = conv_bn_graph(false, false);
        assert_eq!(fold_batchnorm(&mut g), 1);
        assert_eq!(g.nodes.len(), 2);
        let conv = &g.nodes[0];
        assert_eq!(conv.op_type, "Conv");
        assert_eq!(conv.inputs.len(), 3);
        assert_eq!(g.shape(&conv.inputs[2]).unwrap(), [16]);
        assert_eq!(conv.outputs[0], "y");
        assert_eq!(conv.covered(), ["conv", "bn"]);
        assert_eq!(g.nodes[1].inputs[0], "y");
        assert!(g.tensor("c").is_none());
    }

    #[test]
    fn existing_conv_bias_is_kept() {
        // the folded weight and bias are new tensors whose recipes read the old ones
        let mut g = conv_bn_graph(false, true);
        assert_eq!(fold_batchnorm(&mut g), 1);
        assert_eq!(
            g.nodes[0].inputs,
            ["x", "bn::folded_weight", "bn::folded_bias"]
        );
        assert!(matches!(
            &g.recipes["bn::folded_bias"],
            Recipe::BnBias { bias: Some(b), .. } if b == "cb"
        ));
        assert!(matches!(
            &g.recipes["bn::folded_weight"],
            Recipe::BnWeight { weight, .. } if weight == "w"
        ));
        assert_eq!(g.shape("bn::folded_weight"), g.shape("w"));
    }

    #[test]
    fn a_conv_output_read_elsewhere_is_not_folded() {
        let mut g = conv_bn_graph(true, false);
        assert_eq!(fold_batchnorm(&mut g), 0);
        assert!(g.nodes.iter().any(|n| n.op_type == "BatchNormalization"));
    }

    /// A BN whose conv output is read elsewhere stays, reading SimplifyInference constants
    /// computed from its own parameters.
    #[test]
    fn an_unfolded_batchnorm_reads_its_inference_scale_and_shift() {
        let mut g = conv_bn_graph(true, false);
        assert_eq!(fold_batchnorm(&mut g), 0);
        assert_eq!(simplify_batchnorms(&mut g), 1);
        let bn = g
            .nodes
            .iter()
            .find(|n| n.op_type == "BatchNormalization")
            .unwrap();
        assert_eq!(
            bn.inputs,
            ["c", "bn::inference_scale", "bn::inference_shift", "m", "v"]
        );
        assert!(matches!(
            &g.recipes["bn::inference_scale"],
            Recipe::BnScale { scale, var, .. } if scale == "g" && var == "v"
        ));
        assert!(matches!(
            &g.recipes["bn::inference_shift"],
            Recipe::BnBias { bias: None, shift, mean, .. } if shift == "b" && mean == "m"
        ));
        assert_eq!(g.shape("bn::inference_shift").unwrap(), [16]);
        shape::infer(&mut g).unwrap();
    }

    #[test]
    fn identities_are_removed() {
        let mut g = conv_bn_graph(false, false);
        g.nodes.insert(1, node("id", "Identity", &["c"], &["c2"]));
        g.nodes[2].inputs[0] = "c2".into();
        shape::infer(&mut g).unwrap();
        assert_eq!(remove_identities(&mut g), 1);
        assert_eq!(g.nodes[1].inputs[0], "c");
        assert_eq!(fold_batchnorm(&mut g), 1);
    }
}
