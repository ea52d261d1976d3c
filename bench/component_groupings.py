"""The search pinned to a grouping by independent chains, against the free search's suite rows (issue 16, session 74;
a measurement, not a phase of twill).

    python bench/component_groupings.py                 # every suite body over 40 ops with two or more components
    python bench/component_groupings.py --only random-handoff-16026-n46-h100 --groups 3

The loads go to one group; the other ops' connected components (``strategies.consumer_components``: a chain that
shares no value with another) are packed largest hold first onto k consumer groups (k = ``--groups``, or the number
of components where fewer); ``solve`` then runs with that grouping pinned, at the suite's budget by default. Each line
gives the pinned result beside the free search's row in bench/results/suite_<half>.json
(docs/benchmarks_notes.md, "Narrow groups packed in the structure relaxation; component groupings").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite.cases import build_body, read_manifest  # noqa: E402

from twill.arch.registry import get_arch  # noqa: E402
from twill.errors import TwillError  # noqa: E402
from twill.options import SolveOptions  # noqa: E402
from twill.problem import Problem, build_problem  # noqa: E402
from twill.solver import hints, solve  # noqa: E402
from twill.solver.strategies import consumer_components  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def packed(problem: Problem, k: int) -> tuple[dict[str, int], list[int]] | None:
    """(op -> group, each consumer group's hold sum): the loads on group 0, the components largest hold first onto
    the least loaded of ``k`` consumer groups; None where the body has fewer than two components."""
    component = {n: c for n, c in consumer_components(problem) if not problem.op(n).variable_latency}
    members: dict[int, list[str]] = {}
    for name, c in component.items():
        members.setdefault(c, []).append(name)
    if len(members) < 2:
        return None
    holds = [0] * min(k, len(members))
    groups = {op.name: 0 for op in problem.ops}
    for names in sorted(members.values(), key=lambda ns: (-sum(problem.hold(n) for n in ns), ns)):
        g = holds.index(min(holds))
        holds[g] += sum(problem.hold(n) for n in names)
        groups.update((n, g + 1) for n in names)
    return groups, holds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated case ids (default: every case over --min-ops ops)")
    ap.add_argument("--min-ops", type=int, default=41)
    ap.add_argument("--groups", type=int, default=3, help="consumer groups (default 3)")
    ap.add_argument("--work-limit", type=float, default=30.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--time-limit", type=float, default=900.0)
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
            plan = packed(p, args.groups)
            if plan is None:
                print(f"{c['id']}: one component; free {free['ii']} >= {free['bound']}", flush=True)
                continue
            groups, holds = plan
            labels = hints.first_use_labels(p, groups)
            options = SolveOptions(workers=args.workers, time_limit=args.time_limit, work_limit=args.work_limit,
                                   fixed_groups=tuple((op.name, labels[groups[op.name]]) for op in p.ops))
            try:
                s = solve(p, options)
                pinned = f"{s.ii} ({s.status})"
            except TwillError as e:
                pinned = f"none ({str(e).splitlines()[0][:90]})"
            print(f"{c['id']}: k = {len(holds)}, holds {holds}: pinned {pinned}; free {free['ii']} >= {free['bound']} "
                  f"({free['status']})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
