# Session 68: the free optimum of bench/codegen/h200_warpgroup_mio.toml (bench/codegen/fa_mio.json, II 2524 optimal,
# fa_opt's grouping), lowered with --fit-registers, timed beside fa_opt and session 66's hand-off kernel; then
# Nsight Compute of the new kernel. (fa_consumer.json here: run_suite.py --only fa_consumer, an earlier call.)
set -u
D=bench/results/h200
PYTHONPATH=. python bench/gpu/codegen_fa.py --kernels $D/mio/fa_mio.py $D/handoff/fa_opt.py \
  $D/handoff_copy/fa_handoff_copy.py --out $OUT --timeout 240 2>&1 | tail -30
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu | head -1)
n=fa_mio
$NCU --clock-control none --kernel-name twill_fa_fwd_kernel --launch-skip 1 --launch-count 1 \
  --section WarpStateStats --section SourceCounters --section SpeedOfLight -o /tmp/r_$n \
  python bench/gpu/ncu_fa.py $D/mio/$n.py > $OUT/log_ncu_$n.txt 2>&1; echo "rc $n $?"
tail -2 $OUT/log_ncu_$n.txt
$NCU -i /tmp/r_$n.ncu-rep --page details --csv > $OUT/ncu_${n}_details.csv
$NCU -i /tmp/r_$n.ncu-rep --page source --csv --print-source sass | gzip > $OUT/ncu_${n}_source.csv.gz
python bench/gpu/ncu_summary.py $D/handoff/ncu/ncu_fa_opt $OUT/ncu_$n
