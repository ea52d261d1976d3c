#!/usr/bin/env bash
# Issue 21, session 70: FA's generated kernels with clock stamps between the statements of their consumer loops,
# each beside its unstamped original, checked and timed at 1x32x8192 (bench/gpu/stamp_fa.py). One device call:
#   run: bash bench/results/h100/stamps/run.sh     (writes $OUT/stamps_<kernel>.json and $OUT/log.txt)
# The stamped copies were written here by bench/gpu/stamp_kernel.py (fa_opt's consumers raised to 240
# registers, `--regs 240`: at 192 the stamps made ptxas spill).
set -euo pipefail
D=bench/results/h100/stamps
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/log.txt"
python bench/gpu/stamp_fa.py --out "$OUT" \
  bench/results/h200/handoff/fa_opt.py:$D/fa_opt_st.py \
  bench/results/h200/regs_sweep/ncu/fa_opt2_r240.py:$D/fa_opt2_r240_st.py \
  bench/results/h200/mio/fa_mio.py:$D/fa_mio_st.py \
  bench/results/h100/war/fa_war.py:$D/fa_war_st.py \
  bench/results/h100/war/fa_mio_noturns.py:$D/fa_mio_noturns_st.py \
  bench/results/h200/handoff_copy/fa_handoff_copy.py:$D/fa_handoff_copy_st.py \
  bench/results/h200/fa_variants/fa_cap.py:$D/fa_cap_st.py 2>&1 | tee -a "$OUT/log.txt"
