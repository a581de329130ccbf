//! `ttdb export --model M.onnx`: the chosen schedule of each tunable kernel of a model, as
//! an Ansor log TVM's `ApplyHistoryBest` reads.
//!
//! TVM finds a record by its workload key: the md5 of the kernel's `PrintDAG` text plus its
//! shapes. A kernel's own keys are those of its DAG built in each TVM era ttdb knows (the
//! names, and so the md5, differ between TVM versions; `apply` and `tune` store the
//! kernel's measurements under them). For every stored key that is one of them, the best
//! valid record for this host is written verbatim: the cheapest that ttdb measured and
//! verified on a machine of this host's class (CPU, lanes, cores); else, records needing
//! an ISA this host lacks last, then by cost. A cost logged on another machine never
//! outranks a timing taken on this one: it says how fast the schedule was there. Nothing is re-keyed: a schedule measured for
//! another workload is never written under this kernel's key, and no cost is made up. A
//! kernel with no valid record under its keys is listed with the reason.
use super::apply::workload_key_of;
use crate::matcher::ModelMatchError;
use serde::Serialize;
use ttdb_algo::ir::dag_hash;
use ttdb_algo::ops::Era;
use ttdb_format::ansor::{KeyForm, WorkloadKey};
use ttdb_format::host::{class_of, HostFingerprint, IsaCompat};
use ttdb_onnx::onnx::{Kernel, KernelList};
use ttdb_store::store::lookup::{self, SourceRecord};
use ttdb_store::store::record_pins;
use ttdb_store::store::Store;

/// A record written for a kernel.
#[derive(Clone, Debug, Serialize)]
pub struct WrittenRecord {
    pub workload_key: String,
    /// The TVM eras whose DAG of the kernel has this key (which TVM versions will use it).
    pub tvm_eras: Vec<String>,
    pub record_id: i64,
    /// Mean cost in seconds where it was measured.
    pub mean_cost: f64,
    pub target: String,
    /// `resnet_50.best.json:12 (workload ...)` or `ttdb:apply@...:3 (...)`.
    pub source: String,
    /// Whether this host has the vector ISA the record's timing needs.
    pub isa: IsaCompat,
    /// Whether ttdb measured and verified it on a machine of this host's class (what
    /// ranks it first).
    pub measured_here: bool,
    /// Chosen over the cheapest by its time inside a model (`tune MODEL`, `record_pins`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub chosen_in_model: bool,
    #[serde(skip)]
    pub raw: String,
}

/// One tunable kernel of the model.
#[derive(Clone, Debug, Serialize)]
pub struct ExportedKernel {
    pub name: String,
    pub class: String,
    pub multiplicity: usize,
    /// Its keys, one per distinct DAG over the TVM eras.
    pub keys: Vec<String>,
    /// One per stored key of the kernel that has a valid record.
    pub written: Vec<WrittenRecord>,
    /// Why nothing was written, and what to run.
    pub missing: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ModelExport {
    pub model: String,
    pub layout: String,
    /// Tunable kernels.
    pub kernels: usize,
    /// Records written (one line each).
    pub written: usize,
    /// Tunable kernels with no record written.
    pub missing: usize,
    pub per_kernel: Vec<ExportedKernel>,
}

impl ModelExport {
    /// The log lines to write, kernel by kernel.
    pub fn lines(&self) -> impl Iterator<Item = &str> {
        self.per_kernel
            .iter()
            .flat_map(|k| k.written.iter().map(|w| w.raw.as_str()))
    }
}

/// The machine records are chosen for.
#[derive(Clone, Debug)]
pub struct ForHost {
    /// Its ISA flags (records whose timing needs others rank last).
    pub isa: Vec<String>,
    /// Its class ([`HostFingerprint::class`]): ttdb's timings on machines of this class
    /// rank first.
    pub class: String,
}

impl ForHost {
    pub fn of(host: &HostFingerprint) -> ForHost {
        ForHost {
            isa: host.isa_flags.clone(),
            class: host.class(),
        }
    }
}

/// The records of workload `id` that ttdb verified on a machine of class `class`: (record
/// id, mean cost), cheapest first.
pub fn measured_on_class(
    store: &Store,
    id: i64,
    class: &str,
) -> ttdb_store::store::Result<Vec<(i64, f64)>> {
    let verified = lookup::verified_records(store, id)?;
    let mut out: Vec<(i64, f64)> = Vec::new();
    for v in verified {
        let here = class_of(&v.llvm_cpu, v.isa_features.split_whitespace(), v.cores) == class;
        if here && !out.iter().any(|(r, _)| *r == v.record_id) {
            out.push((v.record_id, v.mean_cost));
        }
    }
    Ok(out)
}

/// The record of workload `id` that runs for a machine of class `class`, of those ttdb
/// verified on that class: the one chosen inside a model (`record_pins`) while the cheapest
/// is still the one it was chosen over, else the cheapest. True: the pinned one.
fn best_measured_on_class(
    store: &Store,
    id: i64,
    class: &str,
) -> ttdb_store::store::Result<Option<(SourceRecord, bool)>> {
    let Some(&(cheapest, _)) = measured_on_class(store, id, class)?.first() else {
        return Ok(None);
    };
    if let Some(pin) = record_pins::pinned_record(store, id, class)? {
        if pin.holds_over(cheapest) && pin.record_id != cheapest {
            if let Some(r) = lookup::valid_record(store, pin.record_id)? {
                return Ok(Some((r, true)));
            }
        }
    }
    Ok(lookup::valid_record(store, cheapest)?.map(|r| (r, false)))
}

/// One of a kernel's TVM workload keys.
struct KernelKey {
    key: String,
    /// The md5 of the DAG's `PrintDAG` text, and its io shapes flattened.
    md5: String,
    shapes: Vec<i64>,
    /// The eras whose DAG has this key.
    eras: Vec<Era>,
}

/// The kernel's key in each era its spec builds in.
fn kernel_keys(k: &Kernel) -> Result<Vec<KernelKey>, String> {
    let spec = k.spec.as_ref().ok_or("the kernel has no workload spec")?;
    let mut keys: Vec<KernelKey> = Vec::new();
    let mut error = None;
    for era in Era::ALL {
        match spec.build(era, &k.inputs) {
            Ok(dag) => {
                let key = workload_key_of(&dag);
                match keys.iter_mut().find(|x| x.key == key) {
                    Some(x) => x.eras.push(era),
                    None => keys.push(KernelKey {
                        key,
                        md5: dag_hash(&dag),
                        shapes: dag.io_shapes().concat(),
                        eras: vec![era],
                    }),
                }
            }
            Err(e) => error = Some(e.to_string()),
        }
    }
    if keys.is_empty() {
        return Err(format!(
            "the kernel's DAG does not build: {}",
            error.unwrap_or_default()
        ));
    }
    Ok(keys)
}

/// Whether a stored key is TVM's key of a DAG with md5 `md5` and io shapes `shapes`: the
/// same hash and, as TVM's `decode_workload_key` compares them, the same ints (hash-only
/// keys of old TVM hashed the shapes too).
fn same_workload(stored: &str, md5: &str, shapes: &[i64]) -> bool {
    WorkloadKey::parse(stored).is_ok_and(|k| {
        k.hash() == Some(md5) && (k.form == KeyForm::HashOnly || k.flat_ints() == shapes)
    })
}

fn export_kernel(
    store: &Store,
    k: &Kernel,
    compat: &str,
    host: &ForHost,
    model: &str,
) -> ttdb_store::store::Result<ExportedKernel> {
    let mut out = ExportedKernel {
        name: k.name.clone(),
        class: k.class.clone(),
        multiplicity: k.multiplicity(),
        keys: vec![],
        written: vec![],
        missing: None,
    };
    let keys = match kernel_keys(k) {
        Ok(keys) => keys,
        Err(e) => {
            out.missing = Some(format!("{e}; ttdb cannot tell its TVM workload key"));
            return Ok(out);
        }
    };
    out.keys = keys.iter().map(|x| x.key.clone()).collect();
    let mut records = 0;
    for KernelKey {
        md5, shapes, eras, ..
    } in &keys
    {
        for (id, stored) in lookup::workloads_with_key_head(store, md5)? {
            if !same_workload(&stored, md5, shapes) {
                continue;
            }
            records += lookup::record_count(store, id, compat)?;
            let best = match best_measured_on_class(store, id, &host.class)? {
                Some((r, pinned)) => Some((r.isa_requirement().check(&host.isa), r, true, pinned)),
                None => lookup::best_record_per_target(store, id, compat)?
                    .into_iter()
                    .map(|r| (r.isa_requirement().check(&host.isa), r, false, false))
                    // Stable: among equal verdicts the cost order of the query stays.
                    .min_by_key(|(isa, _, _, _)| isa.rank()),
            };
            if let Some((isa, r, measured_here, chosen_in_model)) = best {
                out.written.push(WrittenRecord {
                    workload_key: stored,
                    tvm_eras: eras.iter().map(|e| e.to_string()).collect(),
                    record_id: r.record_id,
                    mean_cost: r.mean_cost,
                    target: r.target.clone(),
                    source: r.label(),
                    isa,
                    measured_here,
                    chosen_in_model,
                    raw: r.raw,
                });
            }
        }
    }
    if out.written.is_empty() {
        let what = if records > 0 {
            format!("all {records} record(s) under its TVM workload key(s) failed (error_no != 0)")
        } else {
            "no record under its TVM workload key(s)".to_string()
        };
        out.missing = Some(format!(
            "{what}; run `ttdb apply {model}` (measures schedules for it and stores them under \
             its key) or `ttdb tune {model}` (searches it)"
        ));
    }
    Ok(out)
}

/// The record `export --model` would write first for kernel `k`: over its keys, the best
/// valid record for `host` (the cheapest ttdb measured on its class; else records needing
/// an ISA it lacks last, then by cost). None when the kernel has no valid record (or no
/// key).
pub fn chosen_record(
    store: &Store,
    k: &Kernel,
    compat: &str,
    host: &ForHost,
) -> ttdb_store::store::Result<Option<WrittenRecord>> {
    let e = export_kernel(store, k, compat, host, "")?;
    Ok(e.written.into_iter().min_by(|a, b| {
        let rank = |w: &WrittenRecord| (!w.measured_here, w.isa.rank(), w.mean_cost);
        rank(a)
            .partial_cmp(&rank(b))
            .unwrap_or(std::cmp::Ordering::Equal)
    }))
}

/// How much of a kernel list the database covers: the FLOPs (each kernel counted as often as
/// it repeats) of the tuned kernels with a record `run` would take for `host`
/// ([`chosen_record`]), and of all its tuned kernels. What the automatic choices of layout
/// and blocking compare: a database holds a model's schedules under the keys they were
/// tuned or logged for, and the other choices find none of them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StoredFlops {
    pub stored: f64,
    pub tuned: f64,
}

impl StoredFlops {
    /// The stored share of the tuned FLOPs, in percent (0 for a list with none).
    pub fn percent(&self) -> f64 {
        if self.tuned > 0.0 {
            100.0 * self.stored / self.tuned
        } else {
            0.0
        }
    }
}

/// [`StoredFlops`] of `list` in `store` for `host` (targets of compat class `compat`).
pub fn stored_flops(
    store: &Store,
    list: &KernelList,
    compat: &str,
    host: &ForHost,
) -> ttdb_store::store::Result<StoredFlops> {
    let mut c = StoredFlops::default();
    for k in list.tuned() {
        let flops = crate::matcher::kernel_flops(k) * k.multiplicity() as f64;
        c.tuned += flops;
        if chosen_record(store, k, compat, host)?.is_some() {
            c.stored += flops;
        }
    }
    Ok(c)
}

/// The stored workload keys that are TVM keys of a tunable kernel of `list` (any era, any
/// key form): what `bundle export --model` takes.
pub fn stored_kernel_keys(
    store: &Store,
    list: &KernelList,
) -> ttdb_store::store::Result<Vec<String>> {
    let mut out = Vec::new();
    for k in list.tuned() {
        let Ok(keys) = kernel_keys(k) else { continue };
        for KernelKey { md5, shapes, .. } in &keys {
            for (_, stored) in lookup::workloads_with_key_head(store, md5)? {
                if same_workload(&stored, md5, shapes) {
                    out.push(stored);
                }
            }
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The export of the tunable kernels of `list` (of the model file `model`), chosen for
/// `host` among targets of compat class `compat` (`llvm/cpu`).
pub fn export_kernels(
    store: &Store,
    list: &KernelList,
    compat: &str,
    host: &ForHost,
    model: &str,
) -> ttdb_store::store::Result<ModelExport> {
    let per_kernel = list
        .tuned()
        .map(|k| export_kernel(store, k, compat, host, model))
        .collect::<ttdb_store::store::Result<Vec<_>>>()?;
    Ok(ModelExport {
        model: model.to_string(),
        layout: list.layout.clone(),
        kernels: per_kernel.len(),
        written: per_kernel.iter().map(|k| k.written.len()).sum(),
        missing: per_kernel.iter().filter(|k| k.missing.is_some()).count(),
        per_kernel,
    })
}

/// Extracts the kernels of `graph` in each of `layouts` and exports them; keeps the layout
/// with the most kernels written (the first on a tie), as `apply --layout auto` keeps the
/// one the database covers best.
pub fn export_model(
    store: &Store,
    graph: &ttdb_onnx::onnx::Graph,
    extract: &ttdb_onnx::onnx::Options,
    layouts: &[ttdb_onnx::onnx::LayoutMode],
    host: &ForHost,
    model: &str,
) -> Result<ModelExport, ModelMatchError> {
    let compat = crate::matcher::MatchOptions::default().compat;
    let mut best: Option<ModelExport> = None;
    for &layout in layouts {
        let options = ttdb_onnx::onnx::Options {
            layout,
            ..extract.clone()
        };
        let list = ttdb_onnx::onnx::extract(graph, &options).map_err(ModelMatchError::Onnx)?;
        let e =
            export_kernels(store, &list, &compat, host, model).map_err(ModelMatchError::Store)?;
        let covered = |e: &ModelExport| e.kernels - e.missing;
        if best.as_ref().is_none_or(|b| covered(&e) > covered(b)) {
            best = Some(e);
        }
    }
    best.ok_or(ModelMatchError::NoLayout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_keys_match_by_hash_and_ints() {
        let md5 = "094746725b17047692659df5357898d7";
        let shapes = [1, 2, 3, 4];
        assert!(same_workload(
            &format!(r#"["{md5}", [1, 2], [3, 4]]"#),
            md5,
            &shapes
        ));
        // TVM's flat form of the same workload.
        assert!(same_workload(
            &format!(r#"["{md5}", 1, 2, 3, 4]"#),
            md5,
            &shapes
        ));
        assert!(same_workload(&format!(r#"["{md5}"]"#), md5, &shapes));
        assert!(!same_workload(
            &format!(r#"["{md5}", [1, 2], [3, 5]]"#),
            md5,
            &shapes
        ));
        assert!(!same_workload(
            r#"["ffff46725b17047692659df5357898d7", [1, 2], [3, 4]]"#,
            md5,
            &shapes
        ));
        assert!(!same_workload("not a key", md5, &shapes));
    }
}
