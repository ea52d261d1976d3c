#!/usr/bin/env bash
# Issue 21, session 70: the softmax steps beside a partner that issues 16 SS wgmmas and waits them out (wait_group 0)
# against one that keeps a group in flight (beside_wgmma_ss), in one call (bench/gpu/fa_consumer.cu ... waiting).
set -euo pipefail
python bench/gpu/run_suite.py --out "$OUT/suite" --only fa_consumer --build-only > "$OUT/log.txt" 2>&1
timeout 300 bench/gpu/build/fa_consumer "$OUT/fa_consumer_waiting.json" waiting > /dev/null
python3 - "$OUT/fa_consumer_waiting.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["records"]:
    if r.get("kind") == "step":
        print(r["step"], r["mode"], r["ok"], round(r.get("cycles", -1), 1),
              round(r.get("partner_flops_per_clk", {}).get("median", 0)))
PY
