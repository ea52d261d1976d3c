"""Fixed warp-group strategies that compilers use, as op -> group assignments a solve can impose.

Triton's automatic warp specialisation puts the variable-latency loads on a producer group and
everything else on one consumer group; ``twill compare`` and the IMS baseline both impose it.
FlashAttention-3 and CUTLASS's cooperative kernels split the consumer further, one warpgroup per
independent row sub-tile; ``consumer_components`` is that split, read off the dependence graph.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import networkx as nx

from twill.problem import Problem

__all__ = ["producer_consumer_split", "consumer_components", "packed_components"]


def producer_consumer_split(problem: Problem) -> tuple[tuple[str, int], ...]:
    """Triton's warp specialisation: variable-latency loads on a producer group, everything else
    on one consumer group; labels follow the order in which the groups first appear."""
    return _labelled(problem, lambda name: "consumer")


def consumer_components(problem: Problem) -> tuple[tuple[str, int], ...]:
    """Variable-latency loads on a producer group and one consumer group per connected component
    of the other ops' dependences (a sub-tile's chain shares no value with another sub-tile's, only
    the loads): FlashAttention-3's consumer warpgroups. Labels follow first appearance; a body
    whose consumer ops are all connected gets Triton's split."""
    graph = nx.Graph()
    graph.add_nodes_from(op.name for op in problem.ops if not op.variable_latency)
    graph.add_edges_from((e.src, e.dst) for e in problem.edges if e.src in graph and e.dst in graph)
    component = {name: i for i, names in enumerate(nx.connected_components(graph)) for name in names}
    return _labelled(problem, component.__getitem__)


def packed_components(problem: Problem, k: int, least: int = 2) -> tuple[tuple[str, int], ...] | None:
    """``consumer_components`` with the components packed onto at most ``k`` consumer groups: the largest hold first
    onto the least loaded group, so that many small independent chains (eight in random-handoff-16026) share a few
    warpgroups evenly instead of taking a warpgroup each or all one; None where the body has fewer than ``least``
    components. Labels as ``_labelled``'s."""
    component = dict(consumer_components(problem))
    members: dict[int, list[str]] = {}
    for op in problem.ops:
        if not op.variable_latency:
            members.setdefault(component[op.name], []).append(op.name)
    if len(members) < max(least, 2):
        return None
    holds = [0] * min(k, len(members))
    group: dict[str, int] = {}
    for names in sorted(members.values(), key=lambda ns: (-sum(problem.hold(n) for n in ns), ns)):
        g = holds.index(min(holds))
        holds[g] += sum(problem.hold(n) for n in names)
        group.update((n, g) for n in names)
    return _labelled(problem, group.__getitem__)


def _labelled(problem: Problem, consumer: Callable[[str], Hashable]) -> tuple[tuple[str, int], ...]:
    """op -> group: the variable-latency loads share the producer group, every other op goes to the
    group ``consumer`` names; labels in order of first appearance."""
    labels: dict[Hashable, int] = {}
    return tuple((op.name, labels.setdefault(("producer",) if op.variable_latency else consumer(op.name), len(labels)))
                 for op in problem.ops)
