//! `ttdb kernels MODEL.onnx`: the fused kernels TVM Relay would extract on x86.
use super::table::{io_shapes, Table};
use super::{CliError, CliResult};
use std::path::PathBuf;
use std::sync::Arc;
use ttdb_onnx::onnx::{
    self, tophub, InputShape, KernelKind, KernelList, LayoutMode, LayoutPlanning, Options, TopHub,
};
pub use ttdb_tuning::layout_plan::PlanDb;
use ttdb_tuning::layout_plan::{self, Blocking, PlanRequest};

/// How to read a model into kernels (shared by `kernels`, `match`, `apply`).
#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// The ONNX model.
    pub model: PathBuf,
    /// Layout TVM would use: nchwc (x86 AlterOpLayout), nhwc (ConvertLayout), nchw; `match`
    /// and `apply` also take `auto` (the layout the database has better schedules for).
    /// Default: nchwc; for `run` and `build`, auto: the layout whose kernels the database
    /// has schedules for (nchwc without a database, or on a tie).
    #[arg(long)]
    pub layout: Option<String>,
    /// Shape of a graph input with symbolic dims: NAME=d0,d1,... (repeatable).
    #[arg(long = "input-shape", value_name = "NAME=DIMS")]
    pub input_shape: Vec<String>,
    /// Target -mcpu: sets the SIMD lanes of the NCHWc fallback blocking (16 AVX-512, 8 AVX2,
    /// 4 without -mcpu).
    #[arg(long)]
    pub mcpu: Option<String>,
    /// SIMD 32-bit lanes (overrides --mcpu).
    #[arg(long)]
    pub lanes: Option<i64>,
    /// A TopHub x86 log for NCHWc blocking, instead of the one built into ttdb (TVM's
    /// llvm_v0.04.log).
    #[arg(long, conflicts_with = "no_tophub")]
    pub tophub: Option<PathBuf>,
    /// TopHub's blocking without TopHub: the fallback rule only, as a TVM build without
    /// TopHub blocks (under `--layout-plan tophub`, and where a plan starts).
    #[arg(long)]
    pub no_tophub: bool,
    /// N-D MatMul as a batch_matmul of the right operand as it is ([B, K, N],
    /// transpose_b=False), as TVM's ONNX frontend with `use_nt_batch_matmul=False` emits
    /// (default: of the transposed operand, [B, N, K]).
    #[arg(long)]
    pub no_nt_batch_matmul: bool,
    /// NCHWc blocking: `planned` chooses every conv's for the whole graph, weighing the
    /// convs against the layout transforms they force, with ttdb's timings on this host
    /// class where the database has them; the plan is pinned in the database (per model and
    /// host class) by the first command that stores, and every later command uses it;
    /// `replan` plans again (and re-pins where the command stores); `tophub` chooses each
    /// conv's alone, as TVM does (TopHub's config, else the fallback rule; the keys of TVM's
    /// logs); `auto` is the pinned plan, else TopHub's blocking where the database has
    /// schedules for more of the model under it (TVM's logs of this model, imported), else
    /// `planned` (docs/design/layout-plan.md). It decides the kernels' workload keys.
    #[arg(
        long,
        default_value = "auto",
        value_name = "auto|planned|replan|tophub"
    )]
    pub layout_plan: String,
}

#[derive(clap::Args, Debug)]
pub struct KernelsArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Only kernels Ansor would tune.
    #[arg(long)]
    pub tuned_only: bool,
    /// Print the result as JSON on standard output.
    #[arg(long)]
    pub json: bool,
}

fn kind_str(k: &KernelKind) -> &'static str {
    match k {
        KernelKind::Tuned => "tuned",
        KernelKind::Untunable { .. } => "untunable",
        KernelKind::Simple => "simple",
    }
}

/// Human table of a kernel list.
pub fn render_kernels(list: &KernelList, tuned_only: bool) -> String {
    let mut t = Table::new(&[
        "name",
        "class",
        "kind",
        "shapes",
        "layout",
        "blocking",
        ">count",
        "signature",
    ]);
    let mut reasons = Vec::new();
    for k in list.kernels.iter().filter(|k| !tuned_only || k.is_tuned()) {
        let blocking = match k.blocking {
            Some(b) => format!(
                "{},{} {}",
                b.ic_bn,
                b.oc_bn,
                match b.source {
                    onnx::BlockingSource::TopHub => "tophub",
                    onnx::BlockingSource::Fallback => "fallback",
                    onnx::BlockingSource::Override => "chosen",
                }
            ),
            None if k.winograd => "winograd".into(),
            None => String::new(),
        };
        let class = if k.detail.is_empty() {
            k.class.clone()
        } else {
            format!("{} ({})", k.class, k.detail)
        };
        t.row(vec![
            k.name.clone(),
            class,
            kind_str(&k.kind).into(),
            io_shapes(&k.inputs, &k.output),
            k.layout.clone(),
            blocking,
            k.multiplicity().to_string(),
            k.signature_hash
                .as_deref()
                .map(|h| h[..12].to_string())
                .unwrap_or_default(),
        ]);
        if let KernelKind::Untunable { reason } = &k.kind {
            reasons.push(format!("  {}: {reason}", k.name));
        }
    }
    let mut out = t.render();
    let tuned = list.tuned().count();
    out.push_str(&format!(
        "{} kernels ({} tuned, {} occurrences tuned), {} occurrences in all, {} layout transforms; {} ONNX nodes; layout {}, {} lanes{}\n",
        list.kernels.len(),
        tuned,
        list.tuned().map(|k| k.multiplicity()).sum::<usize>(),
        list.occurrences(),
        list.layout_transforms(),
        list.onnx_nodes,
        list.layout,
        list.lanes,
        list.tophub.as_deref().map(|p| format!(", TopHub {p}")).unwrap_or_default()
    ));
    out.push_str(&render_layout_plan(list));
    if !reasons.is_empty() {
        out.push_str("untunable:\n");
        out.push_str(&reasons.join("\n"));
        out.push('\n');
    }
    out
}

/// One line on the graph-level blocking plan, if the list was extracted with one.
pub fn render_layout_plan(list: &KernelList) -> String {
    let Some(p) = &list.layout_plan else {
        return String::new();
    };
    let costs = if p.measured_convs == 0 {
        "estimated convs + transforms".to_string()
    } else {
        format!(
            "convs + transforms ({} of {} convs measured on this host class, the rest estimated x {:.2})",
            p.measured_convs, p.convs, p.estimate_scale
        )
    };
    format!(
        "layout plan ({}): {} of {} NCHWc convs blocked otherwise than TopHub would (start: {}); layout transforms between ops {} (TopHub: {}); {costs} {:.2} ms (TopHub: {:.2} ms)\n",
        p.origin,
        p.changed,
        p.convs,
        p.start,
        p.transforms,
        p.transforms_tophub,
        p.estimated_ms,
        p.estimated_ms_tophub
    )
}

impl ModelArgs {
    /// `model` read with `layout` and every other option at its default.
    pub fn for_model(model: PathBuf, layout: &str) -> ModelArgs {
        ModelArgs {
            model,
            layout: Some(layout.into()),
            input_shape: vec![],
            mcpu: None,
            lanes: None,
            tophub: None,
            no_tophub: false,
            no_nt_batch_matmul: false,
            layout_plan: "auto".into(),
        }
    }

    /// Loads the graph and the extraction options for `layout` (one of nchwc, nhwc, nchw);
    /// with `--layout-plan planned|replan`, the plan from (or pinned in) `db`.
    pub fn load(&self, db: PlanDb) -> Result<(onnx::Graph, Options), CliError> {
        let overrides = self
            .input_shape
            .iter()
            .map(|s| InputShape::parse(s))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(cpu) = self.mcpu.as_deref() {
            if !tophub::KNOWN_X86_CPUS.contains(&cpu) {
                return Err(CliError {
                    message: format!(
                        "--mcpu `{cpu}` is not an x86 CPU LLVM knows (e.g. skylake-avx512, core-avx2, znver4; `llc -march=x86-64 -mcpu=help` lists them)"
                    ),
                    code: 2,
                });
            }
        }
        if let Some(n) = self.lanes {
            if !(n > 0 && (n as u64).is_power_of_two() && n <= 64) {
                return Err(CliError {
                    message: format!(
                        "--lanes {n}: fp32 SIMD lanes are a power of two up to 64 (TVM's x86 targets: 4, 8 or 16)"
                    ),
                    code: 2,
                });
            }
        }
        let lanes = self
            .lanes
            .unwrap_or_else(|| tophub::lanes_for_mcpu(self.mcpu.as_deref()));
        let tophub = if self.no_tophub {
            None
        } else {
            Some(Arc::new(match &self.tophub {
                Some(p) => TopHub::load(p).map_err(|m| CliError {
                    message: m,
                    code: 1,
                })?,
                None => TopHub::builtin(),
            }))
        };
        let request = match self.layout_plan.as_str() {
            "tophub" => None,
            "auto" => Some(PlanRequest::Auto),
            "planned" => Some(PlanRequest::Pinned),
            "replan" => Some(PlanRequest::Replan),
            other => {
                return Err(CliError {
                    message: format!(
                        "unknown --layout-plan `{other}` (auto, planned, replan, tophub)"
                    ),
                    code: 2,
                })
            }
        };
        let graph = onnx::load(&self.model, &overrides)?;
        let mut opts = Options {
            lanes,
            tophub,
            nt_batch_matmul: !self.no_nt_batch_matmul,
            ..Options::default()
        };
        let nchwc = matches!(self.layout_name(), "nchwc" | "auto");
        if let (Some(request), true) = (request, nchwc) {
            // For the machine the kernels are for: --lanes/--mcpu when given, else this one.
            let host = &super::machine().target.host;
            let lanes = match (self.lanes, &self.mcpu) {
                (None, None) => host.f32_lanes() as i64,
                _ => lanes,
            };
            let estimates = onnx::HostEstimates::typical(lanes, host.cores);
            // This host's timings say nothing of a plan for another vector width.
            let timings = lanes == host.f32_lanes() as i64;
            let blocking =
                layout_plan::choose(&graph, &opts, &estimates, host, db, request, timings)
                    .map_err(|m| CliError {
                        message: format!("{}: layout plan: {m}", self.model.display()),
                        code: 1,
                    })?;
            match blocking {
                Blocking::Planned(plan) => opts.layout_plan = Some(LayoutPlanning::Chosen(plan)),
                Blocking::TopHub { why } => {
                    eprintln!("note: TopHub's NCHWc blocking (--layout-plan auto): {why}")
                }
            }
        }
        Ok((graph, opts))
    }

    /// `--layout` as given, else nchwc.
    pub fn layout_name(&self) -> &str {
        self.layout.as_deref().unwrap_or("nchwc")
    }

    /// The layouts to consider: the one asked for, or both for `auto`.
    pub fn layouts(&self, allow_auto: bool) -> Result<Vec<LayoutMode>, CliError> {
        if allow_auto && self.layout_name() == "auto" {
            return Ok(vec![LayoutMode::Nchwc, LayoutMode::Nhwc]);
        }
        let m = LayoutMode::parse(self.layout_name()).ok_or_else(|| CliError {
            message: format!(
                "unknown --layout `{}` (nchwc, nhwc, nchw{})",
                self.layout_name(),
                if allow_auto { ", auto" } else { "" }
            ),
            code: 2,
        })?;
        Ok(vec![m])
    }
}

pub fn run(db: &Option<PathBuf>, args: &KernelsArgs) -> CliResult {
    let layout = args.model.layouts(false)?[0];
    // A plan reads (never pins) the database when there is one: the pinned plan, or timings.
    let store = match args.model.layout_plan.as_str() {
        "tophub" => None,
        _ => super::open_store_if_any(db, ttdb_store::store::OpenMode::ReadOnly)?,
    };
    let plans = store.as_ref().map_or(PlanDb::None, PlanDb::Read);
    let (graph, opts) = args.model.load(plans)?;
    let list = onnx::extract(&graph, &Options { layout, ..opts })?;
    if args.json {
        println!("{}", serde_json::to_string(&list)?);
    } else {
        print!("{}", render_kernels(&list, args.tuned_only));
    }
    Ok(())
}

/// The stored workload keys of the tunable kernels of `model`, in both layouts `apply
/// --layout auto` may choose (NCHWc and NHWC), under TopHub's blocking and under every layout
/// plan pinned for the model, and every TVM era (`bundle export --model`).
pub fn model_stored_keys(
    store: &ttdb_store::store::Store,
    model: &std::path::Path,
) -> Result<Vec<String>, CliError> {
    let args = ModelArgs {
        layout_plan: "tophub".into(),
        ..ModelArgs::for_model(model.to_path_buf(), "auto")
    };
    let (graph, opts) = args.load(PlanDb::None)?;
    let mut keys = Vec::new();
    let mut options: Vec<Options> = args
        .layouts(true)?
        .into_iter()
        .map(|layout| Options {
            layout,
            ..opts.clone()
        })
        .collect();
    // the convs as every layout plan pinned for the model blocks them (`--layout-plan planned`)
    let pinned = layout_plan::pinned_plans(&graph, &opts, store).map_err(|m| CliError {
        message: format!("{}: layout plan: {m}", model.display()),
        code: 1,
    })?;
    options.extend(pinned.into_iter().map(|(_, plan)| Options {
        layout: LayoutMode::Nchwc,
        layout_plan: Some(LayoutPlanning::Chosen(plan)),
        ..opts.clone()
    }));
    for o in &options {
        let list = onnx::extract(&graph, o)?;
        keys.extend(ttdb_tuning::tune::export::stored_kernel_keys(store, &list)?);
    }
    keys.sort();
    keys.dedup();
    Ok(keys)
}
