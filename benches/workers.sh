#!/usr/bin/env bash
# Distributed measurement: the same tune (ResNet-18's kernels, a fixed trial budget) measured
# by one `ttdb worker` pinned to one core against two workers each pinned to a core of its
# own (taskset), side by side in one run, each on a fresh database of a throwaway
# PostgreSQL cluster. Prints the host, then per setup: wall seconds, trials/s and the tuned
# kernel sum, and the ratio of trials/s; then the queue's own cost per job (claim, hand in,
# notification latency; `cargo bench --bench queue`). The coordinator is not pinned: it
# shares the cores with the workers, as it would on a worker's machine. Outside CI.
#   benches/workers.sh [--trials N] [--repeat R]
set -euo pipefail
cd "$(dirname "$0")/.."
trials=256 repeat=1
while [[ "${1:-}" == --* ]]; do
    case $1 in
        --trials) trials=$2 ;;
        --repeat) repeat=$2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift 2
done
model=../shared/corpus/onnx/torchvision_graph_only/resnet18.onnx
cargo build --release --quiet
ttdb=$PWD/target/release/ttdb

source benches/pg_cluster.sh
stop_workers() { pkill -f "ttdb --db postgres://ttdb@/bench" 2>/dev/null || true; }
bench_cleanup_hooks+=(stop_workers)

echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; resnet18 seeded with its log, $trials trials; $(date -u +%F)"
printf '%-28s %8s %9s %14s\n' setup "wall s" "trials/s" "kernel sum ms"
declare -A rate
for r in $(seq "$repeat"); do
    for n in 1 2; do
        db="postgres://ttdb@/bench_${n}_$r?host=$pg_dir"
        psql "$admin" -q -c "DROP DATABASE IF EXISTS bench_${n}_$r" -c "CREATE DATABASE bench_${n}_$r"
        # The same starting database for both: ResNet-18's own log (the tune's seeds).
        "$ttdb" --db "$db" import ../shared/corpus/ansor/tvm_ansor_bench_nchwc/resnet_18.best.json >/dev/null
        pids=()
        for core in $(seq 0 $((n - 1))); do
            taskset -c "$core" "$ttdb" --db "$db" worker --jobs "${JOBS:-8}" --poll 0.5 2>"$pg_dir/worker_${n}_$core.log" &
            pids+=($!)
        done
        sleep 1
        class=$("$ttdb" --db "$db" workers --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["host_class"])')
        t0=$(date +%s.%N)
        out=$("$ttdb" --db "$db" tune "$model" --trials "$trials" --workers "$class" --e2e-runs 0 --json 2>/dev/null)
        t1=$(date +%s.%N)
        kill -TERM "${pids[@]}"; wait "${pids[@]}" 2>/dev/null || true
        [ -z "${KEEP_LOGS:-}" ] || cp "$pg_dir"/worker_"$n"_*.log "$KEEP_LOGS"/
        sum=$(echo "$out" | python3 -c 'import json,sys; print("%.3f" % json.load(sys.stdin)["kernel_sum_ms"])')
        done_trials=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["trials"])')
        wall=$(echo "$t1 - $t0" | bc -l)
        rate[$n]=$(echo "$done_trials / $wall" | bc -l)
        printf '%-28s %8.1f %9.2f %14s\n' "$n worker(s), 1 core each ($r)" "$wall" "${rate[$n]}" "$sum"
    done
    printf 'trials/s, 2 workers / 1 worker: %.2fx\n' "$(echo "${rate[2]} / ${rate[1]}" | bc -l)"
done
cargo bench --quiet --bench queue
