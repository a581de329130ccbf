//! Window attributes of convolutions and pools (kernel, strides, dilations, pads with
//! `auto_pad`, ceil mode) and the output sizes they give. Numbers come from the file, so the
//! arithmetic is checked (i128) and bounded.
use super::error::{OnnxError, Result};
use super::graph::Node;

/// Resolved window attributes of a conv or pool over the spatial dims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    pub kernel: Vec<i64>,
    pub strides: Vec<i64>,
    pub dilations: Vec<i64>,
    /// Per spatial dim (begin, end).
    pub pads: Vec<(i64, i64)>,
}

/// Conv attributes: window plus `group`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvParams {
    pub window: Window,
    pub group: i64,
}

/// Pool attributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolParams {
    pub window: Window,
    pub ceil_mode: bool,
    pub count_include_pad: bool,
}

fn spatial_attr(
    node: &Node,
    name: &str,
    n: usize,
    default: i64,
) -> std::result::Result<Vec<i64>, String> {
    match node.ints(name) {
        Some(v) if v.len() == n => Ok(v.to_vec()),
        Some(v) => Err(format!(
            "`{name}` {v:?} has {} values for {n} spatial dims",
            v.len()
        )),
        None => Ok(vec![default; n]),
    }
}

fn window(node: &Node, spatial: &[i64], kernel: Vec<i64>, ceil_mode: bool) -> Result<Window> {
    let n = spatial.len();
    let bad = |msg: String| OnnxError::Shape {
        node: node.name.clone(),
        op: node.op_type.clone(),
        msg,
    };
    let strides = spatial_attr(node, "strides", n, 1).map_err(bad)?;
    let dilations = spatial_attr(node, "dilations", n, 1).map_err(bad)?;
    if kernel.len() != n
        || kernel
            .iter()
            .chain(&strides)
            .chain(&dilations)
            .any(|&v| v <= 0 || v > 1 << 20)
    {
        return Err(bad(format!("kernel {kernel:?}, strides {strides:?} and dilations {dilations:?} must be positive, one per spatial dim ({n})")));
    }
    let auto_pad = node.string("auto_pad").unwrap_or("NOTSET");
    let pads = match auto_pad {
        "NOTSET" | "" => {
            let p = match node.ints("pads") {
                Some(p) if p.len() == 2 * n => p.to_vec(),
                Some(p) => return Err(bad(format!("pads {p:?} for {n} spatial dims"))),
                None => vec![0; 2 * n],
            };
            if p.iter().any(|&v| !(0..=1 << 20).contains(&v)) {
                return Err(bad(format!("pads {p:?} out of range")));
            }
            (0..n).map(|i| (p[i], p[i + n])).collect()
        }
        "VALID" => vec![(0, 0); n],
        "SAME_UPPER" | "SAME_LOWER" => (0..n)
            .map(|i| {
                let (x, st) = (spatial[i] as i128, strides[i] as i128);
                let out = (x + st - 1) / st;
                let dk = ((kernel[i] - 1) * dilations[i] + 1) as i128;
                let total = ((out - 1) * st + dk - x).clamp(0, 1 << 40) as i64;
                let small = total / 2;
                if auto_pad == "SAME_UPPER" {
                    (small, total - small)
                } else {
                    (total - small, small)
                }
            })
            .collect(),
        other => return Err(bad(format!("auto_pad `{other}`"))),
    };
    let _ = ceil_mode;
    Ok(Window {
        kernel,
        strides,
        dilations,
        pads,
    })
}

/// Conv attributes resolved against the data and weight shapes.
pub fn conv_params(node: &Node, x: &[i64], w: &[i64]) -> Result<ConvParams> {
    let bad = |msg: String| OnnxError::Shape {
        node: node.name.clone(),
        op: node.op_type.clone(),
        msg,
    };
    if x.len() < 3 || w.len() != x.len() {
        return Err(bad(format!(
            "data {x:?} and weight {w:?} ranks do not fit a convolution"
        )));
    }
    let group = node.int("group").unwrap_or(1);
    if group <= 0 || x[1] % group != 0 || w[0] % group != 0 || w[1].checked_mul(group) != Some(x[1])
    {
        return Err(bad(format!(
            "data {x:?}, weight {w:?} and group {group} are inconsistent"
        )));
    }
    let kernel = match node.ints("kernel_shape") {
        Some(k) if k != &w[2..] => {
            return Err(bad(format!(
                "kernel_shape {k:?} differs from the weight {w:?}"
            )))
        }
        _ => w[2..].to_vec(),
    };
    Ok(ConvParams {
        window: window(node, &x[2..], kernel, false)?,
        group,
    })
}

/// Pool attributes resolved against the data shape.
pub fn pool_params(node: &Node, x: &[i64]) -> Result<PoolParams> {
    let bad = |msg: String| OnnxError::Shape {
        node: node.name.clone(),
        op: node.op_type.clone(),
        msg,
    };
    if x.len() < 3 {
        return Err(bad(format!("data {x:?} has no spatial dims")));
    }
    let kernel = node
        .ints("kernel_shape")
        .map(<[i64]>::to_vec)
        .ok_or_else(|| bad("missing kernel_shape".into()))?;
    let ceil_mode = node.int("ceil_mode").unwrap_or(0) != 0;
    Ok(PoolParams {
        window: window(node, &x[2..], kernel, ceil_mode)?,
        ceil_mode,
        count_include_pad: node.int("count_include_pad").unwrap_or(0) != 0,
    })
}

/// Output spatial sizes of a window over `spatial` (errors name the node).
pub fn spatial_out(node: &Node, spatial: &[i64], w: &Window, ceil_mode: bool) -> Result<Vec<i64>> {
    let err = |msg: String| OnnxError::Shape {
        node: node.name.clone(),
        op: node.op_type.clone(),
        msg,
    };
    let mut out = Vec::with_capacity(spatial.len());
    #[allow(clippy::needless_range_loop)]
    for i in 0..spatial.len() {
        // i128: dims, pads and strides come from the file
        let dk = ((w.kernel[i] - 1) * w.dilations[i] + 1) as i128;
        let padded = spatial[i] as i128 + w.pads[i].0 as i128 + w.pads[i].1 as i128;
        if padded < dk {
            return Err(err(format!(
                "window {dk} larger than the padded input {padded} on spatial dim {i}"
            )));
        }
        let s = w.strides[i] as i128;
        let mut o = if ceil_mode {
            (padded - dk + s - 1) / s + 1
        } else {
            (padded - dk) / s + 1
        };
        // a last window starting inside the end padding is dropped (PyTorch / ONNX >= 1.16)
        if ceil_mode && (o - 1) * s >= spatial[i] as i128 + w.pads[i].0 as i128 {
            o -= 1;
        }
        out.push(i64::try_from(o).map_err(|_| err("output size overflows".into()))?);
    }
    Ok(out)
}
