"""The search pinned to a grouping by independent chains, against the free search's suite rows (issue 16, sessions
74-75; the search's components phase, ``search._components``, runs the same grouping inside a free solve).

    python bench/component_groupings.py                 # every suite body over 40 ops with two or more components
    python bench/component_groupings.py --only random-handoff-16026-n46-h100 --groups 3
    python bench/component_groupings.py --only random-handoff-16026-n46-h100 --attempts --probe 5895,5000,4500
    python bench/component_groupings.py --only random-units-16519-n66-b200 --free --progress   # the suite's search

The loads go to one group; the other ops' connected components (``strategies.consumer_components``: a chain that
shares no value with another) are packed largest hold first onto k consumer groups (``strategies.packed_components``;
k = ``--groups``, or the number of components where fewer); ``solve`` then runs with that grouping pinned, at the
suite's budget by default. Each line gives the pinned result beside the free search's row in
bench/results/suite_<half>.json (docs/benchmarks_notes.md, "Narrow groups packed in the structure relaxation;
component groupings").
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite.cases import build_body, read_manifest  # noqa: E402

from twill.arch.registry import get_arch  # noqa: E402
from twill.errors import TwillError  # noqa: E402
from twill.options import SolveOptions  # noqa: E402
from twill.problem import Problem, build_problem  # noqa: E402
from twill.solver import solve  # noqa: E402
from twill.solver.construct import construct_schedule  # noqa: E402
from twill.solver.model import build_model  # noqa: E402
from twill.solver.run import Work, solver  # noqa: E402
from twill.solver.strategies import packed_components  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def _holds(problem: Problem, groups: dict[str, int]) -> list[int]:
    """Each consumer group's hold sum (the variable-latency loads' group left out)."""
    holds: dict[int, int] = {}
    for op in problem.ops:
        if not op.variable_latency:
            holds[groups[op.name]] = holds.get(groups[op.name], 0) + problem.hold(op.name)
    return list(holds.values())


def _diagnose(p: Problem, options: SolveOptions, grouping: tuple[tuple[str, int], ...], args: argparse.Namespace) -> None:
    """What the packed grouping gives without the search: the constructive scheduler's attempts (II, outcome) and
    fixed-II solves of the joint model with the grouping pinned."""
    if args.attempts:
        r = construct_schedule(p, options, dict(grouping))
        print(f"  constructive: {r.schedule.ii if r.schedule else None}", flush=True)
        for ii, outcome in r.attempts:
            print(f"    II {ii}: {outcome}", flush=True)
    pinned = replace(options, fixed_groups=grouping)
    for ii in [int(x) for x in args.probe.split(",")] if args.probe else []:
        work = Work.starting_now(args.time_limit, args.probe_units)
        s = solver(work, args.probe_units, args.workers)
        status = s.solve(build_model(p, pinned, ii, ii).m)
        print(f"  II {ii}, pinned: {s.status_name(status)} in {work.spent:.2f} units", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated case ids (default: every case over --min-ops ops)")
    ap.add_argument("--min-ops", type=int, default=41)
    ap.add_argument("--groups", type=int, default=3, help="consumer groups (default 3)")
    ap.add_argument("--work-limit", type=float, default=30.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--time-limit", type=float, default=900.0)
    ap.add_argument("--free", action="store_true", help="solve with the groups free instead (the suite's search)")
    ap.add_argument("--progress", action="store_true", help="print the search's progress lines")
    ap.add_argument("--attempts", action="store_true",
                    help="print the constructive scheduler's attempts under the packed grouping (no solve)")
    ap.add_argument("--probe", help="comma-separated IIs: one fixed-II solve each with the grouping pinned (no solve)")
    ap.add_argument("--probe-units", type=float, default=4.0)
    args = ap.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    for half in ("tuned", "fresh"):
        rows = json.loads((RESULTS / f"suite_{half}.json").read_text())["rows"]
        for c in read_manifest(half)["cases"]:
            body = build_body(c)
            if (only is not None and c["id"] not in only) or (only is None and len(body.ops) < args.min_ops):
                continue
            p = build_problem(body, get_arch(c["arch"]))
            free = rows[c["id"]]
            grouping = packed_components(p, args.groups)
            if grouping is None:
                print(f"{c['id']}: one component; free {free['ii']} >= {free['bound']}", flush=True)
                continue
            holds = _holds(p, dict(grouping))
            options = SolveOptions(workers=args.workers, time_limit=args.time_limit, work_limit=args.work_limit,
                                   fixed_groups=() if args.free else grouping,
                                   progress=print if args.progress else None)
            if args.attempts or args.probe:
                _diagnose(p, options, grouping, args)
                continue
            try:
                s = solve(p, options)
                pinned = f"{s.ii} ({s.status})"
            except TwillError as e:
                pinned = f"none ({str(e).splitlines()[0][:90]})"
            how = "free groups, solved now" if args.free else "pinned"
            print(f"{c['id']}: k = {len(holds)}, holds {holds}: {how} {pinned}; suite row {free['ii']} >= {free['bound']} "
                  f"({free['status']})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
