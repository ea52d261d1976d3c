"""The sequential schedule: one iteration at a time, op after op, a schedule with no search.

Ops issue one after another in dependence order, each once the previous one is done with its
result, units and group, at an II above the iteration's length. Loads get a warp group of their
own and everything else shares one (or a caller's grouping, each group sized for its own peak).
It is far from optimal, but it needs no solver, so it is a first schedule within milliseconds
wherever its footprints fit (the validator says whether they do), and it proves that generated
bodies (``twill.random_loops``) are solvable.
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx

from twill.ir import Edge
from twill.options import SolveOptions
from twill.problem import Problem
from twill.schedule import Schedule
from twill.solver.assemble import Assignment, assemble, copies_needed, size_groups

__all__ = ["sequential_witness", "witness_ii", "witness_order"]


def witness_order(names: list[str], edges: list[Edge] | tuple[Edge, ...]) -> list[str]:
    """The witness's issue order: dependence order within an iteration, ties by body order."""
    g = nx.DiGraph()
    g.add_nodes_from(names)
    g.add_edges_from((e.src, e.dst) for e in edges if e.distance == 0)
    return list(nx.lexicographical_topological_sort(g, key=names.index))


def _witness_groups(problem: Problem) -> dict[str, int]:
    """The witness's own grouping: variable-latency ops on one group, every other op on another."""
    groups = {op.name: (0 if op.variable_latency else 1) for op in problem.ops}
    return dict.fromkeys(groups, 0) if len(set(groups.values())) == 1 else groups


def _witness_plan(problem: Problem, groups: Mapping[str, int] | None = None) -> tuple[dict[str, int], dict[str, int], int]:
    """Starts (one op after another in dependence order), groups (``groups``, else the witness's
    own), and the smallest II at which every loop-carried dependence and every read ends within
    the next iteration's window."""
    groups = dict(groups) if groups is not None else _witness_groups(problem)
    order = witness_order([op.name for op in problem.ops], problem.edges)
    starts: dict[str, int] = {}
    free = 0
    for name in order:
        ready = [starts[e.src] + e.latency + (problem.cross_group_cost(e) if groups[e.src] != groups[e.dst] else 0)
                 for e in problem.body.in_edges(name) if e.distance == 0]
        starts[name] = max([free, *ready])
        free = starts[name] + max(problem.span(name, groups), 1)
    longest_read = max((e.latency + problem.cross_group_cost(e) for e in problem.edges), default=0)
    reads = max([op.latency for op in problem.ops] + [problem.hold_in(op.name, groups) for op in problem.ops])
    return starts, groups, free + longest_read + reads + 1


def witness_ii(problem: Problem) -> int:
    """The II of ``sequential_witness``: an upper bound on the optimal II of a generated body."""
    return _witness_plan(problem)[2]


def sequential_witness(problem: Problem, *, swp_only: bool = False, groups: Mapping[str, int] | None = None
                       ) -> Schedule:
    """A schedule with no overlap inside an iteration, which the profiles' footprints always fit.

    Ops issue one after another in dependence order; variable-latency ops get a warp group of
    their own (of the narrowest size they need), every other op shares one group of the widest
    size, with the largest register budget the register file allows next to the other group.
    It is not optimal; it proves that the body has a schedule (check it with ``validate``).

    ``groups`` (op -> label) imposes another grouping, each group sized after scheduling with the
    fewest register words that hold its peak (``size_groups``): where one group cannot hold every
    sub-tile's accumulator (FA forward with 2 sub-tiles at head_dim 256 on h100), a group per
    sub-tile can, and the first schedule is then still a matter of milliseconds. Such a grouping
    makes no sense without groups (``swp_only``); where no sizing fits, the groups get the
    witness's own sizes and the validator says what overflows.

    Examples
    --------
    >>> from twill.problem import build_problem
    >>> from twill.random_loops import random_body, tiny_arch
    >>> from twill.validate import validate
    >>> arch = tiny_arch(0)
    >>> p = build_problem(random_body(0, 5, profile="tiny"), arch)
    >>> validate(p, sequential_witness(p))
    []
    """
    if swp_only and groups is not None:
        raise ValueError("sequential_witness: a pure software-pipelining schedule has no warp groups")
    given = groups is not None
    starts, groups, ii = _witness_plan(problem, groups)
    options = SolveOptions(swp_only=swp_only)
    sized = size_groups(problem, options, starts, ii, groups) if given else None
    warps, regs = sized if isinstance(sized, tuple) else _witness_sizes(problem, groups)
    copies = {op.name: copies_needed(problem, starts, ii, op.name) for op in problem.ops
              if op.regs or op.smem_bytes or op.tmem_cols}
    a = Assignment(ii=ii, starts=starts, groups={} if swp_only else groups, warps={} if swp_only else warps,
                   regs={} if swp_only else regs, copies={} if swp_only else copies)
    return assemble(problem, options, a, optimal=False, proven_lb=1,
                    proof="feasible: a sequential schedule (twill.solver.sequential)",
                    proven={"ii": False}, seconds=0.0)


def _witness_sizes(problem: Problem, groups: Mapping[str, int]) -> tuple[dict[int, int], dict[int, int]]:
    """Warps and budgets by the witness's own rule: the last group the widest legal size and the
    largest budget the register file allows next to the others, each other group the narrowest
    size and the smallest budget."""
    arch = problem.arch
    warps: dict[int, int] = {}
    regs: dict[int, int] = {}
    budgets = sorted(arch.register_budgets())
    for g in sorted(set(groups.values())):
        members = [n for n, h in groups.items() if h == g]
        # no legal size when an op needs more warps than a capped wgmma allows: the widest need, which
        # the validator then rejects (the caller's answer is "no sequential schedule")
        legal = problem.group_sizes(members) or [max(problem.op(n).min_warps for n in members)]
        warps[g] = legal[-1] if g == max(groups.values()) else legal[0]
    per_budget = arch.reg_alloc_warps()  # setmaxnreg is per warpgroup: narrow groups pack into whole ones

    def charged(ws: list[int]) -> int:
        narrow = sum(w for w in ws if w < per_budget)
        return sum(w for w in ws if w >= per_budget) + per_budget * -(-narrow // per_budget)

    for g in sorted(warps):
        others = 32 * budgets[0] * charged([w for h, w in warps.items() if h != g])
        fitting = [r for r in budgets if 32 * warps[g] * r + others <= arch.limit("regs_per_sm")]
        regs[g] = fitting[-1] if g == max(warps) and fitting else budgets[0]
    return warps, regs
