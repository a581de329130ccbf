//! `ttdb apply MODEL.onnx`: fast, verified kernels for a model from the database.
use super::kernels::ModelArgs;
use super::match_cmd::match_layouts;
use super::table::{fmt_opt, io_shapes, Table};
use super::{CliError, CliResult};
use crate::matcher::MatchOptions;
use crate::store::measurement::store_measurements;
use crate::store::Store;
use crate::tune::{apply, ApplyOptions, ApplyReport};
use std::io::IsTerminal;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Candidates measured per kernel (besides the untuned default).
    #[arg(long, default_value_t = 3)]
    pub top_k: usize,
    /// Search budget in seconds; kernels past it keep their default schedule.
    #[arg(long, default_value_t = 600.0)]
    pub budget_seconds: f64,
    /// Per-run timeout in seconds.
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Do not store the measured choices in the database.
    #[arg(long)]
    pub dry_run: bool,
    #[arg(long)]
    pub json: bool,
}

pub fn render_apply(r: &ApplyReport) -> String {
    let mut t = Table::new(&[
        "kernel",
        "class",
        "shapes",
        ">count",
        "tier",
        "source",
        ">untuned ms",
        ">tuned ms",
        ">speedup",
        "verified",
    ]);
    for k in &r.kernels {
        t.row(vec![
            k.name.clone(),
            k.class.clone(),
            io_shapes(&k.inputs, &k.output),
            k.multiplicity.to_string(),
            k.tier.as_str().into(),
            match k.chosen_tier {
                Some(tier) => format!("{} {}", tier.as_str(), k.chosen),
                None => "default".into(),
            },
            fmt_opt(k.untuned_ms, 3),
            fmt_opt(k.tuned_ms, 3),
            k.speedup
                .map(|s| format!("{s:.1}x"))
                .unwrap_or_else(|| "-".into()),
            if k.verified {
                "yes".into()
            } else {
                "no".into()
            },
        ]);
    }
    let mut out = t.render();
    let tried: usize = r.kernels.iter().map(|k| k.trials.len()).sum();
    let failed: Vec<String> = r
        .kernels
        .iter()
        .flat_map(|k| {
            k.trials.iter().filter(|t| !t.verified).map(move |t| {
                format!(
                    "  {} <- {}: {}",
                    k.name,
                    t.source,
                    t.error.as_deref().unwrap_or("?")
                )
            })
        })
        .collect();
    out.push_str(&format!(
        "\nmodel {} ({}): {} tuned kernels, {} candidates measured ({} failed)\n",
        r.model,
        r.layout,
        r.kernels.len(),
        tried,
        failed.len()
    ));
    out.push_str(&format!(
        "latency of the tuned kernels (sum of latency x count): untuned {:.3} ms, tuned {:.3} ms, speedup {:.2}x\n",
        r.untuned_total_ms, r.tuned_total_ms, r.speedup
    ));
    out.push_str(&format!(
        "search time {:.1} s{}; {} simple kernels (layout transforms, concat, element-wise) not timed\n",
        r.search_seconds,
        if r.budget_exhausted { " (budget exhausted)" } else { "" },
        r.untimed_kernels
    ));
    let none = r
        .kernels
        .iter()
        .filter(|k| k.tier == crate::matcher::Tier::None)
        .count();
    if none > 0 {
        out.push_str(&format!(
            "{none} kernel(s) had no candidate in the database and keep the untuned default: the search fallback \
             (sketches, evolutionary search, Droplet refinement) is not implemented in this version\n"
        ));
    }
    if !failed.is_empty() {
        out.push_str("candidates that failed:\n");
        out.push_str(&failed.join("\n"));
        out.push('\n');
    }
    out
}

pub fn run(store: &mut Store, args: &ApplyArgs) -> CliResult {
    let m = match_layouts(store, &args.model, MatchOptions::default())?;
    let mut opts = ApplyOptions {
        top_k: args.top_k,
        budget: Duration::from_secs_f64(args.budget_seconds.max(0.0)),
        ..ApplyOptions::default()
    };
    let timeout = Some(Duration::from_secs_f64(args.timeout));
    opts.eval.measure.timeout = timeout;
    opts.default_eval.measure.timeout = timeout;
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new(m.matches.len() as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{bar:30}] {pos}/{len} kernels {elapsed} {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    });
    let report = apply(&m, &opts, &|done, _, name| {
        if let Some(b) = &bar {
            b.set_position(done as u64);
            b.set_message(name.to_string());
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if !args.dry_run {
        let host = crate::measure::detect_host();
        for kind in ["default", "apply"] {
            let items: Vec<_> = report
                .kernels
                .iter()
                .flat_map(|k| k.to_store.iter())
                .filter(|(k, _)| k == kind)
                .map(|(_, m)| m.clone())
                .collect();
            store_measurements(store, kind, &host, &items)?;
        }
    }
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", render_apply(&report));
    }
    if report.kernels.iter().any(|k| !k.verified) {
        return Err(CliError {
            message: "some kernels could not be verified (see the table)".into(),
            code: 1,
        });
    }
    Ok(())
}
