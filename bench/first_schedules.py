"""The heuristics' first schedules on the generalization suite: per case, the II and seconds of the first
schedule and of the best first schedule (IMS, the constructive scheduler, the constructions under proposed
groupings: everything before the exact search), each solve stopped at its "best first schedule" line.

    python bench/first_schedules.py --min-ops 40 --out after.json
    python bench/first_schedules.py --min-ops 40 --exact --out before.json   # the bisection to one cycle
    python bench/first_schedules.py --compare before.json after.json

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


def first_schedules(body: LoopBody, arch: str) -> dict[str, tuple[int, float]]:
    """{"first": (II, s), "best": (II, s)} of one case's solve (30 units, 2 workers), stopped before the search."""
    p = build_problem(body, get_arch(arch))
    rec: dict[str, tuple[int, float]] = {}
    t0 = time.monotonic()

    def progress(message: str) -> None:
        for key, prefix in (("first", "first schedule"), ("best", "best first schedule")):
            if message.startswith(prefix):
                rec[key] = (_ii(message), time.monotonic() - t0)
        if "best" in rec:
            raise _Stop

    with contextlib.suppress(_Stop):
        search.solve(p, SolveOptions(workers=2, work_limit=30.0, time_limit=600, progress=progress))
    return rec


def measure(min_ops: int) -> dict[str, dict]:
    out = {}
    for half in ("tuned", "fresh"):
        for case in read_manifest(half)["cases"]:
            try:
                body = build_body(case)
            except CaseUnavailable:
                continue
            if len(body.ops) < min_ops:
                continue
            out[case["id"]] = {"ops": len(body.ops), **first_schedules(body, case["arch"])}
            print(case["id"], out[case["id"]], flush=True)
    return out


def compare(before: dict[str, dict], after: dict[str, dict]) -> None:
    """Geometric-mean II ratio and seconds saved, first and best first schedule, over the cases in both."""
    ids = [i for i in after if i in before and "best" in after[i] and "best" in before[i]]
    for key in ("first", "best"):
        ratio = [after[i][key][0] / before[i][key][0] for i in ids]
        saved = [before[i][key][1] - after[i][key][1] for i in ids]
        print(f"{key}: {len(ids)} cases, II x{statistics.geometric_mean(ratio):.4f} (geometric mean; "
              f"{min(ratio):.3f}-{max(ratio):.3f}), seconds saved median {statistics.median(saved):.2f}, "
              f"max {max(saved):.2f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-ops", type=int, default=0, help="only bodies of at least this many ops")
    ap.add_argument("--exact", action="store_true", help="bisect to one cycle on every body (resolution 0)")
    ap.add_argument("--out", help="write the measurements as JSON")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two --out files and stop")
    args = ap.parse_args(argv)
    if args.compare:
        before, after = (json.loads(Path(f).read_text()) for f in args.compare)
        compare(before, after)
        return 0
    if args.exact:
        ims.SEARCH_RESOLUTION = 0.0
    out = measure(args.min_ops)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
