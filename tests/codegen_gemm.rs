//! GEMM fixture correctness (JIT vs interpreter) and the FMA peak kernel, on small sizes.
//! Performance numbers come from `cargo bench --bench gemm` (no timing assertions here).

use ttdb::codegen::{compile, CodegenOptions, RunOptions};
use ttdb::loopnest::check_bounds;
use ttdb::measure::gemm::{gemm_kernel, gemm_naive_kernel, GemmSchedule};
use ttdb::measure::peak::fma_kernel;
use ttdb::measure::verify_against_interpreter;

#[test]
fn gemm_fixture_matches_interpreter() {
    // n = 80 is not a multiple of the 24-column panel: exercises padding and guarded tails.
    for (m, n, k, kc) in [(48, 80, 40, 8), (16, 24, 8, 0), (16, 40, 12, 5)] {
        for pack_a in [false, true] {
            let kern = gemm_kernel(
                m,
                n,
                k,
                &GemmSchedule {
                    kc,
                    pack_a,
                    ..GemmSchedule::default()
                },
            );
            assert!(check_bounds(&kern).unwrap().is_empty());
            let c = compile(&kern, &CodegenOptions::default()).unwrap();
            assert!(c.stats.vector_loops > 0);
            verify_against_interpreter(&c, 11).unwrap();
        }
    }
    let naive = compile(&gemm_naive_kernel(12, 20, 9), &CodegenOptions::default()).unwrap();
    verify_against_interpreter(&naive, 5).unwrap();
}

#[test]
fn fma_peak_kernel_runs() {
    let k = fma_kernel(8, 2, 100);
    let c = compile(&k, &CodegenOptions::default()).unwrap();
    verify_against_interpreter(&c, 1).unwrap();
    let mut bufs = vec![
        ttdb::loopnest::BufferData::F32(vec![0.5, 1.0]),
        ttdb::loopnest::BufferData::zeros(ttdb::loopnest::DType::F32, 2 * 12 * 8),
    ];
    c.run(
        &mut bufs,
        &RunOptions {
            threads: Some(2),
            timeout: None,
        },
    )
    .unwrap();
    // x ← 0.5·x + 1 converges to 2.
    assert!(bufs[1]
        .as_f32()
        .unwrap()
        .iter()
        .all(|&v| (v - 2.0).abs() < 1e-3));
}
