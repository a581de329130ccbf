//! Search of one task from scratch, Ansor-style (TVM `SketchPolicy::Search`): sketches
//! ([`super::sketch`]), random initial states ([`super::init`]), evolution by mutation
//! ([`super::mutate`]), measured in rounds.
//!
//! Each round: sample a population from random sketches, add the fastest measured states
//! and the seeds, evolve (mutants of the fittest), then pick a batch eps-greedily (most from
//! the evolved pool, `eps` of it random samples), dropping every state whose printed loop
//! nest was measured or picked before (TVM deduplicates by the printed state, not the step
//! list). The batch is built in parallel and measured one at a time by a
//! [`Measurer`](super::measurer::Measurer); every candidate is verified before its time counts.
//!
//! Ranking (draft-then-verify): parents are measured states (roulette by throughput); the
//! pool of their mutants and of random samples is first cut by the CPU draft estimate
//! ([`super::draft`], the faster share kept), then ordered by the learned cost model
//! ([`super::cost_model`], retrained as trials come in; before it has enough samples, by the
//! draft estimate). Unlike TVM, the evolution itself runs on measured parents, not on the
//! model's predictions: every bred candidate is lowered to be keyed and featurized, which
//! bounds how many predictions a round can afford.
use super::cost_model::{program_features, CostModel, ProgramFeatures};
use super::init::Sampler;
use super::measurer::Measurer;
use super::mutate::{mutate, pick};
use super::observer::{MeasuredTrial, Observer};
use super::rng::Rng;
use super::sketch::{generate_sketches, HardwareParams, Sketch};
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::time::{Duration, Instant};
use ttdb_algo::ir::printdag::dag_hash;
use ttdb_algo::ir::Dag;
use ttdb_algo::schedule::stage_inits_from_dag;
use ttdb_backend::evaluate::Evaluation;
use ttdb_backend::loopnest::printer::kernel_to_string;
use ttdb_backend::lower::{lower_steps, LowerOptions};
use ttdb_format::ansor::Step;

#[derive(Clone, Debug)]
pub struct SearchOptions {
    /// Measured trials at most.
    pub trials: usize,
    /// Candidates measured per round (TVM: 64).
    pub batch: usize,
    /// Random states sampled per round (TVM: 2048, affordable with a cost model; ttdb
    /// lowers each to deduplicate, so fewer).
    pub population: usize,
    /// Mutation generations per round (TVM: 4).
    pub generations: usize,
    /// Share of each batch taken from fresh random samples (TVM: 0.05).
    pub eps_greedy: f64,
    pub time_budget: Option<Duration>,
    /// Per-run timeout ceiling.
    pub max_timeout: Duration,
    pub seed: u64,
    /// Rounds in a row without a new candidate before giving up.
    pub max_empty_rounds: usize,
    /// Cut the candidate pool by the CPU draft estimate before ranking.
    pub draft_filter: bool,
    /// Rank candidates with the learned cost model (and train it on every trial).
    pub learned_model: bool,
    /// Start from the cost model stored for this host class (the caller loads it).
    pub warm_start: bool,
    /// Half the initial draws of a vector split fill whole vectors (`Sampler`); off only
    /// for ablations.
    pub vector_filling_draws: bool,
    /// The seeds make a round of their own, the task's first; the round after samples a
    /// population as a cold search's first round does. `apply`'s transfer: every kernel's
    /// transferred schedules are measured early (one short round each), and the search is
    /// not bred from them alone.
    pub seeds_alone_first: bool,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            trials: 200,
            batch: 32,
            population: 128,
            generations: 4,
            eps_greedy: 0.05,
            time_budget: None,
            max_timeout: Duration::from_secs(10),
            seed: 0x5eed,
            max_empty_rounds: 3,
            draft_filter: true,
            learned_model: true,
            warm_start: true,
            vector_filling_draws: true,
            seeds_alone_first: false,
        }
    }
}

/// One measured candidate.
#[derive(Clone, Debug)]
pub struct SearchTrial {
    /// 0-based round.
    pub round: usize,
    /// Where it came from: "sample", "seed", "transfer" (a sibling task's best) or the
    /// mutation that bred it.
    pub origin: String,
    pub steps: Vec<Step>,
    pub evaluation: Evaluation,
}

/// Why the search stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchStop {
    Trials,
    Time,
    /// No new candidate for `max_empty_rounds` rounds: the space is exhausted.
    Exhausted,
    Interrupted,
}

impl SearchStop {
    pub fn as_str(self) -> &'static str {
        match self {
            SearchStop::Trials => "trial budget",
            SearchStop::Time => "time budget",
            SearchStop::Exhausted => "no new candidates",
            SearchStop::Interrupted => "interrupted",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Searched {
    pub trials: Vec<SearchTrial>,
    /// Index into `trials` of the fastest verified one.
    pub best: Option<usize>,
    pub sketches: usize,
    /// States sampled or bred, and those that did not replay or lower.
    pub generated: usize,
    pub invalid: usize,
    pub duplicates: usize,
    pub rounds: usize,
    pub stop: SearchStop,
    pub seconds: f64,
}

impl Searched {
    pub fn best_trial(&self) -> Option<&SearchTrial> {
        self.best.map(|i| &self.trials[i])
    }

    /// The steps of the `n` fastest verified trials, fastest first (Droplet's starts).
    pub fn fastest(&self, n: usize) -> Vec<Vec<Step>> {
        let mut timed: Vec<(f64, &SearchTrial)> = self
            .trials
            .iter()
            .filter_map(|t| t.evaluation.median().map(|m| (m, t)))
            .collect();
        timed.sort_by(|a, b| a.0.total_cmp(&b.0));
        timed
            .into_iter()
            .take(n)
            .map(|(_, t)| t.steps.clone())
            .collect()
    }
}

impl MeasuredTrial for SearchTrial {
    fn steps(&self) -> &[Step] {
        &self.steps
    }
    fn evaluation(&self) -> &Evaluation {
        &self.evaluation
    }
    fn how(&self) -> String {
        format!("round {}, {}", self.round, self.origin)
    }
}

/// The dedup key of a schedule (a hash of its printed loop nest) and its features, or
/// `None` when it does not lower (then it is invalid).
fn lowered(dag: &Dag, steps: &[Step], hw: &HardwareParams) -> Option<([u8; 32], ProgramFeatures)> {
    let k = lower_steps(dag, steps, &LowerOptions::default()).ok()?;
    let key = Sha256::digest(kernel_to_string(&k).as_bytes()).into();
    Some((key, program_features(&k, hw)))
}

struct Candidate {
    steps: Vec<Step>,
    origin: String,
    features: Option<ProgramFeatures>,
}

impl Candidate {
    fn new(steps: Vec<Step>, origin: String) -> Candidate {
        Candidate {
            steps,
            origin,
            features: None,
        }
    }
}

/// The search state of one task, advanced a round at a time (the task scheduler
/// interleaves the rounds of a model's kernels).
pub struct TaskSearch<'a> {
    dag: &'a Dag,
    /// The task's key for the cost model's label normalization.
    task_key: String,
    hw: HardwareParams,
    sketches: Vec<Sketch>,
    inits: Vec<ttdb_algo::schedule::StageInit>,
    sampler: Sampler<'a>,
    rng: Rng,
    lanes: i64,
    seen: HashSet<[u8; 32]>,
    seeds: Vec<Vec<Step>>,
    /// Sibling tasks' bests, adapted to this DAG, for the next round ([`Self::offer`]).
    transferred: Vec<Vec<Step>>,
    /// Every schedule offered so far, as offered (each is taken once).
    offered: HashSet<String>,
    /// The seeds went to a round's pool (they join one round only).
    seeds_taken: bool,
    /// A round sampled its population with no measured parent (a cold first round).
    sampled_population: bool,
    opts: SearchOptions,
    empty_rounds: usize,
    t0: Instant,
    pub out: Searched,
}

impl<'a> TaskSearch<'a> {
    /// Errors when the DAG has no sketch.
    pub fn new(
        dag: &'a Dag,
        hw: HardwareParams,
        seeds: &[Vec<Step>],
        opts: &SearchOptions,
    ) -> Result<TaskSearch<'a>, String> {
        let sketches: Vec<Sketch> = generate_sketches(dag, &hw).map_err(|e| e.to_string())?;
        Ok(TaskSearch {
            dag,
            task_key: dag_hash(dag),
            hw,
            out: Searched {
                trials: vec![],
                best: None,
                sketches: sketches.len(),
                generated: 0,
                invalid: 0,
                duplicates: 0,
                rounds: 0,
                stop: SearchStop::Trials,
                seconds: 0.0,
            },
            sketches,
            inits: stage_inits_from_dag(dag),
            sampler: Sampler::new(dag, hw).with_vector_filling_draws(opts.vector_filling_draws),
            rng: Rng::new(opts.seed),
            lanes: hw.vector_lanes as i64,
            seen: HashSet::new(),
            seeds: seeds.to_vec(),
            transferred: Vec::new(),
            offered: HashSet::new(),
            seeds_taken: false,
            sampled_population: false,
            opts: opts.clone(),
            empty_rounds: 0,
            t0: Instant::now(),
        })
    }

    /// Offers the best schedule of a sibling task (another kernel of the model, of the same
    /// class): its split lengths adapted to this DAG (transfer-tuning's move,
    /// [`ttdb_algo::schedule::retarget_steps`]), it is measured in the next round like a
    /// seed and bred from when it is fast. False when it does not apply here or was offered
    /// before.
    pub fn offer(&mut self, steps: &[Step]) -> bool {
        let key = format!("{steps:?}");
        if !self.offered.insert(key) {
            return false;
        }
        match ttdb_algo::schedule::retarget_steps(&self.inits, steps) {
            Ok(r) => {
                self.transferred.push(r.steps);
                true
            }
            Err(_) => false,
        }
    }

    /// The best median seconds so far.
    pub fn best_seconds(&self) -> Option<f64> {
        self.out.best_trial().and_then(|t| t.evaluation.median())
    }

    /// No new candidate for `max_empty_rounds` rounds.
    pub fn exhausted(&self) -> bool {
        self.empty_rounds >= self.opts.max_empty_rounds
    }

    /// The candidates of the next round: bred from the measured states and sampled, new
    /// by loop nest, at most `want`, ranked by `model` (see the module docs).
    fn candidates(&mut self, want: usize, model: &CostModel) -> Vec<Candidate> {
        let mut pool: Vec<Candidate> = Vec::new();
        if !self.seeds_taken {
            self.seeds_taken = true;
            pool.extend(
                self.seeds
                    .iter()
                    .map(|s| Candidate::new(s.clone(), "seed".into())),
            );
            if self.opts.seeds_alone_first && !pool.is_empty() {
                let chosen = self.choose_seeds(std::mem::take(&mut pool));
                // (None new: the round is a search round, not an empty one that ends the task.)
                if !chosen.is_empty() {
                    return chosen;
                }
            }
        }
        let (dag, opts) = (self.dag, &self.opts);
        let ranking = opts.draft_filter || (opts.learned_model && model.is_trained());
        // the newest offers (a sibling's later best supersedes its earlier), a quarter of
        // the round at most; the rest wait for the next round
        let take = self.transferred.len().min((want / 4).max(1));
        let newest = self.transferred.split_off(self.transferred.len() - take);
        pool.extend(
            newest
                .into_iter()
                .map(|s| Candidate::new(s, "transfer".into())),
        );
        let parents = if opts.seeds_alone_first && !self.sampled_population {
            // After the seeds' own round: a population as a cold first round samples it.
            Vec::new()
        } else {
            measured_parents(&self.out.trials)
        };
        self.sampled_population |= parents.is_empty();
        let n_rand = if parents.is_empty() {
            0
        } else {
            ((want as f64 * opts.eps_greedy).ceil() as usize).min(want)
        };
        // Evolution from the measured states, fittest first (roulette by throughput). A
        // ranked round breeds a wider pool: predictions are cheaper than measurements.
        if !parents.is_empty() {
            let greedy = want - n_rand;
            let breed = greedy * if ranking { 6 } else { 2 };
            let (mut bred, mut tries) = (0, 0);
            while bred < breed && tries < breed * 10 * opts.generations.max(1) {
                tries += 1;
                let (steps, _) = roulette(&parents, &mut self.rng);
                let mut child = steps.clone();
                let mut how = Vec::new();
                // 1..=generations mutations in a row: the pool of later generations.
                for _ in 0..1 + self.rng.below(opts.generations.max(1)) {
                    let m = pick(&mut self.rng);
                    if let Some(c) = mutate(m, dag, &self.inits, &child, self.lanes, &mut self.rng)
                    {
                        child = c;
                        how.push(format!("{m:?}"));
                    }
                }
                if how.is_empty() {
                    continue;
                }
                bred += 1;
                pool.push(Candidate::new(child, format!("mutation {}", how.join("+"))));
            }
        }
        // Random samples: the eps share, or the whole population before anything was measured.
        let n_random = if parents.is_empty() {
            opts.population.max(want)
        } else {
            n_rand.max(1) * 4
        };
        for _ in 0..n_random {
            let sk = &self.sketches[self.rng.below(self.sketches.len())];
            match self.sampler.sample(sk, &mut self.rng) {
                Ok(st) => pool.push(Candidate::new(
                    st.transform_steps().to_vec(),
                    "sample".into(),
                )),
                Err(_) => self.out.invalid += 1,
            }
        }
        let has_parents = !parents.is_empty();
        let (mut seeds, mut bred, mut random) = (Vec::new(), Vec::new(), Vec::new());
        for (c, k) in self.new_loop_nests(pool) {
            if c.origin == "seed" || c.origin == "transfer" {
                seeds.push((c, k));
            } else if c.origin == "sample" && has_parents {
                random.push((c, k));
            } else {
                bred.push((c, k));
            }
        }
        let greedy = want.saturating_sub(n_rand);
        self.rank(&mut bred, greedy, model);
        // eps-greedy: the seeds (never ranked away), then the best-ranked bred candidates,
        // then random ones.
        let mut chosen: Vec<(Candidate, [u8; 32])> = seeds;
        chosen.extend(bred.drain(..bred.len().min(greedy.saturating_sub(chosen.len()))));
        chosen.extend(random.drain(..random.len().min(want.saturating_sub(chosen.len()))));
        if chosen.len() < want {
            chosen.extend(bred.drain(..bred.len().min(want - chosen.len())));
        }
        chosen.truncate(want);
        chosen
            .into_iter()
            .map(|(c, k)| {
                self.seen.insert(k);
                c
            })
            .collect()
    }

    /// The candidates of `pool` whose loop nest is new (neither seen in an earlier round nor
    /// earlier in the pool), featurized, with their loop nest's key; the others are counted
    /// as invalid (they do not lower) or duplicates. Lowering runs in parallel (it replays
    /// the steps: a state that does not replay is invalid).
    fn new_loop_nests(&mut self, pool: Vec<Candidate>) -> Vec<(Candidate, [u8; 32])> {
        self.out.generated += pool.len();
        let (dag, hw) = (self.dag, self.hw);
        let lowered: Vec<Option<([u8; 32], ProgramFeatures)>> = pool
            .par_iter()
            .map(|c| lowered(dag, &c.steps, &hw))
            .collect();
        let mut in_pool = HashSet::new();
        let mut out = Vec::new();
        for (mut c, l) in pool.into_iter().zip(lowered) {
            let Some((k, features)) = l else {
                self.out.invalid += 1;
                continue;
            };
            if self.seen.contains(&k) || !in_pool.insert(k) {
                self.out.duplicates += 1;
                continue;
            }
            c.features = Some(features);
            out.push((c, k));
        }
        out
    }

    /// The seeds' own round (`SearchOptions::seeds_alone_first`): every seed with a new loop
    /// nest.
    fn choose_seeds(&mut self, pool: Vec<Candidate>) -> Vec<Candidate> {
        let fresh = self.new_loop_nests(pool);
        fresh
            .into_iter()
            .map(|(c, k)| {
                self.seen.insert(k);
                c
            })
            .collect()
    }

    /// Orders `pool` best first: the draft filter keeps the faster share by the static
    /// estimate (at least `2 × greedy`), ordered by it. Once the learned model is trained,
    /// the order alternates between the model's best and the draft's best (each verifies the
    /// other; ranking by the model alone narrows a batch onto near copies of the incumbent,
    /// `benches/cost_model.rs`), and a candidate the model cannot tell from one already
    /// placed (same prediction: same features) goes behind every distinct one.
    fn rank(&self, pool: &mut Vec<(Candidate, [u8; 32])>, greedy: usize, model: &CostModel) {
        let draft = |c: &Candidate| {
            c.features
                .as_ref()
                .map_or(f64::INFINITY, |f| f.draft_seconds)
        };
        if self.opts.draft_filter {
            pool.sort_by(|a, b| draft(&a.0).total_cmp(&draft(&b.0)));
            pool.truncate((pool.len() / 2).max(greedy * 2));
        }
        if !(self.opts.learned_model && model.is_trained()) {
            return;
        }
        let pred: Vec<f64> = pool
            .iter()
            .map(|c| {
                c.0.features
                    .as_ref()
                    .and_then(|f| model.predict(f))
                    .unwrap_or(f64::MIN)
            })
            .collect();
        let mut by_model: Vec<usize> = (0..pool.len()).collect();
        by_model.sort_by(|&a, &b| pred[b].total_cmp(&pred[a]));
        // The pool is in draft order when the filter ran.
        let by_draft: Vec<usize> = if self.opts.draft_filter {
            (0..pool.len()).collect()
        } else {
            by_model.clone()
        };
        let (mut order, mut later) = (Vec::with_capacity(pool.len()), Vec::new());
        let mut placed = vec![false; pool.len()];
        let mut predictions = HashSet::new();
        let (mut model_next, mut draft_next) = (by_model.iter(), by_draft.iter());
        while order.len() + later.len() < pool.len() {
            for next in [&mut model_next, &mut draft_next] {
                let Some(&i) = next.find(|&&i| !placed[i]) else {
                    continue;
                };
                placed[i] = true;
                if predictions.insert(pred[i].to_bits()) {
                    order.push(i);
                } else {
                    later.push(i);
                }
            }
        }
        order.extend(later);
        let mut slots: Vec<Option<(Candidate, [u8; 32])>> = pool.drain(..).map(Some).collect();
        pool.extend(order.into_iter().filter_map(|i| slots[i].take()));
    }

    /// One round: at most `want` new candidates, measured; their trials go to `observer`.
    /// Returns how many were measured (0: nothing new, or interrupted).
    pub fn round(
        &mut self,
        want: usize,
        measurer: &mut dyn Measurer,
        observer: &mut dyn Observer<SearchTrial>,
        model: &mut CostModel,
    ) -> usize {
        let Some(proposal) = self.propose(want, model) else {
            return 0;
        };
        let evals = measurer.measure(&proposal.schedules, proposal.timeout);
        self.absorb(proposal, evals, observer, model)
    }

    /// A round's first half: at most `want` new candidates to measure, with the per-run
    /// timeout; None when there is nothing new. The caller measures them (perhaps while it
    /// proposes another task's round) and hands the evaluations to [`TaskSearch::absorb`].
    pub fn propose(&mut self, want: usize, model: &mut CostModel) -> Option<Proposal> {
        if self.opts.learned_model {
            model.maybe_retrain();
        }
        let chosen = self.candidates(want.max(1), model);
        if chosen.is_empty() {
            self.empty_rounds += 1;
            return None;
        }
        self.empty_rounds = 0;
        let max = self.opts.max_timeout;
        let timeout = Duration::from_secs_f64(
            self.best_seconds()
                .map_or(max.as_secs_f64(), |b| (b * 50.0).max(1.0)),
        )
        .min(max);
        let schedules = chosen.iter().map(|c| c.steps.clone()).collect();
        Some(Proposal {
            chosen,
            schedules,
            timeout,
        })
    }

    /// A round's second half: the evaluations of `proposal`'s schedules (in order; None for
    /// one left unrun) become trials, go to `observer` and train `model`. Returns how many
    /// were measured.
    pub fn absorb(
        &mut self,
        proposal: Proposal,
        evals: Vec<Option<Evaluation>>,
        observer: &mut dyn Observer<SearchTrial>,
        model: &mut CostModel,
    ) -> usize {
        let out = &mut self.out;
        let first = out.trials.len();
        for (c, e) in proposal.chosen.into_iter().zip(evals) {
            let Some(evaluation) = e else { continue };
            if let Some(f) = &c.features {
                model.add(&self.task_key, f, evaluation.median());
            }
            out.trials.push(SearchTrial {
                round: out.rounds,
                origin: c.origin,
                steps: c.steps,
                evaluation,
            });
            let i = out.trials.len() - 1;
            if let Some(m) = out.trials[i].evaluation.median() {
                let best = out.best_trial().and_then(|b| b.evaluation.median());
                if best.is_none_or(|b| m < b) {
                    out.best = Some(i);
                }
            }
        }
        out.rounds += 1;
        out.seconds = self.t0.elapsed().as_secs_f64();
        observer.measured(&out.trials[first..]);
        let n = out.trials.len();
        observer.progress(n, self.best_seconds().unwrap_or(f64::NAN));
        n - first
    }
}

/// The candidates of one round, proposed and not yet measured ([`TaskSearch::propose`]).
pub struct Proposal {
    chosen: Vec<Candidate>,
    /// What to measure, in order.
    pub schedules: Vec<Vec<Step>>,
    /// The per-run timeout: 50 times the best so far, at least 1 s, at most the options'.
    pub timeout: Duration,
}

/// Searches `dag` alone, round after round (see the module docs). `seeds` (transferred or
/// imported schedules) join the first round. Errors when the DAG has no sketch.
pub fn search_task(
    dag: &Dag,
    hw: HardwareParams,
    seeds: &[Vec<Step>],
    measurer: &mut dyn Measurer,
    opts: &SearchOptions,
    observer: &mut dyn Observer<SearchTrial>,
    model: &mut CostModel,
) -> Result<Searched, String> {
    let t0 = Instant::now();
    let mut task = TaskSearch::new(dag, hw, seeds, opts)?;
    let stop = loop {
        let done = task.out.trials.len();
        if done >= opts.trials {
            break SearchStop::Trials;
        }
        if opts.time_budget.is_some_and(|b| t0.elapsed() >= b) {
            break SearchStop::Time;
        }
        if observer.interrupted() {
            break SearchStop::Interrupted;
        }
        if task.exhausted() {
            break SearchStop::Exhausted;
        }
        let want = opts.batch.max(1).min(opts.trials - done);
        if task.round(want, measurer, observer, model) == 0 && observer.interrupted() {
            break SearchStop::Interrupted;
        }
    };
    let mut out = task.out;
    out.stop = stop;
    out.seconds = t0.elapsed().as_secs_f64();
    Ok(out)
}

/// Measured, verified states with their throughput (1 / median), fastest first, at most 64.
fn measured_parents(trials: &[SearchTrial]) -> Vec<(&Vec<Step>, f64)> {
    let mut v: Vec<(&Vec<Step>, f64)> = trials
        .iter()
        .filter_map(|t| {
            t.evaluation
                .median()
                .map(|m| (&t.steps, 1.0 / m.max(1e-12)))
        })
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v.truncate(64);
    v
}

/// A parent drawn with probability proportional to throughput squared (favouring the
/// fastest more than TVM's linear wheel, which a noisy measured fitness needs).
fn roulette<'a>(parents: &[(&'a Vec<Step>, f64)], rng: &mut Rng) -> (&'a Vec<Step>, f64) {
    let total: f64 = parents.iter().map(|p| p.1 * p.1).sum();
    let mut x = rng.unit() * total;
    for p in parents {
        if x < p.1 * p.1 {
            return *p;
        }
        x -= p.1 * p.1;
    }
    parents[0]
}
