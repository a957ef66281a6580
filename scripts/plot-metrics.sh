#!/bin/sh
# Plots clmoe-train metrics CSV files (training loss per step, validation loss where
# evaluated) into one PNG with gnuplot:
#   sh scripts/plot-metrics.sh OUT.png "TITLE" run1/metrics.csv[:LABEL] [run2/metrics.csv[:LABEL] ...]
# gnuplot (Debian: gnuplot-nox) is needed only for this script, which makes the figures in
# docs/; nothing in the build or the tests uses it.
set -eu
if [ $# -lt 3 ]; then
  echo "usage: $0 OUT.png TITLE METRICS.csv[:LABEL]..." >&2
  exit 2
fi
command -v gnuplot > /dev/null || { echo "$0: gnuplot not found (Debian: apt-get install gnuplot-nox)" >&2; exit 1; }
out=$1 title=$2
shift 2
plots=""
for arg in "$@"; do
  file=${arg%%:*}
  label=${arg#*:}
  [ "$label" = "$arg" ] && label=$(basename "$(dirname "$file")")
  [ -r "$file" ] || { echo "$0: cannot read $file" >&2; exit 1; }
  head -n 1 "$file" | grep -q '^step,loss,val_loss' || { echo "$0: $file is not a clmoe-train metrics file" >&2; exit 1; }
  plots="$plots${plots:+, }'$file' using 1:2 with lines lw 1 title '$label train', '$file' using 1:(\$3 == 0 ? NaN : \$3) with linespoints pt 7 ps 0.6 lw 2 title '$label validation'"
done
gnuplot << EOF
set datafile separator ','
set datafile missing ''
set terminal pngcairo size 900,540 font ',11' noenhanced
set output '$out'
set title '$title'
set xlabel 'step'
set ylabel 'cross-entropy (nats per token)'
set key top right
set grid
plot $plots
EOF
echo "wrote $out"
