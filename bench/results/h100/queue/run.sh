#!/usr/bin/env bash
# Issue 21, session 70: the tensor core's issue queue (bench/gpu/wgmma_queue.cu), one process per config so that a
# device fault loses only its own record. Writes $OUT/wgmma_queue.jsonl (one record per line) and $OUT/log.txt.
set -uo pipefail
python bench/gpu/run_suite.py --out "$OUT/suite" --only wgmma_queue --build-only > "$OUT/log.txt" 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv >> "$OUT/log.txt"
for partner in 0 1; do for rs in 0 1; do for c in 1 2 3 4 5 6 7 8 10 12 16; do
  out=$(timeout 60 bench/gpu/build/wgmma_queue /dev/null $partner $rs $c 2>&1)
  rc=$?
  line=$(printf '%s\n' "$out" | grep '"issue_queue"' | head -1)
  if [ -n "$line" ]; then printf '%s\n' "$line" >> "$OUT/wgmma_queue.jsonl"
  else printf '{"kind": "issue_queue", "partner": %s, "rs": %s, "count": %s, "ok": false, "rc": %s, "error": "%s"}\n' \
      "$partner" "$rs" "$c" "$rc" "$(printf '%s' "$out" | tail -1 | tr -d '"\\')" >> "$OUT/wgmma_queue.jsonl"; fi
done; done; done
cat "$OUT/wgmma_queue.jsonl" | cut -c1-200
