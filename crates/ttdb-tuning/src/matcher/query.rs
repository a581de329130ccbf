//! Database side of matching: exact records by signature, the workloads of a class, the
//! nearest of them by shape, and explanations when nothing matches. The SQL lives in
//! `ttdb_store::store::lookup`; this module decides what to ask and how to rank.
use super::{MatchOptions, Rejection};
use ttdb_format::signature::WorkloadSignature;
use ttdb_store::store::lookup;
pub use ttdb_store::store::lookup::SourceRecord;
use ttdb_store::store::target::NormalizedTarget;
use ttdb_store::store::{Result, Store};

/// The targets of the compat class grouped by their ISA verdict on the host being matched
/// for (compatible, unknown, lacks), so each workload's best records of every group can be
/// asked for: a slower record this host can run as timed is not crowded out by faster ones
/// it cannot.
#[derive(Clone, Debug, Default)]
pub struct TargetGroups([Vec<i64>; 3]);

impl TargetGroups {
    pub fn load(store: &Store, opts: &MatchOptions) -> Result<TargetGroups> {
        let mut groups = TargetGroups::default();
        for (id, target) in lookup::targets_of(store, &opts.compat)? {
            let verdict = NormalizedTarget::parse(&target, None)
                .isa_requirement()
                .check(&opts.host_isa);
            groups.0[verdict as usize].push(id);
        }
        Ok(groups)
    }

    /// More than one group has targets (else one query in cost order serves).
    fn mixed(&self) -> bool {
        self.0.iter().filter(|g| !g.is_empty()).count() > 1
    }
}

/// The best `n` valid records of every workload with signature `hash`, in runs: one per
/// workload and target group (see [`best_records_of`]).
pub fn exact_records(
    store: &Store,
    hash: &str,
    opts: &MatchOptions,
    groups: &TargetGroups,
    n: usize,
) -> Result<Vec<Vec<SourceRecord>>> {
    let mut out = Vec::new();
    for id in lookup::workloads_with_signature(store, hash)? {
        out.extend(best_records_of(store, id, opts, groups, n)?);
    }
    Ok(out)
}

/// The best `n` valid records of one workload on compatible targets, cheapest first: one
/// run per target group when the targets' ISA verdicts differ, else a single run.
pub fn best_records_of(
    store: &Store,
    workload_id: i64,
    opts: &MatchOptions,
    groups: &TargetGroups,
    n: usize,
) -> Result<Vec<Vec<SourceRecord>>> {
    if !groups.mixed() {
        return Ok(vec![lookup::best_records_of(
            store,
            workload_id,
            &opts.compat,
            n,
        )?]);
    }
    let mut out = Vec::new();
    for ids in &groups.0 {
        let run = lookup::best_records_on(store, workload_id, ids, n)?;
        if !run.is_empty() {
            out.push(run);
        }
    }
    Ok(out)
}

/// A workload of a class that has valid records on compatible targets.
#[derive(Clone, Debug)]
pub struct ClassWorkload {
    pub id: i64,
    pub signature: String,
    pub key: ShapeKey,
}

/// What the shape distance compares, precomputed once per workload: the ranks of the
/// tensors, the log of every dim, the attributes and layout.
#[derive(Clone, Debug, PartialEq)]
pub struct ShapeKey {
    ranks: Vec<usize>,
    log_dims: Vec<f64>,
    attrs: Vec<(String, String)>,
    layout: String,
    dtype: String,
}

impl ShapeKey {
    pub fn of(sig: &WorkloadSignature) -> ShapeKey {
        let tensors = sig.inputs.iter().chain([&sig.output]);
        ShapeKey {
            ranks: tensors.clone().map(Vec::len).collect(),
            log_dims: tensors.flatten().map(|&d| (d.max(1) as f64).ln()).collect(),
            attrs: sig
                .attrs
                .iter()
                .map(|(k, v)| (k.clone(), v.to_string()))
                .collect(),
            layout: sig.layout.clone(),
            dtype: sig.dtype.clone(),
        }
    }

    /// Sum of |ln(a/b)| over all dims, plus 2 per differing attribute and 1 for another
    /// layout; None when tensor ranks differ (another DAG structure).
    pub fn distance(&self, other: &ShapeKey) -> Option<f64> {
        if self.ranks != other.ranks || self.dtype != other.dtype {
            return None;
        }
        let mut d: f64 = self
            .log_dims
            .iter()
            .zip(&other.log_dims)
            .map(|(a, b)| (a - b).abs())
            .sum();
        // Both attribute lists are sorted by key (BTreeMap order).
        for (k, v) in &self.attrs {
            if other
                .attrs
                .binary_search_by(|(ok, _)| ok.cmp(k))
                .map_or(true, |i| &other.attrs[i].1 != v)
            {
                d += 2.0;
            }
        }
        if self.layout != other.layout {
            d += 1.0;
        }
        Some(d)
    }
}

pub fn class_workloads(store: &Store, op_class: &str, compat: &str) -> Result<Vec<ClassWorkload>> {
    Ok(lookup::class_workloads(store, op_class, compat)?
        .into_iter()
        .map(|(id, signature, sig)| ClassWorkload {
            id,
            signature,
            key: ShapeKey::of(&sig),
        })
        .collect())
}

/// The `n` workloads of `list` nearest to `key` (its own signature excluded: that is the
/// exact tier).
pub fn nearest<'l>(
    list: &'l [ClassWorkload],
    key: &ShapeKey,
    hash: &str,
    n: usize,
) -> Vec<&'l ClassWorkload> {
    let mut scored: Vec<(f64, &ClassWorkload)> = list
        .iter()
        .filter(|w| w.signature != hash)
        .filter_map(|w| key.distance(&w.key).map(|d| (d, w)))
        .collect();
    // Ties by signature (content), not by database id, so two databases holding the same
    // records (one imported from the other's bundle) choose alike.
    scored.sort_by(|a, b| {
        a.0.total_cmp(&b.0)
            .then_with(|| a.1.signature.cmp(&b.1.signature))
            .then(a.1.id.cmp(&b.1.id))
    });
    scored.into_iter().take(n).map(|(_, w)| w).collect()
}

/// The records of the workloads with signature `hash` that were measured without error but
/// can never be chosen, because their costs are not plausible times (zero, negative, NaN,
/// infinite, above the ceiling: `MeasureResult::invalid_reason`), each with its reason: a
/// log or bundle that claims such a time is wrong or hostile, and `--explain` says so.
pub fn unrankable(store: &Store, hash: &str, opts: &MatchOptions) -> Result<Vec<Rejection>> {
    const SHOWN: usize = 3;
    let mut out = Vec::new();
    for id in lookup::workloads_with_signature(store, hash)? {
        let (first, count) = lookup::unrankable_records(store, id, &opts.compat, SHOWN)?;
        for r in &first {
            let why = ttdb_format::ansor::Record::parse(r.raw.trim_end())
                .ok()
                .and_then(|rec| rec.result.invalid_reason())
                .unwrap_or_else(|| "its costs do not parse".into());
            out.push(Rejection {
                source: r.label(),
                reason: format!("dropped, never ranked: {why}"),
            });
        }
        if let (Some(last), true) = (first.last(), count > first.len()) {
            out.push(Rejection {
                source: last.label(),
                reason: format!(
                    "and {} more records of this workload dropped for their costs",
                    count - first.len()
                ),
            });
        }
    }
    Ok(out)
}

/// Why a kernel has no candidate: the closest things the database does hold.
pub fn explain_none(
    store: &Store,
    sig: &WorkloadSignature,
    opts: &MatchOptions,
) -> Result<Vec<Rejection>> {
    let mut out = Vec::new();
    let anchor = sig.op_class.split('+').next().unwrap_or("");
    // Same anchor, another epilogue: a different DAG structure.
    for (class, n) in lookup::sibling_classes(store, anchor, &sig.op_class)? {
        out.push(Rejection {
            source: format!("{n} workload(s) of class {class}"),
            reason: format!(
                "wrong class: {class} is not {} (another fused epilogue, another DAG)",
                sig.op_class
            ),
        });
    }
    // Same class, but only on incompatible targets or only failed measurements.
    for (compat, valid) in lookup::class_presence(store, &sig.op_class)? {
        if compat != opts.compat {
            out.push(Rejection {
                source: format!("records of class {} on {compat}", sig.op_class),
                reason: format!("incompatible target: {compat}, not {}", opts.compat),
            });
        } else if !valid {
            out.push(Rejection {
                source: format!("records of class {} on {compat}", sig.op_class),
                reason:
                    "every measurement of this class failed (error_no != 0): none can be chosen"
                        .into(),
            });
        }
    }
    if out.is_empty() {
        out.push(Rejection {
            source: "-".into(),
            reason: format!("the database holds no workload of class {}", sig.op_class),
        });
    }
    Ok(out)
}
