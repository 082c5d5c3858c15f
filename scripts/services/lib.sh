# Helpers for scripts/services/NN-*.sh (sourced by scripts/test-all).

# Run a command as root: directly when we are root, else through sudo.
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# Install Debian packages that are missing.
apt_install() {
  local missing=()
  for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  # The package lists once per run, not once per service.
  if [ ! -e "$METALFORM_SERVICES_DIR/apt-updated" ]; then
    as_root apt-get update -qq
    touch "$METALFORM_SERVICES_DIR/apt-updated"
  fi
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# A Python virtualenv for the PyPI tools, reused across runs.
py_env() {
  local venv="${METALFORM_PY_VENV:-$PWD/target/py-venv}"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  echo "$venv"
}

# Register a command that stops a service when the test run ends.
on_stop() {
  printf '%s\n' "$*" >> "$METALFORM_SERVICES_DIR/stop"
}

# A free TCP port on 127.0.0.1 (with the next port free too, for servers that bind PORT+1).
free_port() {
  python3 - <<'PY'
import socket
while True:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]
    t = socket.socket()
    try:
        t.bind(("127.0.0.1", p + 1)); t.close(); s.close(); print(p); break
    except OSError:
        s.close(); t.close()
PY
}

# Wait until a TCP port accepts connections.
wait_port() {
  local port=$1 tries=${2:-100}
  for _ in $(seq "$tries"); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "service on port $port did not come up" >&2
  return 1
}
