# Session 70: today's main-job schedule (`twill solve fa_fwd --arch h100`, one 128-row tile, II 2439 optimal,
# bench/codegen/fa_onetile_h100.json), which the emitter lowers since it retires before the loop what the steady
# state holds retired; lowered with --fit-registers, checked and timed beside fa_opt and cuDNN, then Nsight's cycles
# and per-line profile. One device call.
set -u
D=bench/results/h100/onetile
PYTHONPATH=. python bench/gpu/codegen_fa.py --kernels $D/fa_onetile_h100.py bench/results/h200/handoff/fa_opt.py \
  --out $OUT --timeout 240 2>&1 | tail -30
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu | head -1)
n=fa_onetile_h100
$NCU --clock-control none --kernel-name twill_fa_fwd_kernel --launch-skip 1 --launch-count 1 --import-source yes \
  --section WarpStateStats --section SourceCounters --section SpeedOfLight -o /tmp/r_$n \
  python bench/gpu/ncu_fa.py $D/$n.py > $OUT/log_ncu_$n.txt 2>&1; echo "rc $n $?"
tail -1 $OUT/log_ncu_$n.txt
$NCU -i /tmp/r_$n.ncu-rep --page details --csv > $OUT/ncu_${n}_details.csv 2> /dev/null
$NCU -i /tmp/r_$n.ncu-rep --page source --csv --print-source cuda,sass 2> /dev/null | gzip > $OUT/ncu_${n}_cuda_sass.csv.gz
ls $OUT
