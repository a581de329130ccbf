#!/usr/bin/env bash
# `ttdb apply` against its alternatives at equal wall time (issue 31): per model and time
# budget, side by side in one run, the end-to-end latency (`ttdb run --repeat R`, median)
# after each of
#   transfer: apply --transfer-only on a database holding the corpus's NCHWc logs;
#   cold:     tune MODEL --time-budget B from an empty database (search only);
#   apply:    apply --time-budget B on the database with the logs (a search whose first
#             round per kernel is its transferred candidates);
#   apart:    with --apart, also apply --transfer-apart (the transfer measured on its own,
#             then the search: apply before b8bec6c), after the other three.
# Each starts from a fresh copy of its database. Prints the host, then per row the
# medians (of three end-to-end timings per database, the databases taking turns), the wall
# time each took, and apply's speed against the better alternative.
# Outside CI (the defaults take about an hour and a half).
#   benches/apply_vs.sh [--budgets "60 180 600"] [--repeat R] [--apart] [MODEL.onnx ...]
set -euo pipefail
cd "$(dirname "$0")/.."
budgets="60 180 600" repeat=20 apart=0
while [[ "${1:-}" == --* ]]; do
    case $1 in
        --budgets) budgets=$2; shift ;;
        --repeat) repeat=$2; shift ;;
        --apart) apart=1 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
corpus=../shared/corpus
models=("$@")
if [[ ${#models[@]} -eq 0 ]]; then
    for m in resnet34 mnasnet1_0 regnet_x_400mf; do
        models+=("$corpus/onnx/torchvision_more/$m.onnx")
    done
fi
cargo build --release --quiet
ttdb=$PWD/target/release/ttdb
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The seeded database: the corpus's NCHWc logs (none of them of these models).
"$ttdb" --db "$work/logs.db" import "$corpus/ansor/tvm_ansor_bench_nchwc" >/dev/null
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; ttdb run --repeat $repeat; $(date -u +%F)"
printf '%-16s %7s | %18s | %18s | %18s | %s' model budget "transfer ms (s)" "cold search ms (s)" "apply ms (s)" "best alt / apply"
[[ $apart == 1 ]] && printf ' | %18s | %s' "apart ms (s)" "apart / apply"
echo
e2e() { # database, model: the end-to-end median in ms
    "$ttdb" --db "$1" run "$2" --deterministic-inputs --repeat "$repeat" --json -o "$work/out" 2>/dev/null |
        python3 -c 'import json,sys; print("%.3f" % json.load(sys.stdin)["repeat"]["median_ms"])'
}
median() { python3 -c 'import statistics,sys; print(statistics.median(map(float, sys.argv[1:])))' "$@"; }
timed() { # runs "$@", prints its wall seconds
    local t0 t1
    t0=$(date +%s.%N); "$@" >/dev/null 2>&1 || true; t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
}
mkdir -p "$work/out"
for m in "${models[@]}"; do
    name=$(basename "$m" .onnx)
    for b in $budgets; do
        cp "$work/logs.db" "$work/transfer.db"; cp "$work/logs.db" "$work/apply.db"; rm -f "$work/cold.db"
        ts=$(timed "$ttdb" --db "$work/transfer.db" apply "$m" --transfer-only --time-budget "$b" --e2e-runs 0)
        cs=$(timed "$ttdb" --db "$work/cold.db" tune "$m" --time-budget "$b" --trials 100000000 --e2e-runs 0)
        as=$(timed "$ttdb" --db "$work/apply.db" apply "$m" --time-budget "$b" --e2e-runs 0)
        # Three rounds, the databases alternating, each column's median: one timing of each
        # after the other moved a cell by 2% between runs.
        ts_=() cs_=() as_=()
        for _ in 1 2 3; do
            ts_+=("$(e2e "$work/transfer.db" "$m")"); cs_+=("$(e2e "$work/cold.db" "$m")")
            as_+=("$(e2e "$work/apply.db" "$m")")
        done
        t=$(median "${ts_[@]}"); c=$(median "${cs_[@]}"); a=$(median "${as_[@]}")
        best=$(python3 -c "print(min($t, $c))")
        printf '%-16s %6ss | %9.2f (%5.0f s) | %9.2f (%5.0f s) | %9.2f (%5.0f s) | %.2fx' \
            "$name" "$b" "$t" "$ts" "$c" "$cs" "$a" "$as" "$(python3 -c "print($best / $a)")"
        if [[ $apart == 1 ]]; then
            cp "$work/logs.db" "$work/apart.db"
            ps=$(timed "$ttdb" --db "$work/apart.db" apply "$m" --transfer-apart --time-budget "$b" --e2e-runs 0)
            p=$(e2e "$work/apart.db" "$m")
            printf ' | %9.2f (%5.0f s) | %.2fx' "$p" "$ps" "$(python3 -c "print($p / $a)")"
        fi
        echo
    done
done
