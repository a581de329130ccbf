#!/usr/bin/env bash
# Two ttdb binaries matching the 7 corpus networks against the tvm_ansor_bench NCHWc logs:
# each binary imports the logs into its own database, then `match --json` per model; the
# outputs must be byte-identical. For refactors that must not change behaviour.
#
#   benches/match_vs.sh BIN_A BIN_B [CORPUS]      (CORPUS defaults to ../shared/corpus)
set -euo pipefail
a=$1 b=$2 corpus=${3:-$(dirname "$0")/../../shared/corpus}
[ -d "$corpus/ansor" ] || { echo "corpus not found at $corpus (pass it as the third argument)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
logs=$corpus/ansor/tvm_ansor_bench_nchwc
models=$corpus/onnx/torchvision_graph_only
for side in a b; do
  bin=${!side}
  "$bin" --db "$work/$side.db" import "$logs" >/dev/null
done
same=0 differ=0
for m in alexnet densenet121 googlenet mobilenet_v2 resnet18 resnet50 vgg16; do
  "$a" --db "$work/a.db" match "$models/$m.onnx" --json >"$work/$m.a.json"
  "$b" --db "$work/b.db" match "$models/$m.onnx" --json >"$work/$m.b.json"
  kernels=$(grep -o '"signature"' "$work/$m.a.json" | wc -l)
  if cmp -s "$work/$m.a.json" "$work/$m.b.json"; then
    same=$((same + 1)); echo "$m: identical ($(wc -c <"$work/$m.a.json") bytes, $kernels signatures)"
  else
    differ=$((differ + 1)); echo "$m: DIFFERS"; diff <(tr ',' '\n' <"$work/$m.a.json") <(tr ',' '\n' <"$work/$m.b.json") | head -20
  fi
done
echo "match --json: $same identical, $differ differ (A=$a, B=$b)"
[ "$differ" -eq 0 ]
