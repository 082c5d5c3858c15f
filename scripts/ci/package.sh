#!/usr/bin/env bash
# Package a built metalform for the release (.github/workflows/release.yml):
#   OUT/metalform-x86_64-linux.tar.gz holding metalform/bin/metalform, its man pages
#   (share/man/man1), bash/zsh/fish completions and the CI scripts of scripts/ci/
#   (share/metalform/ci), plus OUT/SHA256SUMS.
# Usage: scripts/ci/package.sh BINARY OUT_DIR
set -euo pipefail
binary="${1:?usage: package.sh BINARY OUT_DIR}"
out="${2:?usage: package.sh BINARY OUT_DIR}"
here="$(cd "$(dirname "$0")" && pwd)"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
root="$stage/metalform"
mkdir -p "$root/bin" "$root/share/man/man1" "$root/share/metalform/ci" \
  "$root/share/bash-completion/completions" "$root/share/zsh/site-functions" \
  "$root/share/fish/vendor_completions.d"
install -m 0755 "$binary" "$root/bin/metalform"
"$root/bin/metalform" man --dir "$root/share/man/man1" 2>/dev/null
"$root/bin/metalform" completions bash >"$root/share/bash-completion/completions/metalform"
"$root/bin/metalform" completions zsh >"$root/share/zsh/site-functions/_metalform"
"$root/bin/metalform" completions fish >"$root/share/fish/vendor_completions.d/metalform.fish"
install -m 0755 "$here/fleet-plan.sh" "$here/post-comment.sh" "$root/share/metalform/ci/"
mkdir -p "$out"
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner \
  -czf "$out/metalform-x86_64-linux.tar.gz" metalform
(cd "$out" && sha256sum metalform-x86_64-linux.tar.gz >SHA256SUMS)
echo "packaged $out/metalform-x86_64-linux.tar.gz" >&2
