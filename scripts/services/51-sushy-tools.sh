# sushy-tools (PyPI), the reference Redfish BMC (DESIGN.md §9): `sushy-emulator` with the fake
# systems driver and the `vmedia` feature set, Basic auth from a bcrypt htpasswd file, state in
# a fresh directory. Also makes `sushy-static` available for the vendor mockup trees in
# tests/fixtures/redfish/mockups/. Sourced by scripts/test-all; exports
# METALFORM_TEST_SUSHY_URL, METALFORM_TEST_SUSHY_USER, METALFORM_TEST_SUSHY_PASSWORD,
# METALFORM_TEST_SUSHY_SYSTEMS (the fake systems' ids, one per test) and METALFORM_SUSHY_STATIC.
sushy_venv="$(py_env)"
[ -x "$sushy_venv/bin/sushy-emulator" ] || "$sushy_venv/bin/pip" install -q sushy-tools
sushy_dir="$METALFORM_SERVICES_DIR/sushy"
mkdir -p "$sushy_dir/state"
sushy_port="$(free_port)"
export METALFORM_TEST_SUSHY_USER="admin"
export METALFORM_TEST_SUSHY_PASSWORD="sushy-test-password"
# The emulator accepts bcrypt digests only; bcrypt ships with sushy-tools.
"$sushy_venv/bin/python" - "$sushy_dir" <<'PY' || return 1
import bcrypt, os, sys
d = sys.argv[1]
user, password = os.environ["METALFORM_TEST_SUSHY_USER"], os.environ["METALFORM_TEST_SUSHY_PASSWORD"]
with open(os.path.join(d, "htpasswd"), "w") as f:
    f.write("%s:%s\n" % (user, bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()))
systems = ["5f0e4c5a-0000-4000-8000-%012d" % i for i in range(1, 9)]
with open(os.path.join(d, "emulator.conf"), "w") as f:
    f.write("SUSHY_EMULATOR_AUTH_FILE = %r\n" % os.path.join(d, "htpasswd"))
    f.write("SUSHY_EMULATOR_STATE_DIR = %r\n" % os.path.join(d, "state"))
    f.write("SUSHY_EMULATOR_FAKE_DRIVER = True\n")
    f.write("SUSHY_EMULATOR_FAKE_SYSTEMS = %r\n" % [
        {"uuid": u, "name": "sushy-%d" % i, "power_state": "On", "nics": []}
        for i, u in enumerate(systems, 1)])
with open(os.path.join(d, "systems"), "w") as f:
    f.write(",".join(systems))
PY
"$sushy_venv/bin/sushy-emulator" --config "$sushy_dir/emulator.conf" --fake --feature-set vmedia \
  -i 127.0.0.1 -p "$sushy_port" >"$sushy_dir/emulator.log" 2>&1 &
sushy_pid=$!
on_stop "kill $sushy_pid"
wait_port "$sushy_port" 150 || { cat "$sushy_dir/emulator.log" >&2; return 1; }
export METALFORM_TEST_SUSHY_URL="http://127.0.0.1:$sushy_port"
METALFORM_TEST_SUSHY_SYSTEMS="$(cat "$sushy_dir/systems")"
export METALFORM_TEST_SUSHY_SYSTEMS
export METALFORM_SUSHY_STATIC="$sushy_venv/bin/sushy-static"
[ -x "$METALFORM_SUSHY_STATIC" ] || { echo "sushy-static is missing from $sushy_venv" >&2; return 1; }
echo "sushy-emulator: $METALFORM_TEST_SUSHY_URL" >&2
