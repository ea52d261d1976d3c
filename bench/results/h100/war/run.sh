# Session 69: the optimum of bench/codegen/h200_warpgroup_war.toml on bench/codegen/bodies/fa_war.json
# (bench/codegen/fa_war.json, II 2661 >= 2654), lowered with --fit-registers, timed beside fa_opt and fa_mio in one
# call; then Nsight Compute of the new kernel (fa_opt's and fa_mio's profiles on the same H100: ../mio/).
set -u
PYTHONPATH=. python bench/gpu/codegen_fa.py --kernels bench/results/h100/war/fa_war.py \
  bench/results/h200/handoff/fa_opt.py bench/results/h200/mio/fa_mio.py --out $OUT --timeout 240 2>&1 | tail -30
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu | head -1)
n=fa_war
$NCU --clock-control none --kernel-name twill_fa_fwd_kernel --launch-skip 1 --launch-count 1 \
  --section WarpStateStats --section SourceCounters --section SpeedOfLight -o /tmp/r_$n \
  python bench/gpu/ncu_fa.py bench/results/h100/war/$n.py > $OUT/log_ncu_$n.txt 2>&1; echo "rc $n $?"
tail -2 $OUT/log_ncu_$n.txt
$NCU -i /tmp/r_$n.ncu-rep --page details --csv > $OUT/ncu_${n}_details.csv
$NCU -i /tmp/r_$n.ncu-rep --page source --csv --print-source sass | gzip > $OUT/ncu_${n}_source.csv.gz
python bench/gpu/ncu_summary.py bench/results/h100/mio/ncu_fa_opt $OUT/ncu_$n
