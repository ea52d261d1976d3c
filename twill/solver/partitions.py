"""Groupings that cut a topological order into runs of balanced issue work (issue 16).

On large bodies (40-80 ops) the first schedules come from the constructive scheduler under
groupings the structure relaxation proposes (``twill.solver.structure.propose_grouping``). Those
proposals meet every family on average at their target II, but place ops of one dependence chain
in groups that take turns with each other, so the schedule built under them waits on hand-offs
back and forth and ends far above the target (random-regs-16011, 80 ops: a proposal at II 7643
built at 9872). A warp-specialised kernel is usually a pipeline instead: each group runs a
contiguous stretch of the iteration's dataflow and hands its results forward. So this module cuts
the body's topological order into k runs, one warp group each, at the points that make the
largest run's issue work (the sum of its ops' holds: what in-order issue serialises, design.md
§2.7) least, among cuts whose hand-offs' staging fits shared memory beside one slot of every
ring. Variable-latency ops keep a group of their own (design.md §2.7). Deterministic, no solver.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import product

import networkx as nx

from twill.options import SolveOptions
from twill.problem import Problem

__all__ = ["pipeline_groupings"]

SHIFT = 6  # each cut is tried up to this many ops either side of its balanced position


def _order(problem: Problem, names: set[str]) -> list[str]:
    """``names`` in a topological order of the distance-0 dependences, ties by op index."""
    index = {op.name: i for i, op in enumerate(problem.ops)}
    g = nx.DiGraph()
    g.add_nodes_from(sorted(names, key=index.__getitem__))
    g.add_edges_from((e.src, e.dst) for e in problem.edges
                     if e.distance == 0 and e.src != e.dst and e.src in names and e.dst in names)
    return list(nx.lexicographical_topological_sort(g, key=index.__getitem__))


def _balanced_cuts(holds: list[int], k: int) -> list[int]:
    """Cut positions (run starts after the first) that split ``holds`` into k runs of near-equal sums."""
    total, acc, cuts = sum(holds), 0, []
    for i, h in enumerate(holds):
        if len(cuts) < k - 1 and i > 0 and acc >= total * (len(cuts) + 1) / k:
            cuts.append(i)
        acc += h
    return cuts


def _candidates(n: int, centre: list[int]) -> Iterator[tuple[int, ...]]:
    """Strictly increasing cut positions in [1, n - 1], each within ``SHIFT`` of its centre."""
    ranges = [range(max(1, c - SHIFT), min(n - 1, c + SHIFT) + 1) for c in centre]
    for cuts in product(*ranges):
        if all(a < b for a, b in zip(cuts, cuts[1:], strict=False)):
            yield cuts


def _runs(order: list[str], cuts: tuple[int, ...]) -> dict[str, int]:
    bounds = (0, *cuts, len(order))
    return {name: r for r in range(len(bounds) - 1) for name in order[bounds[r]:bounds[r + 1]]}


def _grouping(problem: Problem, order: list[str], apart: list[str], k: int) -> dict[str, int] | None:
    """The best cut of ``order`` into ``k`` runs (groups 1..k; ``apart`` in group 0), or None when
    the order is too short or no cut's hand-offs fit shared memory."""
    if k > len(order):
        return None
    holds = [problem.hold(n) for n in order]
    room = (problem.arch.limit("smem_bytes_per_cta") - problem.body.static_smem
            - sum(op.smem_bytes for op in problem.ops))  # one slot of every ring
    best: tuple[tuple[int, int], dict[str, int]] | None = None
    for cuts in _candidates(len(order), _balanced_cuts(holds, k)) if k > 1 else [()]:
        runs = _runs(order, cuts)
        groups = {**{n: 0 for n in apart}, **{n: r + 1 for n, r in runs.items()}}
        staged = sum(problem.handoff_bytes(e) for e in problem.edges if groups[e.src] != groups[e.dst])
        if staged > room:
            continue
        largest = max(sum(h for n, h in zip(order, holds, strict=True) if runs[n] == r) for r in range(k))
        key = (largest, staged)
        if best is None or key < best[0]:
            best = (key, groups)
    return None if best is None else best[1]


def pipeline_groupings(problem: Problem, options: SolveOptions, sizes: range) -> list[dict[str, int]]:
    """Groupings with k groups of fixed-latency work for each k in ``sizes``, each its topological order's
    best cut into k runs, distinct, within ``options.max_groups``.

    Examples
    --------
    >>> from twill.arch.registry import get_arch
    >>> from twill.frontend.programs import load_program
    >>> from twill.problem import build_problem
    >>> arch = get_arch("h100")
    >>> p = build_problem(load_program("fa_fwd", arch, {"subtiles": 2}), arch)
    >>> [max(g.values()) for g in pipeline_groupings(p, SolveOptions(), range(1, 4))]
    [1, 2, 3]
    """
    apart = [op.name for op in problem.ops if op.variable_latency and options.isolate_variable_latency]
    order = _order(problem, {op.name for op in problem.ops} - set(apart))
    out: list[dict[str, int]] = []
    for k in sizes:
        if k + (1 if apart else 0) > options.max_groups:
            break
        groups = _grouping(problem, order, apart, k)
        if groups is not None and groups not in out:
            out.append(groups)
    return out
