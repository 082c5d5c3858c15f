# python-libmaas (PyPI, unmodified) in the project's venv, for tests/sim_python.rs.
# Sourced by scripts/test-all; exports METALFORM_LIBMAAS_PYTHON (the venv's python).
METALFORM_LIBMAAS_VERSION=0.6.8
venv="$(py_env)"
if ! "$venv/bin/python" -c "import maas.client" >/dev/null 2>&1; then
  "$venv/bin/pip" install --quiet "python-libmaas==$METALFORM_LIBMAAS_VERSION"
fi
"$venv/bin/python" -c "import maas.client" || {
  echo "python-libmaas did not install into $venv" >&2
  return 1
}
export METALFORM_LIBMAAS_PYTHON="$venv/bin/python"
