#!/usr/bin/env bash
# `ttdb tune MODEL --trials N` against onnxruntime's whole-model latency, side by side in
# one run, for each model given (default: the five of issue 12). Prints the host, then per
# model: ttdb's kernel sum after tuning, its wall time, the kernels with a verified best (of
# all; and failed trials), onnxruntime's median (same thread count), and their ratio. Each model is tuned into a fresh database (no transfer), so the
# kernel sum is what search alone reaches. Needs `pip install onnx onnxruntime`; outside CI.
#   benches/tune_models.sh [--trials N] [MODEL.onnx ...]
set -euo pipefail
cd "$(dirname "$0")/.."
trials=2000
if [[ "${1:-}" == "--trials" ]]; then trials=$2; shift 2; fi
corpus=../shared/corpus/onnx
models=("$@")
if [[ ${#models[@]} -eq 0 ]]; then
    models=("$corpus/torchvision_more/mobilenet_v3_small.onnx" "$corpus/torchvision_more/regnet_y_400mf.onnx"
            "$corpus/torchvision_more/convnext_tiny.onnx" "$corpus/torchvision_more/vit_b_16.onnx"
            "$corpus/transformers/distilbert_like.onnx")
fi
cargo build --release --quiet
ttdb=target/release/ttdb
threads=$(nproc)
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $threads cores; $($ttdb bench-peak | tail -1)"
printf '%-24s %7s %9s %9s %12s %14s %9s\n' model trials "tune s" "verified" "ttdb sum ms" "onnxrt ms" "ort/ttdb"
for m in "${models[@]}"; do
    db=$(mktemp -d)/tune.db
    t0=$(date +%s.%N)
    out=$($ttdb --db "$db" tune "$m" --trials "$trials" --json)
    t1=$(date +%s.%N)
    # The kernel sum, and how many kernels have a verified best (of all, and failed trials).
    read -r sum verified <<<"$(printf '%s' "$out" | python3 -c '
import json, sys
r = json.load(sys.stdin)
k = r["kernels"]
ok = sum(1 for x in k if x.get("best_ms") is not None)
failed = sum(x.get("failed_trials", 0) for x in k)
print(r["kernel_sum_ms"], f"{ok}/{len(k)},{failed}f")')"
    ort=$(python3 benches/ort_model.py "$m" "$threads" | cut -d' ' -f1)
    python3 - "$m" "$trials" "$t0" "$t1" "$sum" "$ort" "$verified" <<'PY'
import os, sys
m, trials, t0, t1, s, o, v = sys.argv[1:]
s, o = float(s), float(o)
print(f"{os.path.basename(m):<24} {trials:>7} {float(t1)-float(t0):>9.0f} {v:>9} {s:>12.3f} {o:>14.3f} {o/s:>8.2f}x")
PY
done
