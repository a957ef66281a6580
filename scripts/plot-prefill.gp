# Figure docs/prefill-h200.png from docs/data/2026-11-29-h200-prefill.csv: gnuplot scripts/plot-prefill.gp (run from the repository root).
set datafile separator ','
set datafile missing ''
set terminal pngcairo size 1100,480 font ',10' noenhanced
set output 'docs/prefill-h200.png'
set multiplot layout 1,2 title 'gpu preset (8 layers) on the H200: hybrid (6 KDA + 2 MLA) vs all-MLA of the same size'
set logscale xy
set grid
set xlabel 'context (tokens)'
set xrange [800:1.4e6]
set ylabel 'prefill time (s)'
set key bottom right
plot 'docs/data/2026-11-29-h200-prefill.csv' using 1:(strcol(3) eq 'one' ? $2 : NaN) with linespoints pt 7 lw 2 title 'hybrid, one pass', \
     '' using 1:(strcol(3) eq 'one' ? NaN : $2) with points pt 6 ps 1.5 lw 2 title 'hybrid, 2 chunks (absorbed extend)', \
     '' using 1:4 with linespoints pt 5 lw 2 title 'all-MLA, one pass', \
     '' using 1:9 with linespoints pt 4 lw 2 title 'hybrid, 64K chunks, training-form extend (fp32)', \
     '' using 1:10 with linespoints pt 9 lw 2 title 'hybrid, 64K chunks, tensor-core MLA (CLMOE_FASTPATH=1)'
set ylabel 'memory (bytes)'
set key top left
plot 'docs/data/2026-11-29-h200-prefill.csv' using 1:7 with linespoints pt 7 lw 2 title 'hybrid: MLA latent cache (2 layers)', \
     '' using 1:8 with linespoints pt 5 lw 2 title 'all-MLA: latent cache (8 layers)', \
     '' using 1:6 with lines lw 2 dt 2 title 'hybrid: KDA states (constant, 3.2 MiB)'
unset multiplot
