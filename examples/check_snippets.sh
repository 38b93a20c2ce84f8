#!/usr/bin/env bash
# Every [snippet:NAME] ... [end] region of each SOURCE must appear verbatim
# (one indent level removed) inside its DOC, so the docs only show code that
# compiles and runs. Usage: check_snippets.sh SOURCE DOC [SOURCE DOC ...]
set -euo pipefail
if (($# == 0 || $# % 2 != 0)); then
  echo "usage: $0 SOURCE DOC [SOURCE DOC ...]" >&2
  exit 2
fi
status=0
while (($# > 0)); do
  awk -v docfile="$2" '
  BEGIN { while ((getline line < docfile) > 0) doc = doc line "\n"; n = 0; bad = 0 }
  /\/\/ \[snippet:/ { match($0, /snippet:[a-z_]+/); name = substr($0, RSTART + 8, RLENGTH - 8); body = ""; inside = 1; next }
  /\/\/ \[end\]/ {
    if (inside) {
      n++
      if (index(doc, body) == 0) { printf "snippet %s of %s is not quoted verbatim in %s:\n%s\n", name, FILENAME, docfile, body; bad = 1 }
    }
    inside = 0; next
  }
  inside { line = $0; sub(/^  /, "", line); body = body line "\n" }
  END {
    if (n == 0) { printf "no snippets found in %s\n", FILENAME; exit 1 }
    if (bad) exit 1
    printf "%s: %d snippets in sync with %s\n", FILENAME, n, docfile
  }' "$1" || status=1
  shift 2
done
exit $status
