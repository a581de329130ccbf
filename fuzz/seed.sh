#!/usr/bin/env bash
# Builds the fuzz seed corpus into fuzz/seeds/ (git-ignored) from the shared corpus:
#   seeds/bundle_read/  small bundles `ttdb bundle export` writes from a database of
#                       ../shared/corpus/ansor/tvm_ansor_bench_nchwc: one per op class,
#                       single workloads, all records; plain, zstd, signed, merged;
#   seeds/ansor_line/   real log lines, a few from every corpus log (every record
#                       generation, key form and step kind), comments and blanks.
# Re-running replaces the seeds; the fuzzers' own corpora (fuzz/corpus/) are kept.
set -euo pipefail
cd "$(dirname "$0")/.."
corpus=../shared/corpus/ansor
[ -d "$corpus/tvm_ansor_bench_nchwc" ] || { echo "missing $corpus (check ttdb out beside shared/)" >&2; exit 1; }
cargo build --release --quiet
ttdb="$PWD/target/release/ttdb"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
db="$work/seed.db"
out=fuzz/seeds/bundle_read
rm -rf fuzz/seeds
mkdir -p "$out" fuzz/seeds/ansor_line

"$ttdb" --db "$db" import "$corpus/tvm_ansor_bench_nchwc" >/dev/null
"$ttdb" --db "$db" key generate -o "$work/key" >/dev/null
export="$ttdb --db $db bundle export --creator fuzz --description seed"

# One bundle per op class (1-146 records), every other one compressed.
n=0
for class in $("$ttdb" --db "$db" workloads --json | python3 -c '
import json, sys
print("\n".join(sorted({w["op_class"] for w in json.load(sys.stdin)})))'); do
    flag=""; [ $((n % 2)) = 1 ] && flag="--compress"
    $export --class "$class" $flag -o "$out/class-$n.ttdb" >/dev/null
    n=$((n + 1))
done
# Single-workload bundles: the smallest inputs, the fastest to mutate.
for sig in $("$ttdb" --db "$db" workloads --json | python3 -c '
import json, sys
print("\n".join(sorted(w["signature"][:12] for w in json.load(sys.stdin))[::40]))'); do
    $export --workload "$sig" -o "$out/one-$sig.ttdb" >/dev/null
    $export --workload "$sig" --compress -o "$out/one-$sig.zst.ttdb" >/dev/null
    $export --workload "$sig" --sign "$work/key" -o "$out/one-$sig.signed.ttdb" >/dev/null
done
"$ttdb" --db "$db" bundle merge "$out/class-0.ttdb" "$out/class-3.ttdb" -o "$out/merged.ttdb" >/dev/null
# The fuzzer runs with -max_len=65536 (README.md): the big classes would only be cut.
find "$out" -size +64k -delete

# Log lines: the first three and the last of every corpus log, one file each.
python3 - "$corpus" fuzz/seeds/ansor_line <<'PY'
import hashlib, os, sys
corpus, out = sys.argv[1], sys.argv[2]
lines = {b"", b"# a comment", b" {\"i\": 1}"}
for d in sorted(os.listdir(corpus)):
    for f in sorted(os.listdir(os.path.join(corpus, d))):
        with open(os.path.join(corpus, d, f), "rb") as fh:
            ls = fh.read().split(b"\n")
        ls = [l for l in ls if l]
        lines.update(ls[:3] + ls[-1:])
for l in lines:
    with open(os.path.join(out, hashlib.sha1(l).hexdigest()), "wb") as fh:
        fh.write(l)
PY
echo "seeds: $(ls "$out" | wc -l) bundles ($(du -sh "$out" | cut -f1)), $(ls fuzz/seeds/ansor_line | wc -l) lines"
