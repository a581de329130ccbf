//! Timing a loaded model end to end: what `ttdb run --repeat` prints and what `ttdb tune
//! MODEL` reports next to its kernel sum (the glue between kernels included).
use super::{ModelRun, Port};
use std::time::{Duration, Instant};
use ttdb_backend::loopnest::ir::DType;
use ttdb_backend::loopnest::BufferData;
use ttdb_onnx::onnx::fill;

/// `runs` timed runs: end-to-end times and each step's median.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Timing {
    pub runs: usize,
    pub threads: usize,
    pub median_ms: f64,
    pub min_ms: f64,
    pub p90_ms: f64,
    /// Medians of the anchored (tunable) kernels' sum and of the glue's sum.
    pub anchored_ms: f64,
    pub glue_ms: f64,
    pub glue_share: f64,
    pub kernels: Vec<KernelTime>,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct KernelTime {
    pub name: String,
    pub class: String,
    pub anchored: bool,
    pub median_ms: f64,
}

/// The `q` quantile of sorted `xs` (nearest rank).
fn quantile(xs: &[f64], q: f64) -> f64 {
    let i = ((q * xs.len() as f64).ceil() as usize).clamp(1, xs.len()) - 1;
    xs[i]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Times `runs` (at least one) runs of `model` on `inputs` (in [`ModelRun::inputs`] order).
pub fn time_runs(
    model: &ModelRun,
    inputs: &[&BufferData],
    runs: usize,
    threads: Option<usize>,
) -> Result<Timing, String> {
    let runs = runs.max(1);
    let mut ws = model.workspace()?;
    let mut totals = Vec::with_capacity(runs);
    let mut per_step: Vec<Vec<f64>> = vec![Vec::with_capacity(runs); model.plan.len()];
    for _ in 0..runs {
        let t0 = Instant::now();
        let steps = model.run_in(&mut ws, inputs, threads)?;
        totals.push(ms(t0.elapsed()));
        for (k, t) in steps.into_iter().enumerate() {
            per_step[k].push(ms(t));
        }
    }
    let sorted = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v
    };
    let totals = sorted(totals);
    let kernels: Vec<KernelTime> = model
        .plan
        .iter()
        .zip(per_step)
        .map(|(p, t)| KernelTime {
            name: p.name.clone(),
            class: p.class.clone(),
            anchored: p.anchored,
            median_ms: quantile(&sorted(t), 0.5),
        })
        .collect();
    let sum = |anchored: bool| -> f64 {
        kernels
            .iter()
            .filter(|k| k.anchored == anchored)
            .map(|k| k.median_ms)
            .sum()
    };
    let (anchored_ms, glue_ms) = (sum(true), sum(false));
    Ok(Timing {
        runs,
        threads: threads.unwrap_or_else(ttdb_format::host::available_cores),
        median_ms: quantile(&totals, 0.5),
        min_ms: totals[0],
        p90_ms: quantile(&totals, 0.9),
        anchored_ms,
        glue_ms,
        glue_share: glue_ms / (anchored_ms + glue_ms).max(1e-12),
        kernels,
    })
}

/// The deterministic values of docs/design/deterministic-data.md for `port`.
pub fn deterministic_input(port: &Port) -> Result<BufferData, String> {
    let n = port.shape.iter().product::<i64>().max(0) as usize;
    match port.dtype {
        DType::F32 => Ok(BufferData::F32(fill::input_floats(&port.name, n))),
        DType::I64 => Ok(BufferData::I64(fill::input_ints(&port.name, n))),
        d => Err(format!(
            "input `{}` is {d}: ttdb runs models on float32 and int64 inputs",
            port.name
        )),
    }
}

/// Times `runs` runs of `model` on the deterministic inputs.
pub fn time_on_deterministic_inputs(
    model: &ModelRun,
    runs: usize,
    threads: Option<usize>,
) -> Result<Timing, String> {
    let given = model
        .inputs
        .iter()
        .map(deterministic_input)
        .collect::<Result<Vec<_>, _>>()?;
    let inputs: Vec<&BufferData> = given.iter().collect();
    time_runs(model, &inputs, runs, threads)
}
