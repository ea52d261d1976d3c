# Session 24, second call: P.V retired where its result is first read (late_retire.py), one and two K/V
# slots, against fa_cap and the shipped fa_opt; checked, timed beside cuDNN; Nsight on the two-slot kernel.
set -u
D=bench/results/h200/fa_variants
python bench/gpu/codegen_fa_ablate.py --kernels $D/fa_cap_late.py $D/fa_cap_rings2_late.py $D/fa_cap.py $D/fa_opt_s23.py \
  --kernel-checks --repeats 2 --out $OUT > $OUT/log_ablate.txt 2>&1; echo "ablate rc $?"
grep -v "check .*: ok" $OUT/log_ablate.txt | tail -25
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu | head -1)
for k in fa_cap_rings2_late; do
  $NCU --clock-control none --kernel-name twill_fa_fwd_kernel --launch-skip 1 --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight -o /tmp/r_$k \
    python bench/gpu/ncu_fa.py $D/$k.py > $OUT/log_ncu_$k.txt 2>&1; echo "rc $k $?"
  tail -2 $OUT/log_ncu_$k.txt
  $NCU -i /tmp/r_$k.ncu-rep --page details --csv > $OUT/ncu_${k}_details.csv
  $NCU -i /tmp/r_$k.ncu-rep --page source --csv --print-source sass | gzip > $OUT/ncu_${k}_source.csv.gz
done
python bench/gpu/ncu_summary.py $D/ncu_fa_cap $OUT/ncu_fa_cap_rings2_late
