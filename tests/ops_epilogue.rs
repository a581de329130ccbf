//! The element-wise epilogue ops fused after an anchor (sigmoid, exp, erf, sqrt, tanh,
//! subtract, divide, power, and binaries with a scalar constant): each DAG, run by the
//! reference evaluator, equals the op's definition applied to the anchor's output; the
//! PrintDAG text (and so the workload key's md5) is TVM's, written out here from TOPI's
//! rules on top of real, md5-verified key texts; keys with these epilogues are recognized
//! by md5; the kernels lower, compile and verify under the default schedule.
use ttdb::ansor::WorkloadKey;
use ttdb::evaluate::{evaluate_default, EvalOptions, Reference};
use ttdb::ir::eval::{evaluate, random_inputs, TensorData};
use ttdb::ir::printdag::md5_hex;
use ttdb::ir::{dag_hash, print_dag, Dag};
use ttdb::ops::{Anchor, EpilogueOp, Era, ScalarOp, Window2d, WorkloadSpec};
use ttdb::recognize::{recognize_uncached, RecognizedBy};

extern "C" {
    // libm's erf, the one TVM's kernels call
    fn erf(x: f64) -> f64;
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

const DENSE: [[i64; 2]; 2] = [[3, 5], [4, 5]];

/// dense [3,5]x[4,5] + epilogue; returns the DAG, its inputs, its output and the dense
/// output alone (evaluated on the same data).
fn dense_with(
    epilogue: Vec<EpilogueOp>,
    operands: &[Vec<i64>],
) -> (Dag, Vec<TensorData>, TensorData, TensorData) {
    let spec = WorkloadSpec::new(Anchor::Dense, epilogue);
    let mut canonical: Vec<Vec<i64>> = DENSE.iter().map(|s| s.to_vec()).collect();
    canonical.extend(operands.iter().cloned());
    let dag = spec.build(Era::V015, &canonical).unwrap();
    // key order -> canonical order of the random inputs
    let keyed = random_inputs(&dag, 7);
    let mut ins = vec![TensorData::zeros(&[]); keyed.len()];
    for (pos, &c) in spec.key_order().iter().enumerate() {
        ins[c] = keyed[pos].clone();
    }
    let out = evaluate(&dag, &keyed).unwrap().remove(0);
    let plain = WorkloadSpec::new(Anchor::Dense, vec![]);
    let pdag = plain.build(Era::V015, &canonical[..2]).unwrap();
    let anchor = evaluate(&pdag, &ins[..2]).unwrap().remove(0);
    (dag, ins, out, anchor)
}

fn assert_close(got: &TensorData, want: &[f64], tol: f64) {
    assert_eq!(got.data.len(), want.len());
    for (i, (a, b)) in got.data.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= tol, "element {i}: {a} vs {b}");
    }
}

#[test]
fn unary_ops_apply_their_function() {
    type Case = (EpilogueOp, &'static str, fn(f64) -> f64);
    let cases: [Case; 4] = [
        (EpilogueOp::Sigmoid, "T_sigmoid", sigmoid),
        (EpilogueOp::Exp, "T_exp", f64::exp),
        (EpilogueOp::Tanh, "T_tanh", f64::tanh),
        (EpilogueOp::Erf, "T_erf", |x| unsafe { erf(x) }),
    ];
    for (op, name, f) in cases {
        let (dag, _, out, anchor) = dense_with(vec![op], &[]);
        let last = dag.stage(dag.output());
        assert_eq!(last.name, name);
        assert_eq!(last.compute().unwrap().tag, "elemwise");
        let want: Vec<f64> = anchor.data.iter().map(|&x| f(x)).collect();
        assert_close(&out, &want, 1e-12);
    }
    // sqrt of a positive value (after the sigmoid)
    let (dag, _, out, anchor) = dense_with(vec![EpilogueOp::Sigmoid, EpilogueOp::Sqrt], &[]);
    assert_eq!(dag.stage(dag.output()).name, "T_sqrt");
    let want: Vec<f64> = anchor.data.iter().map(|&x| sigmoid(x).sqrt()).collect();
    assert_close(&out, &want, 1e-12);
}

#[test]
fn subtract_divide_power_follow_operand_order() {
    let bias = vec![1, 4];
    for first in [false, true] {
        for (op, name) in [
            (
                EpilogueOp::Subtract {
                    operand_first: first,
                },
                "T_subtract",
            ),
            (
                EpilogueOp::Divide {
                    operand_first: first,
                },
                "T_divide",
            ),
        ] {
            let (dag, ins, out, anchor) = dense_with(vec![op], std::slice::from_ref(&bias));
            assert_eq!(dag.stage(dag.output()).name, name);
            assert_eq!(dag.stage(dag.output()).compute().unwrap().tag, "broadcast");
            // an operand-first placeholder is met first by the post-order DFS
            assert_eq!(dag.stages[0].name, if first { "p2" } else { "p0" });
            let want: Vec<f64> = anchor
                .data
                .iter()
                .enumerate()
                .map(|(i, &x)| {
                    let b = ins[2].data[i % 4];
                    let (l, r) = if first { (b, x) } else { (x, b) };
                    if name == "T_subtract" {
                        l - r
                    } else {
                        l / r
                    }
                })
                .collect();
            assert_close(&out, &want, 1e-12);
        }
    }
    // power with a `[1]` tensor exponent, on positive bases
    let (dag, ins, out, anchor) = dense_with(
        vec![
            EpilogueOp::Sigmoid,
            EpilogueOp::Power {
                operand_first: false,
            },
        ],
        &[vec![1]],
    );
    assert_eq!(dag.stage(dag.output()).name, "T_power");
    let e = ins[2].data[0];
    let want: Vec<f64> = anchor.data.iter().map(|&x| sigmoid(x).powf(e)).collect();
    assert_close(&out, &want, 1e-12);
}

#[test]
fn scalar_constants_are_compile_engine_const_stages() {
    for op in ScalarOp::ALL {
        for first in [false, true] {
            // power's base must be positive: the sigmoid first
            let mut chain = vec![EpilogueOp::Sigmoid];
            chain.push(EpilogueOp::Scalar {
                op,
                value: 3.0,
                operand_first: first,
            });
            let (dag, ins, out, anchor) = dense_with(chain, &[]);
            assert_eq!(ins.len(), 2, "a scalar is no task input");
            let c = dag.find("compile_engine_const").unwrap();
            let cs = dag.stage(c);
            assert!(cs.compute().unwrap().axes.is_empty());
            assert_eq!(cs.compute().unwrap().tag, "broadcast");
            assert_eq!(dag.stage(dag.output()).name, format!("T_{}", op.name()));
            let want: Vec<f64> = anchor
                .data
                .iter()
                .map(|&x| {
                    let (l, r) = if first {
                        (3.0, sigmoid(x))
                    } else {
                        (sigmoid(x), 3.0)
                    };
                    match op {
                        ScalarOp::Add => l + r,
                        ScalarOp::Subtract => l - r,
                        ScalarOp::Multiply => l * r,
                        ScalarOp::Divide => l / r,
                        ScalarOp::Power => f64::powf(l, r),
                    }
                })
                .collect();
            assert_close(&out, &want, 1e-12);
        }
    }
}

/// A real key's PrintDAG text (md5 `63163dfa...`: conv2d_NCHWc 1x1 stride 2 + bias, TVM >=
/// 0.10, from `tvm_ansor_bench_nchwc/resnet_18.best.json`).
const NCHWC_CONV_BIAS: &str = "p0 = PLACEHOLDER \np1 = PLACEHOLDER \nconv2d_NCHWc(n, oc_chunk, oh, ow, oc_block) += (p0[n, floordiv(ic, 128), ((oh*2) + kh), ((ow*2) + kw), floormod(ic, 128)]*p1[oc_chunk, floordiv(ic, 128), kh, kw, floormod(ic, 128), oc_block])\np2 = PLACEHOLDER \nT_add(ax0, ax1, ax2, ax3, ax4) = (conv2d_NCHWc[ax0, ax1, ax2, ax3, ax4] + p2[ax0, ax1, 0, 0, ax4])\n";
const NCHWC_SHAPES: [[i64; 6]; 4] = [
    [1, 2, 14, 14, 128, 0],
    [16, 2, 1, 1, 128, 32],
    [1, 16, 1, 1, 32, 0],
    [1, 16, 7, 7, 32, 0],
];

fn shape(s: &[i64; 6]) -> Vec<i64> {
    s.iter().copied().filter(|&d| d != 0).collect()
}

fn nested_key(md5: &str, shapes: &[Vec<i64>]) -> WorkloadKey {
    let v: Vec<serde_json::Value> = std::iter::once(serde_json::json!(md5))
        .chain(shapes.iter().map(|s| serde_json::json!(s)))
        .collect();
    WorkloadKey::parse(&serde_json::to_string(&v).unwrap()).unwrap()
}

/// `T_sigmoid` is `TOPI_DECLARE_UNARY_OP(sigmoid)` (include/tvm/topi/elemwise.h): name
/// `T_sigmoid`, axes `ax*`, body one `tir.sigmoid` call, which PrintDAG prints as the op.
#[test]
fn conv_bias_sigmoid_prints_and_hashes_like_tvm() {
    assert_eq!(md5_hex(NCHWC_CONV_BIAS), "63163dfaa69dc65fc4319ac2dfa138da");
    let want = format!("{NCHWC_CONV_BIAS}T_sigmoid(ax0, ax1, ax2, ax3, ax4) = Op(tir.sigmoid)\n");
    let spec = WorkloadSpec::new(
        Anchor::Conv2dNchwc(Window2d::simple(2, 0)),
        vec![
            EpilogueOp::Add {
                operand_first: false,
            },
            EpilogueOp::Sigmoid,
        ],
    );
    let ins: Vec<Vec<i64>> = NCHWC_SHAPES[..3].iter().map(shape).collect();
    let dag = spec.build(Era::V015, &ins).unwrap();
    assert_eq!(print_dag(&dag), want);
    assert_eq!(dag_hash(&dag), "b47269555fa778d067a2bfb9e8007067");
    // a key with that hash is recognized by md5, as the sigmoid kernel
    let key = nested_key(
        "b47269555fa778d067a2bfb9e8007067",
        &NCHWC_SHAPES.iter().map(shape).collect::<Vec<_>>(),
    );
    let r = recognize_uncached(&key).unwrap();
    assert_eq!(r.recognized_by, RecognizedBy::Md5);
    assert_eq!(r.signature.op_class, "conv2d_nchwc+add+sigmoid");
}

/// `T_subtract` / `T_divide` are `TOPI_DEFINE_BCAST_OP` (include/tvm/topi/broadcast.h);
/// the subtract's tensor operand is the fused function's next parameter `p3`; the divisor,
/// a rank-0 relay constant, is `compile_engine_const()` (te_compiler_cache.cc), read with
/// no indices, and the post-order DFS meets it after the subtract.
#[test]
fn conv_bias_subtract_divide_prints_and_hashes_like_tvm() {
    let want = format!(
        "{NCHWC_CONV_BIAS}p3 = PLACEHOLDER \n\
         T_subtract(ax0, ax1, ax2, ax3, ax4) = (T_add[ax0, ax1, ax2, ax3, ax4] - p3[ax0, ax1, ax2, ax3, ax4])\n\
         compile_engine_const() = 6f\n\
         T_divide(ax0, ax1, ax2, ax3, ax4) = (T_subtract[ax0, ax1, ax2, ax3, ax4]/compile_engine_const[])\n"
    );
    let spec = WorkloadSpec::new(
        Anchor::Conv2dNchwc(Window2d::simple(2, 0)),
        vec![
            EpilogueOp::Add {
                operand_first: false,
            },
            EpilogueOp::Subtract {
                operand_first: false,
            },
            EpilogueOp::Scalar {
                op: ScalarOp::Divide,
                value: 6.0,
                operand_first: false,
            },
        ],
    );
    let mut ins: Vec<Vec<i64>> = NCHWC_SHAPES[..3].iter().map(shape).collect();
    ins.push(shape(&NCHWC_SHAPES[3]));
    let dag = spec.build(Era::V015, &ins).unwrap();
    assert_eq!(print_dag(&dag), want);
    assert_eq!(dag_hash(&dag), "50ac74470dcf2b0fd0c9fd240c4b4e75");
    let mut key_shapes = ins.clone();
    key_shapes.push(shape(&NCHWC_SHAPES[3]));
    let r =
        recognize_uncached(&nested_key("50ac74470dcf2b0fd0c9fd240c4b4e75", &key_shapes)).unwrap();
    assert_eq!(r.recognized_by, RecognizedBy::Md5);
    assert_eq!(
        r.signature.op_class,
        "conv2d_nchwc+add+subtract+divide_scalar"
    );
    assert_eq!(r.signature.attrs["scalars"], serde_json::json!([6.0]));
}

/// The dense + bias + tanh key of the BERT log (`39c1c9cb...`, TVM 0.8 names) with the
/// tanh swapped for each other unary op of `TOPI_DECLARE_UNARY_OP`, and for a power by the
/// rank-0 constant 2 (`T_power` = one `tir.pow` call, printed as the op).
#[test]
fn dense_epilogue_texts_follow_the_real_tanh_key() {
    let real = "placeholder = PLACEHOLDER \nplaceholder = PLACEHOLDER \nT_matmul_NT(i, j) += (placeholder[i, k]*placeholder[j, k])\nplaceholder = PLACEHOLDER \nT_expand_dims(ax0, ax1) = placeholder[ax1]\nT_add(ax0, ax1) = (T_matmul_NT[ax0, ax1] + T_expand_dims[ax0, ax1])\n";
    assert_eq!(
        md5_hex(&format!("{real}T_tanh(ax0, ax1) = Op(tir.tanh)\n")),
        "39c1c9cb5b1f8a9c3f5c1b049037f0ef"
    );
    let ins = vec![vec![1, 768], vec![768, 768], vec![768]];
    for (op, line) in [
        (EpilogueOp::Tanh, "T_tanh(ax0, ax1) = Op(tir.tanh)\n"),
        (
            EpilogueOp::Sigmoid,
            "T_sigmoid(ax0, ax1) = Op(tir.sigmoid)\n",
        ),
        (EpilogueOp::Exp, "T_exp(ax0, ax1) = Op(tir.exp)\n"),
        (EpilogueOp::Erf, "T_erf(ax0, ax1) = Op(tir.erf)\n"),
        (EpilogueOp::Sqrt, "T_sqrt(ax0, ax1) = Op(tir.sqrt)\n"),
        (
            EpilogueOp::Scalar {
                op: ScalarOp::Power,
                value: 2.0,
                operand_first: false,
            },
            "compile_engine_const() = 2f\nT_power(ax0, ax1) = Op(tir.pow)\n",
        ),
    ] {
        let spec = WorkloadSpec::new(Anchor::Dense, vec![EpilogueOp::ExpandAdd, op]);
        let dag = spec.build(Era::V08, &ins).unwrap();
        let want = format!("{real}{line}");
        assert_eq!(print_dag(&dag), want);
        // recognized from a key of that text's md5 and the shapes
        let mut shapes = ins.clone();
        shapes.push(vec![1, 768]);
        let r = recognize_uncached(&nested_key(&md5_hex(&want), &shapes)).unwrap();
        assert_eq!(r.recognized_by, RecognizedBy::Md5, "{line}");
        assert_eq!(r.spec.unwrap().epilogue[1], op);
    }
}

/// The default schedule (every stage at root, the constant stage included) lowers,
/// compiles and verifies against the reference for every new op.
#[test]
fn default_schedules_compile_and_verify() {
    let conv = Anchor::Conv2dNchwc(Window2d::simple(1, 1));
    let ins = vec![
        vec![1, 2, 6, 6, 4],
        vec![2, 2, 3, 3, 4, 4],
        vec![1, 2, 1, 1, 4],
    ];
    let bias = EpilogueOp::Add {
        operand_first: false,
    };
    let full = vec![1, 2, 6, 6, 4];
    let chains: Vec<(Vec<EpilogueOp>, Vec<Vec<i64>>)> = vec![
        (vec![bias, EpilogueOp::Sigmoid], vec![]),
        (vec![bias, EpilogueOp::Exp], vec![]),
        (vec![bias, EpilogueOp::Erf], vec![]),
        (vec![bias, EpilogueOp::Tanh], vec![]),
        (vec![bias, EpilogueOp::Sigmoid, EpilogueOp::Sqrt], vec![]),
        // a rank-0 placeholder (a scalar constant shared with another group)
        (
            vec![
                bias,
                EpilogueOp::Multiply {
                    operand_first: false,
                },
            ],
            vec![vec![]],
        ),
        (
            vec![
                bias,
                EpilogueOp::Subtract {
                    operand_first: true,
                },
                EpilogueOp::Divide {
                    operand_first: false,
                },
            ],
            vec![full.clone(), full.clone()],
        ),
        (
            vec![
                bias,
                EpilogueOp::Scalar {
                    op: ScalarOp::Subtract,
                    value: 0.5,
                    operand_first: true,
                },
                EpilogueOp::Scalar {
                    op: ScalarOp::Power,
                    value: 2.0,
                    operand_first: false,
                },
            ],
            vec![],
        ),
    ];
    let opts = EvalOptions {
        verify_only: true,
        ..EvalOptions::default()
    };
    for (chain, operands) in chains {
        let spec = WorkloadSpec::new(conv.clone(), chain);
        let mut canonical = ins.clone();
        canonical.extend(operands);
        let dag = spec.build(Era::V015, &canonical).unwrap();
        let reference = Reference::new(&dag, 3).unwrap();
        let e = evaluate_default(&dag, &reference, &opts);
        assert!(e.verified(), "{}: {:?}", spec.op_class(), e.failure);
    }
}
