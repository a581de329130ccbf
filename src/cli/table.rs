//! Plain aligned text tables for human output.

pub struct Table {
    header: Vec<String>,
    /// Per column: right-align (numbers) or left-align (text).
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// Columns named with a leading `>` are right-aligned.
    pub fn new(columns: &[&str]) -> Table {
        Table {
            header: columns
                .iter()
                .map(|c| c.trim_start_matches('>').to_string())
                .collect(),
            right: columns.iter().map(|c| c.starts_with('>')).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.header.len());
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let n = self.header.len();
        let width: Vec<usize> = (0..n)
            .map(|i| {
                self.rows
                    .iter()
                    .map(|r| r[i].chars().count())
                    .chain([self.header[i].len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        let line = |cells: &[String], out: &mut String| {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                if i > 0 {
                    s.push_str("  ");
                }
                let pad = width[i] - c.chars().count();
                if self.right[i] {
                    s.push_str(&" ".repeat(pad));
                    s.push_str(c);
                } else {
                    s.push_str(c);
                    if i + 1 < n {
                        s.push_str(&" ".repeat(pad));
                    }
                }
            }
            out.push_str(s.trim_end());
            out.push('\n');
        };
        line(&self.header, &mut out);
        for r in &self.rows {
            line(r, &mut out);
        }
        out
    }
}

/// `[1, 14, 14, 256]` -> `1x14x14x256`.
pub fn shape(s: &[i64]) -> String {
    s.iter().map(i64::to_string).collect::<Vec<_>>().join("x")
}

/// Shapes of inputs and output: `1x14x14x256, 1x1x256x1024 -> 1x14x14x1024`.
pub fn io_shapes(inputs: &[Vec<i64>], output: &[i64]) -> String {
    let ins: Vec<String> = inputs.iter().map(|s| shape(s)).collect();
    format!("{} -> {}", ins.join(", "), shape(output))
}

/// A number with `digits` decimals, or `-` when absent.
pub fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}"))
        .unwrap_or_else(|| "-".into())
}

/// One line on the cost model a run ranked with.
pub(super) fn cost_model_line(m: &ttdb_tuning::search::cost_model::CostModelSummary) -> String {
    let start = if m.warm_programs > 0 {
        format!("warm start from {} stored programs", m.warm_programs)
    } else {
        "cold start".to_string()
    };
    format!(
        "cost model: {start}, trained on {} programs ({} trees)\n",
        m.programs, m.trees
    )
}
