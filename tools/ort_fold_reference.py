#!/usr/bin/env python3
"""Reference values for ttdb's load-time folding (tests/onnx_shape_graphs.rs).

Runs a corpus model in onnxruntime (CPU, graph optimizations off, weights stored externally
replaced by 0.5, integer inputs 5, float inputs 0.25) with every node output exposed, and
writes the shape and values of each integer or bool tensor of at most 4096 elements: the
tensors shape sub-graphs compute. ttdb must agree on every shape, and on the values of every
such tensor it folds.

    tools/ort_fold_reference.py torchvision_more/vit_b_16.onnx [NAME=d0,d1,...]

(run from the repository root; the corpus is ../shared/corpus/onnx). Needs onnx, onnxruntime.
"""
import json
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

rel, overrides = sys.argv[1], dict(a.split("=") for a in sys.argv[2:])
m = onnx.load(f"../shared/corpus/onnx/{rel}", load_external_data=False)
g = m.graph
for i, t in enumerate(g.initializer):
    if t.data_location == TensorProto.EXTERNAL:
        arr = np.full(list(t.dims), 0.5, dtype=helper.tensor_dtype_to_np_dtype(t.data_type))
        g.initializer[i].CopyFrom(numpy_helper.from_array(arr, t.name))
exposed = {o.name for o in g.output}
for n in g.node:
    for o in n.output:
        if o and o not in exposed:
            g.output.append(helper.ValueInfoProto(name=o))
            exposed.add(o)
so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
feeds = {}
for i in s.get_inputs():
    if i.name in overrides:
        shape = [int(d) for d in overrides[i.name].split(",")]
    else:
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
    if "int" in i.type:
        dt = np.int64 if "int64" in i.type else np.int32
        feeds[i.name] = np.full(shape, 5, dtype=dt)
    else:
        feeds[i.name] = np.full(shape, 0.25, dtype=np.float32)
tensors = {}
for o, v in zip(s.get_outputs(), s.run(None, feeds)):
    v = np.asarray(v)
    if v.dtype.kind in "iub" and v.size <= 4096:
        tensors[o.name] = {"shape": list(v.shape), "ints": v.astype(np.int64).ravel().tolist()}
out = {
    "model": rel,
    "input_shapes": [f"{k}={v}" for k, v in overrides.items()],
    "onnxruntime": ort.__version__,
    "tensors": tensors,
}
name = rel.split("/")[-1].removesuffix(".onnx")
with open(f"fixtures/onnx_fold/{name}.json", "w") as f:
    # one tensor per line: readable diffs
    f.write("{\n")
    for k in ["model", "input_shapes", "onnxruntime"]:
        f.write(f"  {json.dumps(k)}: {json.dumps(out[k])},\n")
    f.write('  "tensors": {\n')
    items = sorted(tensors.items())
    for j, (k, v) in enumerate(items):
        f.write(f"    {json.dumps(k)}: {json.dumps(v)}{',' if j + 1 < len(items) else ''}\n")
    f.write("  }\n}\n")
print(f"{name}: {len(tensors)} tensors")
