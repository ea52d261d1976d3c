#!/usr/bin/env bash
# Issue 21, session 70: two different softmax steps at once in two warpgroups (bench/gpu/fa_consumer.cu, cross_kernel),
# alone and beside a third warpgroup streaming wgmmas. One device call; writes $OUT/fa_consumer_cross.json.
set -euo pipefail
python bench/gpu/run_suite.py --out "$OUT/suite" --only fa_consumer --build-only > "$OUT/log.txt" 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv >> "$OUT/log.txt"
timeout 300 bench/gpu/build/fa_consumer "$OUT/fa_consumer_cross.json" cross | cut -c1-400 | tee -a "$OUT/log.txt"
