#!/usr/bin/env bash
# Every [snippet:NAME] ... [end] region of SOURCE must appear verbatim (one
# indent level removed) inside DOC, so the guide only shows code that compiles
# and runs. Usage: check_snippets.sh SOURCE DOC
set -euo pipefail
awk -v docfile="$2" '
BEGIN { while ((getline line < docfile) > 0) doc = doc line "\n"; n = 0; bad = 0 }
/\/\/ \[snippet:/ { match($0, /snippet:[a-z_]+/); name = substr($0, RSTART + 8, RLENGTH - 8); body = ""; inside = 1; next }
/\/\/ \[end\]/ {
  if (inside) {
    n++
    if (index(doc, body) == 0) { printf "snippet %s is not quoted verbatim in %s:\n%s\n", name, docfile, body; bad = 1 }
  }
  inside = 0; next
}
inside { line = $0; sub(/^  /, "", line); body = body line "\n" }
END {
  if (n == 0) { print "no snippets found"; exit 1 }
  if (bad) exit 1
  printf "%d snippets in sync\n", n
}' "$1"
