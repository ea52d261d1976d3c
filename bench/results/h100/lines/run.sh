# Session 69: where each consumer's cycles go, per line of the generated kernel (each op is one Python line).
# Nsight Compute with the source imported, its source page printed against the Python source (Triton keeps line
# info), for fa_opt, fa_opt2 at 240 registers, fa_mio and fa_war on one H100.
set -u
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu | head -1)
$NCU --version | tail -1
for k in bench/results/h200/handoff/fa_opt bench/results/h200/regs_sweep/ncu/fa_opt2_r240 \
         bench/results/h200/mio/fa_mio bench/results/h100/war/fa_war; do
  n=$(basename $k)
  $NCU --clock-control none --kernel-name twill_fa_fwd_kernel --launch-skip 1 --launch-count 1 --import-source yes \
    --section WarpStateStats --section SourceCounters -o /tmp/r_$n \
    python bench/gpu/ncu_fa.py $k.py > $OUT/log_ncu_$n.txt 2>&1; echo "rc $n $?"
  tail -1 $OUT/log_ncu_$n.txt
  for view in cuda cuda,sass; do
    $NCU -i /tmp/r_$n.ncu-rep --page source --csv --print-source $view 2> $OUT/err_${n}_${view/,/_}.txt \
      | gzip > $OUT/ncu_${n}_${view/,/_}.csv.gz
  done
  ls -la $OUT/ncu_${n}_*; head -c 300 $OUT/err_${n}_cuda.txt
done
zcat $OUT/ncu_fa_opt_cuda.csv.gz | head -5 | cut -c1-300
