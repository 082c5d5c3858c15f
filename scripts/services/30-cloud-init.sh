# Debian cloud-init, the real checker of rendered user_data (DESIGN.md §9: `cloud-init schema
# --config-file F`), plus curl (the payload's bootstrap enrolls with it), openssl (checks the
# deploy user's password hash) and sudo (`visudo -c` checks the deploy user's sudo rule), for
# tests/cloudinit_services.rs. Sourced by scripts/test-all; exports METALFORM_CLOUD_INIT (the
# cloud-init executable).
apt_install cloud-init curl openssl sudo
METALFORM_CLOUD_INIT="$(command -v cloud-init)" || {
  echo "cloud-init did not install" >&2
  return 1
}
"$METALFORM_CLOUD_INIT" --version >&2 || return 1
export METALFORM_CLOUD_INIT
