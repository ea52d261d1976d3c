set -u
which ncu || ls /usr/local/cuda*/bin/ncu
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu | head -1)
for k in fa_cap fa_opt_s23; do
  $NCU --clock-control none --kernel-name twill_fa_fwd_kernel --launch-skip 1 --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight -o /tmp/r_$k \
    python bench/gpu/ncu_fa.py bench/results/h200/fa_variants/$k.py > $OUT/log_ncu_$k.txt 2>&1; echo "rc $k $?"
  tail -3 $OUT/log_ncu_$k.txt
  $NCU -i /tmp/r_$k.ncu-rep --page details --csv > $OUT/ncu_${k}_details.csv
  $NCU -i /tmp/r_$k.ncu-rep --page source --csv --print-source sass | gzip > $OUT/ncu_${k}_source.csv.gz
done
ls -la $OUT
python bench/gpu/ncu_summary.py $OUT/ncu_fa_opt_s23 $OUT/ncu_fa_cap
