#!/usr/bin/env python3
"""onnxruntime reference outputs for the corpus ONNX models (fixtures/reference/).

For each model: fills the initializers whose external-data file is missing and the graph
inputs exactly as docs/design/deterministic-data.md specifies (SplitMix64-style hash of the
tensor name and element index, computed in f64 and rounded to f32), runs onnxruntime
(CPUExecutionProvider, one intra-op thread, default graph optimizations) and writes

    fixtures/reference/<model stem>/reference.json   manifest: model, sha256, versions, input
                                                     checks (shape, dtype, count, sum, first 4),
                                                     outputs (shape, dtype, max_abs, mean_abs),
                                                     fill count and fill_check of the first 5
                                                     filled initializers
    fixtures/reference/<model stem>/out<k>.npy       graph output k (np.save, native dtype)

The inputs themselves are not stored; ttdb regenerates them from the same spec and the
manifest's checks pin them. Run offline by a developer, never in CI:

    pip install onnx onnxruntime numpy
    python3 tools/onnx_reference.py [--corpus ../shared/corpus] [--out fixtures/reference] [MODEL ...]

MODEL is a path, a path relative to the corpus (onnx/odd/pnet.onnx) or to its onnx/ folder,
or a file stem (resnet18); default: every model of the folders in DEFAULT_FOLDERS.
"""
import argparse
import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

DEFAULT_FOLDERS = [
    "onnx/torchvision_graph_only",
    "onnx/torchvision_more",
    "onnx/transformers",
    "onnx/zoo_light",
    "onnx/odd",
]

# Fixed shapes for inputs whose dims are symbolic (or, for documentation, static already),
# keyed by model file stem, then input name. Static dims of the graph must agree.
INPUT_SHAPES = {
    # transformers: batch 1, seq 128 (already static in the export)
    "distilbert_like": {"input_ids": [1, 128], "attention_mask": [1, 128]},
    "gpt2_like": {"input_ids": [1, 128]},
    "roberta_small_like": {"input_ids": [1, 128], "attention_mask": [1, 128]},
    # PP-OCR direction classifier: NCHW, its usual 48x192 crop
    "ch_ppocr_mobile_v2.0_cls_infer": {"x": [1, 3, 48, 192]},
    # MTCNN (keras2onnx, NHWC): pnet is fully convolutional (12x12 minimum), 24x24 gives a
    # 7x7 map; rnet's H, W are fixed at 24 by the graph, batch 1
    "pnet": {"input_1": [1, 24, 24, 3]},
    "rnet": {"input_2": [1, 24, 24, 3]},
    # silero VAD v5+, 16 kHz: one 512-sample chunk plus the 64-sample context the package
    # prepends, state [2, batch, 128]
    "silero_vad_16k_op15": {"input": [1, 576], "state": [2, 1, 128], "sr": []},
}

# Inputs whose values do not follow the spec's generic rule (documented in the manifest).
# name -> (description, function(shape, np dtype) -> array)
INPUT_VALUES = {
    "silero_vad_16k_op15": {
        "state": ("zeros (initial recurrent state)",
                  lambda shape, dt: np.zeros(shape, dtype=dt)),
        "sr": ("16000 (the only sample rate this model accepts)",
               lambda shape, dt: np.full(shape, 16000, dtype=dt)),
    },
}

# ---------------------------------------------------------------------------------------------
# docs/design/deterministic-data.md

M64 = (1 << 64) - 1


def fnv1a64(name):
    h = 0xCBF29CE484222325
    for b in name.encode("utf-8"):
        h ^= b
        h = (h * 0x100000001B3) & M64
    return h


def hash_u(name, count):
    """u_i for i in 0..count: (z >> 40) / 2^24 as f64, z the SplitMix64 finalizer of
    seed(name) + (i + 1) * 0x9E3779B97F4A7C15, all mod 2^64."""
    with np.errstate(over="ignore"):
        seed = np.uint64(fnv1a64(name))
        i1 = np.arange(1, count + 1, dtype=np.uint64)
        z = seed + i1 * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(40)).astype(np.float64) / float(1 << 24)


def is_float(dt):
    return np.issubdtype(dt, np.floating)


def weight_fill(name, dims, np_dtype, role):
    """Values of a missing initializer; role is (op_type, input position) or None."""
    count = int(np.prod(dims, dtype=np.int64)) if dims else 1
    if not is_float(np_dtype):
        return np.zeros(dims, dtype=np_dtype)
    u = hash_u(name, count)
    op = role[0] if role else None
    pos = role[1] if role else None
    if op == "BatchNormalization" and pos in (1, 4):
        v = 0.5 + u
    elif op == "BatchNormalization" and pos in (2, 3):
        v = 0.2 * (u - 0.5)
    elif len(dims) >= 2:
        fan_in = int(np.prod(dims[1:], dtype=np.int64))
        v = (2.0 * u - 1.0) * math.sqrt(6.0 / fan_in)
    else:
        v = 0.1 * (2.0 * u - 1.0)
    return v.astype(np.float32).astype(np_dtype).reshape(dims)


def input_fill(name, shape, np_dtype):
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    u = hash_u(name, count)
    if is_float(np_dtype):
        v = (2.0 * u - 1.0).astype(np.float32)
    elif "mask" in name.lower():
        v = np.ones(count)
    else:
        v = np.floor(u * 100.0)
    return v.astype(np_dtype).reshape(shape)


# ---------------------------------------------------------------------------------------------


def first_readers(graph):
    """Role of each tensor read by a top-level node: (op_type, input position) of its first
    reader in node order; an Identity reader is looked through, the role is then that of the
    Identity's (first) output by the same rule. Tensors no node reads are absent ("other")."""
    first = {}  # name -> ("op", (op_type, pos)) or ("alias", identity output name)
    for node in graph.node:
        for pos, name in enumerate(node.input):
            if name and name not in first:
                if node.op_type == "Identity" and node.output:
                    first[name] = ("alias", node.output[0])
                else:
                    first[name] = ("op", (node.op_type, pos))

    def resolve(name):
        cur = name
        for _ in range(len(graph.node) + 1):  # an Identity chain is at most the graph long
            kind, val = first.get(cur, (None, None))
            if kind == "op":
                return val
            if kind != "alias":
                return None
            cur = val
        return None

    roles = {}
    for name in first:
        r = resolve(name)
        if r is not None:
            roles[name] = r
    return roles


def ext_location(t):
    for e in t.external_data:
        if e.key == "location":
            return e.value
    raise ValueError(f"initializer {t.name}: external data without a location")


def resolve_initializers(model, model_dir):
    """Fills missing external initializers in place; inlines present ones. Returns the list
    of fill checks (all filled initializers, graph initializer order)."""
    g = model.graph
    roles = first_readers(g)
    checks = []
    root = os.path.realpath(model_dir)
    for t in g.initializer:
        if t.data_location != TensorProto.EXTERNAL:
            continue
        loc = ext_location(t)
        path = os.path.realpath(os.path.join(model_dir, loc))
        if os.path.commonpath([root, path]) != root:
            raise ValueError(f"initializer {t.name}: location {loc!r} leaves the model's folder")
        np_dtype = helper.tensor_dtype_to_np_dtype(t.data_type)
        dims = [int(d) for d in t.dims]
        if os.path.exists(path):
            info = {e.key: e.value for e in t.external_data}
            offset, nbytes = int(info.get("offset", 0)), info.get("length")
            need = int(np.prod(dims, dtype=np.int64)) * np.dtype(np_dtype).itemsize
            nbytes = int(nbytes) if nbytes is not None else need
            with open(path, "rb") as f:
                f.seek(offset)
                raw = f.read(nbytes)
            if len(raw) < need or nbytes < need:
                raise ValueError(f"initializer {t.name}: {loc} is shorter than the tensor")
            data = raw[:need]
            fill = None
        else:
            role = roles.get(t.name)
            arr = np.ascontiguousarray(weight_fill(t.name, dims, np_dtype, role))
            data = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
            flat = arr.astype(np.float32).ravel() if is_float(np_dtype) else arr.ravel()
            fill = {
                "name": t.name,
                "role": f"{role[0]}:{role[1]}" if role else None,
                "dtype": np.dtype(np_dtype).name,
                "shape": dims,
                "count": int(arr.size),
                "sum": float(flat.astype(np.float64).sum()),
                "first4": [float(x) for x in flat[:4]],
            }
        del t.external_data[:]
        t.data_location = TensorProto.DEFAULT
        t.raw_data = data
        if fill:
            checks.append(fill)
    return checks


def graph_input_shape(vi, stem):
    table = INPUT_SHAPES.get(stem, {})
    dims = vi.type.tensor_type.shape.dim
    graph_dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                  for d in dims]
    if vi.name in table:
        shape = list(table[vi.name])
        if len(shape) != len(graph_dims) or any(
                g is not None and g != s for g, s in zip(graph_dims, shape)):
            raise ValueError(f"input {vi.name}: table shape {shape} contradicts the graph's "
                             f"{[g if g is not None else '?' for g in graph_dims]}")
        return shape
    if any(g is None for g in graph_dims):
        raise ValueError(f"input {vi.name}: symbolic dims and no entry in INPUT_SHAPES")
    return graph_dims


def make_inputs(model, stem):
    g = model.graph
    inits = {t.name for t in g.initializer}
    feeds, manifest = {}, []
    for vi in g.input:
        if vi.name in inits:
            continue
        np_dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        shape = graph_input_shape(vi, stem)
        special = INPUT_VALUES.get(stem, {}).get(vi.name)
        arr = special[1](shape, np_dtype) if special else input_fill(vi.name, shape, np_dtype)
        feeds[vi.name] = arr
        flat = arr.ravel()
        entry = {
            "name": vi.name,
            "shape": shape,
            "dtype": np.dtype(np_dtype).name,
            "count": int(arr.size),
            "sum": float(flat.astype(np.float64).sum()),
            "first4": [float(x) if is_float(np_dtype) else int(x) for x in flat[:4]],
        }
        if special:
            entry["special"] = special[0]
        manifest.append(entry)
    return feeds, manifest


def find_models(corpus, names):
    if not names:
        out = []
        for folder in DEFAULT_FOLDERS:
            out += sorted((corpus / folder).glob("*.onnx"))
        return out
    out = []
    for n in names:
        cands = [Path(n), corpus / n, corpus / "onnx" / n]
        cands += [corpus / f / f"{n}.onnx" for f in DEFAULT_FOLDERS]
        hit = next((c for c in cands if c.is_file()), None)
        if hit is None:
            sys.exit(f"model not found: {n}")
        out.append(hit)
    return out


def run_model(path, corpus, out_root):
    stem = path.name[:-len(".onnx")] if path.name.endswith(".onnx") else path.stem
    out_dir = out_root / stem
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("out*.npy"):
        old.unlink()
    raw = path.read_bytes()
    try:
        rel = path.resolve().relative_to(corpus.resolve()).as_posix()
    except ValueError:
        rel = str(path)
    man = {
        "model": rel,
        "model_sha256": hashlib.sha256(raw).hexdigest(),
        "onnxruntime": ort.__version__,
    }
    t0 = time.time()
    line = ""
    try:
        model = onnx.load(str(path), load_external_data=False)
        checks = resolve_initializers(model, str(path.parent))
        man["filled_initializers"] = len(checks)
        man["fill_check"] = checks[:5]
        feeds, man["inputs"] = make_inputs(model, stem)
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        results = sess.run(names, feeds)
        outs = []
        for k, (name, v) in enumerate(zip(names, results)):
            v = np.asarray(v)
            if is_float(v.dtype):
                v = v.astype(np.float32)
            fname = f"out{k}.npy"
            np.save(out_dir / fname, v)
            a = np.abs(v.astype(np.float64)) if v.size else np.zeros(1)
            outs.append({
                "name": name,
                "file": fname,
                "shape": list(v.shape),
                "dtype": v.dtype.name,
                "max_abs": float(a.max()),
                "mean_abs": float(a.mean()),
                "finite": bool(np.isfinite(a).all()),
            })
        man["outputs"] = outs
        line = "  ".join(f"{o['name']}{o['shape']} max_abs={o['max_abs']:.4g}"
                         + ("" if o["finite"] else " NON-FINITE") for o in outs)
        line += f"  fills={len(checks)}"
    except Exception as e:  # recorded, the next model goes on
        man["error"] = f"{type(e).__name__}: {e}".strip()
        line = "ERROR " + man["error"].splitlines()[0][:200]
    with open(out_dir / "reference.json", "w") as f:
        json.dump(man, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"{stem:32s} {time.time() - t0:6.2f}s  {line}", flush=True)
    return man


def main():
    here = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default=str(here.parent / "shared" / "corpus"))
    ap.add_argument("--out", default=str(here / "fixtures" / "reference"))
    ap.add_argument("models", nargs="*", metavar="MODEL")
    a = ap.parse_args()
    corpus, out_root = Path(a.corpus), Path(a.out)
    print(f"onnx {onnx.__version__}, onnxruntime {ort.__version__}, numpy {np.__version__}")
    for p in find_models(corpus, a.models):
        run_model(p, corpus, out_root)


if __name__ == "__main__":
    main()
