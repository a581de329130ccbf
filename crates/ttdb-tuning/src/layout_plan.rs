//! The blocking a command extracts a model with (docs/design/layout-plan.md): the layout
//! plan pinned in the database for the model's structure and this host class, else one
//! planned now, weighing ttdb's timings on this host class where the database has them, and
//! pinned when the command stores. A plan decides the convs' blockings and so their
//! workload keys: pinned, it stays what `tune` measured under while records accumulate,
//! until the user asks for a re-plan. By default (`auto`) a database that holds more of the
//! model's schedules under TopHub's blocking than under a plan (TVM's own logs of the model)
//! keeps TopHub's, so that its exact matches stay exact.
use crate::tune::export::{chosen_record, stored_flops, ForHost, StoredFlops};
use std::cell::RefCell;
use std::sync::Arc;
use ttdb_format::host::HostFingerprint;
use ttdb_onnx::onnx::{
    self, Graph, HostEstimates, Kernel, KernelCosts, LayoutMode, LayoutPlan, LayoutPlanning,
    Options,
};
use ttdb_store::store::layout_plans::{self, Pin, PinnedPlan};
use ttdb_store::store::Store;

/// What the command asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanRequest {
    /// The pinned plan, else a new one.
    Pinned,
    /// A new plan, whatever is pinned.
    Replan,
    /// The pinned plan; else TopHub's blocking when the database has schedules for most of
    /// the model under it ([`AUTO_TOPHUB_PERCENT`]), and more than under a new plan (TVM's
    /// log of this model, imported); else a new plan (the default: [`choose`]).
    Auto,
}

/// The database a command plans with.
#[derive(Clone, Copy)]
pub enum PlanDb<'a> {
    /// None: the estimate alone, nothing pinned.
    None,
    /// Read pins and timings; pin nothing (a reading command, or a dry run).
    Read(&'a Store),
    /// Read, and pin a new plan.
    Pin(&'a Store),
}

/// The share of a model's tuned FLOPs the database must hold under TopHub's blocking for
/// `auto` to keep it: the model's own TVM log holds nearly all; another model's log that
/// shares a layer or two (resnet50's stem conv is resnet18's) must not cost a model its plan.
pub const AUTO_TOPHUB_PERCENT: f64 = 50.0;

/// How a command blocks the model's NCHWc convs.
#[derive(Clone, Debug)]
pub enum Blocking {
    /// Each conv alone, as TVM does (TopHub's config, else the fallback rule); `why` says
    /// why [`PlanRequest::Auto`] took it.
    TopHub { why: String },
    /// For the whole graph.
    Planned(Arc<LayoutPlan>),
}

/// Measured seconds of a kernel: the record ttdb measured and verified on this host class
/// that `export --model` and `run` would choose. Imported costs are left out (they were
/// logged on other machines).
struct StoreCosts<'a> {
    store: &'a Store,
    compat: String,
    host: ForHost,
    error: RefCell<Option<String>>,
}

impl KernelCosts for StoreCosts<'_> {
    fn seconds(&self, kernel: &Kernel) -> Option<f64> {
        match chosen_record(self.store, kernel, &self.compat, &self.host) {
            Ok(w) => w.filter(|w| w.measured_here).map(|w| w.mean_cost),
            Err(e) => {
                self.error.borrow_mut().get_or_insert(e.to_string());
                None
            }
        }
    }
}

/// The blocking for `graph` (extracted with `opts`) on `host`: see the module comment and
/// [`PlanRequest`]. With `timings` false (a plan for another machine's vector width) a new
/// plan weighs no timing of this host.
pub fn choose(
    graph: &Graph,
    opts: &Options,
    estimates: &HostEstimates,
    host: &HostFingerprint,
    db: PlanDb,
    request: PlanRequest,
    timings: bool,
) -> Result<Blocking, String> {
    let key = onnx::layout_plan_key(graph, opts).map_err(|e| e.to_string())?;
    let class = host.class();
    let store = match db {
        PlanDb::None => None,
        PlanDb::Read(s) | PlanDb::Pin(s) => Some(s),
    };
    if let (Some(store), PlanRequest::Pinned | PlanRequest::Auto) = (store, request) {
        let pinned = layout_plans::pinned_plan(store, &key, &class)
            .map_err(|e| format!("reading the pinned layout plan: {e}"))?;
        if let Some(p) = pinned {
            return read_pin(graph, opts, &p).map(Blocking::Planned);
        }
    }
    let compat = crate::matcher::MatchOptions::default().compat;
    let for_host = ForHost::of(host);
    let costs = store.filter(|_| timings).map(|store| StoreCosts {
        store,
        compat: compat.clone(),
        host: for_host.clone(),
        error: RefCell::new(None),
    });
    let mut plan = onnx::plan_layout(
        graph,
        opts,
        estimates,
        costs.as_ref().map(|c| c as &dyn KernelCosts),
    )
    .map_err(|e| e.to_string())?;
    if let Some(e) = costs.and_then(|c| c.error.into_inner()) {
        return Err(format!(
            "reading measured kernel times for the layout plan: {e}"
        ));
    }
    if let (Some(store), PlanRequest::Auto) = (store, request) {
        let coverage = |layout_plan: Option<LayoutPlanning>| -> Result<StoredFlops, String> {
            let list = onnx::extract(
                graph,
                &Options {
                    layout: LayoutMode::Nchwc,
                    layout_plan,
                    ..opts.clone()
                },
            )
            .map_err(|e| e.to_string())?;
            stored_flops(store, &list, &compat, &for_host).map_err(|e| format!("the database: {e}"))
        };
        let tophub = coverage(None)?;
        let planned = coverage(Some(LayoutPlanning::Chosen(Arc::new(plan.clone()))))?;
        if tophub.stored > planned.stored && tophub.percent() >= AUTO_TOPHUB_PERCENT {
            return Ok(Blocking::TopHub {
                why: format!(
                    "the database has schedules for {:.0}% of the tuned kernels' FLOPs under it, \
                     {:.0}% under a layout plan (`--layout-plan planned` plans anyway)",
                    tophub.percent(),
                    planned.percent()
                ),
            });
        }
    }
    plan.origin = match db {
        PlanDb::Pin(store) => {
            let json = serde_json::to_string(&plan).map_err(|e| e.to_string())?;
            let how = match request {
                PlanRequest::Pinned | PlanRequest::Auto => Pin::IfAbsent,
                PlanRequest::Replan => Pin::Replace,
            };
            let p = layout_plans::pin_plan(store, &key, &class, &graph.name, &json, how)
                .map_err(|e| format!("pinning the layout plan: {e}"))?;
            if p.plan_json != json {
                // Another command pinned one first: use it, as every later command will.
                return read_pin(graph, opts, &p).map(Blocking::Planned);
            }
            format!("planned and pinned {}", p.pinned_at)
        }
        PlanDb::Read(_) => "planned now, not pinned (this command does not store)".into(),
        PlanDb::None => "planned now on the estimate (no database)".into(),
    };
    Ok(Blocking::Planned(Arc::new(plan)))
}

/// Every plan pinned for `graph` (extracted with `opts`), on any host class, checked as
/// [`choose`] checks the one it reads: (host class, plan). What `bundle export --model`
/// collects the planned kernels' keys from.
pub fn pinned_plans(
    graph: &Graph,
    opts: &Options,
    store: &Store,
) -> Result<Vec<(String, Arc<LayoutPlan>)>, String> {
    let key = onnx::layout_plan_key(graph, opts).map_err(|e| e.to_string())?;
    layout_plans::pinned_plans(store, &key)
        .map_err(|e| format!("reading the pinned layout plans: {e}"))?
        .into_iter()
        .map(|(class, p)| {
            read_pin(graph, opts, &p)
                .map(|plan| (class.clone(), plan))
                .map_err(|e| format!("host class {class}: {e}"))
        })
        .collect()
}

/// The pinned plan `p`, checked: it is untrusted like the rest of the database, so it must
/// parse and its blockings must fit the model.
fn read_pin(graph: &Graph, opts: &Options, p: &PinnedPlan) -> Result<Arc<LayoutPlan>, String> {
    let replan = "`--layout-plan replan` plans it again";
    let mut plan: LayoutPlan = serde_json::from_str(&p.plan_json).map_err(|e| {
        format!(
            "the layout plan pinned for this model on this host class ({}) does not parse: {e}; {replan}",
            p.pinned_at
        )
    })?;
    plan.origin = format!("pinned {}", p.pinned_at);
    let plan = Arc::new(plan);
    let fits = onnx::extract(
        graph,
        &Options {
            layout: LayoutMode::Nchwc,
            layout_plan: Some(LayoutPlanning::Chosen(plan.clone())),
            ..opts.clone()
        },
    );
    if let Err(e) = fits {
        return Err(format!(
            "the layout plan pinned for this model on this host class ({}) does not fit it: {e}; {replan}",
            p.pinned_at
        ));
    }
    Ok(plan)
}
