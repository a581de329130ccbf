//! ONNX `Mish` (opset 18: `y = x * tanh(softplus(x))`, `softplus(x) = ln(1 + exp(x))`), the
//! worked example of `docs/adding-an-op.md`: its shape rule, its fusion into the conv
//! before it as one tuned kernel (`x * tanh(log(1 + exp(x)))`, the expansion of
//! `ttdb_algo::ops::activation::MISH`), the recognition of that kernel's workload key by
//! md5, and the compiled kernel's values against the formula computed here directly.
use crate::common;
use ttdb::codegen::{compile, CodegenOptions, RunOptions};
use ttdb::ir::eval::TensorData;
use ttdb::ir::print_dag;
use ttdb::loopnest::ir::BufferRole;
use ttdb::loopnest::BufferData;
use ttdb::lower::check::kernel_args;
use ttdb::lower::lower_default;
use ttdb::onnx::{self, KernelKind, KernelList, Options};
use ttdb_testkit::onnx_model::{attr_ints, ModelBuilder};

const CLASS: &str = "conv2d_nchwc+add+exp+add_scalar+log+tanh+multiply@1";

/// `input [1, 4, 6, 6] -> Conv 3x3 pad 1 (+ bias) -> Mish -> output`.
fn conv_mish_model() -> Vec<u8> {
    let mut b = ModelBuilder::new("conv_mish", 18);
    b.input("input", &[1, 4, 6, 6]);
    b.weight("c.weight", &[4, 4, 3, 3]).weight("c.bias", &[4]);
    b.node(
        "Conv",
        "/c/Conv",
        &["input", "c.weight", "c.bias"],
        &["conv"],
        vec![
            attr_ints("kernel_shape", &[3, 3]),
            attr_ints("pads", &[1; 4]),
        ],
    );
    b.node("Mish", "/c/Mish", &["conv"], &["output"], vec![]);
    b.output("output");
    b.encode()
}

fn kernels(bytes: &[u8]) -> KernelList {
    let g = onnx::load_bytes(bytes, &[]).unwrap();
    onnx::extract(&g, &Options::default()).unwrap()
}

fn mish(x: f64) -> f64 {
    x * (1.0 + x.exp()).ln().tanh()
}

#[test]
fn mish_keeps_its_input_shape() {
    let mut b = ModelBuilder::new("mish", 18);
    b.input("x", &[2, 3, 5, 7]);
    b.node("Mish", "/Mish", &["x"], &["y"], vec![]);
    b.output("y");
    let g = onnx::load_bytes(&b.encode(), &[]).unwrap();
    assert_eq!(g.shape("y"), Some(&[2, 3, 5, 7][..]));
    assert_eq!(g.tensor("y").unwrap().dtype, g.tensor("x").unwrap().dtype);
}

/// The whole activation is in the conv's task: the conv (kOutEWiseFusable) fuses into its
/// immediate post-dominator, the multiply that ends Mish's diamond.
#[test]
fn conv_mish_is_one_tuned_kernel() {
    let list = kernels(&conv_mish_model());
    let anchored: Vec<_> = list.kernels.iter().filter(|k| k.is_anchored()).collect();
    assert_eq!(anchored.len(), 1, "{list:#?}");
    let k = anchored[0];
    assert_eq!(k.kind, KernelKind::Tuned, "{k:?}");
    assert_eq!(k.class, CLASS);
    assert_eq!(
        k.occurrences[0],
        vec!["/c/Conv".to_string(), "/c/Mish".to_string()]
    );
    assert_eq!(
        k.inputs,
        vec![
            vec![1, 1, 6, 6, 4],
            vec![1, 1, 3, 3, 4, 4],
            vec![1, 1, 1, 1, 4]
        ]
    );
    assert_eq!(k.output, vec![1, 1, 6, 6, 4]);
}

/// TOPI's stages after the bias add, in the post-order DFS from the output: the constant 1
/// as a `compile_engine_const` (the add's left operand, so met before the `T_exp` on its
/// right), the add, `T_log`, `T_tanh`, and the multiply of the bias add's output (the
/// diamond's other branch) by the tanh.
#[test]
fn conv_mish_prints_like_tvm() {
    let list = kernels(&conv_mish_model());
    let k = list.kernels.iter().find(|k| k.class == CLASS).unwrap();
    let text = print_dag(&common::kernel_dag(k));
    assert_eq!(
        &text[text.find("T_add(").unwrap()..],
        "T_add(ax0, ax1, ax2, ax3, ax4) = (conv2d_NCHWc[ax0, ax1, ax2, ax3, ax4] + p2[ax0, ax1, 0, 0, ax4])\n\
         compile_engine_const() = 1f\n\
         T_exp(ax0, ax1, ax2, ax3, ax4) = Op(tir.exp)\n\
         T_add(ax0, ax1, ax2, ax3, ax4) = (compile_engine_const[] + T_exp[ax0, ax1, ax2, ax3, ax4])\n\
         T_log(ax0, ax1, ax2, ax3, ax4) = Op(tir.log)\n\
         T_tanh(ax0, ax1, ax2, ax3, ax4) = Op(tir.tanh)\n\
         T_multiply(ax0, ax1, ax2, ax3, ax4) = (T_add[ax0, ax1, ax2, ax3, ax4]*T_tanh[ax0, ax1, ax2, ax3, ax4])\n"
    );
}

/// The kernel's workload key (the md5 of its PrintDAG text) is recognized by md5 under the
/// kernel's own signature: recognition tries the activation table's Mish chain.
#[test]
fn conv_mish_key_is_recognized_by_md5() {
    let list = kernels(&conv_mish_model());
    let k = list.kernels.iter().find(|k| k.class == CLASS).unwrap();
    let r = common::recognized_by_md5(k, &common::kernel_dag(k));
    assert_eq!(r.signature.op_class, CLASS);
}

/// The fused kernel, compiled under the default schedule, computes `mish(conv(x) + b)`:
/// the conv is summed here in the NCHW4c / OIHW4i4o layouts the kernel reads (one channel
/// block of 4), Mish is the formula above, in f64.
#[test]
fn conv_mish_kernel_computes_mish() {
    let list = kernels(&conv_mish_model());
    let k = list.kernels.iter().find(|k| k.class == CLASS).unwrap();
    let dag = common::kernel_dag(k);
    // key order is canonical order here: no operand comes first
    assert_eq!(dag.placeholder_shapes(), k.inputs);
    let (h, w, c, kk) = (6usize, 6usize, 4usize, 3usize);
    let data: Vec<f64> = (0..h * w * c)
        .map(|i| ((i * 7) % 13) as f64 / 6.0 - 1.0)
        .collect();
    let weight: Vec<f64> = (0..kk * kk * c * c)
        .map(|i| ((i * 5) % 11) as f64 / 10.0 - 0.5)
        .collect();
    let bias: Vec<f64> = (0..c).map(|o| o as f64 * 0.25 - 0.5).collect();
    let mut want = vec![0.0; h * w * c];
    for y in 0..h {
        for x in 0..w {
            for o in 0..c {
                let mut acc = bias[o];
                for ky in 0..kk {
                    for kx in 0..kk {
                        let (iy, ix) = (y + ky, x + kx);
                        if iy < 1 || ix < 1 || iy > h || ix > w {
                            continue; // the zero padding
                        }
                        for i in 0..c {
                            let d = data[((iy - 1) * w + (ix - 1)) * c + i];
                            let wt = weight[((ky * kk + kx) * c + i) * c + o];
                            acc += d * wt;
                        }
                    }
                }
                want[(y * w + x) * c + o] = mish(acc);
            }
        }
    }
    assert!(want.iter().any(|&v| v < 0.0) && want.iter().any(|&v| v > 1.0));
    let inputs = vec![
        TensorData::new(&k.inputs[0], data),
        TensorData::new(&k.inputs[1], weight),
        TensorData::new(&k.inputs[2], bias),
    ];
    let kernel = lower_default(&dag).unwrap();
    let compiled = compile(&kernel, &CodegenOptions::default()).unwrap();
    let mut args = kernel_args(&kernel, &inputs).unwrap();
    compiled.run(&mut args, &RunOptions::default()).unwrap();
    let out = kernel
        .params
        .iter()
        .zip(&args)
        .find(|(p, _)| p.role == BufferRole::Output)
        .map(|(_, b)| b)
        .unwrap();
    let BufferData::F32(got) = out else {
        panic!("a float32 output, got {out:?}");
    };
    assert_eq!(got.len(), want.len());
    for (i, (&g, &e)) in got.iter().zip(&want).enumerate() {
        assert!(
            (f64::from(g) - e).abs() <= 1e-5 * e.abs().max(1.0),
            "element {i}: kernel {g}, mish {e}"
        );
    }
}
