//! `Constant` and `ConstantOfShape`: constants with their values (kept when small), which
//! lowering never sees as ops (FoldConstant).
use super::OnnxOp;
use crate::onnx::error::Result;
use crate::onnx::graph::{dtype, numel, Attr, Data, Node, TensorInfo, MAX_KEPT_ELEMENTS};
use crate::onnx::relay::Lowering;
use crate::onnx::shape::{checked, Ctx};

pub(super) struct Constant;
pub(super) struct ConstantOfShape;

impl OnnxOp for Constant {
    fn names(&self) -> &'static [&'static str] {
        &["Constant"]
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        let (name, a) = match ctx.node.attrs.iter().next() {
            Some(kv) => kv,
            None => return ctx.err("Constant without a value attribute"),
        };
        let t = match (name.as_str(), a) {
            ("value", Attr::Tensor(t)) => t.clone(),
            ("value_float", Attr::Float(f)) => {
                TensorInfo::constant(vec![], dtype::FLOAT, Some(Data::Floats(vec![*f as f64])))
            }
            ("value_floats", Attr::Floats(v)) => TensorInfo::constant(
                vec![v.len() as i64],
                dtype::FLOAT,
                Some(Data::Floats(v.iter().map(|&x| x as f64).collect())),
            ),
            ("value_int", Attr::Int(i)) => {
                TensorInfo::constant(vec![], dtype::INT64, Some(Data::Ints(vec![*i])))
            }
            ("value_ints", Attr::Ints(v)) => TensorInfo::constant(
                vec![v.len() as i64],
                dtype::INT64,
                Some(Data::Ints(v.clone())),
            ),
            (other, _) => return ctx.unsupported(format!("Constant with attribute `{other}`")),
        };
        Ok(vec![t])
    }

    fn lower(&self, _: &mut Lowering, _: &Node) -> Result<()> {
        Ok(())
    }
}

impl OnnxOp for ConstantOfShape {
    fn names(&self) -> &'static [&'static str] {
        &["ConstantOfShape"]
    }

    /// The shape input's dims, filled with the `value` attribute (float 0 by default).
    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        let dims = ctx.ints(0, "the shape")?;
        if let Some(d) = dims.iter().find(|&&d| d < 0) {
            return ctx.err(format!("negative dim {d}"));
        }
        let (dt, fill) = match ctx.node.attrs.get("value") {
            Some(Attr::Tensor(t)) => (t.dtype, t.data.clone()),
            _ => (dtype::FLOAT, Some(Data::Floats(vec![0.0]))),
        };
        let n = checked(ctx, numel(&dims))?;
        let data = match fill {
            Some(Data::Ints(v)) if v.len() == 1 && n <= MAX_KEPT_ELEMENTS => {
                Some(Data::Ints(vec![v[0]; n as usize]))
            }
            Some(Data::Floats(v)) if v.len() == 1 && n <= MAX_KEPT_ELEMENTS => {
                Some(Data::Floats(vec![v[0]; n as usize]))
            }
            _ => None,
        };
        let mut t = ctx.out(dims, dt, data)?;
        t.constant = true;
        Ok(vec![t])
    }

    fn lower(&self, _: &mut Lowering, _: &Node) -> Result<()> {
        Ok(())
    }
}
