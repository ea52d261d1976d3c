"""Where each loop of a kernel waits, line by line, from Nsight Compute's source page (issue 21, session 24).

    python bench/gpu/ncu_waits.py bench/results/h200/fa_variants/ncu_fa_cap --step 3000
    python bench/gpu/ncu_waits.py bench/results/h200/fa_variants/ncu_fa_opt_s23 --step 2720

PREFIX as for ncu_summary.py. A loop is a run of SASS lines that share the execution count which, among counts on
50 lines or more, carries the most samples (the working partitions' steady state); lines more than 200 apart start
a new loop. For each loop, its top lines by warp-state samples, each with its main stall reason, the line
before it (a stall is charged to the next instruction to issue: a barrier wait shows on the line after
``BAR.SYNC``), and ``--step`` x its share of the loop's samples: the cycles per loop step that line's warps spend
there. ``--step`` defaults to SM active cycles over ``--steps``."""

from __future__ import annotations

import argparse
import collections

from ncu_summary import active_cycles, source_rows


def loops(counts: list[int], weights: list[int], gap: int = 200) -> list[tuple[int, int]]:
    """[first, last] line of each loop: runs of the execution count that, among counts on 50 lines or more,
    carries the most samples (the steady state of the partitions that do the work)."""
    lines_of, weight = collections.Counter(counts), collections.Counter()
    for c, w in zip(counts, weights, strict=True):
        weight[c] += w
    common = [c for c in lines_of if lines_of[c] >= 50 and c > 0]
    if not common:
        return []
    best = max(common, key=lambda c: weight[c])
    lines = [k for k, c in enumerate(counts) if c == best]
    out = [[lines[0], lines[0]]]
    for k in lines[1:]:
        if k - out[-1][1] > gap:
            out.append([k, k])
        else:
            out[-1][1] = k
    return [(a, b) for a, b in out]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("prefix")
    ap.add_argument("--step", type=float, help="cycles per loop step (default: SM active cycles / --steps)")
    ap.add_argument("--steps", type=int, default=1024, help="loop steps per SM (16 waves x 64 KV steps at 1x32x8192)")
    ap.add_argument("--top", type=int, default=5)
    args = ap.parse_args(argv)
    hdr, body = source_rows(args.prefix)
    src, every, run = hdr.index("Source"), hdr.index("Warp Stall Sampling (All Samples)"), hdr.index("Instructions Executed")
    stalls = [i for i, h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]
    num = [lambda r, i=i: int(r[i].replace(",", "") or 0) for i in (every, run)]
    step = args.step or active_cycles(args.prefix) / args.steps
    for a, b in loops([num[1](r) for r in body], [num[0](r) for r in body]):
        total = sum(num[0](r) for r in body[a:b + 1])
        print(f"loop of lines {a}-{b}: {total} samples; cycles per step of {step:.0f}")
        for k in sorted(range(a, b + 1), key=lambda k: -num[0](body[k]))[:args.top]:
            r = body[k]
            why = max(stalls, key=lambda i: int(r[i].replace(",", "") or 0))
            print(f"  line {k}: ~{step * num[0](r) / total:.0f} cycles ({hdr[why][6:]}) {r[src].strip()[:50]}"
                  f"  after: {body[k - 1][src].strip()[:40]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
