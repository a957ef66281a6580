#!/bin/sh
# Writes the Markdown conformance matrix of clmoe-xcheck --json reports (one file per
# implementation or node), for docs/conformance.md:
#
#   clmoe-xcheck --json pocl.json            # on each node / implementation
#   scripts/conformance-matrix.sh -o matrix.md pocl.json intel.json h200.json
#
# A thin wrapper of `clmoe-xcheck --matrix`. CLMOE_XCHECK names the program (default: the
# clmoe-xcheck found in PATH, else apps/clmoe-xcheck of the current directory).
set -eu
usage() {
  echo "Usage: $0 [-o OUT.md] REPORT.json..."
  echo "Writes the Markdown conformance matrix of clmoe-xcheck --json reports (to OUT.md or stdout)."
}
out=
while [ $# -gt 0 ]; do
  case $1 in
    -o) [ $# -ge 2 ] || { usage >&2; exit 2; }; out=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    -*) echo "$0: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { usage >&2; exit 2; }
xcheck=${CLMOE_XCHECK:-}
if [ -z "$xcheck" ]; then
  if command -v clmoe-xcheck > /dev/null 2>&1; then xcheck=clmoe-xcheck
  elif [ -x apps/clmoe-xcheck ]; then xcheck=apps/clmoe-xcheck
  else echo "$0: clmoe-xcheck not found: set CLMOE_XCHECK or PATH" >&2; exit 1
  fi
fi
if [ -n "$out" ]; then
  "$xcheck" --matrix "$@" > "$out.tmp" || { rm -f "$out.tmp"; exit 1; }
  mv "$out.tmp" "$out"
else
  exec "$xcheck" --matrix "$@"
fi
