//! Matching a model's kernels to the database (transfer-tuning, no measuring).
//!
//! Three tiers per kernel:
//! * **exact**: a stored workload has the kernel's signature on a compatible target; its
//!   records' steps replay unchanged;
//! * **class**: same op class and DAG structure, other shapes; the class's records are
//!   re-targeted (steps replayed on the new workload, split lengths moved to the nearest valid
//!   factorization of the new extents) and ranked by a cheap static estimate;
//! * **none**.
//!
//! Within each tier, candidates timed on an ISA this host has come first, then those whose
//! ISA is unknown, then those needing an ISA this host lacks (AVX-512 records on an AVX2
//! host): kept and flagged, never dropped (`ttdb_format::host::IsaRequirement`).
//!
//! A candidate's DAG is the *kernel's* computation (its attributes and shapes) built with the
//! source record's TVM era and operand order, because Ansor steps index stages and loops and
//! only mean something on the stage structure they were tuned on.
use serde::Serialize;
use std::collections::HashMap;
use ttdb_algo::ir::Dag;
use ttdb_algo::ops::{EpilogueOp, WorkloadSpec};
use ttdb_algo::recognize::Recognized;
use ttdb_format::ansor::{Record, Step, WorkloadKey};
use ttdb_format::host::{IsaCompat, IsaRequirement};
use ttdb_onnx::onnx::Kernel;
use ttdb_store::store::Store;

pub mod adapt;
pub mod estimate;
mod query;

pub use query::SourceRecord;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    Exact,
    Class,
    None,
}

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Exact => "exact",
            Tier::Class => "class",
            Tier::None => "none",
        }
    }
}

/// A schedule ready to try on a kernel.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub tier: Tier,
    pub source: SourceRecord,
    /// The kernel's DAG in the source's era and operand order.
    pub dag: Dag,
    /// The source steps, adapted to the kernel's extents (unchanged for exact matches).
    pub steps: Vec<Step>,
    /// Steps whose split lengths changed.
    pub changed_steps: usize,
    /// Static estimate (higher is better), see [`estimate`].
    pub estimate: f64,
    /// The vector ISA the source's timing needs, and whether the host has it.
    pub isa: IsaRequirement,
    pub compat: IsaCompat,
}

/// Why a stored schedule is not a candidate.
#[derive(Clone, Debug, Serialize)]
pub struct Rejection {
    pub source: String,
    pub reason: String,
}

/// Why [`Matcher::candidate`] refused a record: its own steps, or the workload it belongs
/// to (then every record of that workload would be refused alike).
enum Refusal {
    Record(Rejection),
    Workload(Rejection),
}

/// How many more records of a workload matching tries when its best ones are refused (do
/// not replay on the kernel): bounded, so a workload full of bad records costs a fixed
/// amount of replay.
const FALL_THROUGH: usize = 16;

/// The match of one kernel.
#[derive(Clone, Debug)]
pub struct KernelMatch {
    /// Index into the model's kernel list.
    pub kernel: usize,
    pub tier: Tier,
    /// Best first: exact candidates, then class candidates; within a tier by ISA verdict
    /// (records needing an ISA this host lacks last: `IsaCompat::rank`), then exact by
    /// logged cost and class by estimate.
    pub candidates: Vec<Candidate>,
    /// Nearest schedules that did not qualify, with the reason (for `--explain`).
    pub rejections: Vec<Rejection>,
}

#[derive(Clone, Debug)]
pub struct MatchOptions {
    /// Target compatibility class the records must belong to.
    pub compat: String,
    /// Class tier: how many nearest workloads of the class to re-target.
    pub class_workloads: usize,
    /// Exact tier: records per exact workload.
    pub records_per_workload: usize,
    /// Cores of the machine the kernels will run on (for the parallel-balance estimate).
    pub cores: usize,
    /// fp32 SIMD lanes of that machine.
    pub lanes: i64,
    /// Its `/proc/cpuinfo` ISA flags, which rank candidates (empty: unknown, no preference).
    pub host_isa: Vec<String>,
}

impl Default for MatchOptions {
    fn default() -> Self {
        MatchOptions {
            compat: "llvm/cpu".into(),
            class_workloads: 8,
            records_per_workload: 3,
            cores: ttdb_format::host::available_cores(),
            lanes: 8,
            host_isa: vec![],
        }
    }
}

/// The kernel's spec with the source's operand order (residual-first adds), so the DAG has
/// the source's stage order and the source's steps translate onto it; a candidate then
/// carries them to the kernel's own DAG ([`adapt::permute_stages`]). None when the
/// epilogue chains differ.
pub fn spec_like_source(kernel: &WorkloadSpec, source: &WorkloadSpec) -> Option<WorkloadSpec> {
    if kernel.epilogue.len() != source.epilogue.len()
        || kernel.prologue.len() != source.prologue.len()
    {
        return None;
    }
    let same = |a: &EpilogueOp, b: &EpilogueOp| a.class_name() == b.class_name();
    let mut prologues = kernel.prologue.iter().zip(&source.prologue);
    if !prologues.all(|(a, b)| same(a, b)) {
        return None;
    }
    let mut spec = kernel.clone();
    for (mine, theirs) in spec.epilogue.iter_mut().zip(&source.epilogue) {
        *mine = match (*mine, *theirs) {
            (EpilogueOp::Add { .. }, EpilogueOp::Add { operand_first }) => {
                EpilogueOp::Add { operand_first }
            }
            (EpilogueOp::Multiply { .. }, EpilogueOp::Multiply { operand_first }) => {
                EpilogueOp::Multiply { operand_first }
            }
            // the kernel's constant, the source's side of a commutative op (its stage order)
            (
                EpilogueOp::Scalar { op, value, .. },
                EpilogueOp::Scalar {
                    op: theirs,
                    operand_first,
                    ..
                },
            ) if op == theirs && op.commutative() => EpilogueOp::Scalar {
                op,
                value,
                operand_first,
            },
            (a, b) if a.class_label() == b.class_label() => a,
            _ => return None,
        };
    }
    Some(spec)
}

/// Matches kernels against a store; caches recognized sources and class listings.
pub struct Matcher<'a> {
    store: &'a Store,
    opts: MatchOptions,
    recognized: HashMap<String, Option<std::rc::Rc<Recognized>>>,
    classes: HashMap<String, Vec<query::ClassWorkload>>,
    /// Loaded on first use.
    groups: Option<query::TargetGroups>,
}

impl<'a> Matcher<'a> {
    pub fn new(store: &'a Store, opts: MatchOptions) -> Matcher<'a> {
        Matcher {
            store,
            opts,
            recognized: HashMap::new(),
            classes: HashMap::new(),
            groups: None,
        }
    }

    pub fn options(&self) -> &MatchOptions {
        &self.opts
    }

    fn recognize(&mut self, key: &str) -> Option<std::rc::Rc<Recognized>> {
        self.recognized
            .entry(key.to_string())
            .or_insert_with(|| {
                WorkloadKey::parse(key)
                    .ok()
                    .and_then(|k| ttdb_algo::recognize::recognize(&k).ok())
                    .map(std::rc::Rc::new)
            })
            .clone()
    }

    /// Builds the candidate for `source` on `kernel`, or says why not.
    fn candidate(
        &mut self,
        kernel: &Kernel,
        tier: Tier,
        source: SourceRecord,
    ) -> Result<Candidate, Refusal> {
        let label = source.label();
        let reject = |reason: String| {
            Refusal::Workload(Rejection {
                source: label.clone(),
                reason,
            })
        };
        let reject_record = |reason: String| {
            Refusal::Record(Rejection {
                source: label.clone(),
                reason,
            })
        };
        let spec = kernel
            .spec
            .as_ref()
            .ok_or_else(|| reject("the kernel has no workload spec".into()))?;
        let rec = self
            .recognize(&source.key)
            .ok_or_else(|| reject("the source workload key is not recognized".into()))?;
        let (Some(src_spec), Some(era)) = (rec.spec.as_ref(), rec.era) else {
            return Err(reject(
                "registered workloads do not transfer to model kernels".into(),
            ));
        };
        // The steps are translated on the kernel with the source's operand order (its stage
        // order), then carried over to the kernel's own DAG, whose key `run` looks up.
        let kernel_spec = spec;
        let spec = spec_like_source(kernel_spec, src_spec)
            .ok_or_else(|| reject(format!("epilogue {} differs", src_spec.op_class())))?;
        let dag = spec
            .build(era, &kernel.inputs)
            .map_err(|e| reject(format!("cannot build the kernel in TVM {era}: {e}")))?;
        let record = Record::parse(&source.raw)
            .map_err(|e| reject_record(format!("stored record unreadable: {e}")))?;
        // A target whose stage list differs by inlinable stages (a padded conv taking a 1x1
        // conv's schedule) gets the steps translated stage by stage.
        let mut record = record;
        match adapt::map_stages(&rec.dag, &dag, &record.steps) {
            Ok(Some(mapped)) => record.steps = mapped,
            Ok(None) => {}
            Err(e) => return Err(reject_record(format!("stage structure differs: {e}"))),
        }
        let inits = ttdb_algo::schedule::stage_inits_from_dag(&dag);
        let (steps, state, changed_steps) = if tier == Tier::Exact {
            let state = ttdb_algo::schedule::replay(&inits, &record.steps)
                .map_err(|e| reject_record(format!("replay failed: {e}")))?;
            (record.steps.clone(), state, 0)
        } else {
            let r = adapt::retarget(&inits, &record.steps)
                .map_err(|e| reject_record(format!("replay failed: {e}")))?;
            let n = r.changes.len();
            (r.steps, r.state, n)
        };
        // the kernel's own DAG: another one only when the operand order made it so
        let (dag, steps, state) = if spec == *kernel_spec {
            (dag, steps, state)
        } else {
            let own = kernel_spec
                .build(era, &kernel.inputs)
                .map_err(|e| reject(format!("cannot build the kernel in TVM {era}: {e}")))?;
            match adapt::permute_stages(&dag, &own, &steps) {
                Ok(None) => (dag, steps, state),
                Ok(Some(steps)) => {
                    let inits = ttdb_algo::schedule::stage_inits_from_dag(&own);
                    let state = ttdb_algo::schedule::replay(&inits, &steps).map_err(|e| {
                        reject_record(format!("replay in the kernel's stage order failed: {e}"))
                    })?;
                    (own, steps, state)
                }
                Err(e) => {
                    return Err(reject_record(format!(
                        "the kernel's stage order does not take the steps: {e}"
                    )))
                }
            }
        };
        let mut source = source;
        source.source_flops = Some(rec.dag.flop_ct());
        let estimate = estimate::estimate(&dag, &steps, &state, changed_steps, &source, &self.opts);
        let isa = source.isa_requirement();
        let compat = isa.check(&self.opts.host_isa);
        Ok(Candidate {
            tier,
            source,
            dag,
            steps,
            changed_steps,
            estimate,
            isa,
            compat,
        })
    }

    /// The first `want` candidates of `run` (one workload's records on one target group,
    /// cheapest first) go to `out`. A record that does not replay on the kernel
    /// falls through to the next, so a corrupt or hostile record claiming a tiny cost cannot
    /// hide the valid ones; a refusal of the workload itself ends the run. The first
    /// record refusals are listed, the rest counted.
    fn first_candidates(
        &mut self,
        kernel: &Kernel,
        tier: Tier,
        run: Vec<SourceRecord>,
        want: usize,
        out: &mut Vec<Candidate>,
        rejections: &mut Vec<Rejection>,
    ) {
        const SHOWN: usize = 2;
        let (mut found, mut refused) = (0, 0);
        let mut last = None;
        for source in run {
            if found == want {
                break;
            }
            match self.candidate(kernel, tier, source) {
                Ok(c) => {
                    out.push(c);
                    found += 1;
                }
                Err(Refusal::Record(r)) => {
                    refused += 1;
                    if refused <= SHOWN {
                        rejections.push(r);
                    } else {
                        last = Some(r.source);
                    }
                }
                Err(Refusal::Workload(r)) => {
                    rejections.push(r);
                    break;
                }
            }
        }
        if let Some(source) = last {
            rejections.push(Rejection {
                source,
                reason: format!(
                    "and {} more records of this workload were refused",
                    refused - SHOWN
                ),
            });
        }
    }

    /// Matches one kernel (index `index` of its list).
    pub fn match_kernel(
        &mut self,
        index: usize,
        kernel: &Kernel,
    ) -> ttdb_store::store::Result<KernelMatch> {
        let mut m = KernelMatch {
            kernel: index,
            tier: Tier::None,
            candidates: vec![],
            rejections: vec![],
        };
        let (Some(sig), Some(hash)) = (&kernel.signature, &kernel.signature_hash) else {
            m.rejections.push(Rejection {
                source: "-".into(),
                reason: format!("{} kernels are not tuned", kernel.class),
            });
            return Ok(m);
        };
        if self.groups.is_none() {
            self.groups = Some(query::TargetGroups::load(self.store, &self.opts)?);
        }
        let groups = self.groups.clone().unwrap_or_default();
        // Exact: same signature on a compatible target.
        let want = self.opts.records_per_workload;
        for run in query::exact_records(self.store, hash, &self.opts, &groups, want + FALL_THROUGH)?
        {
            self.first_candidates(
                kernel,
                Tier::Exact,
                run,
                want,
                &mut m.candidates,
                &mut m.rejections,
            );
        }
        m.candidates.sort_by(|a, b| {
            (a.compat.rank())
                .cmp(&b.compat.rank())
                .then(a.source.mean_cost.total_cmp(&b.source.mean_cost))
        });
        // Class: the nearest workloads of the class, re-targeted.
        if !self.classes.contains_key(&sig.op_class) {
            let list = query::class_workloads(self.store, &sig.op_class, &self.opts.compat)?;
            self.classes.insert(sig.op_class.clone(), list);
        }
        let nearest: Vec<i64> = query::nearest(
            &self.classes[&sig.op_class],
            &query::ShapeKey::of(sig),
            hash,
            self.opts.class_workloads,
        )
        .iter()
        .map(|w| w.id)
        .collect();
        let mut class = Vec::new();
        for w in nearest {
            for run in query::best_records_of(self.store, w, &self.opts, &groups, 1 + FALL_THROUGH)?
            {
                self.first_candidates(kernel, Tier::Class, run, 1, &mut class, &mut m.rejections);
            }
        }
        class.sort_by(|a, b| {
            (a.compat.rank())
                .cmp(&b.compat.rank())
                .then(b.estimate.total_cmp(&a.estimate))
        });
        m.tier = if !m.candidates.is_empty() {
            Tier::Exact
        } else if !class.is_empty() {
            Tier::Class
        } else {
            Tier::None
        };
        m.candidates.extend(class);
        if m.tier == Tier::None && m.rejections.is_empty() {
            m.rejections
                .extend(query::explain_none(self.store, sig, &self.opts)?);
        }
        m.rejections
            .extend(query::unrankable(self.store, hash, &self.opts)?);
        Ok(m)
    }
}

/// Matches of every tuned kernel of a model.
pub struct ModelMatch {
    pub list: ttdb_onnx::onnx::KernelList,
    /// One per tuned kernel, in list order.
    pub matches: Vec<KernelMatch>,
}

impl ModelMatch {
    /// Tuned kernels (distinct) per tier.
    pub fn count(&self, tier: Tier) -> usize {
        self.matches.iter().filter(|m| m.tier == tier).count()
    }

    /// Coverage score used by `--layout auto`: FLOPs times multiplicity of the kernels that
    /// matched, exact counting fully and class half.
    pub fn coverage(&self) -> f64 {
        self.matches
            .iter()
            .map(|m| {
                let k = &self.list.kernels[m.kernel];
                let w = match m.tier {
                    Tier::Exact => 1.0,
                    Tier::Class => 0.5,
                    Tier::None => 0.0,
                };
                w * kernel_flops(k) * k.multiplicity() as f64
            })
            .sum()
    }
}

/// FLOPs of a model kernel (its DAG built in any era: the arithmetic does not depend on it).
pub fn kernel_flops(k: &Kernel) -> f64 {
    k.spec
        .as_ref()
        .and_then(|s| s.build(ttdb_algo::ops::Era::V010, &k.inputs).ok())
        .map_or(0.0, |d| d.flop_ct().max(0.0))
}

/// Matches every tuned kernel of `list`.
pub fn match_model(
    matcher: &mut Matcher,
    list: ttdb_onnx::onnx::KernelList,
) -> ttdb_store::store::Result<ModelMatch> {
    let mut matches = Vec::new();
    for (i, k) in list.kernels.iter().enumerate() {
        if k.is_tuned() {
            matches.push(matcher.match_kernel(i, k)?);
        }
    }
    Ok(ModelMatch { list, matches })
}

/// Why a model could not be matched.
#[derive(Debug)]
pub enum ModelMatchError {
    /// Kernel extraction failed.
    Onnx(ttdb_onnx::onnx::OnnxError),
    Store(ttdb_store::store::StoreError),
    /// No layout was asked for.
    NoLayout,
}

impl std::fmt::Display for ModelMatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelMatchError::Onnx(e) => e.fmt(f),
            ModelMatchError::Store(e) => e.fmt(f),
            ModelMatchError::NoLayout => f.write_str("no layout to match"),
        }
    }
}

impl std::error::Error for ModelMatchError {}

/// Extracts the kernels of `graph` in each of `layouts` and matches them; keeps the layout
/// whose kernels the database covers best (the first on a tie).
pub fn match_layouts(
    store: &Store,
    graph: &ttdb_onnx::onnx::Graph,
    extract: &ttdb_onnx::onnx::Options,
    layouts: &[ttdb_onnx::onnx::LayoutMode],
    opts: MatchOptions,
) -> Result<ModelMatch, ModelMatchError> {
    let mut best: Option<ModelMatch> = None;
    let mut matcher = Matcher::new(store, opts);
    for &layout in layouts {
        let options = ttdb_onnx::onnx::Options {
            layout,
            ..extract.clone()
        };
        let list = ttdb_onnx::onnx::extract(graph, &options).map_err(ModelMatchError::Onnx)?;
        let m = match_model(&mut matcher, list).map_err(ModelMatchError::Store)?;
        if best.as_ref().is_none_or(|b| m.coverage() > b.coverage()) {
            best = Some(m);
        }
    }
    best.ok_or(ModelMatchError::NoLayout)
}
