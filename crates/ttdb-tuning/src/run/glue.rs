//! The DAG of a glue group (one without an anchor: layout transforms, reshapes), built from
//! its ops the way a Relay primitive function composes them: one stage per op, reading the
//! stage before it.
use std::collections::HashMap;
use ttdb_algo::ir::{DType, Dag, DagBuilder, Tensor};
use ttdb_algo::ops::layout_transform::{layout_transform, DataLayout};
use ttdb_algo::ops::reshape::reshape;
use ttdb_onnx::onnx::relay::{Layout, OpGraph, OpId, OpKind, ValId};

fn data_layout(l: Layout) -> DataLayout {
    match l {
        Layout::Plain => DataLayout::Nchw,
        Layout::Nchwc(b) => DataLayout::Nchwc(b),
        Layout::Nhwc => DataLayout::Nhwc,
    }
}

/// The DAG of glue group `group` whose inputs are `inputs` (placeholders `p0, p1, ...` in
/// that order). Err names the op ttdb cannot run yet.
pub fn glue_dag(g: &OpGraph, group: &[OpId], inputs: &[ValId]) -> Result<Dag, String> {
    let mut b = DagBuilder::new();
    let mut tensors: HashMap<ValId, Tensor> = HashMap::new();
    for (i, &v) in inputs.iter().enumerate() {
        let t = b.placeholder(format!("p{i}"), &g.values[v].phys, DType::Float(32));
        tensors.insert(v, t);
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
                .ok_or_else(|| format!("`{}` (node `{node}`) reads a constant", o.kind.name()))
        };
        let out_val = &g.values[o.output];
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
            OpKind::Injective(name) if name == "reshape" || name == "batch_flatten" => {
                let src = &g.values[o.inputs[0]];
                if src.layout != Layout::Plain || out_val.layout != Layout::Plain {
                    return Err(format!(
                        "`{name}` (node `{node}`) on a blocked layout is not something ttdb run executes yet"
                    ));
                }
                reshape(&mut b, input(0)?, &out_val.phys).map_err(|e| e.0)?
            }
            _ => return Err(unsupported()),
        };
        tensors.insert(o.output, t.clone());
        last = Some(t);
    }
    let out = last.ok_or("an empty group")?;
    Ok(b.finish(&[&out]))
}
