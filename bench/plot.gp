# SPDX-License-Identifier: Apache-2.0
# plot.gp: the two pictures of docs/benchmarks.md, from lock_bench's plot data.
#   gnuplot -e "results='bench/results'; docs='docs'" bench/plot.gp
# throughput.dat: lockers, then cycles/s per series ("?" = not measured); columns 9-11 are
# dlock's async variant (1, 3, 5 nodes), dashed in the colour of the same nodes' thread series.
# handoff.dat: label, workers, p50 ms, p99 ms per contended run.
if (!exists("results")) results = 'bench/results'
if (!exists("docs")) docs = 'docs'

set terminal pngcairo size 1100,650 font ",11" noenhanced
set datafile missing "?"
set key outside right top
set grid ytics
set style data linespoints

set output docs.'/benchmarks-throughput.png'
set title "Uncontended lock + unlock cycles/s vs concurrent lockers (one run, same servers)"
set xlabel "concurrent lockers (each on its own key)"
set ylabel "cycles/s (log scale)"
set logscale xy
set xtics ("1" 1, "8" 8, "64" 64)
set xrange [0.8:80]
plot for [i=2:8] results.'/throughput.dat' using 1:i title columnheader(i) lw 2 pt 7, \
     for [i=9:11] results.'/throughput.dat' using 1:i title columnheader(i) lw 2 pt 5 dt 2 lt (i-6)

unset logscale
unset xtics
set xrange [*:*]
set output docs.'/benchmarks-handoff.png'
set title "Handoff latency: release sent -> next (already waiting) holder acquired, holding ~1 ms"
set ylabel "ms (log scale)"
set xlabel ""
set logscale y
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set xtics rotate by 40 right font ",9"
set autoscale xfix
set offsets 0.6, 0.6, 0, 0
set key inside left top
set rmargin 3
set bmargin 13
set lmargin 16
plot results.'/handoff.dat' using 3:xtic(1) title "p50", '' using 4 title "p99"
