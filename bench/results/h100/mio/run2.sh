# Session 69, second call on the lent H100 (the first, bench/results/h200/mio/run.sh, came on an H100 and timed
# fa_mio beside fa_opt and fa_handoff_copy there: codegen_fa.json here). This call takes the H100's counterpart of
# the H200 mio records (fa_consumer, with the stmatrix-stream modes) and Nsight Compute of fa_opt and
# fa_handoff_copy on the same chip, so that the per-instruction comparison with fa_mio is within one card.
set -u
python3 bench/gpu/run_suite.py --out $OUT --only fa_consumer 2>&1 | tail -5
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu | head -1)
for p in handoff/fa_opt handoff_copy/fa_handoff_copy; do
  n=$(basename $p)
  $NCU --clock-control none --kernel-name twill_fa_fwd_kernel --launch-skip 1 --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight -o /tmp/r_$n \
    python bench/gpu/ncu_fa.py bench/results/h200/$p.py > $OUT/log_ncu_$n.txt 2>&1; echo "rc $n $?"
  tail -2 $OUT/log_ncu_$n.txt
  $NCU -i /tmp/r_$n.ncu-rep --page details --csv > $OUT/ncu_${n}_details.csv
  $NCU -i /tmp/r_$n.ncu-rep --page source --csv --print-source sass | gzip > $OUT/ncu_${n}_source.csv.gz
done
python bench/gpu/ncu_summary.py $OUT/ncu_fa_opt bench/results/h100/mio/ncu_fa_mio
python bench/gpu/ncu_summary.py $OUT/ncu_fa_opt $OUT/ncu_fa_handoff_copy
