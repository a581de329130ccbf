#!/usr/bin/env bash
# End-to-end latency of whole models, ttdb against onnxruntime, side by side in one run on
# the same thread count. Per model: `ttdb tune MODEL --trials N` from an empty database
# (skipped with --trials 0: default schedules only), then `ttdb run --repeat R` on that
# database, then onnxruntime (benches/ort_model.py). Prints the host, then per model: ttdb's
# end-to-end median and p90, its kernel sum split into tuned kernels and glue, the glue's
# share, the arena against the sum of intermediates, onnxruntime's median and the ratio
# onnxruntime / ttdb (above 1: ttdb is faster), and the tune's wall time; at the end the geomean
# of the ratios and the lowest. Needs `pip install onnx onnxruntime`;
# outside CI.
# --layout-plan auto|planned|tophub (default auto, ttdb's own default: planned on these fresh
# databases): NCHWc blockings planned for the whole graph (pinned by the tune, read by the run;
# docs/design/layout-plan.md) or TopHub's; the header says which.
# --layout nchwc|nhwc (default nchwc): the kernels' layout, for the tune and the run; nhwc
# makes TVM's winograd choice (3x3 stride-1 convs with 64 < CO < 512, F(4x4, 3x3)).
# --rounds K (default 3): K rounds of ttdb then onnxruntime, alternating; each side's figure
# is the median of its rounds' medians (ttdb's row is its median round).
# --db-dir D: each model's database is D/<model>.db and is kept; a model whose database
# exists is not tuned again (its "tune s" says "kept"): re-time a new ttdb on old tunes.
# --cooldown S (default 0): idle S seconds before each timed command (ttdb's and onnxruntime's),
# and at least 60 after a tune. The hosts of these sessions run up to 2x slower for a minute
# or more after sustained load on both cores (60 s of two busy loops: mobilenet_v2 7.2 ms
# instead of 3.4 for the next half minute), so a model timed right after its tune, or after
# the rounds of the model before, can land in such a spell.
# --placement any|one-die|two-dies (default any): a 2-vCPU VM's two vCPUs run on one die of
# the host's CPU (sharing its L3) or on two, and the placement changes every few tens of
# seconds; a model runs up to 2x slower on two dies, onnxruntime alike (benches/core_to_core.c
# probes it: a cache line's round trip between CPU 0 and 1, 50-75 ns on one die, 310-450 on
# two). Each timed command is probed before and after; the "dies" column says where each
# side ran (1, 2, or mix: moved during the command). With one-die or two-dies a command that
# did not run wholly on that placement is run again (5 s apart, at most 40 times), so both
# sides are compared on the same placement.
#   benches/e2e.sh [--trials N] [--repeat R] [--rounds K] [--threads T] [--layout-plan P] [--layout L] [--db-dir D] [--cooldown S] [--placement P] [MODEL.onnx ...]
set -euo pipefail
cd "$(dirname "$0")/.."
trials=2000 repeat=50 threads=$(nproc) plan=auto layout=nchwc db_dir= rounds=3 cooldown=0 placement=any
while [[ "${1:-}" == --* ]]; do
    case $1 in
        --trials) trials=$2 ;;
        --repeat) repeat=$2 ;;
        --rounds) rounds=$2 ;;
        --threads) threads=$2 ;;
        --layout-plan) plan=$2 ;;
        --layout) layout=$2 ;;
        --db-dir) db_dir=$2; mkdir -p "$db_dir" ;;
        --cooldown) cooldown=$2 ;;
        --placement) placement=$2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift 2
done
models=("$@")
if [[ ${#models[@]} -eq 0 ]]; then
    source benches/issue_models.sh
    models=("${issue_models[@]}")
fi
case $placement in
    any) want= ;;
    one-die) want=1 ;;
    two-dies) want=2 ;;
    *) echo "--placement is any, one-die or two-dies, not $placement" >&2; exit 2 ;;
esac
cargo build --release --quiet
ttdb=target/release/ttdb
probe=target/core_to_core
cc -O2 -pthread benches/core_to_core.c -o "$probe"
# 1 or 2: the dies CPUs 0 and 1 run on now (? with fewer than 2 CPUs)
dies() {
    if [[ $(nproc) -lt 2 ]]; then echo '?'; return; fi
    if (( $($probe) < 200 )); then echo 1; else echo 2; fi
}
# timed OUT PLACE_FILE CMD...: runs CMD into OUT (stdout) and appends where it ran to
# PLACE_FILE; with --placement one-die/two-dies, again until it ran wholly there.
timed() {
    local out=$1 place_file=$2 before after try
    shift 2
    for ((try = 1; try <= 40; try++)); do
        before=$(dies)
        "$@" >"$out" || return 1
        after=$(dies)
        if [[ -z $want || ($before == "$want" && $after == "$want") ]]; then
            [[ $before == "$after" ]] && echo "$before" >>"$place_file" || echo mix >>"$place_file"
            return 0
        fi
        sleep 5
    done
    echo "never ran wholly on $placement in 40 tries" >&2
    return 1
}
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $threads threads; trials $trials, repeat $repeat x $rounds rounds, layout $layout, layout plan $plan, cooldown ${cooldown} s, placement $placement (CPU 0-1 round trip now $($probe) ns); $(date -u +%F)"
printf '%-22s %9s %9s %10s %9s %6s %14s %10s %8s %7s %9s\n' model "e2e ms" "p90 ms" "tuned ms" "glue ms" glue% "arena/sum MiB" "onnxrt ms" "ort/ttdb" "tune s" "dies t/o"
ratios_file=$(mktemp)
trap 'rm -f "$ratios_file"' EXIT
for m in "${models[@]}"; do
    name=$(basename "$m" .onnx)
    work=$(mktemp -d)
    db=$work/e2e.db
    [[ -n $db_dir ]] && db=$db_dir/$name.db
    start=$(date +%s)
    if [[ -n $db_dir && -f $db ]]; then
        tune_s=kept
    elif [[ $trials -gt 0 ]]; then
        if ! $ttdb --db "$db" tune "$m" --trials "$trials" --layout "$layout" --layout-plan "$plan" --e2e-runs 0 --json >/dev/null \
                2>"$work/tune.err"; then
            printf '%-22s %s\n' "$name" "ttdb tune failed: $(tail -1 "$work/tune.err" | cut -c1-120)"
            continue
        fi
        tune_s=$(( $(date +%s) - start ))
        sleep $(( cooldown > 60 ? 0 : 60 - cooldown ))
    else
        tune_s=0
    fi
    dbargs=()
    [[ -f $db ]] && dbargs=(--db "$db")
    err=$work/stderr
    # rounds alternate ttdb and onnxruntime, so a slow spell of the machine hits both
    refused=
    for ((round = 1; round <= rounds; round++)); do
        sleep "$cooldown"
        if ! timed "$work/run$round.json" "$work/ttdb_dies" $ttdb "${dbargs[@]}" run "$m" --layout "$layout" --layout-plan "$plan" \
                --deterministic-inputs --repeat "$repeat" --threads "$threads" --json -o "$work" 2>"$err"; then
            refused=1
            break
        fi
        sleep "$cooldown"
        if ! timed "$work/ort$round" "$work/ort_dies" python3 benches/ort_model.py "$m" "$threads"; then
            refused=1
            break
        fi
        cut -d' ' -f1 "$work/ort$round" >>"$work/ort"
    done
    if [[ -n $refused ]]; then
        printf '%-22s %s\n' "$name" "ttdb run or onnxruntime failed: $(tail -1 "$err" | cut -c1-120)"
        continue
    fi
    python3 -c '
import json, statistics, sys
name, tune_s, work, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ort = statistics.median(float(l) for l in open(f"{work}/ort"))
runs = sorted((json.load(open(f"{work}/run{k}.json")) for k in range(1, rounds + 1)),
              key=lambda r: r["repeat"]["median_ms"])
r = runs[(len(runs) - 1) // 2]  # the median round (the lower one of an even count)
t, m = r["repeat"], r["memory"]
mib = lambda b: b / 2**20
med, p90, tuned, glue, share = t["median_ms"], t["p90_ms"], t["anchored_ms"], t["glue_ms"], t["glue_share"]
def dies(side):
    seen = sorted(set(open(f"{work}/{side}_dies").read().split()))
    return seen[0] if len(seen) == 1 else "mix"
td, od = dies("ttdb"), dies("ort")
arena, inter = mib(m["arena_bytes"]), mib(m["intermediates_bytes"])
print(f"{name:<22} {med:>9.2f} {p90:>9.2f} {tuned:>10.2f} {glue:>9.2f} {100*share:>5.1f}% "
      f"{arena:>6.1f}/{inter:<7.1f} {ort:>10.2f} {ort/med:>7.2f}x {tune_s:>7} {td:>5}/{od}")' "$name" "$tune_s" "$work" "$rounds" |
        tee -a "$ratios_file"
done
# The bar of issue 31: the geomean of onnxruntime / ttdb, and the lowest model.
python3 - "$ratios_file" <<'PY'
import math, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
ratios = [(float(r[-3].rstrip("x")), r[0]) for r in rows]
if ratios:
    geo = math.exp(sum(math.log(x) for x, _ in ratios) / len(ratios))
    low = min(ratios)
    print(f"geomean ort/ttdb {geo:.3f}x over {len(ratios)} models; lowest {low[0]:.2f}x ({low[1]})")
PY
