# Headless Chromium from Debian for the status pages (DESIGN.md §9; tests/web_chromium.rs):
# `--dump-dom` after the page's script ran, and a screenshot. Sourced by scripts/test-all;
# exports METALFORM_CHROMIUM (the chromium executable).
apt_install chromium
METALFORM_CHROMIUM="$(command -v chromium)" || {
  echo "chromium did not install" >&2
  return 1
}
"$METALFORM_CHROMIUM" --version >&2 || return 1
export METALFORM_CHROMIUM
