# Session 74 (issue 21): every kernel twill generates today from the stored schedules, checked and timed in one
# device call per harness, baselines beside them. Kernels written locally by
#   twill codegen bench/codegen/<s>.json -o bench/results/h200/current/<s>.py --fit-registers   (FA)
#   twill codegen bench/results/h200/fa_variants/<s>.json -o ... --fit-registers                (fa_opt2, fa_cap)
#   twill codegen bench/codegen/<s>.json -o bench/results/h200/current/<s>.py                   (GEMM)
# Five of the FA kernels today's emitter writes byte for byte as the ones already kept (fa_opt in h200/handoff/,
# fa_mio in h200/mio/, fa_handoff_copy in h200/handoff_copy/, fa_war in h100/war/, the one-tile kernel in
# h100/onetile/): those files are the ones run.
# Usage on the device: bash bench/results/h200/current/run.sh fa|gemm   (writes $OUT/codegen_fa.json or codegen_gemm.json)
set -u
D=bench/results/h200/current
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
case "$1" in
  fa) PYTHONPATH=. python bench/gpu/codegen_fa.py --kernels $D/fa_*.py bench/results/h200/handoff/fa_opt.py \
        bench/results/h200/mio/fa_mio.py bench/results/h200/handoff_copy/fa_handoff_copy.py \
        bench/results/h100/war/fa_war.py bench/results/h100/onetile/fa_onetile_h100.py \
        --out $OUT --timeout 240 2>&1 | tail -60 ;;
  gemm) PYTHONPATH=. python bench/gpu/codegen_gemm.py --kernels $D/gemm_*.py --out $OUT --timeout 240 2>&1 | tail -40 ;;
esac
