"""Reformulations of the joint model at one II, measured against the model as it is (issue 16, sessions 81-82; a
measurement, not a phase: the order cuts decided nothing more, the line statement refutes where the circle stalls;
docs/benchmarks_notes.md, sessions 81 and 82).

    python bench/order_cuts_probe.py random-tmem-16005-n20-b200 --ii 618 --cuts plain,unit --relaxed
    python bench/order_cuts_probe.py random-regs-16508-n12-h100 --ii 1636 --cuts plain,unrolled,line --workers 1 \\
        --groups 'b0_load,b1_load|b0_mma,b0_s0,b0_s1,b0_s2,b0_s3,b0_s4,b0_s5,b1_mma,b1_s0,b1_s1'
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

* ``unrolled``: each group's register peak again, every value's whole live range [start, end) laid on the line with
  copies one II apart back to the stage bound (no division of the lifetime into full turns and a remainder), as one
  more cumulative per group (groups pinned or free).
* ``line``: the model with its two peak families (registers per group, TMEM) stated on the line as ``unrolled`` does,
  in place of the circle's. Exact: a schedule it finds is checked by the validator all the same.
* ``window``: the peaks with each copy present only within its value's stage window: the registers as the search's
  cold probes state them (``build_model(line=True)``, ``ScheduleModel.line_copies``), TMEM the same way. (Until
  session 83 the probe had its own form, which made each value's window once per group; its numbers are in the
  session-82 notes.)

A schedule found is assembled and checked by ``twill.validate`` ("valid", or the first broken rule).

``--groups`` pins a grouping ('|' between groups, ',' between ops; group k is the k-th); without it the groups are
free (only ``unit`` applies). CASE is a suite case id (bench/suite/*.json).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ortools.sat.python import cp_model  # noqa: E402
from suite.cases import build_case  # noqa: E402
from worker_probe import case  # noqa: E402

from twill.options import SolveOptions  # noqa: E402
from twill.problem import read_time  # noqa: E402
from twill.solver import hints, model  # noqa: E402
from twill.solver.assemble import assemble  # noqa: E402
from twill.solver.model import ScheduleModel, build_model, upper  # noqa: E402
from twill.solver.run import Work, solver  # noqa: E402
from twill.validate import validate  # noqa: E402

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


def line_intervals(v: ScheduleModel, w, present=None) -> list:
    """``w``'s live range [start, end) on the line and its copies k II earlier, k = 1..K: every start is below
    (max_stage + 1) II, so every end is below that plus the latest reader's distance x II and read, and K of that
    many IIs makes the copies cover each cycle of [0, II) as often as the steady state holds the value there
    (elsewhere never more often). ``present``: the copies are optional on that literal."""
    m, ii = v.m, v.ii_lo  # one II: the probe's models are at a fixed II
    v.lifetime_of(w)
    life, start = v.life[w.name], v.start[w.name]
    end = m.new_int_var(0, upper(start) + upper(life), f"line_end[{w.name}]")
    m.add(end == start + life)
    reads = [(e.distance, read_time(e, v.p.op(e.dst))) for e in v.p.body.out_edges(w.name)] or [(0, w.latency)]
    turns = v.max_stage + 1 + max(d for d, _ in reads) + -(-max(r for _, r in reads) // ii)
    if present is None:
        return [m.new_interval_var(start - k * ii, life, end - k * ii, f"line[{w.name},{k}]") for k in range(turns + 1)]
    return [m.new_optional_interval_var(start - k * ii, life, end - k * ii, present, f"line[{w.name},{k}]")
            for k in range(turns + 1)]


def unrolled_cut(v: ScheduleModel) -> None:
    """Each group's values on the line (``line_intervals``, optional on membership): one cumulative under its room."""
    for g in v.groups:
        copies = [(iv, w.regs) for w in v.p.ops if w.regs for iv in line_intervals(v, w, v.in_group[w.name, g])]
        if copies:
            room = v.m.new_int_var(0, 1 << 22, f"line_room[{g}]")
            v.m.add(room == v.register_room(g))
            v.m.add_cumulative([iv for iv, _ in copies], [d for _, d in copies], room)


def _tmem_on_line(v: ScheduleModel, copies_of) -> None:
    """The TMEM peak with every tile's copies (``copies_of(w)``) on the line under the arch's columns."""
    copies = [(iv, w.tmem_cols) for w in v.p.ops if w.tmem_cols for iv in copies_of(w)]
    if copies:
        v.m.add_cumulative([iv for iv, _ in copies], [d for _, d in copies], v.p.arch.limit("tmem_cols"))


def unrolled_tmem(v: ScheduleModel) -> None:
    """The TMEM peak the same way, every tile on the line under the arch's columns."""
    _tmem_on_line(v, lambda w: line_intervals(v, w))


def window_tmem(v: ScheduleModel) -> None:
    """The TMEM peak with each tile's copies in its stage window, as the model states the register peaks on the line
    (``ScheduleModel.line_copies``)."""
    cols = v.p.arch.limit("tmem_cols")
    _tmem_on_line(v, lambda w: v.line_copies(w, w.tmem_cols, cols, f"line_tmem[{w.name}]"))


# the peak families of the ``line`` and ``window`` variants, by the names of the circle's they replace (``window``'s
# registers are the model's own: ``build_model(line=True)``)
LINE_FAMILIES = {"line": {"register_budgets": unrolled_cut, "tmem_capacity": unrolled_tmem},
                 "window": {"tmem_capacity": window_tmem}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case")
    ap.add_argument("--ii", required=True, help="comma-separated IIs, each solved at that II alone")
    ap.add_argument("--cuts", default="plain,unit", help="comma-separated: plain, unit, issue, points, unrolled, line, window, "
                    "or a+b")
    ap.add_argument("--groups", help="a grouping to pin: groups separated by '|', ops by ','")
    ap.add_argument("--relaxed", action="store_true", help="the hint relaxation: no register or TMEM peaks")
    ap.add_argument("--stages", type=int, help="cap the stages at this many (a heuristic space: refutes nothing)")
    ap.add_argument("--units", type=float, default=10.0)
    ap.add_argument("--lp", type=int, default=2, help="CP-SAT's linearization level (the bisection's cold probe: 2)")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    p = build_case(case(args.case))
    members = [set(g.split(",")) for g in args.groups.split("|")] if args.groups else []
    pins = tuple(sorted((n, g) for g, names in enumerate(members) for n in names))
    for ii in (int(x) for x in args.ii.split(",")):
        for variant in args.cuts.split(","):
            work = Work.starting_now(3600, args.units)
            parts = set(variant.split("+"))
            families = model.JOINT_FAMILIES
            for key in parts & LINE_FAMILIES.keys():  # the peak families on the line, in their places
                model.JOINT_FAMILIES = tuple((name, LINE_FAMILIES[key].get(name, family)) for name, family in families)
            v = build_model(p, SolveOptions(workers=args.workers, fixed_groups=pins), ii, ii, relaxed=args.relaxed,
                            max_stage=args.stages, line="window" in parts)
            model.JOINT_FAMILIES = families
            units = unit_cut(v) if "unit" in parts else []
            if "issue" in parts:
                issue_cut(v, members)
            if "points" in parts:
                point_cut(v, members)
            if "unrolled" in parts:
                unrolled_cut(v)
            s = solver(work, args.units, args.workers, linearization=args.lp)
            status = s.solve(v.m)
            checked = ""
            if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                sched = assemble(p, SolveOptions(), hints.read(v, s.value, budgets=True), optimal=False, proven_lb=0,
                                 proof="", proven={}, seconds=0.0)
                broken = validate(p, sched)
                checked = " valid" if not broken else f" INVALID: {broken[0]}"
            print(f"II {ii} {variant:12s} {s.status_name(status):10s} {work.spent:6.2f} units{checked}"
                  + (f" (units cut: {', '.join(units)})" if units else ""), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
