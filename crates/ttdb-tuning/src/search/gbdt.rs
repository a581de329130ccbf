//! A small gradient-boosted decision tree learner with a *grouped* objective: Ansor's
//! pack-sum, where a program's score is the sum of its rows' (stores') predictions and the
//! loss is on that sum.
//!
//! Why our own and not a crate: pack-sum's gradient of a row depends on the other rows of its
//! program, which row-wise objective interfaces (`forust-ml`, `gbdt`) cannot express;
//! `perpetual` takes a custom objective but brings its own auto-tuned boosting we would have
//! to steer around. What is needed here is ~200 lines: histogram split finding over
//! quantile bins, depth-wise growth, L2-regularized leaves.
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug)]
pub struct GbdtParams {
    pub trees: usize,
    pub max_depth: usize,
    pub learning_rate: f64,
    /// L2 regularization of leaf values.
    pub lambda: f64,
    /// Minimum hessian sum in a child.
    pub min_child_weight: f64,
    pub bins: usize,
    /// Stop when an extra tree improves the training loss by less than this fraction.
    pub min_improvement: f64,
}

impl Default for GbdtParams {
    fn default() -> Self {
        GbdtParams {
            trees: 200,
            max_depth: 6,
            learning_rate: 0.2,
            lambda: 1.0,
            min_child_weight: 1e-3,
            bins: 64,
            min_improvement: 1e-4,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
enum Node {
    /// Rows with `x[feature] <= threshold` go left.
    Split {
        feature: u32,
        threshold: f32,
        left: u32,
        right: u32,
    },
    Leaf(f32),
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Gbdt {
    trees: Vec<Vec<Node>>,
}

/// Training data: rows (one per store) grouped into programs.
pub struct Grouped<'a> {
    pub rows: &'a [Vec<f32>],
    /// `group[i]`: the program of row `i`.
    pub group: &'a [usize],
    /// Per program: its label and weight.
    pub label: &'a [f64],
    pub weight: &'a [f64],
}

impl Gbdt {
    pub fn is_empty(&self) -> bool {
        self.trees.is_empty()
    }

    pub fn trees(&self) -> usize {
        self.trees.len()
    }

    /// The prediction of one row.
    pub fn predict_row(&self, x: &[f32]) -> f64 {
        self.trees.iter().map(|t| eval_tree(t, x) as f64).sum()
    }

    /// Pack-sum prediction of a program: the sum over its rows.
    pub fn predict_program(&self, rows: &[Vec<f32>]) -> f64 {
        rows.iter().map(|r| self.predict_row(r)).sum()
    }

    /// Fits trees on `data` with the pack-sum squared loss, starting from zero.
    pub fn train(data: &Grouped, params: &GbdtParams) -> Gbdt {
        let n_rows = data.rows.len();
        let n_programs = data.label.len();
        let mut model = Gbdt::default();
        if n_rows == 0 || n_programs == 0 {
            return model;
        }
        let n_features = data.rows[0].len();
        let (binned, cuts) = bin_features(data.rows, n_features, params.bins);
        let mut row_pred = vec![0f64; n_rows];
        let mut prev_loss = f64::INFINITY;
        for _ in 0..params.trees {
            let mut sum = vec![0f64; n_programs];
            for (i, &g) in data.group.iter().enumerate() {
                sum[g] += row_pred[i];
            }
            let loss: f64 = (0..n_programs)
                .map(|p| data.weight[p] * (sum[p] - data.label[p]).powi(2))
                .sum();
            if prev_loss.is_finite() && prev_loss - loss < params.min_improvement * prev_loss {
                break;
            }
            prev_loss = loss;
            let grad: Vec<f64> = data
                .group
                .iter()
                .map(|&g| (sum[g] - data.label[g]) * data.weight[g])
                .collect();
            let hess: Vec<f64> = data.group.iter().map(|&g| data.weight[g]).collect();
            let tree = grow_tree(&binned, &cuts, n_features, &grad, &hess, params);
            for (i, p) in row_pred.iter_mut().enumerate() {
                *p += eval_tree(&tree, &data.rows[i]) as f64;
            }
            model.trees.push(tree);
        }
        model
    }
}

fn eval_tree(t: &[Node], x: &[f32]) -> f32 {
    let mut i = 0usize;
    loop {
        match &t[i] {
            Node::Leaf(v) => return *v,
            Node::Split {
                feature,
                threshold,
                left,
                right,
            } => {
                let v = x.get(*feature as usize).copied().unwrap_or(0.0);
                let next = if v <= *threshold { *left } else { *right } as usize;
                // Trained children always follow their parent; anything else is hostile.
                if next <= i || next >= t.len() {
                    return 0.0;
                }
                i = next;
            }
        }
    }
}

/// Quantile cuts per feature and each row's bin (column-major: `binned[f][row]`).
fn bin_features(
    rows: &[Vec<f32>],
    n_features: usize,
    bins: usize,
) -> (Vec<Vec<u8>>, Vec<Vec<f32>>) {
    let bins = bins.clamp(2, 255);
    (0..n_features)
        .into_par_iter()
        .map(|f| {
            let mut vals: Vec<f32> = rows
                .iter()
                .map(|r| r.get(f).copied().unwrap_or(0.0))
                .collect();
            vals.sort_by(|a, b| a.total_cmp(b));
            vals.dedup();
            // Cut `c` separates bin c (<= cut) from bin c+1.
            let cuts: Vec<f32> = if vals.len() <= bins {
                vals[..vals.len().saturating_sub(1)].to_vec()
            } else {
                let mut c: Vec<f32> = (1..bins).map(|k| vals[k * vals.len() / bins]).collect();
                c.dedup();
                c
            };
            let col = rows
                .iter()
                .map(|r| {
                    let v = r.get(f).copied().unwrap_or(0.0);
                    cuts.partition_point(|&c| c < v) as u8
                })
                .collect();
            (col, cuts)
        })
        .unzip()
}

fn grow_tree(
    binned: &[Vec<u8>],
    cuts: &[Vec<f32>],
    n_features: usize,
    grad: &[f64],
    hess: &[f64],
    params: &GbdtParams,
) -> Vec<Node> {
    let mut nodes = vec![Node::Leaf(0.0)];
    // (node index, rows, depth)
    let mut frontier: Vec<(usize, Vec<u32>, usize)> =
        vec![(0, (0..grad.len() as u32).collect(), 0)];
    while let Some((at, rows, depth)) = frontier.pop() {
        let g: f64 = rows.iter().map(|&r| grad[r as usize]).sum();
        let h: f64 = rows.iter().map(|&r| hess[r as usize]).sum();
        let leaf = (-g / (h + params.lambda) * params.learning_rate) as f32;
        nodes[at] = Node::Leaf(leaf);
        if depth >= params.max_depth || rows.len() < 2 {
            continue;
        }
        let parent_score = g * g / (h + params.lambda);
        let best = (0..n_features)
            .into_par_iter()
            .filter_map(|f| {
                let n_bins = cuts[f].len() + 1;
                if n_bins < 2 {
                    return None;
                }
                let mut hist = vec![(0f64, 0f64); n_bins];
                for &r in &rows {
                    let b = binned[f][r as usize] as usize;
                    hist[b].0 += grad[r as usize];
                    hist[b].1 += hess[r as usize];
                }
                let (mut gl, mut hl) = (0.0, 0.0);
                let mut best: Option<(f64, usize)> = None;
                for (b, &(bg, bh)) in hist.iter().enumerate().take(n_bins - 1) {
                    gl += bg;
                    hl += bh;
                    let (gr, hr) = (g - gl, h - hl);
                    if hl < params.min_child_weight || hr < params.min_child_weight {
                        continue;
                    }
                    let gain = gl * gl / (hl + params.lambda) + gr * gr / (hr + params.lambda)
                        - parent_score;
                    if gain > best.map_or(1e-12, |x| x.0) {
                        best = Some((gain, b));
                    }
                }
                best.map(|(gain, b)| (gain, f, b))
            })
            .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)));
        let Some((_, f, b)) = best else { continue };
        let (left_rows, right_rows): (Vec<u32>, Vec<u32>) = rows
            .iter()
            .partition(|&&r| binned[f][r as usize] as usize <= b);
        let (left, right) = (nodes.len(), nodes.len() + 1);
        nodes.push(Node::Leaf(0.0));
        nodes.push(Node::Leaf(0.0));
        nodes[at] = Node::Split {
            feature: f as u32,
            threshold: cuts[f][b],
            left: left as u32,
            right: right as u32,
        };
        frontier.push((left, left_rows, depth + 1));
        frontier.push((right, right_rows, depth + 1));
    }
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Programs of 1-3 rows whose label is the sum of a per-row function of the features:
    /// pack-sum must recover it (a row-wise model cannot see the grouping).
    #[test]
    fn pack_sum_learns_a_sum_over_rows() {
        let mut rng = crate::search::rng::Rng::new(7);
        let (mut rows, mut group, mut label) = (Vec::new(), Vec::new(), Vec::new());
        for p in 0..400 {
            let k = 1 + rng.below(3);
            let mut y = 0.0;
            for _ in 0..k {
                let x: Vec<f32> = (0..4).map(|_| rng.unit() as f32).collect();
                y += if x[0] > 0.5 { 1.0 } else { 0.2 } + 0.5 * x[1] as f64;
                rows.push(x);
                group.push(p);
            }
            label.push(y);
        }
        let weight = vec![1.0; label.len()];
        let data = Grouped {
            rows: &rows,
            group: &group,
            label: &label,
            weight: &weight,
        };
        let m = Gbdt::train(&data, &GbdtParams::default());
        let mut err = 0.0;
        for (p, y) in label.iter().enumerate() {
            let rs: Vec<Vec<f32>> = rows
                .iter()
                .zip(&group)
                .filter(|(_, &g)| g == p)
                .map(|(r, _)| r.clone())
                .collect();
            err += (m.predict_program(&rs) - y).abs();
        }
        let mae = err / label.len() as f64;
        assert!(mae < 0.1, "mean absolute error {mae}");
        // Serializes and predicts the same after a round trip.
        let back: Gbdt = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn empty_data_gives_an_empty_model() {
        let data = Grouped {
            rows: &[],
            group: &[],
            label: &[],
            weight: &[],
        };
        assert!(Gbdt::train(&data, &GbdtParams::default()).is_empty());
    }

    #[test]
    fn hostile_trees_do_not_panic() {
        // A deserialized model may point anywhere.
        let m: Gbdt = serde_json::from_str(
            r#"{"trees":[[{"Split":{"feature":99,"threshold":0.5,"left":7,"right":1}},{"Leaf":1.0}]]}"#,
        )
        .unwrap();
        assert_eq!(m.predict_row(&[0.0]), 0.0);
        // A cycle would loop forever: nodes only point forward when trained; a hostile one is cut.
        let cyc: Gbdt = serde_json::from_str(
            r#"{"trees":[[{"Split":{"feature":0,"threshold":0.5,"left":0,"right":0}}]]}"#,
        )
        .unwrap();
        assert_eq!(cyc.predict_row(&[0.0]), 0.0);
    }
}
