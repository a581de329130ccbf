//! The DAG of a glue group (one without an anchor: layout transforms, reshapes, element-wise
//! ops), built from its ops the way a Relay primitive function composes them: one stage per
//! op, reading the stages before it.
use std::collections::HashMap;
use ttdb_algo::ir::{BinOp, DType, Dag, DagBuilder, Intrinsic, Tensor};
use ttdb_algo::ops::concat::concatenate;
use ttdb_algo::ops::epilogue::{self, broadcast_binary};
use ttdb_algo::ops::layout_transform::{layout_transform, DataLayout};
use ttdb_algo::ops::reshape::reshape;
use ttdb_onnx::onnx::relay::{BinKind, Layout, OpGraph, OpId, OpKind, UnaryKind, ValId};

fn data_layout(l: Layout) -> DataLayout {
    match l {
        Layout::Plain => DataLayout::Nchw,
        Layout::Nchwc(b) => DataLayout::Nchwc(b),
        Layout::Nhwc => DataLayout::Nhwc,
    }
}

/// The physical axis of logical `axis` for tensors of logical `shapes` laid out in `layout`,
/// when joining or splitting along it keeps each tensor's layout: in NCHW[x]c the channel
/// axis is the block axis, which works only when every channel count is whole blocks.
fn physical_axis(layout: Layout, shapes: &[&[i64]], axis: usize) -> Option<usize> {
    let rank = shapes.first()?.len();
    if axis >= rank {
        return None;
    }
    match layout {
        Layout::Plain => Some(axis),
        _ if rank != 4 => Some(axis),
        Layout::Nchwc(block) => {
            let whole_blocks = block > 0 && shapes.iter().all(|s| s[1] % block == 0);
            (axis != 1 || whole_blocks).then_some(axis)
        }
        Layout::Nhwc => Some([0, 3, 1, 2][axis]),
    }
}

/// The DAG of glue group `group` whose run-time inputs are `inputs`, and every value its
/// placeholders `p0, p1, ...` stand for, in order: `inputs`, then the constants the ops read.
/// Err names the op ttdb cannot run yet.
pub fn glue_dag(
    g: &OpGraph,
    group: &[OpId],
    inputs: &[ValId],
) -> Result<(Dag, Vec<ValId>), String> {
    let mut b = DagBuilder::new();
    let mut tensors: HashMap<ValId, Tensor> = HashMap::new();
    let mut params: Vec<ValId> = inputs.to_vec();
    for (i, &v) in inputs.iter().enumerate() {
        let t = b.placeholder(format!("p{i}"), &g.values[v].phys, DType::Float(32));
        tensors.insert(v, t);
    }
    // the constants element-wise ops read become placeholders too
    for &op in group {
        for &v in &g.ops[op].inputs {
            if g.values[v].constant && !tensors.contains_key(&v) {
                let t = b.placeholder(
                    format!("p{}", params.len()),
                    &g.values[v].phys,
                    DType::Float(32),
                );
                tensors.insert(v, t);
                params.push(v);
            }
        }
    }
    let mut last = None;
    for &op in group {
        let o = &g.ops[op];
        let node = o.nodes.first().map(String::as_str).unwrap_or("?");
        let unsupported = || {
            format!(
                "`{}` (node `{node}`) is not something ttdb run executes yet",
                o.kind.name()
            )
        };
        let input = |k: usize| -> Result<&Tensor, String> {
            o.inputs
                .get(k)
                .and_then(|v| tensors.get(v))
                .ok_or_else(|| format!("`{}` (node `{node}`) has no input {k}", o.kind.name()))
        };
        let out_val = &g.values[o.output];
        // element-wise operands must share the output's layout, or hold one value
        let same_layout = || {
            o.inputs.iter().all(|&v| {
                let x = &g.values[v];
                x.layout == out_val.layout || x.phys.iter().product::<i64>() == 1
            })
        };
        let t = match &o.kind {
            OpKind::LayoutTransform { src, dst } => {
                let [n, c, h, w] =
                    <[i64; 4]>::try_from(out_val.shape.as_slice()).map_err(|_| unsupported())?;
                layout_transform(
                    &mut b,
                    input(0)?,
                    [n, c, h, w],
                    data_layout(*src),
                    data_layout(*dst),
                )
                .map_err(|e| e.0)?
            }
            OpKind::Concat { axis } => {
                let mut ins = Vec::with_capacity(o.inputs.len());
                for (k, &v) in o.inputs.iter().enumerate() {
                    if g.values[v].layout != out_val.layout {
                        return Err(format!(
                            "`concatenate` (node `{node}`) of inputs in different layouts"
                        ));
                    }
                    ins.push(input(k)?.clone());
                }
                let shapes: Vec<&[i64]> = o
                    .inputs
                    .iter()
                    .map(|&v| g.values[v].shape.as_slice())
                    .collect();
                let axis = physical_axis(out_val.layout, &shapes, *axis).ok_or_else(|| {
                    format!(
                        "`concatenate` (node `{node}`) along logical axis {axis} has no matching axis in the {} layout",
                        out_val.layout.name(out_val.shape.len())
                    )
                })?;
                concatenate(&mut b, &ins, axis).map_err(|e| format!("node `{node}`: {}", e.0))?
            }
            OpKind::Injective(name) if name == "reshape" || name == "batch_flatten" => {
                let src = &g.values[o.inputs[0]];
                if src.layout != Layout::Plain || out_val.layout != Layout::Plain {
                    return Err(format!(
                        "`{name}` (node `{node}`) on a blocked layout is not something ttdb run executes yet"
                    ));
                }
                reshape(&mut b, input(0)?, &out_val.phys).map_err(|e| e.0)?
            }
            OpKind::Binary(kind) if o.inputs.len() == 2 && same_layout() => {
                let op = match kind {
                    BinKind::Add => BinOp::Add,
                    BinKind::Subtract => BinOp::Sub,
                    BinKind::Multiply => BinOp::Mul,
                    BinKind::Divide => BinOp::Div,
                    _ => return Err(unsupported()),
                };
                let name = format!("T_{}", o.kind.name());
                broadcast_binary(&mut b, op, input(0)?, input(1)?, &name).map_err(|e| e.0)?
            }
            OpKind::Unary(kind) if same_layout() => {
                let x = input(0)?.clone();
                match kind {
                    UnaryKind::Relu => epilogue::relu(&mut b, &x),
                    UnaryKind::Clip { lo, hi } => epilogue::clip(&mut b, &x, *lo, *hi),
                    UnaryKind::Tanh => epilogue::tanh(&mut b, &x),
                    UnaryKind::Other(name) => {
                        let f = match name.as_str() {
                            "sigmoid" => Intrinsic::Sigmoid,
                            "exp" => Intrinsic::Exp,
                            "sqrt" => Intrinsic::Sqrt,
                            "erf" => Intrinsic::Erf,
                            "log" => Intrinsic::Log,
                            "abs" => Intrinsic::Fabs,
                            _ => return Err(unsupported()),
                        };
                        epilogue::unary(&mut b, &x, f)
                    }
                }
            }
            _ => return Err(unsupported()),
        };
        if t.shape != out_val.phys {
            return Err(format!(
                "`{}` (node `{node}`) gives {:?}, the graph has {:?}",
                o.kind.name(),
                t.shape,
                out_val.phys
            ));
        }
        tensors.insert(o.output, t.clone());
        last = Some(t);
    }
    let out = last.ok_or("an empty group")?;
    Ok((b.finish(&[&out]), params))
}
