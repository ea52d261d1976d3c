# Session 81 (issue 21): the search's schedule on the measured-rate variant (bench/codegen/h200_warpgroup_rates.toml),
# lowered and timed beside fa_opt and fa_opt2 (FA3's order) in one call. Kernel written locally by
#   twill solve fa_fwd --arch bench/codegen/h200_warpgroup_rates.toml -p subtiles=2 --workers 2 --work-limit 30 \
#       --time-limit 900 --out bench/results/h200/rates81/fa_rates.json
#   twill codegen bench/results/h200/rates81/fa_rates.json -o bench/results/h200/rates81/fa_rates.py --fit-registers
# Usage on the device: bash bench/results/h200/rates81/run.sh   (writes $OUT/codegen_fa.json)
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
PYTHONPATH=. python bench/gpu/codegen_fa.py --kernels bench/results/h200/rates81/fa_rates.py \
  bench/results/h200/handoff/fa_opt.py bench/results/h200/current/fa_opt2.py --out $OUT --timeout 240 2>&1 | tail -40
