#!/usr/bin/env bash
# Two (or more) ttdb binaries timing the same kernels, side by side in one run: for every
# workload of a database, each binary's `ttdb verify` in turn, ROUNDS rounds, then per
# binary the median kernel time of each workload and the geomean ratio to the first binary.
# For changes to codegen or the kernel runtime, where only the binary differs.
#
#   benches/verify_vs.sh DB ROUNDS BIN_A BIN_B [BIN_C ...]
#   e.g. benches/verify_vs.sh /tmp/mb.db 3 /tmp/ttdb.old target/release/ttdb
set -euo pipefail
db=$1 rounds=$2
shift 2
bins=("$@")
[ "${#bins[@]}" -ge 2 ] || { echo "usage: $0 DB ROUNDS BIN_A BIN_B [BIN...]" >&2; exit 2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
workloads=$("${bins[0]}" --db "$db" workloads --json | grep -o "\"signature\":\"[0-9a-f]*\"" | grep -o "[0-9a-f]\{12,\}" | sort -u)
total=$(echo "$workloads" | wc -w) done_n=0
for w in $workloads; do
  done_n=$((done_n + 1))
  printf '\rworkload %d/%d (%s)' "$done_n" "$total" "${w:0:12}" >&2
  for r in $(seq "$rounds"); do
    for i in "${!bins[@]}"; do
      ms=$("${bins[$i]}" --db "$db" verify --workload "${w:0:12}" --no-naive --dry-run --peak 1 --json 2>/dev/null \
        | grep -o "\"tuned_ms\":[0-9.e+-]*" | head -1 | grep -o '[0-9.e+-]*$' || true)
      [ -n "$ms" ] && echo "$w $i $ms" >>"$out"
    done
  done
done
printf '\n' >&2
awk -v n="${#bins[@]}" '
  { t[$1, $2, ++c[$1, $2]] = $3; if (!($1 in w)) { w[$1] = 1; order[++nw] = $1 } }
  function median(k, i,   m, a, j, x) {
    m = c[k, i]
    for (j = 1; j <= m; j++) a[j] = t[k, i, j]
    for (j = 2; j <= m; j++) { x = a[j]; for (y = j - 1; y >= 1 && a[y] > x; y--) a[y + 1] = a[y]; a[y + 1] = x }
    return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
  }
  END {
    printf "%-14s", "workload"; for (i = 0; i < n; i++) printf " %10s", "bin" i " ms"; printf "\n"
    for (o = 1; o <= nw; o++) {
      k = order[o]
      ok = 1; for (i = 0; i < n; i++) if (!c[k, i]) ok = 0
      if (!ok) continue
      printf "%-14s", substr(k, 1, 12)
      for (i = 0; i < n; i++) { m[i] = median(k, i); printf " %10.4f", m[i]; s[i] += m[i] }
      for (i = 1; i < n; i++) lr[i] += log(m[0] / m[i])
      cnt++; printf "\n"
    }
    for (i = 1; i < n; i++)
      printf "bin%d vs bin0: geomean speedup %.3f over %d workloads; kernel sum %.3f ms vs %.3f ms\n", i, exp(lr[i] / cnt), cnt, s[i], s[0]
  }' "$out"
for i in "${!bins[@]}"; do echo "bin$i = ${bins[$i]}"; done
