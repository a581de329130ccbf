//! Element-wise glue: broadcast binary ops and unary math through ops::epilogue's builders
//! (the ones fused epilogues use), comparisons, logic, casts and `where` (ops::logic,
//! ops::broadcast: truth values as int64 0 / 1), and the two reductions along an axis that
//! are glue, LRN and cumsum. Operands share the output's layout, or hold one value;
//! broadcasting is then the same in every layout.
use super::GlueOp;
use ttdb_algo::ir::{BinOp, DagBuilder, Intrinsic, Tensor};
use ttdb_algo::ops::broadcast::where_select;
use ttdb_algo::ops::cumsum::cumsum as cumsum_of;
use ttdb_algo::ops::epilogue::{self, broadcast_binary, broadcast_power};
use ttdb_algo::ops::logic::{self, CastTo, Comparison, Logical};
use ttdb_algo::ops::lrn::{lrn as lrn_of, LrnAttrs};
use ttdb_onnx::onnx::graph::dtype;
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
    require_same_layout(cx)?;
    if let BinKind::Other(name) = kind {
        if name == "where" {
            let [c, x, y] = [cx.input(0)?, cx.input(1)?, cx.input(2)?];
            return where_select(b, c, x, y).map_err(|e| cx.build_error(e));
        }
    }
    if cx.op.inputs.len() != 2 {
        return Err(cx.refused(format!("{} operands", cx.op.inputs.len())));
    }
    let (x, y) = (cx.input(0)?, cx.input(1)?);
    let built = match kind {
        BinKind::Power => broadcast_power(b, x, y),
        BinKind::Other(name) => {
            let (comparison, logical, arithmetic) = match name.as_str() {
                "equal" => (Some(Comparison::Equal), None, None),
                "less" => (Some(Comparison::Less), None, None),
                "lessorequal" => (Some(Comparison::LessOrEqual), None, None),
                "greater" => (Some(Comparison::Greater), None, None),
                "greaterorequal" => (Some(Comparison::GreaterOrEqual), None, None),
                "and" => (None, Some(Logical::And), None),
                "or" => (None, Some(Logical::Or), None),
                "max" => (None, None, Some(BinOp::Max)),
                "min" => (None, None, Some(BinOp::Min)),
                _ => return Err(cx.unsupported()),
            };
            match (comparison, logical, arithmetic) {
                (Some(c), _, _) => logic::compare(b, c, x, y),
                (_, Some(l), _) => logic::logical(b, l, x, y),
                (_, _, Some(op)) => broadcast_binary(b, op, x, y, &format!("T_{name}imum")),
                _ => unreachable!("one of the three"),
            }
        }
        arithmetic => {
            let op = match arithmetic {
                BinKind::Add => BinOp::Add,
                BinKind::Subtract => BinOp::Sub,
                BinKind::Multiply => BinOp::Mul,
                _ => BinOp::Div,
            };
            broadcast_binary(b, op, x, y, &format!("T_{}", cx.name()))
        }
    };
    built.map_err(|e| cx.build_error(e))
}

pub(super) fn unary(b: &mut DagBuilder, cx: &GlueOp, kind: &UnaryKind) -> Result<Tensor, String> {
    require_same_layout(cx)?;
    let x = cx.input(0)?;
    Ok(match kind {
        UnaryKind::Relu => epilogue::relu(b, x),
        UnaryKind::Clip { lo, hi } => epilogue::clip(b, x, *lo, *hi),
        UnaryKind::Tanh => epilogue::tanh(b, x),
        UnaryKind::Other(name) if name == "not" => logic::logical_not(b, x),
        UnaryKind::Other(name) if name == "cast" => {
            let to = cx.out().dtype;
            let to = if to == dtype::BOOL {
                CastTo::Bool
            } else if dtype::is_integer(to) {
                CastTo::Int64
            } else if to == dtype::FLOAT || to == dtype::DOUBLE || to == dtype::FLOAT16 {
                CastTo::Float32
            } else {
                return Err(cx.refused(format!("a cast to {}", dtype::name(to))));
            };
            logic::cast(b, x, to)
        }
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

/// Along a logical axis: the input in the logical layout.
pub(super) fn cumsum(
    b: &mut DagBuilder,
    cx: &GlueOp,
    axis: usize,
    exclusive: bool,
    reverse: bool,
) -> Result<Tensor, String> {
    let x = cx.input_value(0);
    if x.phys != x.shape {
        return Err(cx.refused(format!(
            "its input is in the {} layout, not the logical one",
            x.layout.name(x.shape.len())
        )));
    }
    cumsum_of(b, cx.input(0)?, axis, exclusive, reverse).map_err(|e| cx.build_error(e))
}
