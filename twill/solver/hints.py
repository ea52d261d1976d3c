"""Schedules in flight between the search's phases, and the hints one phase gives the next.

A phase that finds a schedule of a relaxation or of the full model hands it on as an
``Assignment`` (``twill.solver.assemble``): II, starts, and, where it has them, groups, warps and
registers. The next model starts from it (``hint``): a relaxation's schedule only has to be
repaired for the families the relaxation left out, which is far quicker than a cold search.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

import networkx as nx
from ortools.sat.python import cp_model

from twill.problem import Problem
from twill.solver.assemble import Assignment
from twill.solver.model import ScheduleModel

__all__ = ["read", "from_schedule", "pinned", "hint", "hint_rescaled", "hint_moved", "hint_solution", "solution_of", "short_stage_bound", "first_use_labels",
           "pressure_objective", "stages_first", "solve_stages_first"]

Value = Callable[[cp_model.IntVar], int]


def read(v: ScheduleModel, value: Value, budgets: bool = False) -> Assignment:
    """II, starts and groups of a solution of ``v`` (with ``budgets``, also each group's warps and
    registers), read through ``value``: a solver's ``value`` or a recorded solution's."""
    warps = {g: int(value(x)) for g, x in enumerate(v.warps)} if budgets else {}
    regs = {g: int(value(x)) for g, x in enumerate(v.regs)} if budgets else {}
    return Assignment(ii=int(value(v.ii)), starts={n: int(value(x)) for n, x in v.start.items()},
                      groups={n: int(value(x)) for n, x in v.group_of.items()}, warps=warps, regs=regs)


def from_schedule(problem: Problem, sched) -> Assignment:
    """A ``Schedule`` (a heuristic's) as an ``Assignment`` whose group labels follow the model's
    first-use order, so it can hint a model with label symmetry breaking."""
    order = first_use_labels(problem, {op.id: op.group for op in sched.ops})
    return Assignment(ii=sched.ii, starts={op.id: op.start for op in sched.ops},
                      groups={op.id: order[op.group] for op in sched.ops} if sched.groups else {},
                      warps={order[g.id]: g.warps for g in sched.groups},
                      regs={order[g.id]: g.regs_per_thread or 0 for g in sched.groups})


def decisions(v: ScheduleModel, a: Assignment, starts: bool = True) -> Iterator[tuple[cp_model.IntVar, int]]:
    """(variable, value) for ``a``'s starts (unless ``starts`` is off), and its groups, warps and
    registers where ``v`` has them: what a schedule decides; the model's other variables follow."""
    for name, var in v.start.items() if starts else ():
        yield var, a.starts[name]
    for name, var in v.group_of.items():
        if name in a.groups:  # none from a relaxation without warp groups
            yield var, a.groups[name]
    for given, variables in ((a.warps, v.warps), (a.regs, v.regs)):
        for g, value in given.items():
            if g < len(variables):  # none in a pure modulo-scheduling model
                yield variables[g], value


def pinned(v: ScheduleModel, a: Assignment) -> cp_model.CpModel:
    """A copy of ``v``'s model with ``a``'s II and decisions fixed: solved, a propagation that completes the
    schedule into every variable of ``v`` (the copy keeps ``v``'s variable indices)."""
    c = v.m.clone()
    for x, value in ((v.ii, a.ii), *decisions(v, a)):
        c.add(c.get_int_var_from_proto_index(x.index) == value)
    return c


def hint(v: ScheduleModel, a: Assignment, starts: bool = True) -> None:
    """Hint ``v`` with ``a``'s starts (unless ``starts`` is off: ``hint_rescaled`` gives them), and
    its groups, warps and registers where it has them."""
    for var, value in decisions(v, a, starts):
        v.m.add_hint(var, value)


def hint_rescaled(v: ScheduleModel, a: Assignment, ii: int) -> None:
    """Hint ``v`` with ``a`` moved to II ``ii``: each op keeps its stage and the same fraction of
    the II circle. A schedule a few cycles away is then a short repair."""
    for name, start in a.starts.items():
        stage, offset = divmod(start, a.ii)
        offset = min(ii - 1, round(offset * ii / a.ii))
        v.m.add_hint(v.stage[name], stage)
        v.m.add_hint(v.offset[name], offset)
        v.m.add_hint(v.start[name], stage * ii + offset)


def hint_moved(v: ScheduleModel, a: Assignment, ii: int) -> None:
    """Hint ``v`` with ``a`` moved to II ``ii`` (``hint_rescaled``), groups, warps and budgets kept:
    where a cold search at one II is heavy-tailed, this is a short repair."""
    hint(v, a, starts=False)
    hint_rescaled(v, a, ii)


@contextmanager
def stages_first(v: ScheduleModel) -> Iterator[None]:
    """``v`` with a search strategy, taken off after: the ops' stages fixed first, in dependence order, each at
    its least value. Why: a solve that follows it (CP-SAT's FIXED_SEARCH) tries the shallowest pipelines first,
    where register lifetimes are short, while CP-SAT's own search wanders among deep stage assignments whose
    lifetimes no register file holds: random-regs-16508's II 1650 under its known grouping, undecided after 10
    units cold, is found in 0.00 this way; at fixed IIs under the best schedules of the suite's unproven rows it
    found schedules CP-SAT's search did not in 11 of 48 probes, in 0.02-0.70 units (``bench/staged_probe.py``,
    docs/benchmarks_notes.md, session 48)."""
    g = nx.DiGraph()
    names = [op.name for op in v.p.ops]
    g.add_nodes_from(names)
    g.add_edges_from((e.src, e.dst) for e in v.p.edges if e.distance == 0 and e.src != e.dst)
    order = nx.lexicographical_topological_sort(g, key=names.index)
    v.m.add_decision_strategy([v.stage[n] for n in order], cp_model.CHOOSE_FIRST, cp_model.SELECT_MIN_VALUE)
    try:
        yield
    finally:
        v.m.proto.search_strategy.clear()


def solve_stages_first(s: cp_model.CpSolver, v: ScheduleModel) -> int:
    """``s``'s status on ``v`` under CP-SAT's fixed search, the stages first (``stages_first``): the staged finder's
    one solve, wherever it runs (the staged descent, a bisection probe, bench/staged_probe.py)."""
    s.parameters.search_branching = cp_model.FIXED_SEARCH
    with stages_first(v):
        return s.solve(v.m)


def solution_of(s: cp_model.CpSolver) -> list[int]:
    """Every variable's value in ``s``'s last solution, in the model's order."""
    return [int(x) for x in s.response_proto.solution]


def hint_solution(v: ScheduleModel, solution: list[int]) -> None:
    """A complete hint: the model's last solution, variable by variable."""
    v.m.clear_hints()
    for i, value in enumerate(solution):
        v.m.add_hint(v.m.get_int_var_from_proto_index(i), value)


def short_stage_bound(problem: Problem, lo: int) -> int:
    """Stages a schedule needs when each iteration runs its longest dependence chain at full
    speed, plus slack: the small search space in which hints are looked for."""
    g = nx.DiGraph()
    g.add_nodes_from(op.name for op in problem.ops)
    for e in problem.edges:
        if e.distance == 0:
            w = e.latency + problem.cross_group_cost(e)
            if not g.has_edge(e.src, e.dst) or g[e.src][e.dst]["w"] < w:
                g.add_edge(e.src, e.dst, w=w)
    chain = nx.dag_longest_path_length(g, weight="w") if g.number_of_edges() else 0
    tail = max(max(op.latency, problem.hold(op.name)) for op in problem.ops)
    return math.ceil((chain + tail) / lo) + 2


def first_use_labels(problem: Problem, groups: Mapping[str, int]) -> dict[int, int]:
    """Group label -> the label the model allows: groups numbered in the order their first op
    appears (the model's label symmetry breaking, design.md §2.6)."""
    order: dict[int, int] = {}
    for op in problem.ops:
        order.setdefault(groups[op.name], len(order))
    return order


def pressure_objective(v: ScheduleModel) -> cp_model.LinearExprT:
    """Groups first, then register words weighted by how long they live: a relaxation schedule
    that minimises it fits the register budgets the relaxation left out more often."""
    words = [(op.regs // 64 or 1) * (v.lifetime_of(op)[0] * v.ii_hi + v.lifetime_of(op)[1])
             for op in v.p.ops if op.regs]
    weight = 1 + sum(op.regs // 64 or 1 for op in v.p.ops if op.regs) * (v.max_stage + 3) * v.ii_hi
    return weight * v.objective_terms["groups"] + sum(words)
