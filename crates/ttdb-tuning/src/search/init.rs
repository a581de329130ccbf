//! The initial population: complete states sampled from sketches with TVM's CPU init
//! rules, in order (`sketch_policy_rules.cc`; `shared/spec/search.md` §2):
//! InitFillTileSize, InitChangeComputeLocation, InitParallel, InitUnroll,
//! InitVectorization. Each sample is a full step list, so an Ansor record.
//!
//! Where TVM asks a state after `InferBound` for the extent of a loop of an attached
//! stage, ttdb's state has none (bounds are inferred in lowering); such loops count as
//! extent 1, as TVM's `GetExtent` does for undefined ranges.
use super::rng::Rng;
use super::sketch::{is_tiled, stage_has_reduce_iter, Analysis, HardwareParams, Sketch};
use std::collections::HashMap;
use ttdb_algo::ir::Dag;
use ttdb_algo::schedule::{replay, ComputeAt, IterKind, StageInit, State};
use ttdb_format::ansor::step::{
    Annotation, AnnotationStep, ComputeAtStep, ComputeInlineStep, ComputeRootStep, FuseStep,
    PragmaStep,
};
use ttdb_format::ansor::Step;

/// TVM's `max_innermost_split_factor`.
pub const MAX_INNERMOST_SPLIT: i64 = 64;

/// `auto_unroll_max_step` values the initial population draws from (CPU).
pub const UNROLL_CHOICES: [i64; 4] = [0, 16, 64, 512];

/// Every ordered tuple of `n` lengths whose product divides `extent`, the innermost at
/// most `max_innermost` (`GetFactorizationSchemes`), memoized. For an awkward extent
/// ([`padded_extents`]), also those of the extents it rounds up to: the split then does not
/// divide its loop, and the lowering guards the partial tile.
#[derive(Default)]
pub struct FactorCache {
    schemes: HashMap<(i64, usize), Vec<Vec<i64>>>,
}

fn divisors(n: i64) -> Vec<i64> {
    let mut d: Vec<i64> = (1..)
        .take_while(|i| i * i <= n)
        .filter(|i| n % i == 0)
        .flat_map(|i| [i, n / i])
        .collect();
    d.sort_unstable();
    d.dedup();
    d
}

/// The extents an awkward one rounds up to for tiling (multiples of 8 and of 16), none for
/// others. Ansor splits by divisors only, so a loop of prime extent (vit_b_16's 197 tokens)
/// can only be tiled by 1 or by all of it: its dense layers ran on 1-row or 197-row tiles at
/// 48% of peak, where 8-row tiles of 200 rows (the last one partial) reach 58%. Awkward:
/// at least 32 and no divisor from 4 to 16.
pub fn padded_extents(extent: i64) -> Vec<i64> {
    if extent < 32 || (4..=16).any(|d| extent % d == 0) {
        return Vec::new();
    }
    let mut out: Vec<i64> = [8, 16].iter().map(|m| (extent + m - 1) / m * m).collect();
    out.dedup();
    out
}

/// The vector a loop of `extent` fills best on a host of `lanes` fp32 lanes: the widest
/// power of two up to `lanes` that divides the extent or one of its padded extents; 1 when
/// that is below 4 (no vector worth steering to).
pub fn vector_width(extent: i64, lanes: i64) -> i64 {
    let widest = std::iter::once(extent)
        .chain(padded_extents(extent))
        .map(|e| {
            let mut w = 1;
            while w * 2 <= lanes && e % (w * 2) == 0 {
                w *= 2;
            }
            w
        })
        .max()
        .unwrap_or(1);
    if widest >= 4 {
        widest
    } else {
        1
    }
}

impl FactorCache {
    pub fn schemes(&mut self, extent: i64, n: usize) -> &[Vec<i64>] {
        self.schemes.entry((extent, n)).or_insert_with(|| {
            let mut out = Vec::new();
            for e in std::iter::once(extent.max(1)).chain(padded_extents(extent)) {
                for scheme in Self::divisor_schemes(e, n) {
                    if !out.contains(&scheme) {
                        out.push(scheme);
                    }
                }
            }
            out
        })
    }

    fn divisor_schemes(extent: i64, n: usize) -> Vec<Vec<i64>> {
        let mut out = Vec::new();
        let mut cur = Vec::with_capacity(n);
        fn rec(rest: i64, n: usize, cur: &mut Vec<i64>, out: &mut Vec<Vec<i64>>) {
            if cur.len() == n {
                if cur.last().is_none_or(|&l| l <= MAX_INNERMOST_SPLIT) {
                    out.push(cur.clone());
                }
                return;
            }
            for d in divisors(rest) {
                cur.push(d);
                rec(rest / d, n, cur, out);
                cur.pop();
            }
        }
        rec(extent, n, &mut cur, &mut out);
        out
    }
}

/// Samples complete states of one DAG.
pub struct Sampler<'a> {
    dag: &'a Dag,
    inits: Vec<StageInit>,
    hw: HardwareParams,
    pub factors: FactorCache,
    /// Half the draws of a vector split fill whole vectors ([`Sampler::fill_tile_sizes`]);
    /// off, every draw is uniform as in TVM (for ablations; [`Sampler::with_vector_filling_draws`]).
    vector_filling_draws: bool,
}

/// Why a sample was dropped (TVM: the state is invalid and resampled).
#[derive(Debug, Clone, PartialEq)]
pub struct Invalid(pub String);

impl<'a> Sampler<'a> {
    pub fn new(dag: &'a Dag, hw: HardwareParams) -> Sampler<'a> {
        Sampler {
            dag,
            inits: ttdb_algo::schedule::stage_inits_from_dag(dag),
            hw,
            factors: FactorCache::default(),
            vector_filling_draws: true,
        }
    }

    /// This sampler with the vector-filling draws on or off.
    pub fn with_vector_filling_draws(self, on: bool) -> Sampler<'a> {
        Sampler {
            vector_filling_draws: on,
            ..self
        }
    }

    /// The state of a step list, from the DAG's initial state.
    pub fn replay(&self, steps: &[Step]) -> Result<State, Invalid> {
        replay(&self.inits, steps).map_err(|e| Invalid(e.to_string()))
    }

    /// One random complete state of `sketch`.
    pub fn sample(&mut self, sketch: &Sketch, rng: &mut Rng) -> Result<State, Invalid> {
        let steps = self.fill_tile_sizes(sketch, rng);
        let mut state = self.replay(&steps)?;
        self.change_compute_location(&mut state, rng)?;
        self.parallel(&mut state)?;
        self.unroll(&mut state, rng)?;
        self.vectorize(&mut state, rng)?;
        Ok(state)
    }

    /// InitFillTileSize: every open SP gets a random factorization of its extent. For the
    /// split of a stage's innermost spatial loop, half the samples draw only from the
    /// factorizations whose innermost length fills whole vectors ([`vector_width`]): TVM
    /// draws uniformly, and on a 16-lane host most draws leave the vector a quarter full
    /// (mobilenet_v2's 24-channel depthwise conv kept an innermost 4 after its 62 trials,
    /// 0.36 ms, where 8 lanes ran it in 0.22).
    pub fn fill_tile_sizes(&mut self, sketch: &Sketch, rng: &mut Rng) -> Vec<Step> {
        let mut steps = sketch.steps.clone();
        let lanes = self.hw.vector_lanes as i64;
        for &i in &sketch.open_splits {
            if let Step::Split(sp) = &mut steps[i] {
                let n = sp.lengths.len();
                let extent = sp.extent.max(1);
                let schemes = self.factors.schemes(extent, n);
                let width = match self.vector_filling_draws && sketch.vector_splits.contains(&i) {
                    true => vector_width(extent, lanes),
                    false => 1,
                };
                if width > 1 {
                    let full: Vec<&Vec<i64>> = schemes
                        .iter()
                        .filter(|s| s.last().is_some_and(|&l| l % width == 0))
                        .collect();
                    if !full.is_empty() && rng.below(2) == 0 {
                        sp.lengths = full[rng.below(full.len())].clone();
                        continue;
                    }
                }
                if !schemes.is_empty() {
                    sp.lengths = schemes[rng.below(schemes.len())].clone();
                }
            }
        }
        steps
    }

    fn apply(state: &mut State, step: Step) -> Result<(), Invalid> {
        state.apply(&step).map_err(|e| Invalid(e.to_string()))
    }

    /// InitChangeComputeLocation: each untiled, non-MLT stage (last to first) is inlined
    /// (if attached and reduce-free), put at root, or computed at a random candidate loop.
    fn change_compute_location(&self, state: &mut State, rng: &mut Rng) -> Result<(), Invalid> {
        for s in (0..state.stages().len()).rev() {
            let analysis = Analysis::new(self.dag, state);
            let st = &state.stages()[s];
            if st.op.is_placeholder() || st.compute_at == ComputeAt::Inlined {
                continue;
            }
            if is_tiled(state, s) || analysis.needs_multi_level_tiling(s) {
                continue;
            }
            let candidates = compute_location_candidates(&analysis, state, s);
            let choice = rng.below(candidates.len() + 2);
            if choice == 0 {
                if !stage_has_reduce_iter(state, s) && state.attach_map().attach_point(s).is_some()
                {
                    Self::apply(
                        state,
                        Step::ComputeInline(ComputeInlineStep { stage_id: s as u32 }),
                    )?;
                }
            } else if choice == 1 {
                Self::apply(
                    state,
                    Step::ComputeRoot(ComputeRootStep { stage_id: s as u32 }),
                )?;
            } else {
                let (t, i) = candidates[choice - 2];
                Self::apply(
                    state,
                    Step::ComputeAt(ComputeAtStep {
                        stage_id: s as u32,
                        target_stage_id: t as u32,
                        target_iter_id: i as u32,
                    }),
                )?;
            }
        }
        Ok(())
    }

    /// InitParallel: per root stage, fuse the outer spatial loops until there is enough
    /// parallelism (16 x cores), and mark the result parallel.
    fn parallel(&self, state: &mut State) -> Result<(), Invalid> {
        for s in 0..state.stages().len() {
            let st = &state.stages()[s];
            if st.compute_at != ComputeAt::Root || st.op.is_placeholder() {
                continue;
            }
            self.annotate_parallel(state, s, 0)?;
        }
        Ok(())
    }

    fn annotate_parallel(&self, state: &mut State, s: usize, offset: usize) -> Result<(), Invalid> {
        let iters = &state.stages()[s].iters;
        let mut degree = 1i64;
        let mut to_fuse = Vec::new();
        let mut i = offset;
        while i < iters.len() {
            let it = &iters[i];
            if it.kind == IterKind::Reduction || it.annotation != Annotation::None {
                break;
            }
            to_fuse.push(i as u32);
            degree = degree.saturating_mul(extent(it));
            if degree > 16 * self.hw.num_cores as i64 {
                break;
            }
            if !state.attach_map().attached_at(s, i).is_empty() {
                break;
            }
            i += 1;
        }
        if degree == 1 {
            let attached = state.attach_map().attached_at(s, i).to_vec();
            if !attached.is_empty() {
                for a in attached {
                    self.annotate_parallel(state, a, 0)?;
                }
                self.annotate_parallel(state, s, i + 1)?;
            }
        }
        if to_fuse.is_empty() {
            return Ok(());
        }
        let first = to_fuse[0];
        if to_fuse.len() > 1 {
            Self::apply(
                state,
                Step::Fuse(FuseStep {
                    stage_id: s as u32,
                    fused_ids: to_fuse,
                }),
            )?;
        }
        Self::apply(
            state,
            Step::Annotation(AnnotationStep {
                stage_id: s as u32,
                iter_id: first,
                annotation: Annotation::Parallel,
            }),
        )
    }

    /// InitUnroll: stages that reduce get a random `auto_unroll_max_step` on their outer loop.
    fn unroll(&self, state: &mut State, rng: &mut Rng) -> Result<(), Invalid> {
        for s in 0..state.stages().len() {
            let st = &state.stages()[s];
            if st.compute_at == ComputeAt::Inlined || st.op.is_placeholder() {
                continue;
            }
            if stage_has_reduce_iter(state, s) {
                let v = UNROLL_CHOICES[rng.below(UNROLL_CHOICES.len())];
                Self::apply(
                    state,
                    Step::Pragma(PragmaStep {
                        stage_id: s as u32,
                        iter_id: 0,
                        pragma: format!("auto_unroll_max_step${v}"),
                    }),
                )?;
            }
        }
        Ok(())
    }

    /// InitVectorization: fuse and vectorize trailing spatial loops while their product
    /// stays within two vector registers (tiled stages: the innermost loop only).
    fn vectorize(&self, state: &mut State, rng: &mut Rng) -> Result<(), Invalid> {
        for s in 0..state.stages().len() {
            let st = &state.stages()[s];
            if st.compute_at == ComputeAt::Inlined || st.op.is_placeholder() {
                continue;
            }
            let n = st.iters.len();
            let tiled = is_tiled(state, s);
            let mut prod = 1i64;
            let mut fusible = 0usize;
            while fusible < n {
                let i = n - 1 - fusible;
                if !state.attach_map().attached_at(s, i).is_empty() {
                    break;
                }
                let it = &st.iters[i];
                if it.kind == IterKind::Reduction || it.annotation != Annotation::None {
                    break;
                }
                if tiled && fusible != 0 {
                    break;
                }
                prod = prod.saturating_mul(extent(it));
                if prod > self.hw.max_vectorize_size() {
                    break;
                }
                fusible += 1;
            }
            if fusible > 1 {
                fusible = 1 + rng.below(fusible - 1);
            }
            if fusible == 0 {
                continue;
            }
            let first = (n - fusible) as u32;
            if fusible > 1 {
                Self::apply(
                    state,
                    Step::Fuse(FuseStep {
                        stage_id: s as u32,
                        fused_ids: (first..n as u32).collect(),
                    }),
                )?;
            }
            Self::apply(
                state,
                Step::Annotation(AnnotationStep {
                    stage_id: s as u32,
                    iter_id: first,
                    annotation: Annotation::Vectorize,
                }),
            )?;
        }
        Ok(())
    }
}

/// `GetExtent`: undefined extents count as 1.
fn extent(it: &ttdb_algo::schedule::Iterator) -> i64 {
    it.extent.unwrap_or(1)
}

/// `GetComputeLocationCandidates`: loops of the single consumer (and of the stage that
/// consumer is attached to) where stage `s` may be computed.
pub fn compute_location_candidates(
    analysis: &Analysis,
    state: &State,
    s: usize,
) -> Vec<(usize, usize)> {
    let consumers = analysis.consumers(state, s);
    if consumers.len() != 1 {
        return vec![];
    }
    let t = *consumers.iter().next().unwrap();
    let target = &state.stages()[t];
    let attached_elsewhere = target.compute_at == ComputeAt::Iter;
    let target_tiled = is_tiled(state, t);
    let mut out = Vec::new();
    let mut visited_reduce = false;
    for (i, it) in target.iters.iter().enumerate() {
        match it.kind {
            IterKind::Reduction => {
                visited_reduce = true;
                if !target_tiled {
                    break;
                }
            }
            IterKind::Spatial if visited_reduce => break,
            _ => {}
        }
        if it.annotation == Annotation::Unroll {
            break;
        }
        if extent(it) == 1 {
            continue;
        }
        if attached_elsewhere && it.kind == IterKind::Spatial && it.name.ends_with(".0") {
            continue;
        }
        out.push((t, i));
        if !state.attach_map().attached_at(t, i).is_empty() {
            break;
        }
    }
    if attached_elsewhere {
        if let Some(p) = state.attach_map().attach_point(t) {
            let tt = p.stage;
            for (i, it) in state.stages()[tt].iters.iter().enumerate() {
                if it.kind == IterKind::Reduction
                    || !state.attach_map().attached_at(tt, i).is_empty()
                {
                    break;
                }
                if it.annotation == Annotation::Unroll {
                    break;
                }
                if extent(it) == 1 {
                    continue;
                }
                out.push((tt, i));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factorization_schemes_divide_and_cap_the_innermost() {
        let mut c = FactorCache::default();
        let s = c.schemes(8, 2).to_vec();
        // (a, b) with a * b | 8: 10 tuples.
        assert_eq!(s.len(), 10);
        assert!(s.contains(&vec![2, 4]) && s.contains(&vec![1, 1]));
        for t in c.schemes(512, 3).to_vec() {
            assert_eq!(512 % t.iter().product::<i64>(), 0);
        }
        assert!(c.schemes(128, 1).iter().all(|t| t[0] <= 64));
    }

    #[test]
    fn vector_widths_fill_the_host_vector_where_the_extent_allows() {
        assert_eq!(vector_width(24, 16), 8);
        assert_eq!(vector_width(32, 16), 16);
        assert_eq!(vector_width(32, 8), 8);
        assert_eq!(vector_width(197, 16), 16, "through its padded extent 208");
        assert_eq!(vector_width(14, 16), 1);
        assert_eq!(vector_width(7, 16), 1);
    }

    /// A prime extent also gets the tiles of 200 and 208 (its partial tile guarded); an
    /// extent with a small divisor, or a short one, only its own divisors.
    #[test]
    fn awkward_extents_are_also_tiled_padded() {
        assert_eq!(padded_extents(197), [200, 208]);
        assert_eq!(padded_extents(151), [152, 160]);
        assert!(padded_extents(49 * 3).is_empty(), "7 divides it");
        for plain in [196, 7, 31, 49, 768, 3136] {
            assert!(padded_extents(plain).is_empty(), "{plain}");
        }
        let mut c = FactorCache::default();
        let s = c.schemes(197, 3).to_vec();
        assert!(
            s.contains(&vec![1, 1, 8]) && s.contains(&vec![25, 1, 8]),
            "{s:?}"
        );
        assert!(
            s.contains(&vec![1, 13, 16]) && s.contains(&vec![197, 1, 1]),
            "{s:?}"
        );
        for t in &s {
            let p = t.iter().product::<i64>();
            assert!([197, 200, 208].iter().any(|e| e % p == 0), "{t:?}");
        }
        assert_eq!(
            c.schemes(196, 2).len(),
            c.schemes(196, 2)
                .iter()
                .filter(|t| 196 % t.iter().product::<i64>() == 0)
                .count()
        );
    }

    /// Half the draws of a vector split fill whole vectors; drawn uniformly (the ablation,
    /// TVM's way), far fewer of a 48-wide split's innermost lengths fill a 16-lane vector.
    #[test]
    fn vector_filling_draws_fill_vector_splits_and_can_be_turned_off() {
        use crate::search::sketch::{generate_sketches, tests::matmul};
        let hw = HardwareParams {
            num_cores: 2,
            vector_lanes: 16,
        };
        let dag = matmul(64, 48, 64);
        let sketch = generate_sketches(&dag, &hw).unwrap().remove(0);
        let i = sketch.vector_splits[0];
        let share = |on: bool| {
            let mut s = Sampler::new(&dag, hw).with_vector_filling_draws(on);
            let mut rng = Rng::new(7);
            let full = (0..400)
                .filter(|_| {
                    let steps = s.fill_tile_sizes(&sketch, &mut rng);
                    let Step::Split(sp) = &steps[i] else {
                        panic!("not a split: {:?}", steps[i])
                    };
                    sp.lengths.last().is_some_and(|l| l % 16 == 0)
                })
                .count();
            full as f64 / 400.0
        };
        let (on, off) = (share(true), share(false));
        assert!(on > 0.5, "{on}");
        assert!(off < on - 0.2, "uniform {off}, vector-filling {on}");
    }
}
