//! The records the in-model choice tries for a workload: its few best measured on this host
//! class, and the rows variant of the cheapest (`crate::search::partition`), measured alone
//! and stored first when the database lacks it.
use super::{db, ChoiceError, InModelOptions};
use crate::search::interrupt;
use crate::search::observer::Observer;
use crate::search::partition::rows_across_cores;
use crate::search::policy::SearchTrial;
use crate::tune::export::measured_on_class;
use crate::tune::record::StoreSink;
use crate::tune::refine::RefineOptions;
use crate::tune::trials::{Provenance, TrialSink};
use ttdb_algo::schedule::stage_inits_from_dag;
use ttdb_backend::evaluate::Reference;
use ttdb_format::ansor::{Record, Step, WorkloadKey};
use ttdb_store::store::lookup;
use ttdb_store::store::Store;

/// A workload tried in the model: its steps (in the plan as first loaded) and candidates.
pub(super) struct Tried {
    pub workload_id: i64,
    pub steps: Vec<usize>,
    /// (record id, tuned cost), cheapest first (the rows variant last).
    pub candidates: Vec<(i64, f64)>,
    /// The candidate that is the cheapest's rows variant (never the first).
    pub rows_variant: Option<i64>,
}

/// Where the choice may measure a candidate the database lacks (this host's searches'
/// options), and how many cores share a kernel in the model.
pub(super) struct Measuring<'a> {
    pub refine: &'a RefineOptions,
    pub threads: usize,
}

/// A workload's candidates (its steps left empty): distinct step lists, cheapest first, and
/// last the rows variant of the cheapest when `o.rows_across_cores` and it is within
/// `o.within` alone, so that the choice's last variant run runs every rows variant at once
/// (a conv gains from rows only when the conv before it splits rows too).
pub(super) fn candidates_of(
    store: &mut Store,
    record_id: i64,
    class: &str,
    o: &InModelOptions,
    measuring: Option<&Measuring>,
) -> Result<Tried, ChoiceError> {
    let none = |workload_id| Tried {
        workload_id,
        steps: Vec::new(),
        candidates: Vec::new(),
        rows_variant: None,
    };
    let Some(ran) = lookup::valid_record(store, record_id).map_err(db)? else {
        return Ok(none(0));
    };
    let first = measured_on_class(store, ran.workload_id, class).map_err(db)?;
    let Some(&(cheapest_id, _)) = first.first() else {
        return Ok(none(ran.workload_id));
    };
    // A variant measured just now may be the cheapest alone, the record pins are made
    // over: then the list is read again.
    let wants_variant = measuring.filter(|_| o.rows_across_cores);
    let (measured, variant) = match wants_variant {
        Some(m) => match rows_variant(store, cheapest_id, m, &first)? {
            Some(Variant::Stored(found)) => (first, Some(found)),
            Some(Variant::MeasuredNow(steps)) => {
                let again = measured_on_class(store, ran.workload_id, class).map_err(db)?;
                let found = steps_of(store, &again, &steps)?;
                (again, found)
            }
            None => (first, None),
        },
        None => (first, None),
    };
    let cheapest = measured[0].1;
    let variant = variant.filter(|v| v.1 <= cheapest * o.within);
    // The cheapest alone itself (measured just now, or stored earlier): simply the first.
    let variant = variant.filter(|v| v.0 != measured[0].0);
    let mut seen: Vec<String> = Vec::new();
    let mut out = Vec::new();
    let wanted = o.candidates.max(2) - usize::from(variant.is_some());
    for (id, cost) in measured {
        if out.len() >= wanted || cost > cheapest * o.within {
            break;
        }
        if variant.is_some_and(|v| v.0 == id) {
            continue;
        }
        let Some(r) = lookup::valid_record(store, id).map_err(db)? else {
            continue;
        };
        let Ok(parsed) = Record::parse(&r.raw) else {
            continue;
        };
        let steps = format!("{:?}", parsed.steps);
        if !seen.contains(&steps) {
            seen.push(steps);
            out.push((id, cost));
        }
    }
    out.extend(variant);
    Ok(Tried {
        candidates: out,
        rows_variant: variant.map(|v| v.0),
        ..none(ran.workload_id)
    })
}

/// The record among `measured` whose steps are `steps`.
fn steps_of(
    store: &Store,
    measured: &[(i64, f64)],
    steps: &[Step],
) -> Result<Option<(i64, f64)>, ChoiceError> {
    for &(id, cost) in measured {
        let Some(r) = lookup::valid_record(store, id).map_err(db)? else {
            continue;
        };
        if Record::parse(&r.raw).is_ok_and(|p| p.steps == steps) {
            return Ok(Some((id, cost)));
        }
    }
    Ok(None)
}

/// The rows variant of record `id`, when it has one (`search::partition`).
enum Variant {
    /// A record among those already measured on this host class: (record id, cost).
    Stored((i64, f64)),
    /// None of them had its steps: measured alone and stored just now (if it verified).
    MeasuredNow(Vec<Step>),
}

/// The rows variant of record `id`: found among `measured` (this host class's records of
/// its workload), or else measured alone and stored; None when the record has no such
/// variant or it was not measured.
fn rows_variant(
    store: &mut Store,
    id: i64,
    m: &Measuring,
    measured: &[(i64, f64)],
) -> Result<Option<Variant>, ChoiceError> {
    let Some(r) = lookup::valid_record(store, id).map_err(db)? else {
        return Ok(None);
    };
    let Ok(parsed) = Record::parse(&r.raw) else {
        return Ok(None);
    };
    let key = parsed.task.workload_key;
    let Some(dag) = WorkloadKey::parse(&key)
        .ok()
        .and_then(|k| ttdb_algo::recognize::recognize(&k).ok())
        .map(|r| r.dag)
    else {
        return Ok(None);
    };
    let Some(steps) = rows_across_cores(&stage_inits_from_dag(&dag), &parsed.steps, m.threads)
    else {
        return Ok(None);
    };
    if let Some(found) = steps_of(store, measured, &steps)? {
        return Ok(Some(Variant::Stored(found)));
    }
    // Without a reference output the variant could not be verified: not tried.
    let Ok(reference) = Reference::new(&dag, 11) else {
        return Ok(None);
    };
    let interrupted = || interrupt::requested();
    let mut measurer = (m.refine).measurer(&dag, &reference, m.refine.eval(), &interrupted);
    let timeout = m.refine.droplet.max_timeout;
    let Some(evaluation) = measurer
        .measure(std::slice::from_ref(&steps), timeout)
        .pop()
        .flatten()
    else {
        return Ok(None);
    };
    drop(measurer);
    let mut sink = StoreSink {
        store,
        host: m.refine.target.host.clone(),
    };
    let how = Provenance::Variant {
        record: id,
        how: "rows across cores",
    };
    let mut trials = TrialSink::new(&mut sink, &key, dag.flop_ct(), how);
    let trial = SearchTrial {
        round: 0,
        origin: "rows across cores".into(),
        steps: steps.clone(),
        evaluation,
    };
    trials.measured(&[trial]);
    trials.finish().map_err(db)?;
    Ok(Some(Variant::MeasuredNow(steps)))
}
