//! Static cost guard: bound the work and temporary memory of a kernel before compiling or
//! running it (schedules come from untrusted files).

use super::bounds::{expr_interval, Interval};
use super::ir::*;
use std::collections::HashMap;

#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub struct CostLimits {
    /// Maximum Σ over statements and loop iterations of their dynamic execution count.
    pub max_total_steps: u128,
    /// Maximum bytes of temporaries live at once (per executing thread).
    pub max_temp_bytes: i64,
    /// Maximum statement nodes (code size) after unrolling. LLVM's time grows faster than
    /// the code: on a Zen 4 host 4k statements compile in about 1 s, 8k in 5 s, 39k in 35 s
    /// and 113k in more than 300 s. The largest real record in the corpus unrolls to 2.5k;
    /// TVM's CPU search picks unroll steps of at most 512, ttdb's Droplet at most 1,024.
    pub max_stmt_nodes: usize,
    /// Maximum LLVM instructions of one function before optimization (checked by codegen):
    /// statements scalarized or with large expressions can translate to far more code than
    /// their count says. The best corpus records of ResNet-50 and MobileNet-v2 translate to
    /// at most 21k; a Droplet candidate of 747k (a scalarized fused loop, a vector body since
    /// the codegen knows constant lane offsets) kept LLVM's loop vectorizer busy for more
    /// than ten minutes.
    pub max_ir_instructions: usize,
}

impl Default for CostLimits {
    fn default() -> Self {
        CostLimits {
            max_total_steps: 200_000_000_000,
            max_temp_bytes: 4 << 30,
            max_stmt_nodes: 16_384,
            max_ir_instructions: 100_000,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CostEstimate {
    /// Upper bound of executed statements + loop iterations.
    pub total_steps: u128,
    /// Peak bytes of live temporaries (one thread).
    pub temp_bytes: i64,
    pub stmt_nodes: usize,
}

struct Walker<'a> {
    vars: HashMap<String, Interval>,
    buffers: &'a [Buffer],
    total: u128,
    unbounded: Option<String>,
}

impl Walker<'_> {
    /// Returns peak temporary bytes inside `s`.
    fn visit(&mut self, s: &Stmt, mult: u128) -> i64 {
        match s {
            Stmt::For {
                var,
                min,
                extent,
                body,
                ..
            } => {
                let m = expr_interval(min, &self.vars, self.buffers);
                let x = expr_interval(extent, &self.vars, self.buffers);
                let Some(hi) = x.hi else {
                    self.unbounded.get_or_insert_with(|| var.clone());
                    return 0;
                };
                if hi <= 0 {
                    return 0;
                }
                let mult = mult.saturating_mul(hi as u128);
                self.total = self.total.saturating_add(mult);
                let range = Interval {
                    lo: m.lo,
                    hi: m.hi.map(|h| h.saturating_add(hi) - 1),
                };
                self.vars.insert(var.clone(), range);
                let r = self.visit(body, mult);
                self.vars.remove(var);
                r
            }
            Stmt::Attr { body, .. } => self.visit(body, mult),
            Stmt::Seq(v) => v.iter().map(|s| self.visit(s, mult)).max().unwrap_or(0),
            Stmt::Store { .. } | Stmt::Evaluate(_) => {
                self.total = self.total.saturating_add(mult);
                0
            }
            Stmt::IfThenElse { then_, else_, .. } => {
                let a = self.visit(then_, mult);
                let b = else_.as_ref().map_or(0, |e| self.visit(e, mult));
                a.max(b)
            }
            Stmt::Allocate { buffer, body } => {
                buffer.size_bytes().saturating_add(self.visit(body, mult))
            }
        }
    }
}

/// Estimate the cost of a (validated) kernel.
pub fn estimate(k: &Kernel) -> Result<CostEstimate, String> {
    let mut w = Walker {
        vars: HashMap::new(),
        buffers: &k.params,
        total: 0,
        unbounded: None,
    };
    let temp = w.visit(&k.body, 1);
    if let Some(v) = w.unbounded {
        return Err(format!("cannot bound the trip count of loop `{v}`"));
    }
    Ok(CostEstimate {
        total_steps: w.total,
        temp_bytes: temp,
        stmt_nodes: k.body.size(),
    })
}

/// Reject kernels whose work or memory is absurd.
pub fn check_cost(k: &Kernel, limits: &CostLimits) -> Result<CostEstimate, String> {
    let e = estimate(k)?;
    if e.total_steps > limits.max_total_steps {
        return Err(format!(
            "kernel would execute up to {} steps (limit {})",
            e.total_steps, limits.max_total_steps
        ));
    }
    if e.temp_bytes > limits.max_temp_bytes {
        return Err(format!(
            "kernel needs {} bytes of temporaries (limit {})",
            e.temp_bytes, limits.max_temp_bytes
        ));
    }
    if e.stmt_nodes > limits.max_stmt_nodes {
        return Err(format!(
            "kernel has {} statements (limit {})",
            e.stmt_nodes, limits.max_stmt_nodes
        ));
    }
    Ok(e)
}
