# Per-turn latency of the peer benchmark's CPU runs (bench/peer/run draws it):
# gnuplot -e "data='latency.dat'; out='latency.png'; turns=1000" bench/peer/latency.gp
# data columns: turn, then floor / coagent / reference in one conversation, then the same in
# 10-turn conversations (new_session every 10 turns); a missing agent is nan.
if (!exists("data")) data = 'latency.dat'
if (!exists("out")) out = 'latency.png'
if (!exists("turns")) turns = 1000
set terminal pngcairo size 1400,1000 font ",11" noenhanced
set output out
set datafile missing "nan"
set logscale y
set grid ytics mytics xtics
set key top left
set xlabel "turn"
set ylabel "prompt -> settled, ms (log scale)"
set multiplot layout 2,1 title sprintf("Per-turn latency, %d turns, coagent-fakellm on loopback (2 shared cores, noisy)", turns)
set title "one conversation: every request carries the whole history"
plot data using 1:4 with points pt 7 ps 0.35 lc rgb "#d95f02" title "reference (pi-coding-agent 0.73.1)", \
     data using 1:3 with points pt 7 ps 0.35 lc rgb "#1b9e77" title "coagent", \
     data using 1:2 with points pt 7 ps 0.35 lc rgb "#7570b3" title "floor (driver + fake server + stand-in agent)"
set title "new_session every 10 turns"
plot data using 1:7 with points pt 7 ps 0.35 lc rgb "#d95f02" title "reference (pi-coding-agent 0.73.1)", \
     data using 1:6 with points pt 7 ps 0.35 lc rgb "#1b9e77" title "coagent", \
     data using 1:5 with points pt 7 ps 0.35 lc rgb "#7570b3" title "floor (driver + fake server + stand-in agent)"
unset multiplot
