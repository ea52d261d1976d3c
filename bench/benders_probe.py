"""Logic-based Benders over warp-group structures at one II (issue 16, item 5; a measurement, not a phase yet).

    python bench/benders_probe.py random-regs-16508-n12-h100 --ii 1300,1500 [--units 2] [--cap 2000]

At a fixed II: take a grouping from the structure relaxation (solver/structure.py, canonical first-use labels) under
the cuts found so far; solve the joint model at that II with the grouping pinned, one CP-SAT worker. Refuted: for
each of its groups, the joint model of that group's ops alone (the others and every edge to them dropped; one group
with the whole register file) at the same II; a group refuted alone is a core, and since a group holding more ops
only adds constraints to that subproblem (more issue, more registers, more dependences), no grouping may put all
of the core's ops in one group: the cut sum_v x[v, g] <= |core| - 1 for every g. No core: the cut excludes that one
partition. When the structure relaxation has no grouping left, the II is refuted; a pinned schedule is a schedule;
an undecided pinned solve stops the loop (undecided). Prints the groupings tried, the cores and the units spent.
CASE is a suite case id (bench/suite/*.json). ``--search-loop TOTAL`` runs the search's own loop instead
(``twill.solver.groupings.decide_by_groupings``), e.g. ``--ii 2600 --units 5 --search-loop 60`` on
random-handoff-16524-n15-h100 (docs/benchmarks_notes.md, session 71).

With ``--assumption-cores`` the cores come from CP-SAT itself: one joint model at the II, each grouping stated as
assumptions on pair literals (same group / different groups, label-free), and a refutation's
``sufficient_assumptions_for_infeasibility`` is the cut (at least one of those pairs must change); no deletion tests.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from unittest import mock

from ortools.sat.python import cp_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite.cases import build_body, read_manifest  # noqa: E402

from twill.arch.registry import get_arch  # noqa: E402
from twill.options import SolveOptions  # noqa: E402
from twill.problem import Problem, build_problem  # noqa: E402
from twill.solver import groupings  # noqa: E402
from twill.solver.groupings import decide_by_groupings, pair_literals  # noqa: E402
from twill.solver.model import build_model  # noqa: E402
from twill.solver.run import Work, solver  # noqa: E402
from twill.solver.structure import build_structure  # noqa: E402

VERDICT = {cp_model.INFEASIBLE: "refuted", cp_model.FEASIBLE: "schedule", cp_model.OPTIMAL: "schedule"}


def case_problem(case_id: str) -> Problem:
    for half in ("tuned", "fresh"):
        for c in read_manifest(half)["cases"]:
            if c["id"] == case_id:
                return build_problem(build_body(c), get_arch(c["arch"]))
    raise SystemExit(f"no suite case {case_id!r}")


def joint(p: Problem, groups: dict[str, int], ii: int, units: float) -> tuple[str, float]:
    """The joint model at ``ii`` built with ``groups`` fixed (the search's ``groupings._fixed_grouping_status``), one
    worker at LP level 2: (verdict, units)."""
    w = Work.starting_now(3600, units)
    return VERDICT.get(groupings._fixed_grouping_status(p, SolveOptions(workers=1), ii, groups, w, units),
                       "undecided"), w.spent


def minimal_core(p: Problem, groups: dict[str, int], ii: int, units: float) -> tuple[list[list[str]], float]:
    """The search's deletion core (``groupings._deletion_core``: whole groups dropped first, then one op at a time,
    each drop kept where the subproblem is still refuted; an undecided test keeps the ops), with ``units`` per test
    instead of the search's ``SUBSET_UNITS``. The core's parts (its ops by group) and the units spent."""
    work = Work.starting_now(3600, math.inf)
    with mock.patch.object(groupings, "SUBSET_UNITS", units):
        kept = groupings._deletion_core(p, SolveOptions(workers=1), ii, groups, work, math.inf)
    parts: dict[int, list[str]] = {}
    for op in p.ops:
        if op.name in kept:
            parts.setdefault(groups[op.name], []).append(op.name)
    return list(parts.values()), work.spent


def add_cut(s, parts: list[list[str]]) -> None:
    """No grouping may hold each part wholly in one group, the parts in different groups."""
    m, k = s.m, len(parts)
    y = {}
    for j, part in enumerate(parts):
        for g in s.groups:
            b = y[j, g] = m.new_bool_var("")
            for n in part:
                m.add_implication(b, s.x[n, g])
            m.add(b >= sum(s.x[n, g] for n in part) - (len(part) - 1))
    if k == 1:
        m.add(sum(y[0, g] for g in s.groups) == 0)
        return
    same = []
    for j in range(k):
        for m2 in range(j + 1, k):
            for g in s.groups:
                z = m.new_bool_var("")
                m.add_implication(z, y[j, g])
                m.add_implication(z, y[m2, g])
                m.add(z >= y[j, g] + y[m2, g] - 1)
                same.append(z)
    m.add(sum(y.values()) - k * sum(same) <= k - 1)


def decide(p: Problem, ii: int, units: float, cap: int, core_units: float | None, past_undecided: bool) -> None:
    """The loop of the module docstring at ``ii``. ``core_units`` None: each refuted grouping cuts only its own
    partition (no core). ``past_undecided``: an undecided grouping is counted, its partition cut, and the loop goes
    on (the II then stays undecided, but the count of groupings left is measured)."""
    s = build_structure(p, SolveOptions(workers=1), ii)
    names = [o.name for o in p.ops]
    cores, undecided, pinned = set(), 0, []
    tried, spent, t0 = 0, 0.0, time.time()
    while tried < cap:
        sv = cp_model.CpSolver()
        sv.parameters.num_workers = 1
        sv.parameters.max_time_in_seconds = 60
        if sv.solve(s.m) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            break
        tried += 1
        g = {n: int(sv.value(s.group_of[n])) for n in names}
        parts: dict[int, list[str]] = {}
        for n in names:
            parts.setdefault(g[n], []).append(n)
        got, u = joint(p, g, ii, units)
        spent += u
        pinned.append(u)
        whole = list(parts.values())
        if got == "schedule" or (got == "undecided" and not past_undecided):
            undecided += got == "undecided"
            print(f"  grouping {tried}: {got} ({u:.2f} u): {' | '.join(','.join(x) for x in whole)}")
            break
        if got == "undecided" or core_units is None:
            undecided += got == "undecided"
            core = whole
            if got == "undecided":
                print(f"  grouping {tried}: undecided ({u:.2f} u): {' | '.join(','.join(x) for x in whole)}", flush=True)
        else:
            core, u = minimal_core(p, g, ii, core_units)
            spent += u
            print(f"  grouping {tried}: refuted; core {' | '.join(','.join(sorted(x)) for x in core)}", flush=True)
        add_cut(s, core)
        cores.add(frozenset(frozenset(x) for x in core))
    else:
        got = "undecided (cap)"
    verdict = got if got in ("schedule", "undecided (cap)") else "undecided" if undecided or got == "undecided" \
        else "refuted"
    median = sorted(pinned)[len(pinned) // 2] if pinned else 0.0
    print(f"II {ii}: {verdict} after {tried} groupings ({undecided} undecided), {len(cores)} cuts, {spent:.1f} units "
          f"(pinned solves: median {median:.2f}), {time.time() - t0:.0f} s")


def decide_by_assumptions(p: Problem, ii: int, units: float, cap: int) -> None:
    """The loop of ``decide`` with CP-SAT's own cores: the joint model at ``ii`` is built once, each grouping is
    a set of assumptions on pair literals, and a refuted grouping's sufficient assumptions become the cut. An
    undecided grouping is counted and its whole partition cut (the II then stays undecided)."""
    names = [o.name for o in p.ops]
    s = build_structure(p, SolveOptions(workers=1), ii)
    cut_pairs = pair_literals(s.m, s.group_of, names)
    v = build_model(p, SolveOptions(workers=1), ii, ii)
    pairs = pair_literals(v.m, v.group_of, names)
    by_index = {lit.index: key for key, lit in pairs.items()}
    tried, undecided, spent, sizes, t0 = 0, 0, 0.0, [], time.time()
    verdict = "undecided (cap)"
    while tried < cap:
        sv = cp_model.CpSolver()
        sv.parameters.num_workers = 1
        if sv.solve(s.m) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            verdict = "undecided" if undecided else "refuted"
            break
        tried += 1
        g = {n: int(sv.value(s.group_of[n])) for n in names}
        v.m.clear_assumptions()
        v.m.add_assumptions([lit if g[a] == g[b] else ~lit for (a, b), lit in pairs.items()])
        w = Work.starting_now(3600, units)
        js = solver(w, units, 1, linearization=2)
        status = js.solve(v.m)
        spent += w.spent
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            verdict = "schedule"
            break
        if status == cp_model.INFEASIBLE:
            core = [(by_index[i if i >= 0 else -i - 1], i >= 0) for i in js.sufficient_assumptions_for_infeasibility()
                    if (i if i >= 0 else -i - 1) in by_index]
        else:
            undecided += 1
            core = [(key, g[key[0]] == g[key[1]]) for key in pairs]
            print(f"  grouping {tried}: undecided ({w.spent:.2f} u): "
                  f"{' | '.join(','.join(n for n in names if g[n] == k) for k in sorted(set(g.values())))}", flush=True)
        if not core:
            verdict = "refuted"
            break
        sizes.append(len(core))
        s.m.add_bool_or([~cut_pairs[key] if same else cut_pairs[key] for key, same in core])
    sizes.sort()
    print(f"II {ii}: {verdict} after {tried} groupings ({undecided} undecided), {spent:.1f} units, "
          f"{time.time() - t0:.0f} s; cores of {sizes[0] if sizes else 0}-{sizes[-1] if sizes else 0} pairs "
          f"(median {sizes[len(sizes) // 2] if sizes else 0}) of {len(pairs)}")


def decide_as_the_search(p: Problem, ii: int, per_grouping: float, total: float) -> None:
    """The search's own loop (``twill.solver.groupings.decide_by_groupings``: assumption cores, then the grouping
    fixed) at ``ii`` on one worker, with ``per_grouping`` units per joint solve and ``total`` in all."""
    work, t0 = Work.starting_now(3600, total + per_grouping), time.time()
    status, _, _ = decide_by_groupings(p, SolveOptions(workers=1), ii, work, work.until(total), per_grouping)
    verdict = {cp_model.INFEASIBLE: "refuted", cp_model.FEASIBLE: "schedule"}.get(status, "undecided")
    print(f"II {ii}: {verdict}, {work.spent:.1f} units, {time.time() - t0:.0f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case")
    ap.add_argument("--ii", required=True, help="comma-separated IIs")
    ap.add_argument("--units", type=float, default=2.0, help="units per pinned joint solve")
    ap.add_argument("--cap", type=int, default=2000, help="most groupings per II")
    ap.add_argument("--core-units", type=float, default=0.5,
                    help="units per deletion test while minimising a core (undecided keeps the op: still sound)")
    ap.add_argument("--partition-cuts", action="store_true", help="cut each refuted grouping's partition, no cores")
    ap.add_argument("--past-undecided", action="store_true", help="go on past an undecided grouping, cutting it")
    ap.add_argument("--assumption-cores", action="store_true",
                    help="cores from CP-SAT's assumptions on pair literals (past undecided groupings)")
    ap.add_argument("--search-loop", type=float, metavar="TOTAL",
                    help="the search's own loop (decide_by_groupings) with --units per grouping and TOTAL units in all")
    a = ap.parse_args()
    p = case_problem(a.case)
    for ii in (int(x) for x in a.ii.split(",")):
        if a.search_loop is not None:
            decide_as_the_search(p, ii, a.units, a.search_loop)
            continue
        if a.assumption_cores:
            decide_by_assumptions(p, ii, a.units, a.cap)
            continue
        decide(p, ii, a.units, a.cap, None if a.partition_cuts else a.core_units, a.past_undecided)


if __name__ == "__main__":
    main()
