//! The stable text form of a state, identical to `dump_state()` of the reference simulator
//! (`shared/tools/ansor_state_sim.py --dump`), so that the two can be diffed line by line:
//!
//! ```text
//! <sid> <op name> placeholder [d0,d1,...]
//! <sid> <op name> <where> unroll=<n>[ offset=<n>] : <iter> <iter> ...
//! ```
//! `where` = `root` | `inline` | `at:<stage>.<iter>` (the attach map's indices, which RE
//! does not update); `iter` = `<name>=<extent or ?>:<S|R|M|X>[:<annotation>]`.
use super::iterator::Iterator;
use super::state::{ComputeAt, OpKind, State};
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
