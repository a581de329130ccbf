#!/usr/bin/env bash
# The store at scale, SQLite and PostgreSQL side by side in one run (a throwaway cluster,
# fsync on): import records/s of a 1,000,000-record log, and `ttdb match resnet50.onnx`
# latency against a database of the corpus plus 1,000,000 records. Outside CI (minutes).
#   benches/store_scale.sh   (TTDB_BENCH_RECORDS, TTDB_BENCH_RUNS as for the benches)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
source benches/pg_cluster.sh
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; PostgreSQL $("$pg_bin/postgres" --version | awk '{print $3}'), on a unix socket; $(date -u +%F)"
cargo bench --quiet --bench import
cargo bench --quiet --bench matching
