#!/usr/bin/env bash
# The pull-request report of a fleet repository (docs/pr-workflow.md), run by
# .github/workflows/fleet-plan.yml: validate the manifests, diff them against the target
# branch and, when a MAAS snapshot is committed, plan against it — one markdown comment that
# never misleads a reviewer:
#   - invalid manifests still make a comment: the FILE:LINE:COL errors are the comment;
#   - the age of the MAAS snapshot the plan used is shown (and flagged when it is old);
#   - a report over GitHub's comment limit becomes a summary (every left-out row counted)
#     that points at the full report, kept as a workflow artifact — never a silent cut.
#
# Environment (all optional but BASE_REF):
#   BASE_REF        the PR's target branch (github.base_ref); diffed as origin/BASE_REF
#   FLEET_DIR       the fleet directory (default .)
#   OBSERVED        the committed snapshot (default observed/snapshot.json)
#   OUT_DIR         where comment.md, full.md and validate.txt go (default metalform-report)
#   METALFORM       the metalform binary (default: metalform on PATH)
#   MAX_CHARS       the comment limit (default 65536, GitHub's)
#   STALE_HOURS     a snapshot older than this is flagged (default 24)
#   NOW             the current time as Unix seconds (default: now; tests pin it)
#   RUN_URL         this workflow run's page, linked from a summary comment
#   ARTIFACT_NAME   the artifact holding full.md (default metalform-plan)
#   GITHUB_OUTPUT   step outputs: valid, truncated
# Exit: 0 when the report was written (also for invalid manifests: the workflow fails the job
# after posting it); 1 when it could not be (metalform missing, git trouble).
set -euo pipefail

: "${BASE_REF:?BASE_REF (the target branch of the pull request) is required}"
FLEET_DIR="${FLEET_DIR:-.}"
OBSERVED="${OBSERVED:-observed/snapshot.json}"
OUT_DIR="${OUT_DIR:-metalform-report}"
METALFORM="${METALFORM:-metalform}"
MAX_CHARS="${MAX_CHARS:-65536}"
STALE_HOURS="${STALE_HOURS:-24}"
NOW="${NOW:-$(date -u +%s)}"
ARTIFACT_NAME="${ARTIFACT_NAME:-metalform-plan}"
MARKER='<!-- metalform-fleet-plan -->'

command -v "$METALFORM" >/dev/null || {
  echo "fleet-plan: $METALFORM not found" >&2
  exit 1
}
mkdir -p "$OUT_DIR"
full="$OUT_DIR/full.md"
comment="$OUT_DIR/comment.md"

output() {
  if [ -n "${GITHUB_OUTPUT:-}" ]; then echo "$1=$2" >>"$GITHUB_OUTPUT"; fi
}

# `3 h 12 min`, `2 d 4 h`, `45 s`.
human_age() {
  local s=$1
  if [ "$s" -lt 60 ]; then echo "${s} s"
  elif [ "$s" -lt 3600 ]; then echo "$((s / 60)) min"
  elif [ "$s" -lt 86400 ]; then echo "$((s / 3600)) h $((s % 3600 / 60)) min"
  else echo "$((s / 86400)) d $((s % 86400 / 3600)) h"
  fi
}

# The line about the snapshot the plan used.
snapshot_line() {
  local taken epoch age
  taken="$(jq -r '.taken_at // empty' "$OBSERVED" 2>/dev/null || true)"
  if [ -z "$taken" ] || ! epoch="$(date -u -d "$taken" +%s 2>/dev/null)"; then
    echo "> ⚠️ **MAAS snapshot** \`$OBSERVED\` has no readable \`taken_at\`: its age is unknown."
    return
  fi
  age=$((NOW - epoch))
  if [ "$age" -lt 0 ]; then age=0; fi
  if [ "$age" -gt $((STALE_HOURS * 3600)) ]; then
    echo "> ⚠️ **MAAS snapshot taken $taken, $(human_age "$age") before this run** — older than ${STALE_HOURS} h: MAAS may have moved since. Refresh it with \`metalform observe > $OBSERVED\` and push."
  else
    echo "**MAAS snapshot** taken $taken, $(human_age "$age") before this run."
  fi
}

# Everything, uncut: full.md. `$1` is the markdown size cap passed to diff and plan.
report() {
  local cap=$1
  echo "$MARKER"
  echo "### metalform"
  echo
  if [ "$valid" = true ]; then
    local summary
    summary="$(tail -n 1 "$OUT_DIR/validate.txt")"
    echo "✅ manifests valid — ${summary#*: valid — }"
  else
    echo "❌ **manifests invalid**: nothing was diffed or planned. Fix these, then push:"
    echo
    echo '```'
    cat "$OUT_DIR/validate.txt"
    echo '```'
    return
  fi
  echo
  if ! "$METALFORM" diff --fleet "$FLEET_DIR" --base "origin/$BASE_REF" --head HEAD \
    --format markdown --max-bytes "$cap" 2>"$OUT_DIR/diff.err"; then
    echo "❌ **diff failed**:"
    echo '```'
    cat "$OUT_DIR/diff.err"
    echo '```'
  fi
  echo
  if [ -f "$OBSERVED" ]; then
    snapshot_line
    echo
    if ! "$METALFORM" plan --fleet "$FLEET_DIR" --observed "$OBSERVED" \
      --format markdown --max-bytes "$cap" 2>"$OUT_DIR/plan.err"; then
      echo "❌ **plan failed**:"
      echo '```'
      cat "$OUT_DIR/plan.err"
      echo '```'
    fi
  else
    echo "_No MAAS snapshot is committed (\`$OBSERVED\`), so only the desired-state change is shown. To see the plan, commit one: \`metalform observe > $OBSERVED\`._"
  fi
}

chars() { wc -m <"$1" | tr -d ' '; }

# 1. Validate: its report is the comment when the manifests are invalid.
set +e
"$METALFORM" validate --fleet "$FLEET_DIR" >"$OUT_DIR/validate.txt" 2>&1
rc=$?
set -e
if [ "$rc" -eq 0 ]; then valid=true; else valid=false; fi
output valid "$valid"

# 2. The full report; it is the comment when it fits.
report 100000000 >"$full"
truncated=false
if [ "$(chars "$full")" -le "$MAX_CHARS" ]; then
  cp "$full" "$comment"
else
  truncated=true
  # 3. Too long: a summary whose diff and plan share what is left, each counting the rows it
  # leaves out, and where the full report is.
  note="$(printf '\n---\n📦 **The full report is %s characters, over the %s a comment can hold**: this comment is a summary (what it leaves out is counted above). The full report is the artifact `%s` of %s.\n' \
    "$(chars "$full")" "$MAX_CHARS" "$ARTIFACT_NAME" "${RUN_URL:-this workflow run}")"
  # Room for the header and the snapshot line, then half each for the diff and the plan.
  cap=$(((MAX_CHARS - ${#note} - 1500) / 2))
  if [ "$cap" -lt 500 ]; then cap=500; fi
  if [ "$valid" = false ]; then
    # The errors themselves are too long: keep the first ones, whole lines, and count the rest.
    {
      echo "$MARKER"
      echo "### metalform"
      echo
      echo "❌ **manifests invalid**: nothing was diffed or planned. The first errors (all $(grep -c ': error: ' "$OUT_DIR/validate.txt" || true) are in the artifact):"
      echo
      echo '```'
      head -c $((MAX_CHARS - ${#note} - 300)) "$OUT_DIR/validate.txt" | sed '$d'
      echo '```'
    } >"$comment"
  else
    report "$cap" >"$comment"
  fi
  printf '%s\n' "$note" >>"$comment"
fi
output truncated "$truncated"
echo "fleet-plan: valid=$valid truncated=$truncated comment=$(chars "$comment") full=$(chars "$full") characters" >&2
