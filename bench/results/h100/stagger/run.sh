#!/usr/bin/env bash
# Issue 21, session 70: two softmax steps whose starts are staggered by 0-768 cycles each round
# (bench/gpu/fa_consumer.cu, stagger_kernel). One device call; writes $OUT/fa_consumer_stagger.json.
set -euo pipefail
python bench/gpu/run_suite.py --out "$OUT/suite" --only fa_consumer --build-only > "$OUT/log.txt" 2>&1
timeout 300 bench/gpu/build/fa_consumer "$OUT/fa_consumer_stagger.json" stagger > /dev/null
python3 - "$OUT/fa_consumer_stagger.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["records"]:
    if r.get("kind") == "stagger":
        print(r["step"], r["other"], r["delay"], r["ok"], round(r.get("cycles", -1), 1), round(r.get("other_cycles", -1), 1))
PY
