# Session 69, second call: the turn token's cost to FA3's order. fa_war and fa_mio lowered with --no-turns (the
# groups' wgmmas no longer take tensor-core turns in the schedule's order), timed beside the kernels with the token
# and fa_opt in one call.
set -u
D=bench/results/h100/war
PYTHONPATH=. python bench/gpu/codegen_fa.py --kernels $D/fa_war_noturns.py $D/fa_mio_noturns.py $D/fa_war.py \
  bench/results/h200/mio/fa_mio.py bench/results/h200/handoff/fa_opt.py --out $OUT --timeout 300 2>&1 | grep -v "^  check"
