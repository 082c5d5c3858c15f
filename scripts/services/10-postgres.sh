# PostgreSQL for the store suites (DESIGN.md §9): Debian `postgresql`, a throwaway cluster
# under $METALFORM_SERVICES_DIR (initdb + pg_ctl as the postgres user, socket in the data dir,
# a free port), with TLS on: a private CA and a server certificate for 127.0.0.1/localhost made
# with openssl (issue 16: PostgreSQL over TLS up to verify-full). Exports
# METALFORM_TEST_POSTGRES_URL (a superuser URL; tests create their own databases in it) and
# METALFORM_TEST_POSTGRES_CA (the CA's PEM). Sourced by scripts/test-all after lib.sh.
apt_install postgresql openssl
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
pg_tls="$pg_dir/tls"
mkdir -p "$pg_tls"
(
  cd "$pg_tls" &&
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem \
    -days 2 -subj "/CN=metalform test postgres CA" &&
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout server.key -out server.csr \
    -subj "/CN=localhost" &&
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >ext.cnf &&
  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem \
    -days 2 -extfile ext.cnf
) >"$pg_dir/tls.log" 2>&1 || { cat "$pg_dir/tls.log" >&2; return 1; }
chown -R postgres:postgres "$pg_tls" 2>/dev/null || true
chmod 600 "$pg_tls/server.key"
chmod 644 "$pg_tls/ca.pem"
as_postgres "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/server.log" -w \
  -o "-c listen_addresses=127.0.0.1 -p $pg_port -k $pg_dir -c max_connections=200 -c fsync=off -c ssl=on -c ssl_cert_file=$pg_tls/server.pem -c ssl_key_file=$pg_tls/server.key" start \
  >/dev/null || { cat "$pg_dir/server.log" >&2; return 1; }
on_stop "rm -rf '$pg_dir'"
on_stop "as_postgres '$pg_bin/pg_ctl' -D '$pg_dir/data' -m immediate stop >/dev/null 2>&1"
wait_port "$pg_port"
export METALFORM_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$pg_port/postgres"
export METALFORM_TEST_POSTGRES_CA="$pg_tls/ca.pem"
echo "postgres: $METALFORM_TEST_POSTGRES_URL" >&2
