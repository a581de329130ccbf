//! The textbook GEMM loop nest: the naive baseline of the GEMM benchmark and the smallest
//! real kernel the IR, interpreter and codegen tests run.
use super::ir::*;

/// `C[i, j] = sum_k A[i, k] * B[k, j]` as three plain loops with an explicit init; `rows`
/// is the kind of the `i` loop. Also the smallest real kernel the IR tests run.
pub fn textbook_gemm_kernel(name: &str, m: i64, n: i64, k: i64, rows: ForKind) -> Kernel {
    let v = Expr::var;
    let body = Stmt::loop_(
        "i",
        m,
        rows,
        Stmt::loop_(
            "j",
            n,
            ForKind::Serial,
            Stmt::seq(vec![
                Stmt::store("C", vec![v("i"), v("j")], Expr::f32(0.0)),
                Stmt::loop_(
                    "k",
                    k,
                    ForKind::Serial,
                    Stmt::store(
                        "C",
                        vec![v("i"), v("j")],
                        Expr::add(
                            Expr::load("C", vec![v("i"), v("j")]),
                            Expr::mul(
                                Expr::load("A", vec![v("i"), v("k")]),
                                Expr::load("B", vec![v("k"), v("j")]),
                            ),
                        ),
                    ),
                ),
            ]),
        ),
    );
    Kernel::new(
        name,
        vec![
            Buffer::new("A", DType::F32, &[m, k], BufferRole::Input),
            Buffer::new("B", DType::F32, &[k, n], BufferRole::Input),
            Buffer::new("C", DType::F32, &[m, n], BufferRole::Output),
        ],
        body,
    )
}
