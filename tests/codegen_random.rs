//! Property test: random expression kernels under random loop kinds give the same results
//! through the JIT as through the reference interpreter.

use proptest::prelude::*;
use ttdb::codegen::{compile, CodegenOptions};
use ttdb::loopnest::ir::*;
use ttdb::measure::verify_against_interpreter;

fn leaf() -> impl Strategy<Value = Expr> {
    let v = Expr::var;
    prop_oneof![
        Just(Expr::load("A", vec![v("i"), v("j")])),
        Just(Expr::load("A", vec![v("j"), v("i")])),
        Just(Expr::load("B", vec![v("j")])),
        Just(Expr::load("B", vec![v("i")])),
        Just(Expr::load(
            "B",
            vec![Expr::floormod(
                Expr::mul(v("j"), Expr::int(3)),
                Expr::int(16)
            )]
        )),
        (-4i32..4).prop_map(|c| Expr::f32(c as f64 * 0.5)),
        Just(Expr::cast(DType::F32, Expr::sub(v("i"), v("j")))),
    ]
}

fn expr() -> impl Strategy<Value = Expr> {
    leaf().prop_recursive(4, 24, 3, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Expr::add(a, b)),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Expr::sub(a, b)),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Expr::mul(a, b)),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Expr::min(a, b)),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Expr::max(a, b)),
            (inner.clone(), inner.clone(), inner.clone(), inner.clone())
                .prop_map(|(a, b, t, f)| Expr::select(Expr::lt(a, b), t, f)),
            inner
                .clone()
                .prop_map(|a| Expr::call(Intrinsic::Fabs, vec![a])),
            inner
                .clone()
                .prop_map(|a| Expr::call(Intrinsic::Tanh, vec![a])),
            // guarded load: only valid under the condition
            inner.prop_map(|t| Expr::select(
                Expr::lt(Expr::var("j"), Expr::int(12)),
                Expr::add(t, Expr::load("C", vec![Expr::var("j")])),
                Expr::f32(0.0),
            )),
        ]
    })
}

fn kernel(e: Expr, outer: ForKind, inner: ForKind) -> Kernel {
    let v = Expr::var;
    Kernel::new(
        "random",
        vec![
            Buffer::new("A", DType::F32, &[16, 16], BufferRole::Input),
            Buffer::new("B", DType::F32, &[16], BufferRole::Input),
            Buffer::new("C", DType::F32, &[12], BufferRole::Input),
            Buffer::new("O", DType::F32, &[16, 16], BufferRole::Output),
        ],
        Stmt::loop_(
            "i",
            16,
            outer,
            Stmt::loop_("j", 16, inner, Stmt::store("O", vec![v("i"), v("j")], e)),
        ),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]
    #[test]
    fn jit_matches_interpreter(
        e in expr(),
        outer in prop_oneof![Just(ForKind::Serial), Just(ForKind::Parallel), Just(ForKind::Unrolled)],
        inner in prop_oneof![Just(ForKind::Serial), Just(ForKind::Vectorized), Just(ForKind::Unrolled)],
        seed in 0u64..1000,
    ) {
        let k = kernel(e, outer, inner);
        let c = compile(&k, &CodegenOptions::default()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        verify_against_interpreter(&c, seed).map_err(TestCaseError::fail)?;
    }
}
