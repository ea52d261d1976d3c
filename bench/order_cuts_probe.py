"""Two reformulations of the joint model at one II, measured against the model as it is (issue 16, session 81; a
measurement, not a phase: neither decided what the model leaves undecided, docs/benchmarks_notes.md, session 81).

    python bench/order_cuts_probe.py random-tmem-16005-n20-b200 --ii 618 --cuts plain,unit --relaxed
    python bench/order_cuts_probe.py random-handoff-16025-n19-b200 --ii 2600 --cuts plain,issue,points \\
        --groups 'b0_load,b1_load,b2_load|b0_mma0,b0_o2,b0_o3|b1_mma0,b1_o2,b1_o3,b1_o4,b1_o5,b1_o6,b2_mma0,b2_o2,b2_o3,b2_o4,b2_o5,b2_o6,b3_o0'

Cuts (each an implied constraint: every schedule of the model meets it):

* ``unit``: a capacity-1 unit whose segments total W within 2% of the II is idle II - W cycles per II, so walking the
  circle each segment is followed by the next to start after a gap in [0, II - W]: one circuit of successor literals
  through the unit's segments (CP-SAT's AddCircuit), exactly one arc wrapping round the circle.
* ``issue``: the same circuit over each pinned group's holds (in-order issue with slack II - the group's hold sum).
* ``points``: each pinned group's register peak at each of its values' issues, as a linear sum of reified liveness
  literals (value w live at u's issue iff (offset u - offset w) mod II < w's partial lifetime). Exact: a group's live
  words rise only where one of its values is issued.

``--groups`` pins a grouping ('|' between groups, ',' between ops; group k is the k-th); without it the groups are
free (only ``unit`` applies). CASE is a suite case id (bench/suite/*.json).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite.cases import build_case  # noqa: E402
from worker_probe import case  # noqa: E402

from twill.options import SolveOptions  # noqa: E402
from twill.solver.model import ScheduleModel, build_model  # noqa: E402
from twill.solver.run import Work, solver  # noqa: E402

SLACK = 0.02  # the unit cut applies where II - W <= SLACK * W


def cyclic_order(v: ScheduleModel, starts: list, lengths: list[int], total: int, name: str) -> None:
    """Intervals at modular positions ``starts`` that leave II - ``total`` cycles free: one circuit of successors,
    each gap in [0, II - total], one arc wrapping."""
    arcs, wraps = [], []
    for i, (pi, li) in enumerate(zip(starts, lengths, strict=True)):
        for j, pj in enumerate(starts):
            if i == j:
                continue
            arc, wrap = v.m.new_bool_var(f"{name}.next[{i},{j}]"), v.m.new_bool_var(f"{name}.wraps[{i},{j}]")
            v.m.add_implication(wrap, arc)
            gap = pj - pi - li
            v.m.add(gap >= 0).only_enforce_if([arc, ~wrap])
            v.m.add(gap <= v.ii - total).only_enforce_if([arc, ~wrap])
            v.m.add(gap + v.ii >= 0).only_enforce_if([arc, wrap])
            v.m.add(gap + v.ii <= v.ii - total).only_enforce_if([arc, wrap])
            arcs.append((i, j, arc))
            wraps.append(wrap)
    v.m.add_circuit(arcs)
    v.m.add(sum(wraps) == 1)


def unit_cut(v: ScheduleModel) -> list[str]:
    """``cyclic_order`` on every capacity-1 unit busy within SLACK of the window's largest II; the units cut."""
    segments: dict[str, list] = {}
    for op in v.p.ops:
        for k, use in enumerate(op.uses):
            if use.length > 0:
                segments.setdefault(use.unit, []).append((op, k, use))
    cut = []
    for unit, items in sorted(segments.items()):
        total = sum(use.length for _, _, use in items)
        if (v.p.capacity[unit] != 1 or len(items) < 2 or any(use.amount != 1 or use.length >= v.ii_lo
                                                             for _, _, use in items)
                or v.ii_hi - total > SLACK * total):
            continue
        starts = [v.position(op, use.offset, f"{op.name}@{unit}#{k}.order") for op, k, use in items]
        cyclic_order(v, starts, [use.length for _, _, use in items], total, unit)
        cut.append(unit)
    return cut


def issue_cut(v: ScheduleModel, members: list[set[str]]) -> None:
    """``cyclic_order`` on each pinned group's holds (constant holds only)."""
    for g, names in enumerate(members):
        ops = [op for op in v.p.ops if op.name in names and isinstance(v.hold_of(op), int) and v.hold_of(op) > 0]
        if len(ops) >= 2:
            holds = [v.hold_of(op) for op in ops]
            cyclic_order(v, [v.offset[op.name] for op in ops], holds, sum(holds), f"group{g}")


def point_cut(v: ScheduleModel, members: list[set[str]]) -> None:
    """Each pinned group's live words at each of its values' issues, as reified liveness literals."""
    m = v.m
    for g, names in enumerate(members):
        values = [op for op in v.p.ops if op.name in names and op.regs]
        if len(values) < 2:
            continue
        life = {w.name: v.lifetime_of(w) for w in values}
        room = v.register_room(g) - sum(w.regs * life[w.name][0] for w in values)
        for u in values:
            terms = []
            for w in values:
                rest = life[w.name][1]
                live = m.new_bool_var(f"live[{w.name}@{u.name}]")
                if w is u:
                    m.add(rest >= 1).only_enforce_if(live)
                    m.add(rest == 0).only_enforce_if(~live)
                else:
                    after = m.new_bool_var(f"after[{u.name},{w.name}]")
                    d = v.offset[u.name] - v.offset[w.name]
                    m.add(d >= 0).only_enforce_if(after)
                    m.add(d <= -1).only_enforce_if(~after)
                    m.add(d <= rest - 1).only_enforce_if([live, after])
                    m.add(d + v.ii <= rest - 1).only_enforce_if([live, ~after])
                    m.add(d >= rest).only_enforce_if([~live, after])
                    m.add(d + v.ii >= rest).only_enforce_if([~live, ~after])
                terms.append(w.regs * live)
            m.add(sum(terms) <= room)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case")
    ap.add_argument("--ii", required=True, help="comma-separated IIs, each solved at that II alone")
    ap.add_argument("--cuts", default="plain,unit", help="comma-separated: plain, unit, issue, points, or a+b")
    ap.add_argument("--groups", help="a grouping to pin: groups separated by '|', ops by ','")
    ap.add_argument("--relaxed", action="store_true", help="the hint relaxation: no register or TMEM peaks")
    ap.add_argument("--stages", type=int, help="cap the stages at this many (a heuristic space: refutes nothing)")
    ap.add_argument("--units", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    p = build_case(case(args.case))
    members = [set(g.split(",")) for g in args.groups.split("|")] if args.groups else []
    pins = tuple(sorted((n, g) for g, names in enumerate(members) for n in names))
    for ii in (int(x) for x in args.ii.split(",")):
        for variant in args.cuts.split(","):
            work = Work.starting_now(3600, args.units)
            v = build_model(p, SolveOptions(workers=args.workers, fixed_groups=pins), ii, ii, relaxed=args.relaxed,
                            max_stage=args.stages)
            parts = set(variant.split("+"))
            units = unit_cut(v) if "unit" in parts else []
            if "issue" in parts:
                issue_cut(v, members)
            if "points" in parts:
                point_cut(v, members)
            s = solver(work, args.units, args.workers)
            status = s.solve(v.m)
            print(f"II {ii} {variant:12s} {s.status_name(status):10s} {work.spent:6.2f} units"
                  + (f" (units cut: {', '.join(units)})" if units else ""), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
