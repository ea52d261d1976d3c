# Session 70: the same per-line profile for the four measured FA kernels that had none (fa_cap, the hand-off kernel
# read in place (SS), fa_handoff_copy, the one-tile h100 optimum), with SpeedOfLight for their cycles; one H100 call.
set -u
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu | head -1)
$NCU --version | tail -1
mkdir -p $OUT/p
for k in bench/results/h200/fa_variants/fa_cap bench/results/h200/handoff/fa_handoff_ss \
         bench/results/h200/handoff_copy/fa_handoff_copy bench/results/h200/handoff/fa_onetile_h100; do
  n=$(basename $k)
  $NCU --clock-control none --kernel-name twill_fa_fwd_kernel --launch-skip 1 --launch-count 1 --import-source yes \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight -o /tmp/r_$n \
    python bench/gpu/ncu_fa.py $k.py > $OUT/p/log_ncu_$n.txt 2>&1; echo "rc $n $?"
  tail -1 $OUT/p/log_ncu_$n.txt
  $NCU -i /tmp/r_$n.ncu-rep --page source --csv --print-source cuda,sass 2> /dev/null | gzip > $OUT/p/ncu_${n}_cuda_sass.csv.gz
  $NCU -i /tmp/r_$n.ncu-rep --page details --csv > $OUT/p/ncu_${n}_details.csv 2> /dev/null
done
ls -la $OUT/p
tar -C $OUT -cf $OUT/lines2.tar p && rm -rf $OUT/p
