# Session 24: FA3's order with the values computed under a wgmma fenced at its retire (fa_cap_fence.py)
# against the same schedule unfenced (fa_cap.py) and the shipped fa_opt, checked then timed beside cuDNN,
# then Nsight's instruction-level samples of the fenced kernel.
set -u
D=bench/results/h200/fa_variants
python $D/gen_fence.py $D/fa_cap.py $D/fa_cap_fence.py  # byte for byte the kernel timed in call 1
python bench/gpu/codegen_fa_ablate.py --kernels $D/fa_cap_fence.py $D/fa_cap.py $D/fa_opt_s23.py \
  --kernel-checks --repeats 2 --out $OUT > $OUT/log_ablate.txt 2>&1; echo "ablate rc $?"
tail -12 $OUT/log_ablate.txt
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu | head -1)
for k in fa_cap_fence; do
  $NCU --clock-control none --kernel-name twill_fa_fwd_kernel --launch-skip 1 --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight -o /tmp/r_$k \
    python bench/gpu/ncu_fa.py $D/$k.py > $OUT/log_ncu_$k.txt 2>&1; echo "rc $k $?"
  tail -3 $OUT/log_ncu_$k.txt
  $NCU -i /tmp/r_$k.ncu-rep --page details --csv > $OUT/ncu_${k}_details.csv
  $NCU -i /tmp/r_$k.ncu-rep --page source --csv --print-source sass | gzip > $OUT/ncu_${k}_source.csv.gz
done
python bench/gpu/ncu_summary.py $D/ncu_fa_cap $OUT/ncu_fa_cap_fence
