# Session 66: the warpgroup-rate variant's optimum under the hand-off grouping once a hand-off's SMEM copy is charged
# as hold (bench/codegen/fa_handoff_copy.json, II 2383 optimal for that grouping), lowered with --fit-registers,
# timed beside session 63's hand-off kernel and fa_opt; then Nsight Compute of the new kernel.
set -u
D=bench/results/h200
PYTHONPATH=. python bench/gpu/codegen_fa.py --kernels $D/handoff_copy/fa_handoff_copy.py $D/handoff/fa_handoff_ss.py \
  $D/handoff/fa_opt.py --out $OUT --timeout 240 2>&1 | tail -30
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu | head -1)
n=fa_handoff_copy
$NCU --clock-control none --kernel-name twill_fa_fwd_kernel --launch-skip 1 --launch-count 1 \
  --section WarpStateStats --section SourceCounters --section SpeedOfLight -o /tmp/r_$n \
  python bench/gpu/ncu_fa.py $D/handoff_copy/$n.py > $OUT/log_ncu_$n.txt 2>&1; echo "rc $n $?"
tail -2 $OUT/log_ncu_$n.txt
$NCU -i /tmp/r_$n.ncu-rep --page details --csv > $OUT/ncu_${n}_details.csv
$NCU -i /tmp/r_$n.ncu-rep --page source --csv --print-source sass | gzip > $OUT/ncu_${n}_source.csv.gz
python bench/gpu/ncu_summary.py $D/handoff/ncu/ncu_fa_opt $OUT/ncu_$n
