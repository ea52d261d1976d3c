"""Lower bounds on the initiation interval II, each with what binds it.

ResMII: a unit of capacity c used for W unit-cycles per iteration needs II >= ceil(W / c).
RecMII: a dependence cycle with total latency D and total distance k needs II >= ceil(D / k); the
bound is the exact maximum cycle ratio, found as the least integer II for which the graph with
edge weights latency - II * distance has no positive cycle (Bellman-Ford via networkx), with the
critical recurrence read off a positive cycle at II - 1. See docs/design.md §3.1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import networkx as nx

from .problem import Problem

__all__ = ["UnitBound", "Recurrence", "Bounds", "res_mii", "rec_mii", "compute_bounds"]


@dataclass(frozen=True, slots=True)
class UnitBound:
    unit: str
    work: int  # unit-cycles reserved per iteration
    capacity: int

    @property
    def ii(self) -> int:
        return math.ceil(self.work / self.capacity)


@dataclass(frozen=True, slots=True)
class Recurrence:
    ops: tuple[str, ...]  # the critical cycle, in order
    latency: int
    distance: int

    @property
    def ii(self) -> int:
        return math.ceil(self.latency / self.distance) if self.distance else 0


@dataclass(frozen=True, slots=True)
class Bounds:
    units: tuple[UnitBound, ...]  # sorted, tightest first
    recurrence: Recurrence | None

    @property
    def res_mii(self) -> int:
        return max((u.ii for u in self.units), default=0)

    @property
    def rec_mii(self) -> int:
        return self.recurrence.ii if self.recurrence else 0

    @property
    def mii(self) -> int:
        return max(self.res_mii, self.rec_mii, 1)

    def binding(self) -> str:
        """A sentence naming what binds the larger bound."""
        if self.recurrence and self.rec_mii >= self.res_mii:
            ops = " -> ".join(self.recurrence.ops)
            return (f"recurrence {ops} (latency {self.recurrence.latency} over "
                    f"distance {self.recurrence.distance})")
        if self.units:
            u = self.units[0]
            return f"unit {u.unit!r} ({u.work} unit-cycles per iteration, capacity {u.capacity})"
        return "nothing (no unit work, no recurrence)"


def res_mii(problem: Problem) -> tuple[UnitBound, ...]:
    """Per-unit resource bounds, tightest first."""
    work: dict[str, int] = {}
    for op in problem.ops:
        for use in op.uses:
            work[use.unit] = work.get(use.unit, 0) + use.amount * use.length
    bounds = [UnitBound(u, w, problem.capacity[u]) for u, w in work.items()]
    return tuple(sorted(bounds, key=lambda b: (-b.ii, b.unit)))


def _weighted_graph(problem: Problem, ii: int) -> nx.DiGraph:
    """Edge weight = the most constraining parallel edge's (ii * distance - latency)."""
    g = nx.DiGraph()
    g.add_nodes_from(op.name for op in problem.ops)
    for e in problem.edges:
        w = ii * e.distance - e.latency
        if not g.has_edge(e.src, e.dst) or w < g[e.src][e.dst]["weight"]:
            g.add_edge(e.src, e.dst, weight=w)
    return g


def _has_positive_cycle(problem: Problem, ii: int) -> bool:
    return nx.negative_edge_cycle(_weighted_graph(problem, ii), weight="weight")


def rec_mii(problem: Problem) -> Recurrence | None:
    """The critical recurrence (exact maximum cycle ratio, rounded up), or None if acyclic."""
    if not any(e.distance > 0 for e in problem.edges):
        return None
    hi = sum(e.latency for e in problem.edges) + 1
    if not _has_positive_cycle(problem, 0):
        return None  # every recurrence has total latency 0: it never limits II
    lo = 0  # invariant: positive cycle at lo, none at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _has_positive_cycle(problem, mid):
            lo = mid
        else:
            hi = mid
    return _critical_cycle(problem, lo)


def _critical_cycle(problem: Problem, ii: int) -> Recurrence:
    """A cycle whose latency-to-distance ratio exceeds ``ii``."""
    g = _weighted_graph(problem, ii)
    g.add_node("__source__")
    for n in list(g.nodes):
        if n != "__source__":
            g.add_edge("__source__", n, weight=0)
    cycle = nx.find_negative_cycle(g, "__source__", weight="weight")
    return _recurrence(problem, [n for n in cycle[:-1] if n != "__source__"], ii)


def _recurrence(problem: Problem, cycle: list[str], ii: int) -> Recurrence:
    latency = distance = 0
    for i, src in enumerate(cycle):
        dst = cycle[(i + 1) % len(cycle)]
        # the parallel edge that made this cycle positive: the tightest one at this II
        best = min((e for e in problem.edges if e.src == src and e.dst == dst),
                   key=lambda e: ii * e.distance - e.latency)
        latency += best.latency
        distance += best.distance
    return Recurrence(tuple(cycle), latency, distance)


def compute_bounds(problem: Problem) -> Bounds:
    return Bounds(res_mii(problem), rec_mii(problem))
