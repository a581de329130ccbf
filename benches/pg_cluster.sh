# Sourced by the benches that need PostgreSQL: starts a throwaway cluster in a temp folder
# (as the postgres user when run as root: initdb refuses root), on a unix socket only, and
# stops it and removes the folder on exit. Sets pg_dir, admin (a URL whose user may create
# databases) and exports TTDB_BENCH_POSTGRES=$admin. A bench's own cleanup can be added to
# bench_cleanup_hooks.
pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
pg_dir=$(mktemp -d /tmp/ttdb-bench-pg.XXXXXX)
as_pg=()
if [ "$(id -u)" -eq 0 ]; then chown postgres: "$pg_dir"; as_pg=(runuser -u postgres --); fi
bench_cleanup_hooks=()
bench_cleanup() {
    for hook in "${bench_cleanup_hooks[@]}"; do $hook; done
    "${as_pg[@]}" "$pg_bin/pg_ctl" -D "$pg_dir/data" -m immediate -s stop >/dev/null 2>&1 || true
    rm -rf "$pg_dir"
}
trap bench_cleanup EXIT
"${as_pg[@]}" "$pg_bin/initdb" -D "$pg_dir/data" -U ttdb --auth=trust -E UTF8 --locale=C >/dev/null
# Durable settings (fsync on): the figures are what a team's server does.
"${as_pg[@]}" "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/log" -w -s \
    -o "-c listen_addresses='' -k $pg_dir" start
admin="postgres://ttdb@/postgres?host=$pg_dir"
export TTDB_BENCH_POSTGRES=$admin
