//! Constants the ONNX graph computes from other constants, whose values shape inference did
//! not keep (too large, or an op whose values it does not fold): computed at load, as TVM's
//! FoldConstant would, for the few ops that make weights: `ConstantOfShape` (zoo models'
//! weights), `Expand` (a class token broadcast to the batch) and the ops that keep values
//! as they are (`Reshape`, `Squeeze`, `Unsqueeze`, `Flatten`, `Identity`).
//!
//! Nothing here may allocate more than the weight limit left ([`Folder`]'s fill budget):
//! a small model can ask for a huge constant.
use super::*;
use crate::onnx::graph::{dtype, numel, Attr, Node};
use crate::onnx::shape::broadcast;

impl Folder<'_> {
    /// The values of `name` when a node ttdb can evaluate makes it from constants (None
    /// when no such node does).
    pub(super) fn computed(&self, name: &str) -> Option<Result<Values>> {
        let node = self
            .graph
            .nodes
            .iter()
            .find(|n| n.outputs.first().map(String::as_str) == Some(name))?;
        let bad = |msg: String| OnnxError::Weight {
            tensor: name.into(),
            msg: format!("{} node `{}`: {msg}", node.op_type, node.name),
        };
        let shape = match self.graph.shape(name) {
            Some(s) => s.to_vec(),
            None => return Some(Err(bad("no static shape".into()))),
        };
        let input = |k: usize| -> Result<Values> {
            let i = node
                .input(k)
                .ok_or_else(|| bad(format!("input {k} is missing")))?;
            self.tensor(i)
        };
        Some(match node.op_type.as_str() {
            "ConstantOfShape" => self.constant_of_shape(node, &shape).map_err(bad),
            "Expand" => input(0).and_then(|x| {
                let from = self.graph.shape(node.input(0).unwrap_or_default());
                self.expand(&x, from.unwrap_or_default(), &shape)
                    .map_err(bad)
            }),
            "Reshape" | "Squeeze" | "Unsqueeze" | "Flatten" | "Identity" => input(0),
            _ => return None,
        })
    }

    /// Charges `n` elements of `width` bytes to the fill budget.
    fn charge(&self, n: i64, width: u64) -> std::result::Result<(), String> {
        let budget = self.fill_budget.get();
        match (n as u64).checked_mul(width).filter(|&b| b <= budget) {
            Some(bytes) => {
                self.fill_budget.set(budget - bytes);
                Ok(())
            }
            None => Err(format!(
                "{n} elements exceed what is left of the weight limit"
            )),
        }
    }

    /// `shape` filled with the node's one-element `value` (float32 0 without one), as the
    /// ONNX spec and onnxruntime have it.
    fn constant_of_shape(&self, node: &Node, shape: &[i64]) -> std::result::Result<Values, String> {
        let fill = match node.attrs.get("value") {
            None => Data::Floats(vec![0.0]),
            Some(Attr::Tensor(t)) => match &t.data {
                Some(d) if d.len() == 1 && t.dtype != dtype::FLOAT16 => d.clone(),
                _ => {
                    return Err(format!(
                        "its value is not one {} ttdb can read",
                        dtype::name(t.dtype)
                    ))
                }
            },
            Some(_) => return Err("its value is not a tensor".into()),
        };
        let n = numel(shape).ok_or("its shape overflows")?;
        Ok(match fill {
            Data::Floats(v) => {
                self.charge(n, 4)?;
                Values::F32(vec![v[0] as f32; n as usize])
            }
            Data::Ints(v) => {
                self.charge(n, 8)?;
                Values::I64(vec![v[0]; n as usize])
            }
        })
    }

    /// `x` (of shape `from`) broadcast to `shape` (numpy rules, right-aligned).
    fn expand(
        &self,
        x: &Values,
        from: &[i64],
        shape: &[i64],
    ) -> std::result::Result<Values, String> {
        if broadcast(from, shape).as_deref() != Some(shape) || shape.len() < from.len() {
            return Err(format!("{from:?} does not expand to {shape:?}"));
        }
        if numel(from) != Some(x.len() as i64) {
            return Err(format!("{} values for the shape {from:?}", x.len()));
        }
        let n = numel(shape).ok_or("its shape overflows")?;
        self.charge(n, if matches!(x, Values::F32(_)) { 4 } else { 8 })?;
        // the source's stride along each output axis: 0 where it broadcasts
        let r = shape.len();
        let mut src_stride = vec![0usize; r];
        let mut stride = 1usize;
        for (i, &d) in from.iter().enumerate().rev() {
            let axis = r - from.len() + i;
            if d != 1 {
                src_stride[axis] = stride;
            }
            stride *= d as usize;
        }
        let index = |mut flat: usize| {
            let mut at = 0;
            for axis in (0..r).rev() {
                let d = shape[axis] as usize;
                at += (flat % d) * src_stride[axis];
                flat /= d;
            }
            at
        };
        Ok(permute(x, n as usize, index))
    }
}
