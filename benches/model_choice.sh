#!/usr/bin/env bash
# The in-model choice (`tune MODEL`'s last step, ttdb_tuning::run::in_model) against each
# kernel's cheapest record, side by side in one run. Per model: the database D/NAME.db that
# benches/e2e.sh --db-dir D tuned (left as it is: the cheapest records, unless it was tuned
# after the choice existed), and a copy of it re-chosen by `tune MODEL --trials 1` (one more
# trial, then the choice); then `ttdb run --repeat R` of each and onnxruntime, alternating,
# K rounds, and each column's median. Prints the host, and per model the configuration the
# choice took and its own end-to-end timing of it against the cheapest records ("rows:
# 29.90->27.75"), and the speedup (cheapest ms / chosen ms).
# Outside CI (about a minute per model).
#   benches/model_choice.sh --db-dir D [--rounds K] [--repeat R] [--no-choice-in-d] [MODEL.onnx ...]
# --no-choice-in-d: D was tuned with the choice; its pins are dropped in the "cheapest" copy.
set -euo pipefail
cd "$(dirname "$0")/.."
db_dir= rounds=5 repeat=30 drop=0
while [[ "${1:-}" == --* ]]; do
    case $1 in
        --db-dir) db_dir=$2; shift ;;
        --rounds) rounds=$2; shift ;;
        --repeat) repeat=$2; shift ;;
        --no-choice-in-d) drop=1 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
[[ -n $db_dir ]] || { echo "--db-dir D is required (databases tuned by benches/e2e.sh --db-dir D)" >&2; exit 2; }
models=("$@")
if [[ ${#models[@]} -eq 0 ]]; then
    source benches/issue_models.sh
    models=("${issue_models[@]}")
fi
cargo build --release --quiet
ttdb=$PWD/target/release/ttdb
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
e2e() { # database, model: the end-to-end median in ms
    "$ttdb" --db "$1" run "$2" --layout nchwc --layout-plan auto --deterministic-inputs --repeat "$repeat" --json -o "$work/out" 2>/dev/null |
        python3 -c 'import json,sys; print("%.3f" % json.load(sys.stdin)["repeat"]["median_ms"])'
}
median() { python3 -c 'import statistics,sys; print(statistics.median(map(float, sys.argv[1:])))' "$@"; }
mkdir -p "$work/out"
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; ttdb run --repeat $repeat x $rounds rounds; $(date -u +%F)"
printf '%-20s %13s %24s | %12s %12s %12s | %9s %9s\n' model "changed/kernels" "taken: its own ms" "cheapest ms" "chosen ms" "onnxrt ms" "speedup" "ort/chosen"
for m in "${models[@]}"; do
    name=$(basename "$m" .onnx)
    [[ -f $db_dir/$name.db ]] || { echo "$name: no $db_dir/$name.db" >&2; continue; }
    cp "$db_dir/$name.db" "$work/cheapest.db"
    [[ $drop == 1 ]] && python3 -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute("DELETE FROM record_pins"); c.commit()' "$work/cheapest.db"
    cp "$work/cheapest.db" "$work/chosen.db"
    pred=$("$ttdb" --db "$work/chosen.db" tune "$m" --trials 1 --layout nchwc --layout-plan auto --e2e-runs 0 --json 2>/dev/null |
        python3 -c 'import json,sys; d=json.load(sys.stdin)["model_choice"]; r=d.get("chosen")
c = {k["name"]: k["model_ms"] for k in r["configurations"]} if r else {}
print("%d/%d %s:%.2f->%.2f" % (r["changed"], len(r["workloads"]), r["taken"].replace(" ", "_"), c["cheapest"], c[r["taken"]]) if r and len(c) > 1 else "0/0 none")')
    cs=() hs=() os=()
    for _ in $(seq "$rounds"); do
        cs+=("$(e2e "$work/cheapest.db" "$m")"); hs+=("$(e2e "$work/chosen.db" "$m")")
        os+=("$(python3 benches/ort_model.py "$m" "$(nproc)" | cut -d' ' -f1)")
    done
    c=$(median "${cs[@]}"); h=$(median "${hs[@]}"); o=$(median "${os[@]}")
    printf '%-20s %13s %24s | %12.2f %12.2f %12.2f | %8.3fx %8.3fx\n' "$name" ${pred% *} "${pred#* }" "$c" "$h" "$o" \
        "$(python3 -c "print($c / $h)")" "$(python3 -c "print($o / $h)")"
done
