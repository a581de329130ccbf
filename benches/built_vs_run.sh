#!/usr/bin/env bash
# A model built by `ttdb build` (libmodel.so, timed by benches/time_built.c) against the same
# model under `ttdb run`, side by side in one run, same database, same threads, and
# optionally against libraries an older ttdb builds (--vs OLD_TTDB). Prints the host, then per
# model the medians and the ratios (above 1: the library is faster). Outside CI.
#   benches/built_vs_run.sh [--db-dir D] [--repeat R] [--threads T] [--layout-plan P] [--vs OLD_TTDB] [MODEL.onnx ...]
# --db-dir D: each model's database is D/<model>.db (as benches/e2e.sh keeps them); without
# it, or for a model with none there, every kernel runs its default schedule.
set -euo pipefail
cd "$(dirname "$0")/.."
repeat=50 threads=$(nproc) plan=planned db_dir= old=
while [[ "${1:-}" == --* ]]; do
    case $1 in
        --repeat) repeat=$2 ;;
        --threads) threads=$2 ;;
        --layout-plan) plan=$2 ;;
        --db-dir) db_dir=$2 ;;
        --vs) old=$2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift 2
done
models=("$@")
if [[ ${#models[@]} -eq 0 ]]; then
    for m in torchvision_graph_only/resnet18 torchvision_more/mobilenet_v3_small \
             torchvision_more/shufflenet_v2_x1_0 transformers/distilbert_like; do
        models+=("../shared/corpus/onnx/$m.onnx")
    done
fi
cargo build --release --quiet
ttdb=target/release/ttdb
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# the library of `$1` (a ttdb binary) for model `$2` with database args `$3...`, timed
time_lib() {
    local bin=$1 model=$2 dir=$work/lib.$RANDOM
    shift 2
    "$bin" "$@" build "$model" --layout-plan "$plan" -o "$dir" >/dev/null 2>"$work/build.err" ||
        { echo "build failed: $(tail -1 "$work/build.err")" >&2; return 1; }
    cc -O2 benches/time_built.c -I "$dir" -L "$dir" -lmodel -o "$dir/time_built"
    LD_LIBRARY_PATH=$dir "$dir/time_built" "$threads" "$repeat" | cut -d' ' -f1
    rm -rf "$dir"
}
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $threads threads; repeat $repeat, layout plan $plan; $(date -u +%F)"
header=(model "run ms" "built ms" "run/built")
[[ -n $old ]] && header+=("old built ms" "old/built")
printf '%-22s %9s %9s %10s %13s %10s\n' "${header[@]}"
for m in "${models[@]}"; do
    name=$(basename "$m" .onnx)
    dbargs=()
    [[ -n $db_dir && -f $db_dir/$name.db ]] && dbargs=(--db "$db_dir/$name.db")
    run=$($ttdb "${dbargs[@]}" run "$m" --layout-plan "$plan" --deterministic-inputs --repeat "$repeat" \
              --threads "$threads" --json -o "$work/out" 2>/dev/null |
          python3 -c 'import json,sys; print(json.load(sys.stdin)["repeat"]["median_ms"])')
    built=$(time_lib "$ttdb" "$m" "${dbargs[@]}")
    line=$(printf '%-22s %9.2f %9.2f %9.2fx' "$name" "$run" "$built" "$(echo "$run / $built" | bc -l)")
    if [[ -n $old ]]; then
        was=$(time_lib "$old" "$m" "${dbargs[@]}")
        line+=$(printf ' %13.2f %9.2fx' "$was" "$(echo "$was / $built" | bc -l)")
    fi
    echo "$line"
done
