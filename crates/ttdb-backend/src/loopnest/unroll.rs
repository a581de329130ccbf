//! TIR `UnrollLoop` pass (apache/tvm `src/tir/transforms/unroll_loop.cc`), on this IR.
//!
//! Exact rules mirrored from TVM (defaults: `auto_max_step = 0` outside any pragma scope,
//! `auto_max_depth = 8`, `auto_max_extent = 0`, `explicit_unroll = true`):
//! * the walk is post-order; `step_count` counts `Store`/`Evaluate` nodes already visited in the
//!   current sequence element (a `Seq` visits each child with fresh counters, then sums the step
//!   counts and takes the max of the depth counters);
//! * a `Serial` loop with constant extent `v ≥ 0` is auto-unrolled iff no non-unrolled loop is
//!   inside it (`normal_loop_depth == 0`), `unroll_depth ≤ auto_max_depth` and
//!   `v · step_count ≤ auto_max_step` (or `v ≤ auto_max_extent`); then `step_count *= v` and
//!   `unroll_depth += 1`, otherwise `normal_loop_depth += 1`;
//! * `Unrolled` loops are always unrolled (a non-constant extent is an error);
//! * with `explicit_unroll` the loop is replaced by copies of its body (`var := min + i`),
//!   otherwise it is only marked `Unrolled`.
//!
//! Deviation: TVM runs `VectorizeLoop` before `UnrollLoop`, so a vectorized loop is already a
//! set of vector stores when this pass runs. Here `Vectorized` loops are still loops; they are
//! treated as transparent (their stores count as steps, they change no depth counter), which
//! matches TVM's result whenever the loop really is vectorized.

use super::ir::*;
use super::simplify::{simplify_expr, simplify_stmt};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnrollError {
    NonConstantExtent(String),
    TooLarge {
        var: String,
        nodes: usize,
        limit: usize,
    },
}

impl std::fmt::Display for UnrollError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UnrollError::NonConstantExtent(v) => {
                write!(f, "cannot unroll loop `{v}`: extent is not a constant")
            }
            UnrollError::TooLarge { var, nodes, limit } => write!(
                f,
                "unrolling loop `{var}` would produce {nodes} statements (limit {limit})"
            ),
        }
    }
}
impl std::error::Error for UnrollError {}

#[derive(Clone, Copy, Debug)]
pub struct UnrollConfig {
    pub auto_max_step: i64,
    pub auto_max_depth: i64,
    pub auto_max_extent: i64,
    pub explicit_unroll: bool,
    /// Code-size guard: maximum statement count of one unrolled loop's result.
    pub max_nodes: usize,
}

impl Default for UnrollConfig {
    fn default() -> Self {
        UnrollConfig {
            auto_max_step: 0,
            auto_max_depth: 8,
            auto_max_extent: 0,
            explicit_unroll: true,
            max_nodes: 1 << 20,
        }
    }
}

struct Unroller {
    cfg: UnrollConfig,
    normal_loop_depth: i64,
    unroll_depth: i64,
    step_count: i64,
}

fn const_extent(e: &Expr) -> i64 {
    match simplify_expr(e).as_int() {
        Some(v) if v <= i32::MAX as i64 => v,
        _ => -1,
    }
}

impl Unroller {
    fn visit(&mut self, s: &Stmt) -> Result<Stmt, UnrollError> {
        Ok(match s {
            Stmt::Attr {
                attr: Attr::AutoUnroll { max_step, explicit },
                body,
            } => {
                let saved = (self.cfg.auto_max_step, self.cfg.explicit_unroll);
                self.cfg.auto_max_step = *max_step;
                self.cfg.explicit_unroll = *explicit;
                let r = self.visit(body);
                (self.cfg.auto_max_step, self.cfg.explicit_unroll) = saved;
                r?
            }
            Stmt::Attr { attr, body } => Stmt::attr(attr.clone(), self.visit(body)?),
            Stmt::For {
                var,
                min,
                extent,
                kind: ForKind::Vectorized,
                body,
            } => Stmt::for_(
                var,
                min.clone(),
                extent.clone(),
                ForKind::Vectorized,
                self.visit(body)?,
            ),
            Stmt::For {
                var,
                min,
                extent,
                kind,
                body,
            } => {
                let body = self.visit(body)?;
                let value = const_extent(extent);
                let mut auto = *kind == ForKind::Serial
                    && value >= 0
                    && self.normal_loop_depth == 0
                    && self.unroll_depth <= self.cfg.auto_max_depth;
                auto = auto
                    && (value.saturating_mul(self.step_count) <= self.cfg.auto_max_step
                        || value <= self.cfg.auto_max_extent);
                if *kind == ForKind::Unrolled {
                    if value < 0 {
                        return Err(UnrollError::NonConstantExtent(var.clone()));
                    }
                    auto = true;
                }
                if auto {
                    self.step_count = self.step_count.saturating_mul(value);
                    self.unroll_depth += 1;
                } else {
                    self.normal_loop_depth += 1;
                }
                if (auto && self.cfg.explicit_unroll)
                    || (0 <= value
                        && value <= self.cfg.auto_max_extent
                        && self.cfg.auto_max_extent == 1)
                {
                    self.unroll(var, min, value, &body)?
                } else if auto {
                    Stmt::for_(var, min.clone(), extent.clone(), ForKind::Unrolled, body)
                } else {
                    Stmt::for_(var, min.clone(), extent.clone(), *kind, body)
                }
            }
            Stmt::Store { .. } | Stmt::Evaluate(_) => {
                self.step_count += 1;
                s.clone()
            }
            Stmt::Seq(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    let saved = (self.step_count, self.unroll_depth, self.normal_loop_depth);
                    self.step_count = 0;
                    self.unroll_depth = 0;
                    self.normal_loop_depth = 0;
                    out.push(self.visit(item)?);
                    self.step_count = self.step_count.saturating_add(saved.0);
                    self.normal_loop_depth = self.normal_loop_depth.max(saved.2);
                    self.unroll_depth = self.unroll_depth.max(saved.1);
                }
                Stmt::seq(out)
            }
            Stmt::IfThenElse { cond, then_, else_ } => {
                let t = self.visit(then_)?;
                let e = match else_ {
                    Some(e) => Some(self.visit(e)?),
                    None => None,
                };
                Stmt::if_(cond.clone(), t, e)
            }
            Stmt::Allocate { buffer, body } => Stmt::allocate(buffer.clone(), self.visit(body)?),
        })
    }

    fn unroll(&self, var: &str, min: &Expr, value: i64, body: &Stmt) -> Result<Stmt, UnrollError> {
        let nodes = (value.max(0) as usize).saturating_mul(body.size());
        if nodes > self.cfg.max_nodes {
            return Err(UnrollError::TooLarge {
                var: var.to_string(),
                nodes,
                limit: self.cfg.max_nodes,
            });
        }
        let mut out = Vec::with_capacity(value.max(0) as usize);
        for i in 0..value {
            let at = simplify_expr(&Expr::add(min.clone(), Expr::int(i)));
            out.push(simplify_stmt(&body.substitute(var, &at)));
        }
        Ok(Stmt::seq(out))
    }
}

/// Run the pass with the default configuration (pragmas in the kernel set the per-scope limits).
pub fn unroll_loops(k: &Kernel) -> Result<Kernel, UnrollError> {
    unroll_loops_with(k, UnrollConfig::default())
}

pub fn unroll_loops_with(k: &Kernel, cfg: UnrollConfig) -> Result<Kernel, UnrollError> {
    let mut u = Unroller {
        cfg,
        normal_loop_depth: 0,
        unroll_depth: 0,
        step_count: 0,
    };
    let body = u.visit(&k.body)?;
    Ok(Kernel {
        name: k.name.clone(),
        params: k.params.clone(),
        body,
    })
}
