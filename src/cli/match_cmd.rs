//! `ttdb match MODEL.onnx`: each kernel's tier (exact / class / none) and best candidates,
//! without measuring; `--explain KERNEL` says why.
use super::kernels::ModelArgs;
use super::table::{io_shapes, Table};
use super::{CliError, CliResult};
use serde::Serialize;
use ttdb_format::host::IsaCompat;
use ttdb_onnx::onnx::{KernelKind, KernelList};
use ttdb_store::store::Store;
use ttdb_tuning::matcher::{MatchOptions, ModelMatch, Tier};

#[derive(clap::Args, Debug)]
pub struct MatchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Explain one kernel (its ONNX node name or signature prefix): why it matched, or why
    /// the nearest candidates did not.
    #[arg(long, value_name = "KERNEL")]
    pub explain: Option<String>,
    /// Candidates listed per kernel in --explain and --json.
    #[arg(long, default_value_t = 5)]
    pub show: usize,
    /// Print the result as JSON on standard output.
    #[arg(long)]
    pub json: bool,
}

/// Match options for this run's machine: its ISA flags rank the candidates (`--pretend-isa`
/// stands in for them, so tests can play another host; it changes the ranking only, never
/// what codegen targets).
pub fn host_match_options() -> MatchOptions {
    MatchOptions {
        host_isa: super::machine().ranking_isa.clone(),
        ..MatchOptions::default()
    }
}

/// Loads the model and matches it in each layout asked for (`ttdb_tuning::matcher::match_layouts`);
/// a layout plan is pinned in `store` when `pin` (a command that stores).
pub fn match_layouts(
    store: &Store,
    model: &ModelArgs,
    opts: MatchOptions,
    pin: bool,
) -> Result<ModelMatch, CliError> {
    let plans = if pin {
        super::kernels::PlanDb::Pin(store)
    } else {
        super::kernels::PlanDb::Read(store)
    };
    let (graph, extract) = model.load(plans)?;
    Ok(ttdb_tuning::matcher::match_layouts(
        store,
        &graph,
        &extract,
        &model.layouts(true)?,
        opts,
    )?)
}

#[derive(Serialize)]
struct JsonCandidate<'a> {
    tier: Tier,
    source: &'a ttdb_tuning::matcher::SourceRecord,
    changed_steps: usize,
    estimate: f64,
    isa: &'a ttdb_format::host::IsaRequirement,
    compat: ttdb_format::host::IsaCompat,
}

#[derive(Serialize)]
struct JsonKernel<'a> {
    name: &'a str,
    class: &'a str,
    signature: Option<&'a str>,
    inputs: &'a [Vec<i64>],
    output: &'a [i64],
    multiplicity: usize,
    tier: Tier,
    candidates: Vec<JsonCandidate<'a>>,
    rejections: &'a [ttdb_tuning::matcher::Rejection],
}

fn layout_name(m: &ModelMatch) -> String {
    m.list.layout.clone()
}

pub fn render_match(m: &ModelMatch) -> String {
    let mut t = Table::new(&[
        "kernel",
        "class",
        "shapes",
        ">count",
        "tier",
        "best source",
        ">candidates",
    ]);
    for km in &m.matches {
        let k = &m.list.kernels[km.kernel];
        t.row(vec![
            k.name.clone(),
            k.class.clone(),
            io_shapes(&k.inputs, &k.output),
            k.multiplicity().to_string(),
            km.tier.as_str().into(),
            km.candidates
                .first()
                .map(|c| c.source.label())
                .unwrap_or_else(|| "-".into()),
            km.candidates.len().to_string(),
        ]);
    }
    let mut out = t.render();
    let occ = |tier| {
        m.matches
            .iter()
            .filter(|x| x.tier == tier)
            .map(|x| m.list.kernels[x.kernel].multiplicity())
            .sum::<usize>()
    };
    let convs: Vec<_> = m
        .matches
        .iter()
        .filter(|x| m.list.kernels[x.kernel].class.contains("conv2d"))
        .collect();
    let conv_hit = |tier| convs.iter().filter(|x| x.tier == tier).count();
    out.push_str(&format!(
        "\n{} tuned kernels in layout {}: {} exact, {} class, {} none ({} / {} / {} occurrences)\n",
        m.matches.len(),
        layout_name(m),
        m.count(Tier::Exact),
        m.count(Tier::Class),
        m.count(Tier::None),
        occ(Tier::Exact),
        occ(Tier::Class),
        occ(Tier::None)
    ));
    out.push_str(&super::kernels::render_layout_plan(&m.list));
    if !convs.is_empty() {
        out.push_str(&format!(
            "conv kernels: {} of {} exact ({:.0}%), {} class, {} none\n",
            conv_hit(Tier::Exact),
            convs.len(),
            100.0 * conv_hit(Tier::Exact) as f64 / convs.len() as f64,
            conv_hit(Tier::Class),
            conv_hit(Tier::None)
        ));
    }
    let untunable: Vec<_> = m
        .list
        .kernels
        .iter()
        .filter_map(|k| match &k.kind {
            KernelKind::Untunable { reason } => Some((k, reason)),
            _ => None,
        })
        .collect();
    if !untunable.is_empty() {
        out.push_str(&format!(
            "untunable, not matched ({} kernels, {} occurrences):\n",
            untunable.len(),
            untunable
                .iter()
                .map(|(k, _)| k.multiplicity())
                .sum::<usize>()
        ));
        for (k, reason) in untunable {
            out.push_str(&format!("  {} ({}): {reason}\n", k.name, k.class));
        }
    }
    out
}

/// `--explain` on a kernel that is not matched because it is not tuned: why.
fn explain_not_tuned(list: &KernelList, which: &str) -> Option<String> {
    let k = list.kernels.iter().find(|k| k.name == which)?;
    let why = match &k.kind {
        KernelKind::Tuned => return None,
        KernelKind::Untunable { reason } => format!(
            "untunable: {reason}; ttdb can neither match nor tune it (it runs TVM's default schedule)"
        ),
        KernelKind::Simple => {
            "a simple (injective or element-wise) kernel: not an Ansor task, so not tuned".into()
        }
    };
    Some(format!(
        "kernel {} ({}), {} occurrence(s)\n  shapes {}\n  ONNX nodes: {}\n  {why}\n",
        k.name,
        k.class,
        k.multiplicity(),
        io_shapes(&k.inputs, &k.output),
        k.occurrences
            .first()
            .map(|o| o.join(", "))
            .unwrap_or_default()
    ))
}

pub fn render_explain(m: &ModelMatch, which: &str, show: usize) -> Option<String> {
    let km = m.matches.iter().find(|x| {
        let k = &m.list.kernels[x.kernel];
        k.name == which
            || k.signature_hash
                .as_deref()
                .is_some_and(|h| !which.is_empty() && h.starts_with(which))
    })?;
    let k = &m.list.kernels[km.kernel];
    let mut out = format!(
        "kernel {} ({}), {} occurrence(s)\n  shapes {}\n  layout {}, signature {}\n  tier: {}\n",
        k.name,
        k.class,
        k.multiplicity(),
        io_shapes(&k.inputs, &k.output),
        k.layout,
        k.signature_hash.as_deref().unwrap_or("-"),
        km.tier.as_str()
    );
    if !km.candidates.is_empty() {
        let known_isa = km.candidates.iter().any(|c| c.compat != IsaCompat::Unknown);
        out.push_str(if known_isa {
            "  candidates (best first; in each tier: ISA this host has, unknown ISA, ISA it lacks):\n"
        } else {
            "  candidates (best first):\n"
        });
        for c in km.candidates.iter().take(show) {
            let why = match c.tier {
                Tier::Exact => format!("same signature, tuned on {}, logged {:.3} ms", c.source.target, c.source.mean_cost * 1e3),
                _ => format!(
                    "same class {}, re-targeted ({} split step(s) adapted), static estimate {:.3}, tuned on {}",
                    c.source.op_class, c.changed_steps, c.estimate, c.source.target
                ),
            };
            out.push_str(&format!(
                "    {:<6} {}: {why}\n",
                c.tier.as_str(),
                c.source.label()
            ));
            // Said only when some verdict is known (else the ISA ordered nothing).
            if known_isa {
                out.push_str(&format!("           {}\n", c.isa.explain(c.compat)));
            }
        }
    }
    if !km.rejections.is_empty() {
        out.push_str("  not candidates:\n");
        for r in km.rejections.iter().take(show) {
            out.push_str(&format!("    {}: {}\n", r.source, r.reason));
        }
    }
    Some(out)
}

pub fn run(store: &Store, args: &MatchArgs) -> CliResult {
    let m = match_layouts(store, &args.model, host_match_options(), false)?;
    if let Some(which) = &args.explain {
        let text = render_explain(&m, which, args.show)
            .or_else(|| explain_not_tuned(&m.list, which))
            .ok_or_else(|| CliError {
                message: format!(
                    "no kernel named or with a signature starting `{which}` (see `ttdb kernels`)"
                ),
                code: 2,
            })?;
        print!("{text}");
        return Ok(());
    }
    if args.json {
        let kernels: Vec<JsonKernel> = m
            .matches
            .iter()
            .map(|km| {
                let k = &m.list.kernels[km.kernel];
                JsonKernel {
                    name: &k.name,
                    class: &k.class,
                    signature: k.signature_hash.as_deref(),
                    inputs: &k.inputs,
                    output: &k.output,
                    multiplicity: k.multiplicity(),
                    tier: km.tier,
                    candidates: km
                        .candidates
                        .iter()
                        .take(args.show)
                        .map(|c| JsonCandidate {
                            tier: c.tier,
                            source: &c.source,
                            changed_steps: c.changed_steps,
                            estimate: c.estimate,
                            isa: &c.isa,
                            compat: c.compat,
                        })
                        .collect(),
                    rejections: &km.rejections,
                }
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({"model": m.list.model, "layout": m.list.layout, "kernels": kernels})
        );
    } else {
        print!("{}", render_match(&m));
    }
    Ok(())
}
