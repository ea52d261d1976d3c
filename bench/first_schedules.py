"""The heuristics' first schedules on the generalization suite: per case, the II and seconds of the first
schedule and of the best first schedule (IMS, the constructive scheduler, the constructions under proposed
groupings: everything before the exact search), each solve stopped at its "best first schedule" line.

    python bench/first_schedules.py --min-ops 40 --out after.json
    python bench/first_schedules.py --min-ops 40 --exact --out before.json   # the bisection to one cycle
    python bench/first_schedules.py --compare before.json after.json
    python bench/first_schedules.py --first-only --out first.json   # seconds to the first schedule in hand

``--exact`` sets ``ims.SEARCH_RESOLUTION`` to 0, the heuristics' II search before session 18 (design.md §3.1c).
Seconds are wall time: run it alone on the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite.cases import CaseUnavailable, build_body, read_manifest  # noqa: E402

from twill.arch.registry import get_arch  # noqa: E402
from twill.ir import LoopBody  # noqa: E402
from twill.options import SolveOptions  # noqa: E402
from twill.problem import build_problem  # noqa: E402
from twill.solver import ims, search  # noqa: E402


class _Stop(Exception):
    """Raised from the progress callback once the best first schedule is known."""


def _ii(message: str) -> int:
    return int(message.split("at II ")[1].split()[0].rstrip(":"))


# progress lines that report a schedule in hand: the sequential one (since session 32), then the heuristics'
FIRST = ("a schedule in hand", "first schedule")


def first_schedules(body: LoopBody, arch: str, first_only: bool = False) -> dict[str, tuple[int, float]]:
    """{"first": (II, s), "heuristic": (II, s), "best": (II, s)} of one case's solve (30 units, 2 workers), stopped
    before the search (``first_only``: at the first schedule in hand)."""
    p = build_problem(body, get_arch(arch))
    rec: dict[str, tuple[int, float]] = {}
    t0 = time.monotonic()

    def progress(message: str) -> None:
        now = time.monotonic() - t0
        if message.startswith(FIRST) and "first" not in rec:
            rec["first"] = (_ii(message), now)
        for key, prefix in (("heuristic", "first schedule"), ("best", "best first schedule")):
            if message.startswith(prefix):
                rec[key] = (_ii(message), now)
        if "best" in rec or (first_only and "first" in rec):
            raise _Stop

    with contextlib.suppress(_Stop):
        search.solve(p, SolveOptions(workers=2, work_limit=30.0, time_limit=600, progress=progress))
    return rec


def measure(min_ops: int, first_only: bool = False) -> dict[str, dict]:
    out = {}
    for half in ("tuned", "fresh"):
        for case in read_manifest(half)["cases"]:
            try:
                body = build_body(case)
            except CaseUnavailable:
                continue
            if len(body.ops) < min_ops:
                continue
            out[case["id"]] = {"ops": len(body.ops), **first_schedules(body, case["arch"], first_only)}
            print(case["id"], out[case["id"]], flush=True)
    return out


def compare(before: dict[str, dict], after: dict[str, dict]) -> None:
    """Geometric-mean II ratio and seconds saved, first and best first schedule, over the cases in both."""
    keys = [k for k in ("first", "best") if all(k in m for d in (before, after) for m in d.values())]
    ids = [i for i in after if i in before]
    for key in keys:
        ratio = [after[i][key][0] / before[i][key][0] for i in ids]
        saved = [before[i][key][1] - after[i][key][1] for i in ids]
        print(f"{key}: {len(ids)} cases, II x{statistics.geometric_mean(ratio):.4f} (geometric mean; "
              f"{min(ratio):.3f}-{max(ratio):.3f}), seconds saved median {statistics.median(saved):.2f}, "
              f"max {max(saved):.2f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-ops", type=int, default=0, help="only bodies of at least this many ops")
    ap.add_argument("--exact", action="store_true", help="bisect to one cycle on every body (resolution 0)")
    ap.add_argument("--first-only", action="store_true", help="stop each solve at its first schedule in hand")
    ap.add_argument("--out", help="write the measurements as JSON")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two --out files and stop")
    args = ap.parse_args(argv)
    if args.compare:
        before, after = (json.loads(Path(f).read_text()) for f in args.compare)
        compare(before, after)
        return 0
    if args.exact:
        ims.SEARCH_RESOLUTION = 0.0
    out = measure(args.min_ops, args.first_only)
    firsts = sorted((m["first"][1], i) for i, m in out.items() if "first" in m)
    print(f"first schedule in hand within 5 s: {sum(t <= 5 for t, _ in firsts)}/{len(out)}; "
          f"median {statistics.median(t for t, _ in firsts):.2f} s, slowest {firsts[-1][0]:.2f} s ({firsts[-1][1]})")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
