# Session 74 (issue 21): every kernel twill generates today from the stored schedules, checked and timed in one
# device call per harness, baselines beside them. Kernels written locally by
#   twill codegen bench/codegen/<s>.json -o bench/results/h200/current/<s>.py --fit-registers   (FA)
#   twill codegen bench/results/h200/fa_variants/<s>.json -o ... --fit-registers                (fa_opt2, fa_cap)
#   twill codegen bench/codegen/<s>.json -o bench/results/h200/current/<s>.py                   (GEMM)
# Usage on the device: bash bench/results/h200/current/run.sh fa|gemm   (writes $OUT/codegen_fa.json or codegen_gemm.json)
set -u
D=bench/results/h200/current
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
case "$1" in
  fa) PYTHONPATH=. python bench/gpu/codegen_fa.py --kernels $D/fa_*.py --out $OUT --timeout 240 2>&1 | tail -60 ;;
  gemm) PYTHONPATH=. python bench/gpu/codegen_gemm.py --kernels $D/gemm_*.py --out $OUT --timeout 240 2>&1 | tail -40 ;;
esac
