# bench/scale/run's plot: throughput and memory per session against N, coagent and the
# reference's SDK (gnuplot -e "data='…/scale.dat'; out='…/scale.png'").
set terminal pngcairo size 1200,500
set output out
set multiplot layout 1,2
set logscale xy
set grid
set key top left
set xlabel "concurrent sessions N"
set ylabel "prompts settled per CPU-second"
set title "Throughput"
plot data using 1:2 with linespoints title "coagent, 1 thread", \
     data using 1:3 with linespoints title "coagent, 2 threads", \
     data using 1:4 with linespoints title "reference SDK (Node.js)", \
     data using 1:9 with linespoints dashtype 2 title "floor (bare streams, no agent)"
set ylabel "heap KiB per session"
set title "Memory per session"
plot data using 1:5 with linespoints title "coagent, streaming", \
     data using 1:6 with linespoints title "reference SDK, streaming", \
     data using 1:7 with linespoints title "coagent, parked", \
     data using 1:8 with linespoints title "reference SDK, parked", \
     data using 1:10 with linespoints dashtype 2 title "floor, streaming"
unset multiplot
