#!/usr/bin/env bash
# The layout plan re-weighed with measured costs (issue 31), side by side in one run. Per
# model: `tune --layout-plan planned --trials N` from an empty database (a plan on the
# estimate alone, pinned), then from two copies of that database
#   kept:   tune --layout-plan planned --trials M (more trials under the pinned plan);
#   replan: tune --layout-plan replan --trials M (a plan that weighs the timings the first
#           tune stored, pinned, then tuned: convs whose blocking changed start anew);
# then `ttdb run --layout-plan planned` on each, three timings per database, alternating;
# medians. Prints the host, the re-plan's line (what changed, how much was measured), and
# kept / replan (above 1: the re-plan is faster).
# --db-dir D keeps each model's three databases in D (<model>.{first,kept,replan}.db).
# Outside CI (about 10 minutes a model at the defaults).
#   benches/replan.sh [--trials N] [--more M] [--repeat R] [--db-dir D] [MODEL.onnx ...]
set -euo pipefail
cd "$(dirname "$0")/.."
trials=1000 more=1000 repeat=30 db_dir=
while [[ "${1:-}" == --* ]]; do
    case $1 in
        --trials) trials=$2; shift ;;
        --more) more=$2; shift ;;
        --repeat) repeat=$2; shift ;;
        --db-dir) db_dir=$2; mkdir -p "$db_dir"; shift ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
corpus=../shared/corpus
models=("$@")
if [[ ${#models[@]} -eq 0 ]]; then
    for m in mobilenet_v3_small regnet_y_400mf; do
        models+=("$corpus/onnx/torchvision_more/$m.onnx")
    done
fi
cargo build --release --quiet
ttdb=$PWD/target/release/ttdb
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; tune --trials $trials, then $more more; ttdb run --repeat $repeat; $(date -u +%F)"
e2e() { # database, model: the end-to-end median in ms
    "$ttdb" --db "$1" run "$2" --layout-plan planned --deterministic-inputs --repeat "$repeat" --json -o "$work/out" 2>/dev/null |
        python3 -c 'import json,sys; print("%.3f" % json.load(sys.stdin)["repeat"]["median_ms"])'
}
median() { python3 -c 'import statistics,sys; print(statistics.median(map(float, sys.argv[1:])))' "$@"; }
mkdir -p "$work/out"
printf '%-20s | %10s | %10s | %10s | %s\n' model "first ms" "kept ms" "replan ms" "kept / replan"
for m in "${models[@]}"; do
    name=$(basename "$m" .onnx)
    rm -f "$work/first.db"
    "$ttdb" --db "$work/first.db" tune "$m" --layout-plan planned --trials "$trials" --e2e-runs 0 >/dev/null 2>&1
    cp "$work/first.db" "$work/kept.db"; cp "$work/first.db" "$work/replan.db"
    "$ttdb" --db "$work/kept.db" tune "$m" --layout-plan planned --trials "$more" --e2e-runs 0 >/dev/null 2>&1
    "$ttdb" --db "$work/replan.db" tune "$m" --layout-plan replan --trials "$more" --e2e-runs 0 >"$work/replan.txt" 2>&1
    f_=() k_=() r_=()
    for _ in 1 2 3; do
        f_+=("$(e2e "$work/first.db" "$m")"); k_+=("$(e2e "$work/kept.db" "$m")"); r_+=("$(e2e "$work/replan.db" "$m")")
    done
    f=$(median "${f_[@]}"); k=$(median "${k_[@]}"); r=$(median "${r_[@]}")
    printf '%-20s | %10.2f | %10.2f | %10.2f | %.2fx\n' "$name" "$f" "$k" "$r" "$(python3 -c "print($k / $r)")"
    grep -m1 '^layout plan' "$work/replan.txt" | sed 's/^/    replan: /'
    "$ttdb" --db "$work/kept.db" kernels "$m" --layout-plan planned | grep -m1 '^layout plan' | sed 's/^/    kept:   /'
    if [[ -n $db_dir ]]; then
        for d in first kept replan; do cp "$work/$d.db" "$db_dir/$name.$d.db"; done
    fi
done
