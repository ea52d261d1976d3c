#!/usr/bin/env bash
# Run one half of the generalization suite on a lent many-core machine (issue 16, session 72).
#
# Why: a half takes 50-100 minutes on the 2-core development machine, one case at a time; on a 16-core machine,
# eight cases at once (two CP-SAT workers each) take about 8 minutes. The rows are the same: every phase of the
# search is budgeted in CP-SAT's deterministic work, so a case's II, bound and status come out the same on either
# machine (checked in docs/benchmarks_notes.md, session 72), and the work it spent too on most rows (session 73:
# CP-SAT's two-worker interleaved search moves a few rows' work in the last digits from run to run).
#
# Prepare once, on the development machine, in the repository root (both folders are ignored):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux2014_x86_64 \
#       -d .whl ortools==9.15.6755 protobuf==6.33.6 immutabledict
#   cp -r ../shared/ddg .ddg        # the shared graphs, which the suite reads from ../shared/ddg
# then run on the lent machine, carrying .whl and .ddg:
#   bash bench/suite/lent.sh tuned|fresh [JOBS] [IDS] [SECONDS]
# IDS: comma-separated case ids (default: every case of the half); SECONDS: the run's cap (default 560, inside the
# lent machine's 600-s call). The half's JSON is copied to $OUT (the lent machine's return folder) when it is set.
set -euo pipefail
half=${1:?usage: lent.sh tuned|fresh [jobs] [ids] [seconds]}
jobs=${2:-8}
only=${3:-}
cap=${4:-560}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
if [ -d .ddg ] && [ ! -d ../shared/ddg ]; then mkdir -p ../shared && cp -r .ddg ../shared/ddg; fi
status=0
timeout "$cap" python3 bench/suite/run.py --half "$half" --time-limit 900 --work-limit 30 --workers 2 --jobs "$jobs" \
    --redo --no-page ${only:+--only "$only"} || status=$?
if [ -n "${OUT:-}" ]; then cp "bench/results/suite_$half.json" "$OUT/"; fi
exit "$status"
