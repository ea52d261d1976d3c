"""The unrolled relaxation: the joint problem at one II, written in absolute time over a few iterations.

The joint model (``twill.solver.model``) puts every interval on the II circle: an op's offset and stage, a value's
lifetime as whole turns plus a remainder (a division by II), each interval twice (at its offset and one II
earlier). Where memories and in-order issue decide, CP-SAT stalls on that arithmetic (docs/benchmarks_notes.md,
"What makes that pinned problem hard is the copy counts"). This relaxation states the same facts in absolute time:
op v of iteration j issues at start[v] + j·II, and for j in [-COPIES, COPIES] each copy's busy segments, holds and
lifetime are intervals of one no-overlap or cumulative per unit, warp group and memory, with a value's ring slots
the least c such that life <= c·II. At a fixed II everything is linear: no division, no stage variables.

Why it is a relaxation: a schedule of the joint problem, read in absolute time, meets each of these constraints
for every pair of iterations, so for the 2·COPIES + 1 written here (design.md §3.1g). Left out: the register
families (peaks, budgets, averages), the warps per CTA, and every reservation that begins after its op's issue
(a use at offset > 0, FA4's rescale writing TMEM): without them each interval begins at an issue, and the
stretching argument of ``bounds.monotone_in_ii`` (issue k·II + o moves to k·(II + 1) + o; no distance shrinks, no
cycle of the stretched steady state is covered more than a cycle of the old one, a ring of c slots still holds
its value) holds for these constraints too. So the relaxation's feasible IIs are closed upwards on every body, and
refuting one II refutes every smaller one: a lower bound found by bisection, like the structure floor's.

Measured: FA forward at FA4's granularity on b200 with FA4's roles pinned, 2633 found and 2546 the static bound:
this relaxation refutes 2582 in 5.6 units and 2625 in 15.7 on one worker (``bench/unrolled_probe.py``), where the
joint model and the memory relaxation stay undecided at 2546-2600 after 10-40 (docs/benchmarks_notes.md, session 59). The search uses
it twice: its solution at 1.1 x the floor, completed in the joint model, seeds the improvement phase
(``search._seeded``), and one probe 2% under the improved schedule bounds it (``search._unrolled_close``);
``twill show`` prints its floor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ortools.sat.python import cp_model

from twill.bounds import register_capacity, stage_bound
from twill.ir import Carrier
from twill.options import SolveOptions
from twill.problem import Problem, read_time
from twill.solver.assemble import Assignment
from twill.solver.model import group_relation, group_variables, isolate
from twill.solver.run import Budget, Work, solver
from twill.solver.structure import gallop

__all__ = ["COPIES", "PROBE_LP", "UnrolledFloor", "UnrolledModel", "build_unrolled", "decide", "registers_fit",
           "solution", "unrolled_floor"]

# iterations written on each side of iteration 0: 5 in all. FA4's roles at 2582: refuted in 4.2 units with 2, 10.9
# with 3; at 2632 only 3 refuted (37.4 units; 2 undecided at 40): more copies see more, each solve costs more
COPIES = 2
PROBE = Budget(share=0.0, at_least=3.0)  # one fixed-II decision, at most
PROBE_LP = 2  # CP-SAT's LP level for it: its refutations came 1.5-2x cheaper than at level 1 (session 59)


@dataclass(frozen=True, slots=True)
class UnrolledFloor:
    """The least II the unrolled relaxation does not refute (``ii``); ``decided`` False where a probe ran out of
    work, so ``ii`` is only what was refuted."""

    ii: int
    decided: bool = True

    def sentence(self) -> str:
        return (f"the unrolled relaxation: below II {self.ii} no schedule of {2 * COPIES + 1} consecutive iterations "
                f"fits the units, in-order issue, hand-offs, TMEM and shared memory (registers left out)")


class UnrolledModel:
    """The relaxation's model with its variables: each op's issue in iteration 0, its group (membership and
    label), each stored value's lifetime."""

    def __init__(self, problem: Problem, options: SolveOptions, ii: int, copies: int, since: int) -> None:
        self.p, self.o, self.ii, self.m = problem, options, ii, cp_model.CpModel()
        self.copies = range(-copies, copies + 1)
        # a schedule at II' needs at most stage_bound(II') stages (bounds.stage_bound), which only grows as II' falls:
        # with the bound at ``since``, a schedule at any II' in [since, ii] stretched to ii (design.md §3.1g) fits
        self.horizon = horizon = (stage_bound(problem, since, not options.swp_only) + 2) * ii
        self.start = {op.name: self.m.new_int_var(-horizon, horizon, f"start[{op.name}]") for op in problem.ops}
        self.m.add(self.start[problem.ops[0].name] == 0)  # a schedule moved in time is the same schedule
        self.groups = range(min(options.max_groups, len(problem.ops))) if not options.swp_only else range(0)
        self.member: dict[tuple[str, int], cp_model.IntVar] = {}
        self.group_of: dict[str, cp_model.IntVar] = {}
        self.life: dict[str, cp_model.IntVar] = {}

    def intervals(self, name: str, offset: int, length: cp_model.LinearExprT, tag: str,
                  present: cp_model.IntVar | None = None) -> list[cp_model.IntervalVar]:
        """One interval per copy of op ``name``, from ``offset`` cycles after its issue, ``length`` long."""
        out = []
        for j in self.copies:
            begin = self.start[name] + offset + j * self.ii
            if isinstance(length, int):
                end: cp_model.LinearExprT = begin + length
            else:
                end = self.m.new_int_var(-8 * self.horizon, 8 * self.horizon, f"{tag}[{name}#{j}].end")
                self.m.add(end == begin + length)
            label = f"{tag}[{name}#{j}]"
            out.append(self.m.new_interval_var(begin, length, end, label) if present is None else
                       self.m.new_optional_interval_var(begin, length, end, present, label))
        return out

    def lifetime(self, name: str) -> cp_model.IntVar:
        """From the op's issue until its last reader is done (a value no one reads: its latency), as the model's."""
        if name not in self.life:
            ends = [(e.dst, e.distance * self.ii + read_time(e, self.p.op(e.dst))) for e in self.p.body.out_edges(name)]
            life = self.life[name] = self.m.new_int_var(0, 4 * self.horizon, f"life[{name}]")
            if not ends:
                self.m.add(life >= self.p.op(name).latency)
            for dst, delay in ends:
                self.m.add(life >= self.start[dst] + delay - self.start[name])
        return self.life[name]


def _groups(u: UnrolledModel) -> None:
    """Each op in one group (labels in order of first use), pinned where the options pin it; variable-latency ops
    apart from the rest."""
    if not u.groups:
        return
    gv = group_variables(u.m, u.p, u.groups)
    u.member, u.group_of = gv.member, gv.group_of
    for name, g in u.o.fixed_groups:
        u.m.add(u.group_of[name] == g)
    if u.o.isolate_variable_latency:
        isolate(u.m, u.p, u.groups, u.member)


def _dependences(u: UnrolledModel) -> list[tuple[int, cp_model.IntVar]]:
    """start[dst] + distance·II >= start[src] + latency, plus the hand-off where the groups differ; returns the
    staged bytes of each edge that may cross, with its same-group literal (for shared memory)."""
    staged = []
    for i, e in enumerate(u.p.edges):
        u.m.add(u.start[e.dst] + e.distance * u.ii >= u.start[e.src] + e.latency)
        cost, hb = u.p.cross_group_cost(e), u.p.handoff_bytes(e)
        if not u.groups or not (cost or hb or u.o.no_handoff):
            continue
        same = group_relation(u.m, u.group_of, e.src, e.dst, f"same[{e.src}->{e.dst}#{i}]")
        if u.o.no_handoff and e.carrier is Carrier.REGISTERS and u.p.op(e.src).regs > 0:
            u.m.add(same == 1)  # the option's restriction, as the joint model states it
        if cost:
            u.m.add(u.start[e.dst] + e.distance * u.ii >= u.start[e.src] + e.latency + cost).only_enforce_if(~same)
        if hb:
            staged.append((hb, same))
    return staged


def _in_order_issue(u: UnrolledModel) -> None:
    """A group's holds, over every copy, never overlap (design.md §2.7)."""
    for g in u.groups:
        holds = [iv for op in u.p.ops if u.p.hold(op.name)
                 for iv in u.intervals(op.name, 0, u.p.hold(op.name), f"hold{g}", u.member[op.name, g])]
        u.m.add_no_overlap(holds)


def _units(u: UnrolledModel) -> None:
    """Each unit serves at most its capacity at any cycle (uses that begin at issue; the rest are left out)."""
    by_unit: dict[str, list[tuple[list[cp_model.IntervalVar], int]]] = {}
    for op in u.p.ops:
        for k, use in enumerate(op.uses):
            if use.offset == 0:
                by_unit.setdefault(use.unit, []).append((u.intervals(op.name, 0, use.length, f"{use.unit}{k}"),
                                                         use.amount))
    for unit, items in sorted(by_unit.items()):
        cap = u.p.capacity[unit]
        if cap == 1 and all(a == 1 for _, a in items):
            u.m.add_no_overlap([iv for ivs, _ in items for iv in ivs])
        else:
            u.m.add_cumulative([iv for ivs, _ in items for iv in ivs], [a for ivs, a in items for _ in ivs], cap)


def _memories(u: UnrolledModel, staged: list[tuple[int, cp_model.IntVar]]) -> None:
    """TMEM holds every copy's live tiles at every cycle (and on average over one II); shared memory holds each
    ring's slots, the staged hand-offs and the static buffers (design.md §2.9)."""
    arch = u.p.arch
    tmem = [op for op in u.p.ops if op.tmem_cols]
    if tmem:
        intervals, demands = [], []
        for op in tmem:
            ivs = u.intervals(op.name, 0, u.lifetime(op.name), "tmem")
            intervals += ivs
            demands += [op.tmem_cols] * len(ivs)
        u.m.add_cumulative(intervals, demands, arch.limit("tmem_cols"))
        u.m.add(sum(op.tmem_cols * u.life[op.name] for op in tmem) <= arch.limit("tmem_cols") * u.ii)
    terms = []
    for op in u.p.ops:
        if op.smem_bytes:
            slots = u.m.new_int_var(0, 4 * u.horizon // u.ii + 1, f"slots[{op.name}]")
            u.m.add(u.lifetime(op.name) <= slots * u.ii)
            terms.append(op.smem_bytes * slots)
    terms += [hb * (1 - same) for hb, same in staged]
    if terms or u.p.body.static_smem:
        u.m.add(sum(terms) + u.p.body.static_smem <= arch.limit("smem_bytes_per_cta"))


def build_unrolled(problem: Problem, options: SolveOptions, ii: int, since: int | None = None,
                   copies: int = COPIES) -> UnrolledModel:
    """The unrolled relaxation at ``ii``: infeasible only where the joint problem is infeasible at every II in
    [``since``, ``ii``] (default: ``ii`` alone; the starts' horizon is the stage bound at ``since``)."""
    u = UnrolledModel(problem, options, ii, copies, ii if since is None else min(since, ii))
    _groups(u)
    staged = _dependences(u)
    _in_order_issue(u)
    _units(u)
    _memories(u, staged)
    return u


def decide(problem: Problem, options: SolveOptions, ii: int, since: int, work: Work,
           units: float = PROBE.at_least, copies: int = COPIES) -> int:
    """The relaxation at ``ii`` on one worker within ``units``: INFEASIBLE refutes every II in [``since``, ``ii``]."""
    return solver(work, units, 1, linearization=PROBE_LP).solve(build_unrolled(problem, options, ii, since, copies).m)


def solution(u: UnrolledModel, value: Callable[[cp_model.IntVar], int]) -> Assignment:
    """A relaxation solution read by ``value`` as the search's decisions, for ``hints.hint``: every op's start, moved
    so that the first begins at 0, and its group (no warps or budgets: the relaxation has none, and leaves registers
    out, so the joint model may still have to repair the rest, or find no schedule near it)."""
    starts = {n: value(x) for n, x in u.start.items()}
    first = min(starts.values())
    return Assignment(ii=u.ii, starts={n: t - first for n, t in starts.items()},
                      groups={n: value(x) for n, x in u.group_of.items()})


def registers_fit(problem: Problem, a: Assignment) -> bool:
    """Whether a relaxation solution's register values fit the register file on average: each held at least from its
    producer's issue to its last reader's issue (``bounds.register_capacity``; the relaxation leaves registers out).
    Where they do not, the joint model cannot keep the solution and must move it far: FA4 free at 2691 needs 0.68 of
    the file, random-regs-16010 at 4409 needs 3.6, and its completion finds nothing in 2.8 units (session 60)."""
    demand = 0
    for op in problem.ops:
        ends = [a.starts[e.dst] + e.distance * a.ii for e in problem.body.out_edges(op.name)
                if e.carrier is Carrier.REGISTERS]
        if op.regs and ends:
            demand += op.regs * (max(ends) - a.starts[op.name])
    return demand <= register_capacity(problem) * a.ii


def unrolled_floor(problem: Problem, options: SolveOptions, lo: int, hi: int, work: Work,
                   until: float | None = None) -> UnrolledFloor | None:
    """The least II in [lo, hi] that the unrolled relaxation does not refute, galloping up from ``lo`` as the
    structure floor does (``structure.gallop``), or None when it refutes nothing at ``lo``."""
    until = work.limit if until is None else until
    found = gallop(lambda ii: decide(problem, options, ii, lo, work), lo, hi,
                   lambda: work.left() > 0 and work.spent < until)
    return None if found is None else UnrolledFloor(*found)
