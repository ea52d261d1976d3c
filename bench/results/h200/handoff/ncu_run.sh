# Nsight Compute on the register hand-off kernel (fa_handoff_g2r192.py: P and alpha through SMEM to the group that
# issues both P·V) beside fa_opt (fa_opt.py, the same emitter), as regs_sweep/ncu/ncu_run.sh (session 63).
set -u
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu | head -1)
D=bench/results/h200/handoff
for n in fa_opt fa_handoff_g2r192; do
  $NCU --clock-control none --kernel-name twill_fa_fwd_kernel --launch-skip 1 --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight -o /tmp/r_$n \
    python bench/gpu/ncu_fa.py $D/$n.py > $OUT/log_ncu_$n.txt 2>&1; echo "rc $n $?"
  tail -3 $OUT/log_ncu_$n.txt
  $NCU -i /tmp/r_$n.ncu-rep --page details --csv > $OUT/ncu_${n}_details.csv
  $NCU -i /tmp/r_$n.ncu-rep --page source --csv --print-source sass | gzip > $OUT/ncu_${n}_source.csv.gz
done
python bench/gpu/ncu_summary.py $OUT/ncu_fa_opt $OUT/ncu_fa_handoff_g2r192
