# Session 63, second lowering: P read in place by the P·V wgmma (SS) instead of loaded into registers; and the
# default main job's schedule (one tile, h100, II 2439 optimal), which hands P and alpha to a P·V group.
set -u
D=bench/results/h200/handoff
PYTHONPATH=. python bench/gpu/codegen_fa.py --kernels $D/fa_handoff_ss.py $D/fa_onetile_h100.py $D/fa_opt.py \
  --out $OUT --timeout 240 2>&1 | tail -30
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu | head -1)
n=fa_handoff_ss
$NCU --clock-control none --kernel-name twill_fa_fwd_kernel --launch-skip 1 --launch-count 1 \
  --section WarpStateStats --section SourceCounters --section SpeedOfLight -o /tmp/r_$n \
  python bench/gpu/ncu_fa.py $D/$n.py > $OUT/log_ncu_$n.txt 2>&1; echo "rc $n $?"
tail -2 $OUT/log_ncu_$n.txt
$NCU -i /tmp/r_$n.ncu-rep --page details --csv > $OUT/ncu_${n}_details.csv
$NCU -i /tmp/r_$n.ncu-rep --page source --csv --print-source sass | gzip > $OUT/ncu_${n}_source.csv.gz
python bench/gpu/ncu_summary.py $D/ncu/ncu_fa_opt $OUT/ncu_$n
