# Figure docs/tiles-h200.png from docs/data/2026-12-02-h200-tiles.csv (GEMM and MLA: the warp-group kernels): gnuplot scripts/plot-tiles.gp (run from the repository root).
set datafile separator ','
set terminal pngcairo size 1100,480 font ',10' noenhanced
set output 'docs/tiles-h200.png'
set title "Tile kernels on the H200 against their peers (cuBLAS, PyTorch SDPA, fla chunk_kda): speed as a fraction of the peer's"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set yrange [0:1.7]
set ytics 0.1
set grid ytics
set ylabel "speed / peer's speed (1 = as fast)"
set xtics rotate by -25
set key top left Left reverse maxrows 3 samplen 2
plot 'docs/data/2026-12-02-h200-tiles.csv' using 2:xtic(1) title 'before (2026-11-29; KDA fwd+bwd: portable)', \
     '' using 3 title 'now (2026-12-02; GEMM and MLA: wgmma kernels; GEMM: slowest layout; KDA: copy ring, kept states)', \
     '' using ($0):4 with points pt 2 ps 2 lw 2 lc rgb 'black' title "the issue's target"
