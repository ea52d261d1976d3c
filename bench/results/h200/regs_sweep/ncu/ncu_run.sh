# Nsight Compute on fa_opt (regs_sweep/src/fa_opt.py) and FA3's order at 240 registers (fa_opt2_r240.py, written by
# `twill codegen bench/results/h200/fa_variants/fa_opt2.json --fit-registers`); as fa_variants/ncu_run_s23.sh.
set -u
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu | head -1)
D=bench/results/h200/regs_sweep
for k in src/fa_opt ncu/fa_opt2_r240; do
  n=$(basename $k)
  $NCU --clock-control none --kernel-name twill_fa_fwd_kernel --launch-skip 1 --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight -o /tmp/r_$n \
    python bench/gpu/ncu_fa.py $D/$k.py > $OUT/log_ncu_$n.txt 2>&1; echo "rc $n $?"
  tail -3 $OUT/log_ncu_$n.txt
  $NCU -i /tmp/r_$n.ncu-rep --page details --csv > $OUT/ncu_${n}_details.csv
  $NCU -i /tmp/r_$n.ncu-rep --page source --csv --print-source sass | gzip > $OUT/ncu_${n}_source.csv.gz
done
python bench/gpu/ncu_summary.py $OUT/ncu_fa_opt $OUT/ncu_fa_opt2_r240
