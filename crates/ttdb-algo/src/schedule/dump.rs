//! The stable text form of a state, identical to `dump_state()` of the reference simulator
//! (`shared/tools/ansor_state_sim.py --dump`), so that the two can be diffed line by line:
//!
//! ```text
//! <sid> <op name> placeholder [d0,d1,...]
//! <sid> <op name> <where> unroll=<n>[ offset=<n>] : <iter> <iter> ...
//! ```
//! `where` = `root` | `inline` | `at:<stage>.<iter>` (the attach map's indices, which RE
//! does not update); `iter` = `<name>=<extent or ?>:<S|R|M|X>[:<annotation>]`.
use super::iterator::{IterKind, Iterator};
use super::state::{AxisInit, ComputeAt, OpKind, StageInit, State};
use std::fmt::Write;
use ttdb_format::ansor::Annotation;

fn write_iter(out: &mut String, it: &Iterator) {
    out.push_str(&it.name);
    out.push('=');
    match it.extent {
        Some(e) => write!(out, "{e}").unwrap(),
        None => out.push('?'),
    }
    out.push(':');
    out.push(it.kind.code());
    if it.annotation != Annotation::None {
        out.push(':');
        out.push_str(it.annotation.name());
    }
}

impl State {
    /// One line per stage, joined by `\n` (no trailing newline).
    pub fn dump(&self) -> String {
        let mut out = String::new();
        for (i, st) in self.stages.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            if let OpKind::Placeholder { shape } = &st.op.kind {
                let dims: Vec<String> = shape.iter().map(i64::to_string).collect();
                write!(out, "{i} {} placeholder [{}]", st.op.name, dims.join(",")).unwrap();
                continue;
            }
            write!(out, "{i} {} ", st.op.name).unwrap();
            match (st.compute_at, self.attach_map.attach_point(i)) {
                (ComputeAt::Root, _) => out.push_str("root"),
                (ComputeAt::Inlined, _) => out.push_str("inline"),
                (ComputeAt::Iter, Some(p)) => write!(out, "at:{}.{}", p.stage, p.iter).unwrap(),
                // Not reachable through `apply` (every CA sets an entry, and steps that
                // would drop it are refused); printed rather than panicking.
                (ComputeAt::Iter, None) => out.push_str("at:?"),
            }
            write!(out, " unroll={}", st.attrs.auto_unroll_max_step).unwrap();
            if st.attrs.storage_offset != 0 {
                write!(out, " offset={}", st.attrs.storage_offset).unwrap();
            }
            out.push_str(" : ");
            for (k, it) in st.iters.iter().enumerate() {
                if k > 0 {
                    out.push(' ');
                }
                write_iter(&mut out, it);
            }
        }
        out
    }
}

/// Reads the dump of an *initial* state (every compute stage at root, no annotations, as
/// `ansor_state_sim.py --dag KEY` prints it) back into the stage list that starts replay.
/// Loop names are taken as the TE axis names (true for TOPI's plain axis names); the
/// dataflow is unknown.
pub fn stage_inits_from_dump(text: &str) -> Result<Vec<StageInit>, String> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let bad = |why: &str| format!("{why} in initial-state line {line:?}");
        let mut words = line.splitn(3, ' ');
        let (Some(id), Some(name), Some(rest)) = (words.next(), words.next(), words.next()) else {
            return Err(bad("too few fields"));
        };
        if id.parse::<usize>().ok() != Some(out.len()) {
            return Err(bad("stage ids must count from 0"));
        }
        let name = name.to_string();
        if let Some(shape) = rest
            .strip_prefix("placeholder [")
            .and_then(|r| r.strip_suffix(']'))
        {
            let dims = shape
                .split(',')
                .map(|d| d.parse::<i64>().map_err(|_| bad("bad dimension")));
            let shape = dims.collect::<Result<_, _>>()?;
            out.push(StageInit {
                name,
                placeholder_shape: Some(shape),
                iters: Vec::new(),
                inputs: None,
            });
            continue;
        }
        let Some(iters) = rest
            .strip_prefix("root unroll=0 : ")
            .or(rest.strip_prefix("root unroll=0 :"))
        else {
            return Err(bad("expected a placeholder or a root stage"));
        };
        let mut axes = Vec::new();
        for word in iters.split_whitespace() {
            let (axis, ext_kind) = word
                .rsplit_once('=')
                .ok_or_else(|| bad("iterator without '='"))?;
            let (ext, kind) = match ext_kind.split_once(':') {
                Some((e, "S")) => (e, IterKind::Spatial),
                Some((e, "R")) => (e, IterKind::Reduction),
                _ => return Err(bad("iterator kind must be S or R")),
            };
            let extent = match ext {
                "?" => None,
                e => Some(e.parse::<i64>().map_err(|_| bad("bad extent"))?),
            };
            axes.push(AxisInit {
                name: axis.to_string(),
                extent,
                kind,
            });
        }
        out.push(StageInit {
            name,
            placeholder_shape: None,
            iters: axes,
            inputs: None,
        });
    }
    Ok(out)
}
