#!/usr/bin/env bash
# The ablations of issue 31, side by side in one run: each column switches one thing off
# and times the model end to end (`ttdb run --repeat R` on 2 threads, median ms) against the
# default, on this host. Databases are tuned once (`tune MODEL --trials N`) into --db-dir
# and kept, so a second run re-times them; e2e.sh's databases can be reused there (they
# are named <model>.db, tuned with --layout-plan planned: copy them as <model>.planned.db).
#   layout:    the layout transforms left under TopHub's blocking and under the plan (`ttdb
#              kernels --json`), and end to end on databases tuned for each (MODELS_LAYOUT);
#   draws:     the mobilenet family tuned with every tile draw uniform, as TVM draws
#              (`tune --uniform-draws`), against the vector-filling draws (the depthwise
#              convs' innermost split);
#   vmath:     exp, sigmoid, tanh and erf as a libm call per lane (`--vector-math 0`), same
#              database, on efficientnet_b1 and distilbert_like;
#   launch:    idle kernel threads park after every launch (`--pool-spin 0`), so each launch
#              wakes them through the kernel; and default schedules parallel however small
#              their stage (`--serial-small-work 0`); same database, on mobilenet_v3_small.
# Outside CI (about 30 minutes when nothing is tuned yet).
#   [MODELS_LAYOUT="..."] [MODELS_DRAWS="..."] benches/ablations.sh --db-dir D [--trials N] [--repeat R]
set -euo pipefail
cd "$(dirname "$0")/.."
trials=2000 repeat=30 db_dir=
while [[ "${1:-}" == --* ]]; do
    case $1 in
        --trials) trials=$2 ;;
        --repeat) repeat=$2 ;;
        --db-dir) db_dir=$2; mkdir -p "$db_dir" ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift 2
done
[[ -n $db_dir ]] || { echo "--db-dir D is required (tuned databases are kept there)" >&2; exit 2; }
corpus=../shared/corpus/onnx
[[ -d $corpus ]] || { echo "$corpus is missing: the models come from the shared corpus" >&2; exit 1; }
# The models each tuned column tunes (override to shorten a run; empty: that column's
# end-to-end part is skipped).
MODELS_LAYOUT=${MODELS_LAYOUT-"mobilenet_v2 mobilenet_v3_small resnet50"}
MODELS_DRAWS=${MODELS_DRAWS-"mobilenet_v2 mobilenet_v3_small"}
cargo build --release --quiet
ttdb=$PWD/target/release/ttdb
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/out"

model() { # name -> its ONNX file in the corpus
    local d
    for d in torchvision_graph_only torchvision_more transformers; do
        if [[ -f $corpus/$d/$1.onnx ]]; then echo "$corpus/$d/$1.onnx"; return; fi
    done
    echo "no model $1 in $corpus" >&2
    exit 1
}
tuned() { # name plan tag [tune flags...] -> the database, tuned into --db-dir unless there
    local name=$1 plan=$2 tag=$3
    shift 3
    local db=$db_dir/$name.$tag.db
    if [[ ! -f $db ]]; then
        if ! "$ttdb" --db "$db" tune "$(model "$name")" --trials "$trials" --layout-plan "$plan" \
                --e2e-runs 0 "$@" >/dev/null 2>"$work/tune.err"; then
            echo "tuning $name ($tag) failed: $(tail -1 "$work/tune.err")" >&2
            rm -f "$db"
            exit 1
        fi
    fi
    echo "$db"
}
e2e() { # db name plan [global ttdb flags...] -> end-to-end median in ms
    local db=$1 name=$2 plan=$3
    shift 3
    "$ttdb" "$@" --db "$db" run "$(model "$name")" --layout-plan "$plan" --deterministic-inputs \
        --repeat "$repeat" --threads 2 --json -o "$work/out" 2>/dev/null |
        python3 -c 'import json,sys; print("%.3f" % json.load(sys.stdin)["repeat"]["median_ms"])'
}
transforms() { # name -> "tophub planned": layout transforms between ops under each
    "$ttdb" kernels "$(model "$1")" --layout-plan planned --json |
        python3 -c 'import json,sys; p=json.load(sys.stdin)["layout_plan"]; print(p["transforms_tophub"], p["transforms"])'
}
ratio() { python3 -c "print('%.2fx' % ($1 / $2))"; }

echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; ttdb run --repeat $repeat --threads 2, medians; tunes --trials $trials; $(date -u +%F)"
echo
echo "layout: TopHub's blocking against the plan (each tuned for its layout)"
printf '%-20s %12s %12s %12s %12s %9s\n' model "tophub xf" "planned xf" "tophub ms" "planned ms" "speedup"
for name in resnet18 resnet50 mobilenet_v2 mobilenet_v3_small regnet_y_400mf efficientnet_b1 \
            shufflenet_v2_x1_0 convnext_tiny; do
    read -r xt xp < <(transforms "$name")
    if [[ " $MODELS_LAYOUT " == *" $name "* ]]; then
        t=$(e2e "$(tuned "$name" tophub tophub)" "$name" tophub)
        p=$(e2e "$(tuned "$name" planned planned)" "$name" planned)
        printf '%-20s %12s %12s %12.2f %12.2f %9s\n' "$name" "$xt" "$xp" "$t" "$p" "$(ratio "$t" "$p")"
    else
        printf '%-20s %12s %12s %12s %12s %9s\n' "$name" "$xt" "$xp" - - -
    fi
done
echo
echo "draws: uniform tile draws (TVM's) against vector-filling ones, each tuned"
printf '%-20s %12s %12s %9s\n' model "uniform ms" "default ms" "speedup"
for name in $MODELS_DRAWS; do
    u=$(e2e "$(tuned "$name" planned uniform --uniform-draws)" "$name" planned)
    d=$(e2e "$(tuned "$name" planned planned)" "$name" planned)
    printf '%-20s %12.2f %12.2f %9s\n' "$name" "$u" "$d" "$(ratio "$u" "$d")"
done
echo
echo "vmath and launch: one switch off against the default, same database, alternating"
printf '%-20s %-16s %12s %12s %9s\n' model switch "off ms" "on ms" "speedup"
for row in "efficientnet_b1 --vector-math" "distilbert_like --vector-math" \
           "mobilenet_v3_small --pool-spin" "mobilenet_v3_small --serial-small-work"; do
    read -r name flag <<<"$row"
    db=$(tuned "$name" planned planned)
    offs=() ons=()
    for _ in 1 2 3; do
        offs+=("$(e2e "$db" "$name" planned "$flag" 0)")
        ons+=("$(e2e "$db" "$name" planned)")
    done
    off=$(printf '%s\n' "${offs[@]}" | sort -n | sed -n 2p)
    on=$(printf '%s\n' "${ons[@]}" | sort -n | sed -n 2p)
    printf '%-20s %-16s %12.2f %12.2f %9s\n' "$name" "$flag 0" "$off" "$on" "$(ratio "$off" "$on")"
done
