# Debian xorriso, the builder of task ISOs (DESIGN.md §9), for tests/redfish_iso_services.rs
# and the Redfish suites that mount real images. Sourced by scripts/test-all; exports
# METALFORM_XORRISO (the xorriso executable).
apt_install xorriso
METALFORM_XORRISO="$(command -v xorriso)" || {
  echo "xorriso did not install" >&2
  return 1
}
"$METALFORM_XORRISO" -version 2>/dev/null | head -n 1 >&2 || return 1
export METALFORM_XORRISO
