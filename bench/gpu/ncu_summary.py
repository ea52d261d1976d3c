"""Where a kernel's loop step goes, by SASS instruction, from Nsight Compute's source page; two kernels side by side.

    python bench/gpu/ncu_summary.py bench/results/h200/fa_variants/ncu_fa_opt_s9 \\
        bench/results/h200/fa_variants/ncu_fa_opt2_fixed [--steps 1024]

Each argument is a prefix: PREFIX_details.csv (``ncu -i R --page details --csv``) and PREFIX_source.csv.gz
(``ncu -i R --page source --csv --print-source sass``) of one profile made with ``--section WarpStateStats
--section SourceCounters``. A step's cycles are the SM active cycles over ``--steps`` (waves x loop iterations
per SM); each instruction mnemonic gets the share of them that its warp-state samples have, and the MIO-queue
stalls among those. Samples count every warp of the CTA, so a row is warp time, not the critical path: read the
differences between the kernels, not the rows alone.
"""

from __future__ import annotations

import argparse
import collections
import csv
import gzip
from pathlib import Path

SHOWN = ("MUFU", "FMNMX", "FADD", "FMUL", "FFMA", "F2FP", "SHFL", "HGMMA", "WARPGROUP", "LDL", "STL", "UMOV",
         "BAR", "SYNCS", "BRA", "NOP", "STS", "LDS", "STSM", "LDSM")


def active_cycles(prefix: str) -> float:
    """SM Active Cycles from the details page."""
    with open(f"{prefix}_details.csv") as f:
        for row in csv.reader(f):
            if len(row) > 14 and row[12] == "SM Active Cycles":
                return float(row[14].replace(",", ""))
    raise SystemExit(f"{prefix}_details.csv: no 'SM Active Cycles' (profile with --section SpeedOfLight)")


def source_rows(prefix: str) -> tuple[list[str], list[list[str]]]:
    """The source page's header and its rows, one per SASS instruction."""
    with gzip.open(f"{prefix}_source.csv.gz", "rt") as f:
        rows = list(csv.reader(f))
    return rows[1], [r for r in rows[2:] if len(r) == len(rows[1])]


def samples(prefix: str) -> tuple[collections.Counter, collections.Counter]:
    """Warp-state samples and MIO-queue stalls per instruction mnemonic (before the first dot)."""
    hdr, body = source_rows(prefix)
    src, every, mio = hdr.index("Source"), hdr.index("Warp Stall Sampling (All Samples)"), hdr.index("stall_mio")
    total, queue = collections.Counter(), collections.Counter()
    for r in body:
        words = r[src].split()
        if not words:
            continue
        op = (words[1] if words[0].startswith("@") else words[0]).split(".")[0]
        total[op] += int(r[every].replace(",", "") or 0)
        queue[op] += int(r[mio].replace(",", "") or 0)
    return total, queue


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base")
    ap.add_argument("other")
    ap.add_argument("--steps", type=int, default=1024, help="loop steps per SM (16 waves x 64 KV steps at 1x32x8192)")
    args = ap.parse_args(argv)
    per_step, share = {}, {}
    for prefix in (args.base, args.other):
        total, queue = samples(prefix)
        step = active_cycles(prefix) / args.steps
        n = sum(total.values())
        per_step[prefix] = step
        share[prefix] = {op: (total[op] / n * step, queue[op] / n * step) for op in SHOWN}
    a, b = args.base, args.other
    print(f"cycles per step: {Path(a).name} {per_step[a]:.0f}, {Path(b).name} {per_step[b]:.0f}")
    print("| instruction | " + f"{Path(a).name} | {Path(b).name} | difference | MIO stalls ({Path(a).name}, {Path(b).name}) |")
    print("|---|---|---|---|---|")
    for op in SHOWN:
        (x, qx), (y, qy) = share[a][op], share[b][op]
        print(f"| {op} | {x:.0f} | {y:.0f} | {y - x:+.0f} | {qx:.0f}, {qy:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
