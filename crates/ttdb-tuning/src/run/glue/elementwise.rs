//! Element-wise glue: broadcast binary ops and unary math, through ops::epilogue's
//! builders (the ones fused epilogues use). Operands share the output's layout, or hold one
//! value; broadcasting is then the same in every layout.
use super::GlueOp;
use ttdb_algo::ir::{BinOp, DagBuilder, Intrinsic, Tensor};
use ttdb_algo::ops::epilogue::{self, broadcast_binary, broadcast_power};
use ttdb_algo::ops::lrn::{lrn as lrn_of, LrnAttrs};
use ttdb_onnx::onnx::relay::{BinKind, UnaryKind};

/// Err unless every operand is in the output's layout or is a single value.
fn require_same_layout(cx: &GlueOp) -> Result<(), String> {
    let out = cx.out().layout;
    let mixed = cx
        .op
        .inputs
        .iter()
        .map(|&v| &cx.g.values[v])
        .find(|x| x.layout != out && x.phys.iter().product::<i64>() != 1);
    match mixed {
        Some(x) => Err(cx.refused(format!(
            "operand `{}` is in the {} layout, the output in {}",
            x.name,
            x.layout.name(x.shape.len()),
            out.name(cx.out().shape.len())
        ))),
        None => Ok(()),
    }
}

pub(super) fn binary(b: &mut DagBuilder, cx: &GlueOp, kind: &BinKind) -> Result<Tensor, String> {
    if cx.op.inputs.len() != 2 {
        return Err(cx.refused(format!("{} operands", cx.op.inputs.len())));
    }
    require_same_layout(cx)?;
    let (x, y) = (cx.input(0)?, cx.input(1)?);
    let op = match kind {
        BinKind::Add => BinOp::Add,
        BinKind::Subtract => BinOp::Sub,
        BinKind::Multiply => BinOp::Mul,
        BinKind::Divide => BinOp::Div,
        BinKind::Power => return broadcast_power(b, x, y).map_err(|e| cx.build_error(e)),
        BinKind::Other(_) => return Err(cx.unsupported()),
    };
    let name = format!("T_{}", cx.name());
    broadcast_binary(b, op, x, y, &name).map_err(|e| cx.build_error(e))
}

pub(super) fn unary(b: &mut DagBuilder, cx: &GlueOp, kind: &UnaryKind) -> Result<Tensor, String> {
    require_same_layout(cx)?;
    let x = cx.input(0)?;
    Ok(match kind {
        UnaryKind::Relu => epilogue::relu(b, x),
        UnaryKind::Clip { lo, hi } => epilogue::clip(b, x, *lo, *hi),
        UnaryKind::Tanh => epilogue::tanh(b, x),
        UnaryKind::Other(name) => {
            let f = match name.as_str() {
                "sigmoid" => Intrinsic::Sigmoid,
                "exp" => Intrinsic::Exp,
                "sqrt" => Intrinsic::Sqrt,
                "erf" => Intrinsic::Erf,
                "log" => Intrinsic::Log,
                "abs" => Intrinsic::Fabs,
                _ => return Err(cx.unsupported()),
            };
            epilogue::unary(b, x, f)
        }
    })
}

/// Across the channels of a logical (NCHW) tensor.
pub(super) fn lrn(b: &mut DagBuilder, cx: &GlueOp, attrs: LrnAttrs) -> Result<Tensor, String> {
    let x = cx.input_value(0);
    if x.phys != x.shape {
        return Err(cx.refused(format!(
            "its input is in the {} layout, not the logical one",
            x.layout.name(x.shape.len())
        )));
    }
    lrn_of(b, cx.input(0)?, attrs).map_err(|e| cx.build_error(e))
}
