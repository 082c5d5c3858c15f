# PostgreSQL for the store suites (DESIGN.md §9): Debian `postgresql`, a throwaway cluster
# under $METALFORM_SERVICES_DIR (initdb + pg_ctl as the postgres user, socket in the data dir,
# a free port). Exports METALFORM_TEST_POSTGRES_URL (a superuser URL; tests create their own
# databases in it). Sourced by scripts/test-all after lib.sh.
apt_install postgresql
pg_bin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
# Its own temp dir (not under the services dir, which is private to root): the server runs as
# the postgres user and must reach its data directory and socket.
pg_dir="$(mktemp -d /tmp/metalform-pg.XXXXXX)"
chown postgres:postgres "$pg_dir" 2>/dev/null || true
chmod 700 "$pg_dir"
pg_port="$(free_port)"
as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
as_postgres "$pg_bin/initdb" -D "$pg_dir/data" -U postgres -A trust >"$pg_dir/initdb.log" 2>&1 \
  || { cat "$pg_dir/initdb.log" >&2; return 1; }
as_postgres "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/server.log" -w \
  -o "-c listen_addresses=127.0.0.1 -p $pg_port -k $pg_dir -c max_connections=200 -c fsync=off" start \
  >/dev/null || { cat "$pg_dir/server.log" >&2; return 1; }
on_stop "rm -rf '$pg_dir'"
on_stop "as_postgres '$pg_bin/pg_ctl' -D '$pg_dir/data' -m immediate stop >/dev/null 2>&1"
wait_port "$pg_port"
export METALFORM_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$pg_port/postgres"
echo "postgres: $METALFORM_TEST_POSTGRES_URL" >&2
