"""Logic-based Benders over groupings: refute one II by refuting every warp-group structure at it.

The joint model at a fixed II stalls where register peaks decide (docs/benchmarks_notes.md, "Where the search
stalls"), yet with the grouping fixed it often refutes at once. So at one II:

1. the structure relaxation (``twill.solver.structure``, a relaxation over groupings) proposes a grouping
   that meets its conditions and every cut so far; none left: the II is refuted;
2. the joint model at the II decides it with the grouping stated as assumptions on pair literals (two ops in
   one group, or not; labels do not enter, so a grouping and its relabellings are one), for a short slice;
3. refuted: CP-SAT's sufficient assumptions are a core, a set of pair relations no schedule at this II can
   meet together; the cut "at least one of them changes" goes into the structure model and the loop goes on.
   A core smaller than the grouping is solved again alone (``_holds``) before it cuts: CP-SAT's presolve can name
   the wrong assumptions (google/or-tools#5141); where the core does not refute alone, the cut is the relations
   among the ops of a deletion core (``_deletion_core``: ops whose subproblem alone, under the grouping, is still
   refuted), the whole grouping where nothing can be dropped;
4. undecided under assumptions: the joint model built with the grouping fixed (``SolveOptions.fixed_groups``,
   labels in first-use order as the model's label symmetry breaking has them) decides it. CP-SAT's presolve
   cannot fix assumption literals, so under assumptions it keeps every group's optional intervals and budget
   terms; with the grouping fixed it drops them: on random-regs-16009 at II 2013 a grouping undecided under
   assumptions after 8 units was refuted in 0.97 (docs/benchmarks_notes.md, "Benders with the grouping fixed",
   session 46).
   Refuted, the cut is the grouping itself (all its pair relations: a no-good); a schedule is carried over to
   the joint model by fixing its decisions there (a propagation);
5. a schedule ends the loop with that schedule, an undecided solve with nothing proven.

The cuts are pair relations, with no II in them: on a monotone problem one learned at II x holds at every II up to
x, so a loop starts from those the loops at or above its II learned (``Cuts``; design.md §3.1f, carried cuts).

Sound because every schedule at the II has a grouping, which the structure relaxation admits and which meets
no core; the joint model's symmetry breaking keeps one of every set of equivalent schedules, so a core refutes
only groupings whose schedules all have an equivalent one elsewhere, which the loop still has to refute.
Deterministic: every solve is on one worker within a deterministic budget. Measured on the suite in
docs/benchmarks_notes.md ("Benders over groupings in the bisection", issue 16).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

from ortools.sat.python import cp_model

from twill.bounds import rec_mii
from twill.options import SolveOptions
from twill.problem import Problem
from twill.solver import hints
from twill.solver.model import ScheduleModel, build_model, group_relation
from twill.solver.run import Solver, Work, solver
from twill.solver.structure import build_structure

__all__ = ["Cuts", "decide_by_groupings", "pair_literals"]

FEASIBLE = (cp_model.OPTIMAL, cp_model.FEASIBLE)
PROPOSE_UNITS = 1.0  # one proposal of the structure relaxation under the cuts (most take well under 0.1)
# The grouping under assumptions, for a core that cuts more than this grouping: where one came on the suite's
# register-bound bodies it came within 0.03-0.19 units (random-regs-16009 at II 2013: 0.04-0.19; random-handoff-16025
# at 2200: 0.03-0.05; session 46)
CORE_UNITS = 0.25
CARRY_UNITS = 1.0  # a fixed-grouping schedule's decisions fixed in the joint model: a propagation
# One subset's solve in a deletion core (``_deletion_core``): a subset the grouping cannot schedule is refuted at once
# where the whole grouping was (0.00-0.03 units on random-handoff-16524 at II 1843 and two-tile FA d64 h100 at 1107,
# docs/benchmarks_notes.md, session 87); one that holds a schedule runs this out
SUBSET_UNITS = 0.02


Cut = tuple[tuple[tuple[str, str], bool], ...]  # pair relations (both ops in one group, or not) no schedule meets together


@dataclass(slots=True)
class Cuts:
    """The cuts the loop has learned, each with the II it was learned at, for the loops at other IIs to start from.
    On a monotone problem a cut learned at II x holds at every II up to x: a schedule at a lower II stretches to x
    with its grouping, and the stretch keeps the joint model's symmetry breaking (design.md §3.1e, §3.1f carried
    cuts); elsewhere only at x itself. ``base``: how many it held when copied for a probe run beside others, so that
    ``merge`` takes only what that probe learned."""

    monotone: bool
    learned: list[tuple[int, Cut]] = field(default_factory=list)
    base: int = 0

    def at(self, ii: int) -> list[Cut]:
        """The cuts that hold at ``ii``."""
        return [cut for x, cut in self.learned if x == ii or (self.monotone and x > ii)]

    def learn(self, ii: int, cut: Cut) -> None:
        self.learned.append((ii, cut))

    def copy(self) -> Cuts:
        return Cuts(self.monotone, list(self.learned), len(self.learned))

    def merge(self, other: Cuts) -> None:
        """Take what ``other``, a copy of this store, learned since it was copied."""
        self.learned.extend(other.learned[other.base:])


def _relations(keys: list[tuple[str, str]], group: dict[str, int]) -> Cut:
    """The relations ``group`` gives the pairs ``keys``: a cut once they are refuted together."""
    return tuple((key, group[key[0]] == group[key[1]]) for key in keys)


def _clause(proposed: dict[tuple[str, str], cp_model.IntVar], cut: Cut) -> list[cp_model.LiteralT]:
    """At least one of the cut's relations changes."""
    return [~proposed[key] if same else proposed[key] for key, same in cut]


def pair_literals(m: cp_model.CpModel, group_of: dict[str, cp_model.IntVar],
                   names: list[str]) -> dict[tuple[str, str], cp_model.IntVar]:
    """A literal per pair of ops, true iff both sit in one group."""
    return {(a, b): group_relation(m, group_of, a, b, f"same[{a},{b}]") for a, b in itertools.combinations(names, 2)}


def decide_by_groupings(problem: Problem, options: SolveOptions, ii: int, work: Work, until: float,
                        per_grouping: float, cuts: Cuts | None = None) -> tuple[int, ScheduleModel | None, Solver | None]:
    """(CP-SAT status, model, solver) of the loop above at ``ii``, within the work mark ``until`` and
    ``per_grouping`` units per joint solve: INFEASIBLE when every grouping is refuted; FEASIBLE with the joint
    model at ``ii`` (its assumptions cleared) and the solver holding the schedule found under a grouping;
    UNKNOWN when a solve stayed undecided or the work ran out. ``cuts``: the master starts from those that hold at
    ``ii``, and what the loop learns goes there, even where it ends undecided."""
    if work.spent >= until or work.left() <= 0:  # out of work, or the wall-clock cap passed: build nothing
        return cp_model.UNKNOWN, None, None
    recurrence = rec_mii(problem)
    if recurrence is not None and ii < recurrence.ii:  # a dependence cycle outlasts its distance x II
        return cp_model.INFEASIBLE, None, None
    names = [op.name for op in problem.ops]
    s = build_structure(problem, options, ii)
    proposed = pair_literals(s.m, s.group_of, names)
    for cut in cuts.at(ii) if cuts is not None else ():
        s.m.add_bool_or(_clause(proposed, cut))
    v = build_model(problem, options, ii, ii)
    asked = pair_literals(v.m, v.group_of, names)
    key_of = {lit.index: key for key, lit in asked.items()}
    while work.spent < until and work.left() > 0:
        sv = solver(work, min(PROPOSE_UNITS, until - work.spent), 1)
        status = sv.solve(s.m)
        if status == cp_model.INFEASIBLE:
            return cp_model.INFEASIBLE, None, None
        if status not in FEASIBLE:
            break
        group = {n: sv.value(s.group_of[n]) for n in names}
        status, js = _under_assumptions(v, asked, group, work, min(CORE_UNITS, per_grouping, until - work.spent))
        if status in FEASIBLE:
            return cp_model.FEASIBLE, v, js
        if status == cp_model.INFEASIBLE:
            core = [key_of[_var(i)] for i in js.sufficient_assumptions_for_infeasibility() if _var(i) in key_of]
            if len(core) < len(asked) and not _holds(v, asked, group, core, work,
                                                     min(CORE_UNITS, until - work.spent)):
                kept = _deletion_core(problem, options, ii, group, work, until)  # not by CP-SAT's core
                core = [key for key in asked if key[0] in kept and key[1] in kept]
            if not core:  # infeasible whatever the grouping
                return cp_model.INFEASIBLE, None, None
        else:
            status, js = _fixed_grouping(problem, options, ii, v, group, work, min(per_grouping, until - work.spent))
            if status in FEASIBLE:
                return (cp_model.FEASIBLE, v, js) if js is not None else (cp_model.UNKNOWN, None, None)
            if status != cp_model.INFEASIBLE:
                break
            core = list(asked)  # the grouping itself
        cut = _relations(core, group)
        s.m.add_bool_or(_clause(proposed, cut))
        if cuts is not None:
            cuts.learn(ii, cut)
    return cp_model.UNKNOWN, None, None


def _under_assumptions(v: ScheduleModel, asked: dict[tuple[str, str], cp_model.IntVar], group: dict[str, int],
                       work: Work, units: float, keys: list[tuple[str, str]] | None = None) -> tuple[int, Solver | None]:
    """(status, solver) of the joint model ``v`` with ``group``'s relations on the pairs ``keys`` (default: every
    pair) stated as assumptions on its pair literals, for ``units`` (none: UNKNOWN, nothing solved); the
    assumptions are cleared after."""
    if units <= 0:
        return cp_model.UNKNOWN, None
    js = solver(work, units, 1, linearization=2)
    stated = _relations(list(asked) if keys is None else keys, group)
    v.m.add_assumptions([asked[key] if same else ~asked[key] for key, same in stated])
    status = js.solve(v.m)
    v.m.clear_assumptions()
    return status, js


def _holds(v: ScheduleModel, asked: dict[tuple[str, str], cp_model.IntVar], group: dict[str, int],
           core: list[tuple[str, str]], work: Work, units: float) -> bool:
    """Whether ``core``, the pair relations CP-SAT named as enough to refute ``group``, refutes the joint model
    alone: solved under those assumptions only, within ``units``. Why: CP-SAT 9.15's presolve can map the
    sufficient assumptions wrongly (google/or-tools#5141); on held-out random-handoff-17159 (h100, 23 ops) at II
    2025 it named one relation (b0_load and b0_mma0 in different groups) that a valid schedule at 2025 meets, and
    the cut refuted 2025 and every II under it (docs/benchmarks_notes.md, session 86)."""
    return _under_assumptions(v, asked, group, work, units, core)[0] == cp_model.INFEASIBLE


def _deletion_core(problem: Problem, options: SolveOptions, ii: int, group: dict[str, int], work: Work,
                   until: float) -> set[str]:
    """Ops whose joint model alone (``_alone``), under ``group`` restricted to them, is refuted at ``ii``: whole groups
    dropped first, then one op at a time, each drop kept where the smaller subproblem is still refuted within
    ``SUBSET_UNITS`` (an undecided one keeps the ops, so the set stays a core, only a larger one). Why: where CP-SAT's
    core does not refute alone, the grouping itself was the cut, which excludes one partition of a space that grows
    as the Bell numbers; on random-handoff-16524 at II 1843 every core but one failed that check, and the loop
    refuted 98 groupings one by one in 27.9 units, with these cores in 7.7 (12.9 at 0.1 units a subset;
    docs/benchmarks_notes.md, session 87). Sound: the ops and the edges dropped only take constraints away (units,
    registers, warps, memories and in-order issue are sums and orders over the ops kept), so a schedule of the whole
    body under a grouping that keeps these ops' relations restricts to a schedule of the subproblem, which is
    refuted."""
    kept = [op.name for op in problem.ops]
    drops = [{n for n in kept if group[n] == g} for g in sorted(set(group.values()))]
    drops += [{n} for n in kept]
    for drop in drops:
        trial = [n for n in kept if n not in drop]
        units = min(SUBSET_UNITS, until - work.spent, work.left())
        if not trial or len(trial) == len(kept) or units <= 0:
            continue
        if _fixed_grouping_status(_alone(problem, trial), options, ii, group, work, units) == cp_model.INFEASIBLE:
            kept = trial
    return set(kept)


def _alone(problem: Problem, ops: list[str]) -> Problem:
    """The subproblem of ``ops`` alone: the other ops and every edge touching them dropped."""
    keep, body = set(ops), problem.body
    sub = replace(body, ops=tuple(o for o in body.ops if o.name in keep),
                  edges=tuple(e for e in body.edges if e.src in keep and e.dst in keep))
    return replace(problem, body=sub)


def _fixed_grouping_status(problem: Problem, options: SolveOptions, ii: int, group: dict[str, int], work: Work,
                           units: float) -> int:
    """CP-SAT's status for the joint model of ``problem`` at ``ii`` built with ``group`` fixed, within ``units``."""
    return solver(work, units, 1, linearization=2).solve(_fixed_model(problem, options, ii, group).m)


def _fixed_model(problem: Problem, options: SolveOptions, ii: int, group: dict[str, int]) -> ScheduleModel:
    """The joint model at ``ii`` built with ``group`` fixed, labels in first-use order as the model's label symmetry
    breaking has them."""
    labels = hints.first_use_labels(problem, group)
    fixed = tuple((op.name, labels[group[op.name]]) for op in problem.ops)
    return build_model(problem, replace(options, fixed_groups=fixed), ii, ii)


def _fixed_grouping(problem: Problem, options: SolveOptions, ii: int, v: ScheduleModel, group: dict[str, int],
                    work: Work, units: float) -> tuple[int, Solver | None]:
    """(status, solver) of the joint model at ``ii`` built with ``group`` fixed: on a schedule, the solver holds it
    as a solution of ``v`` (its decisions fixed there), or None where ``v`` does not take it: the fixed model leaves
    out the mirror-image cuts (§2.8c), so its schedule may be the twin ``v`` cuts off. Its refutation is ``v``'s
    under ``group`` all the same: it only has fewer constraints."""
    f = _fixed_model(problem, options, ii, group)
    fs = solver(work, units, 1, linearization=2)
    status = fs.solve(f.m)
    if status not in FEASIBLE:
        return status, None
    js = solver(work, CARRY_UNITS, 1)
    return status, (js if js.solve(hints.pinned(v, hints.read(f, fs.value, budgets=True))) in FEASIBLE else None)


def _var(literal: int) -> int:
    """The variable index of a literal index (CP-SAT writes the negation of x as -x - 1)."""
    return literal if literal >= 0 else -literal - 1
