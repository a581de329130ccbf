"""onnxruntime's latency for an ONNX model of the corpus: the "just run it" peer of the
benchmarks. The corpus graphs ship without their external weight data, so initializers
stored externally get random values of their declared shape first. Prints one line:
`median_ms min_ms threads`. Needs `pip install onnx onnxruntime` (benchmarks only)."""
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper


def with_weights(path):
    model = onnx.load(path, load_external_data=False)
    rng = np.random.default_rng(0)
    for t in model.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(t.data_type)
            values = (rng.standard_normal(list(t.dims)) * 0.05).astype(dtype)
            filled = numpy_helper.from_array(values, t.name)
            t.ClearField("external_data")
            t.data_location = onnx.TensorProto.DEFAULT
            t.raw_data = filled.raw_data
    return model.SerializeToString()


def main():
    path, threads = sys.argv[1], int(sys.argv[2])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(with_weights(path), opts, providers=["CPUExecutionProvider"])
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        if "int" in i.type:  # token ids, masks, positions: zeros are valid for all
            dtype = np.int64 if "int64" in i.type else np.int32
            feeds[i.name] = np.zeros(shape, dtype)
            if "mask" in i.name:
                feeds[i.name] += 1
        else:
            feeds[i.name] = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    for _ in range(5):
        sess.run(None, feeds)
    times = []
    for _ in range(30):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t)
    times.sort()
    print(f"{times[len(times) // 2] * 1e3:.3f} {times[0] * 1e3:.3f} {threads}")


if __name__ == "__main__":
    main()
