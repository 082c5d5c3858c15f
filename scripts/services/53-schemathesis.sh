# schemathesis (PyPI), the OpenAPI contract checker (DESIGN.md §9; tests/api_contract.rs): it
# drives every operation of openapi.yaml against a running daemon and validates each answer
# against the document. Sourced by scripts/test-all; exports METALFORM_SCHEMATHESIS.
METALFORM_SCHEMATHESIS_VERSION=4.32.5
schemathesis_venv="$(py_env)"
[ -x "$schemathesis_venv/bin/schemathesis" ] ||
  "$schemathesis_venv/bin/pip" install --quiet "schemathesis==$METALFORM_SCHEMATHESIS_VERSION"
"$schemathesis_venv/bin/schemathesis" --version >&2 || {
  echo "schemathesis did not install into $schemathesis_venv" >&2
  return 1
}
export METALFORM_SCHEMATHESIS="$schemathesis_venv/bin/schemathesis"
