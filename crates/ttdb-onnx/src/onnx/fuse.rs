//! Operator fusion as Relay's `FuseOps` does it (src/relay/transforms/fuse_ops.cc):
//! a post-dominator tree over the op graph whose edges carry pattern kinds (a broadcast op
//! reading a tensor of its own output shape is an element-wise edge), then three phases:
//!
//! 0. an `OutEWiseFusable` op (conv, dense, pool) fuses into its immediate post-dominator
//!    when the relation is element-wise and every op on the paths is at most broadcast;
//!    element-wise / broadcast groups fuse into an injective or reduction post-dominator
//!    (the sink may be an already-fused conv group);
//! 1. injective groups fuse into their post-dominator along injective paths;
//! 2. injective groups feeding a concatenate fuse into it once the concatenate itself was
//!    fused into injective consumers.
//!
//! Relay's `Tuple` node in front of `concatenate` is not modelled as a node; its rules (no
//! fusion *into* a tuple in phases 0/1, phase 2 above) are applied at the concatenate.
use super::relay::{OpGraph, OpId, OpKind, Pattern};

const MAX_FUSE_DEPTH: usize = 256;

struct Fuser<'a> {
    g: &'a OpGraph,
    /// out-edges: (consumer op, edge pattern)
    edges: Vec<Vec<(OpId, Pattern)>>,
    dom_parent: Vec<Option<OpId>>,
    dom_pattern: Vec<Pattern>,
    depth: Vec<usize>,
    gparent: Vec<usize>,
    gpattern: Vec<Pattern>,
    anchor: Vec<bool>,
    num_nodes: Vec<usize>,
    visited: Vec<bool>,
}

impl<'a> Fuser<'a> {
    fn new(g: &'a OpGraph) -> Fuser<'a> {
        let n = g.ops.len();
        let pattern: Vec<Pattern> = g.ops.iter().map(|o| o.kind.pattern()).collect();
        let consumers = g.consumers();
        let edges = g
            .ops
            .iter()
            .map(|op| {
                consumers[op.output]
                    .iter()
                    .map(|&(c, _)| {
                        let p = pattern[c];
                        let same = g.values[op.output].phys == g.values[g.ops[c].output].phys;
                        (
                            c,
                            if p == Pattern::Broadcast && same {
                                Pattern::ElemWise
                            } else {
                                p
                            },
                        )
                    })
                    .collect()
            })
            .collect();
        Fuser {
            g,
            gpattern: pattern.clone(),
            anchor: pattern
                .iter()
                .map(|&p| p == Pattern::OutEWiseFusable)
                .collect(),
            edges,
            dom_parent: vec![None; n],
            dom_pattern: vec![Pattern::Opaque; n],
            depth: vec![1; n],
            gparent: (0..n).collect(),
            num_nodes: vec![1; n],
            visited: vec![false; n],
        }
    }

    fn lca(&self, mut a: OpId, mut b: OpId, pat: &mut Pattern) -> Option<OpId> {
        while a != b {
            if self.depth[a] < self.depth[b] {
                *pat = (*pat).max(self.dom_pattern[b]);
                b = self.dom_parent[b]?;
            } else if self.depth[b] < self.depth[a] {
                *pat = (*pat).max(self.dom_pattern[a]);
                a = self.dom_parent[a]?;
            } else {
                *pat = (*pat).max(self.dom_pattern[a]).max(self.dom_pattern[b]);
                a = self.dom_parent[a]?;
                b = self.dom_parent[b]?;
            }
        }
        Some(a)
    }

    fn post_dominators(&mut self) {
        let outputs: Vec<bool> = (0..self.g.values.len())
            .map(|v| self.g.outputs.contains(&v))
            .collect();
        for i in (0..self.g.ops.len()).rev() {
            let extern_ref = outputs[self.g.ops[i].output];
            if extern_ref || self.edges[i].is_empty() {
                self.dom_parent[i] = None;
                self.depth[i] = 1;
                self.dom_pattern[i] = Pattern::Opaque;
                continue;
            }
            let mut pat = Pattern::ElemWise.max(self.edges[i][0].1);
            let mut parent = Some(self.edges[i][0].0);
            for &(c, p) in &self.edges[i][1..] {
                parent = parent.and_then(|a| self.lca(a, c, &mut pat));
                pat = pat.max(p);
            }
            self.dom_parent[i] = parent;
            self.depth[i] = parent.map_or(1, |p| self.depth[p] + 1);
            self.dom_pattern[i] = pat;
        }
    }

    fn find(&mut self, mut i: usize) -> usize {
        while self.gparent[i] != i {
            let gp = self.gparent[self.gparent[i]];
            self.gparent[i] = gp;
            i = gp;
        }
        i
    }

    /// Every op on the paths from `src`'s consumers to `sink` (inclusive) satisfies `fcond`
    /// on its group's pattern. Iterative: graphs can be deep.
    fn check_path(&mut self, src: OpId, sink: OpId, fcond: &dyn Fn(Pattern, bool) -> bool) -> bool {
        self.visited.iter_mut().for_each(|v| *v = false);
        let mut stack: Vec<OpId> = self.edges[src].iter().map(|e| e.0).collect();
        while let Some(u) = stack.pop() {
            if self.visited[u] {
                continue;
            }
            self.visited[u] = true;
            let root = self.find(u);
            if !fcond(self.gpattern[root], u == sink) {
                return false;
            }
            if u != sink {
                stack.extend(self.edges[u].iter().map(|e| e.0));
            }
        }
        true
    }

    fn merge(&mut self, child: usize, parent: usize) {
        let (c, p) = (self.find(child), self.find(parent));
        if c == p {
            return;
        }
        self.gparent[c] = p;
        self.num_nodes[p] += self.num_nodes[c];
        if self.anchor[c] {
            self.anchor[p] = true;
            self.gpattern[p] = self.gpattern[p].max(self.gpattern[c]);
        }
    }

    /// Merges every op on the paths from `src` to `sink` (exclusive) into `sink`'s group.
    fn commit(&mut self, src: OpId, sink: OpId) {
        self.visited.iter_mut().for_each(|v| *v = false);
        let target = self.find(sink);
        let mut stack = vec![src];
        while let Some(u) = stack.pop() {
            if u == sink || self.visited[u] {
                continue;
            }
            self.visited[u] = true;
            self.merge(u, target);
            stack.extend(self.edges[u].iter().map(|e| e.0));
        }
    }

    fn is_concat(&self, i: OpId) -> bool {
        matches!(self.g.ops[i].kind, OpKind::Concat { .. })
    }

    fn run(&mut self, phase: u8) {
        for i in 0..self.g.ops.len() {
            let root = self.find(i);
            let gp = self.gpattern[root];
            if gp == Pattern::Opaque {
                continue;
            }
            let Some(parent) = self.dom_parent[i] else {
                continue;
            };
            let proot = self.find(parent);
            if self.num_nodes[root] + self.num_nodes[proot] > MAX_FUSE_DEPTH {
                continue;
            }
            // the concatenate's input tuple: no fusion into it before phase 2
            let into_tuple =
                self.is_concat(parent) && self.g.ops[parent].inputs.contains(&self.g.ops[i].output);
            if phase == 2 {
                if gp > Pattern::Injective
                    || !into_tuple
                    || self.gpattern[proot] > Pattern::Injective
                    || proot == parent
                {
                    continue;
                }
                if self.check_path(i, parent, &|k, _| k <= Pattern::Injective) {
                    self.commit(i, parent);
                }
                continue;
            }
            if root == proot || into_tuple {
                continue;
            }
            let dp = self.dom_pattern[i];
            if gp == Pattern::OutEWiseFusable {
                if phase == 0
                    && dp == Pattern::ElemWise
                    && self.check_path(i, parent, &|k, _| k <= Pattern::Broadcast)
                {
                    self.commit(i, parent);
                }
            } else if gp <= Pattern::Broadcast {
                if phase == 0 && (dp <= Pattern::Injective || dp == Pattern::CommReduce) {
                    let fcond = |k: Pattern, is_sink: bool| {
                        if is_sink {
                            k <= Pattern::Broadcast
                                || k == Pattern::CommReduce
                                || k == Pattern::Injective
                                || k == Pattern::OutEWiseFusable
                        } else {
                            k <= Pattern::Injective
                        }
                    };
                    if self.check_path(i, parent, &fcond) {
                        self.commit(i, parent);
                    }
                }
            } else if gp == Pattern::Injective
                && phase == 1
                && self.check_path(i, parent, &|k, _| k <= Pattern::Injective)
            {
                self.commit(i, parent);
            }
        }
    }
}

/// Fused groups (ops of each in topological order), ordered by their first op.
pub fn fuse(g: &OpGraph) -> Vec<Vec<OpId>> {
    let mut f = Fuser::new(g);
    f.post_dominators();
    for phase in 0..3 {
        f.run(phase);
    }
    let mut by_root: std::collections::BTreeMap<usize, Vec<OpId>> =
        std::collections::BTreeMap::new();
    for i in 0..g.ops.len() {
        let r = f.find(i);
        by_root.entry(r).or_default().push(i);
    }
    let mut groups: Vec<Vec<OpId>> = by_root.into_values().collect();
    groups.sort_by_key(|g| g[0]);
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::relay::{BinKind, OpGraph, UnaryKind};
    use ttdb_algo::ops::Window2d;

    fn conv(g: &mut OpGraph, x: usize, c: i64, name: &str) -> usize {
        let w = g.add_value(format!("{name}_w"), vec![c, c, 3, 3], true);
        let out = g.add_op(
            OpKind::Conv {
                window: Window2d::simple(1, 1),
                groups: 1,
            },
            vec![x, w],
            name.into(),
            vec![1, c, 8, 8],
            vec![name.into()],
        );
        let b = g.add_value(format!("{name}_b"), vec![1, c, 1, 1], true);
        g.add_op(
            OpKind::Binary(BinKind::Add),
            vec![out, b],
            format!("{name}_bias"),
            vec![1, c, 8, 8],
            vec![name.into()],
        )
    }

    fn names(g: &OpGraph, groups: &[Vec<OpId>]) -> Vec<Vec<String>> {
        groups
            .iter()
            .map(|grp| grp.iter().map(|&o| g.ops[o].kind.name()).collect())
            .collect()
    }

    /// resnet block: relu(conv2(relu(conv1(x))) + x); the residual add and relu fuse into conv2.
    #[test]
    fn residual_add_fuses_into_the_second_conv() {
        let mut g = OpGraph::default();
        let x = g.add_value("x".into(), vec![1, 16, 8, 8], false);
        g.inputs.push(x);
        let r = g.add_op(
            OpKind::Unary(UnaryKind::Relu),
            vec![x],
            "r0".into(),
            vec![1, 16, 8, 8],
            vec!["r0".into()],
        );
        let c1 = conv(&mut g, r, 16, "c1");
        let r1 = g.add_op(
            OpKind::Unary(UnaryKind::Relu),
            vec![c1],
            "r1".into(),
            vec![1, 16, 8, 8],
            vec!["r1".into()],
        );
        let c2 = conv(&mut g, r1, 16, "c2");
        let add = g.add_op(
            OpKind::Binary(BinKind::Add),
            vec![c2, r],
            "add".into(),
            vec![1, 16, 8, 8],
            vec!["add".into()],
        );
        let out = g.add_op(
            OpKind::Unary(UnaryKind::Relu),
            vec![add],
            "r2".into(),
            vec![1, 16, 8, 8],
            vec!["r2".into()],
        );
        g.outputs.push(out);
        let groups = fuse(&g);
        assert_eq!(
            names(&g, &groups),
            vec![
                vec!["relu"],
                vec!["conv2d", "add", "relu"],
                vec!["conv2d", "add", "add", "relu"]
            ]
        );
    }

    /// Two convs meeting at one add: only the first (in DFS order) gets it.
    #[test]
    fn only_one_conv_takes_a_shared_add() {
        let mut g = OpGraph::default();
        let x = g.add_value("x".into(), vec![1, 16, 8, 8], false);
        g.inputs.push(x);
        let a = conv(&mut g, x, 16, "a");
        let b = conv(&mut g, x, 16, "b");
        let add = g.add_op(
            OpKind::Binary(BinKind::Add),
            vec![a, b],
            "add".into(),
            vec![1, 16, 8, 8],
            vec!["add".into()],
        );
        g.outputs.push(add);
        let groups = fuse(&g);
        assert_eq!(
            names(&g, &groups),
            vec![vec!["conv2d", "add", "add"], vec!["conv2d", "add"]]
        );
    }

    /// Element-wise ops after a concatenate fuse with it; a conv after them does not.
    #[test]
    fn concat_and_elementwise_fuse_conv_stays() {
        let mut g = OpGraph::default();
        let x = g.add_value("x".into(), vec![1, 8, 8, 8], false);
        let y = g.add_value("y".into(), vec![1, 8, 8, 8], false);
        g.inputs.extend([x, y]);
        let cat = g.add_op(
            OpKind::Concat { axis: 1 },
            vec![x, y],
            "cat".into(),
            vec![1, 16, 8, 8],
            vec!["cat".into()],
        );
        let s = g.add_value("s".into(), vec![1, 16, 1, 1], true);
        let m = g.add_op(
            OpKind::Binary(BinKind::Multiply),
            vec![cat, s],
            "m".into(),
            vec![1, 16, 8, 8],
            vec!["bn".into()],
        );
        let r = g.add_op(
            OpKind::Unary(UnaryKind::Relu),
            vec![m],
            "r".into(),
            vec![1, 16, 8, 8],
            vec!["r".into()],
        );
        let c = conv(&mut g, r, 16, "c");
        g.outputs.push(c);
        let groups = fuse(&g);
        assert_eq!(
            names(&g, &groups),
            vec![
                vec!["concatenate", "multiply", "relu"],
                vec!["conv2d", "add"]
            ]
        );
    }
}
