//! The CPU draft estimate: a static, roofline-style time of a lowered loop nest, cheap enough
//! to prune candidates before the learned model ranks them (Pruner's draft-then-verify,
//! whose analyzer is GPU-only; this is a CPU analogue).
//!
//! Per store: `max(compute, memory)` cycles, then divided over the cores the parallel loops
//! keep busy.
//! - compute: flops over the vector lanes the vectorized loop fills (a scalar loop uses one),
//!   two FMA pipes; a reduction whose register tile has fewer independent accumulators than
//!   the FMA latency hides is latency-bound, one past the register file spills; every
//!   iteration of the innermost loop that is not vectorized or unrolled costs a cycle.
//! - memory: per cache level, the outermost loop whose footprint fits in that level brings
//!   its footprint in on every iteration of the loops outside it, at the bandwidth of the
//!   level below.
//! - parallel balance: `P` parallel iterations on `C` cores run `ceil(P/C)` waves.
//!
//! The constants are a generic modern x86 core; ranking within one task needs ratios, not
//! absolute accuracy, and the learned model corrects the rest (the terms are also features).
use super::features::{DraftTerms, StoreInfo};
use super::sketch::HardwareParams;
use ttdb_backend::loopnest::ir::ForKind;

const FREQ_HZ: f64 = 3.0e9;
const FMA_PIPES: f64 = 2.0;
const FMA_LATENCY: f64 = 4.0;
/// (capacity in bytes, bandwidth from the level below in bytes/cycle) for L1, L2, L3.
const CACHES: [(f64, f64); 3] = [
    (32.0 * 1024.0, 64.0),
    (1024.0 * 1024.0, 32.0),
    (16.0 * 1024.0 * 1024.0, 8.0),
];
/// Cycles to start a parallel region (thread wake-up and join).
const PARALLEL_LAUNCH: f64 = 3000.0;

/// The draft time of a kernel in seconds (lower is better), and each store's terms.
pub fn draft_estimate(stores: &[StoreInfo], hw: &HardwareParams) -> (f64, Vec<DraftTerms>) {
    let lanes = hw.vector_lanes.max(1) as f64;
    let cores = hw.num_cores.max(1) as f64;
    let registers = if lanes >= 16.0 { 32.0 } else { 16.0 };
    let mut total = 0.0;
    let mut terms = Vec::with_capacity(stores.len());
    for s in stores {
        let n = s.executions();
        // Vector lane use of the innermost vectorized loop.
        let lane_use = s
            .loops_of(ForKind::Vectorized)
            .last()
            .map_or(1.0 / lanes, |(_, l)| {
                l.extent / ((l.extent / lanes).ceil().max(1.0) * lanes)
            });
        let mut compute = s.ops.flops().max(1.0) * n / (2.0 * FMA_PIPES * lanes * lane_use);
        // Register tile of a reduction: store elements live across the innermost reduction loop.
        let store = s.store();
        let is_reduction = s.accesses[1..].iter().any(|a| a.buf == store.buf);
        let mut register_tile = 0.0;
        if is_reduction {
            if let Some(r) = s.innermost_reduction() {
                register_tile = store.footprint_elems(&s.loops, r + 1);
                let vectors = (register_tile / lanes).ceil().max(1.0);
                let needed = FMA_LATENCY * FMA_PIPES;
                if vectors < needed {
                    compute *= needed / vectors;
                } else if vectors > registers - 4.0 {
                    compute *= 1.0 + 2.0 * (vectors - (registers - 4.0)) / registers;
                }
            }
        }
        // Loop overhead of the innermost loop that is neither vectorized nor unrolled.
        if let Some(d) = s
            .loops
            .iter()
            .rposition(|l| l.kind == ForKind::Serial || l.kind == ForKind::Parallel)
        {
            let body_iters: f64 = s.loops[..=d].iter().map(|l| l.extent).product();
            if s.auto_unroll
                < s.loops[d + 1..].iter().map(|l| l.extent).product::<f64>() * s.loops[d].extent
            {
                compute += body_iters;
            }
        }
        // Memory: per cache level, what the loops outside the fitting loop bring in.
        let mut memory: f64 = 0.0;
        for (capacity, bandwidth) in CACHES {
            let depth = s.loops.len();
            let fits = (0..=depth).find(|&d| {
                s.accesses
                    .iter()
                    .map(|a| a.footprint_elems(&s.loops, d) * a.elem_bytes)
                    .sum::<f64>()
                    <= capacity
            });
            let d = fits.unwrap_or(depth);
            let footprint: f64 = s
                .accesses
                .iter()
                .map(|a| a.footprint_lines(&s.loops, d) * 64.0)
                .sum();
            let outer: f64 = s.loops[..d].iter().map(|l| l.extent).product();
            memory = memory.max(footprint * outer / bandwidth);
        }
        // Parallel balance and launch cost.
        let par: Vec<(usize, f64)> = s
            .loops_of(ForKind::Parallel)
            .map(|(d, l)| (d, l.extent))
            .collect();
        let (efficiency, speedup, launches) = match par.first() {
            None => (1.0 / cores, 1.0, 0.0),
            Some(&(d, _)) => {
                let p: f64 = par.iter().map(|x| x.1).product();
                let waves = (p / cores).ceil().max(1.0);
                let launches: f64 = s.loops[..d].iter().map(|l| l.extent).product();
                (p / (waves * cores), p / waves, launches)
            }
        };
        let cycles = compute.max(memory) / speedup + launches * PARALLEL_LAUNCH;
        total += cycles;
        terms.push(DraftTerms {
            compute: compute / FREQ_HZ,
            memory: memory / FREQ_HZ,
            parallel_efficiency: efficiency,
            register_tile,
        });
    }
    (total / FREQ_HZ, terms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::cost_model::program_features;
    use crate::search::features::STORE_FEATURES;
    use crate::search::init::Sampler;
    use crate::search::rng::Rng;
    use crate::search::sketch::{generate_sketches, tests::matmul};
    use ttdb_backend::lower::{lower_steps, LowerOptions};

    const HW: HardwareParams = HardwareParams {
        num_cores: 2,
        vector_lanes: 16,
    };

    /// The naive nest (one scalar thread, a 512-long dot product per element, B read with
    /// stride 512) must draft far slower than the best tiled, vectorized, parallel sample.
    #[test]
    fn tiled_vectorized_parallel_matmul_drafts_faster_than_naive() {
        let dag = matmul(512, 512, 512);
        let naive = lower_steps(&dag, &[], &LowerOptions::default()).unwrap();
        let naive = program_features(&naive, &HW);
        assert_eq!(naive.rows.len(), 2, "the init and the update of C");
        assert_eq!(naive.rows[0].len(), STORE_FEATURES);
        let sketches = generate_sketches(&dag, &HW).unwrap();
        let mut sampler = Sampler::new(&dag, HW);
        let mut rng = Rng::new(3);
        let mut best = f64::INFINITY;
        for i in 0..40 {
            let Ok(st) = sampler.sample(&sketches[i % sketches.len()], &mut rng) else {
                continue;
            };
            let k = lower_steps(&dag, st.transform_steps(), &LowerOptions::default()).unwrap();
            let f = program_features(&k, &HW);
            assert!(f.rows.iter().all(|r| r.iter().all(|v| v.is_finite())));
            best = best.min(f.draft_seconds);
        }
        eprintln!("naive {} s, best sample {} s", naive.draft_seconds, best);
        // 2·512³ flops at one scalar flop per cycle is ~90 ms; the best sample is ~1 ms.
        assert!(
            naive.draft_seconds > 20.0 * best,
            "naive {} vs best {}",
            naive.draft_seconds,
            best
        );
        assert!(
            naive.draft_seconds > 0.05 && naive.draft_seconds < 1.0,
            "{}",
            naive.draft_seconds
        );
    }
}
