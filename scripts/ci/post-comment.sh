#!/usr/bin/env bash
# Post the fleet report as the pull request's one metalform comment (docs/pr-workflow.md):
# the comment that starts with the marker is updated in place; there is never a second one
# (leftovers of an earlier race are deleted). Uses the GitHub CLI (`gh api`).
#
# Environment: REPO (owner/name), PR_NUMBER, BODY_FILE (the comment, starting with the
# marker), GH_TOKEN for gh.
set -euo pipefail

: "${REPO:?REPO (owner/name) is required}"
: "${PR_NUMBER:?PR_NUMBER is required}"
: "${BODY_FILE:?BODY_FILE is required}"
MARKER='<!-- metalform-fleet-plan -->'

if [ "$(head -n 1 "$BODY_FILE")" != "$MARKER" ]; then
  echo "post-comment: $BODY_FILE does not start with $MARKER" >&2
  exit 1
fi

# Our comments, oldest first (every page).
mapfile -t ours < <(gh api --paginate "repos/$REPO/issues/$PR_NUMBER/comments" \
  --jq ".[] | select(.body | startswith(\"$MARKER\")) | .id")

if [ "${#ours[@]}" -eq 0 ]; then
  gh api -X POST "repos/$REPO/issues/$PR_NUMBER/comments" -F "body=@$BODY_FILE" --jq .html_url
else
  gh api -X PATCH "repos/$REPO/issues/comments/${ours[0]}" -F "body=@$BODY_FILE" --jq .html_url
  for extra in "${ours[@]:1}"; do
    gh api -X DELETE "repos/$REPO/issues/comments/$extra" >/dev/null
  done
fi
