"""Fixed warp-group strategies that compilers use, as op -> group assignments a solve can impose.

Triton's automatic warp specialisation puts the variable-latency loads on a producer group and
everything else on one consumer group; ``twill compare`` and the IMS baseline both impose it.
FlashAttention-3 and CUTLASS's cooperative kernels split the consumer further, one warpgroup per
independent row sub-tile; ``consumer_components`` is that split, read off the dependence graph.
"""

from __future__ import annotations

import networkx as nx

from twill.problem import Problem

__all__ = ["producer_consumer_split", "consumer_components"]


def producer_consumer_split(problem: Problem) -> tuple[tuple[str, int], ...]:
    """Triton's warp specialisation: variable-latency loads on a producer group, everything else
    on one consumer group; labels follow the order in which the groups first appear."""
    role = {op.name: "producer" if op.variable_latency else "consumer" for op in problem.ops}
    labels: dict[str, int] = {}
    for op in problem.ops:
        labels.setdefault(role[op.name], len(labels))
    return tuple((op.name, labels[role[op.name]]) for op in problem.ops)


def consumer_components(problem: Problem) -> tuple[tuple[str, int], ...]:
    """Variable-latency loads on a producer group and one consumer group per connected component
    of the other ops' dependences (a sub-tile's chain shares no value with another sub-tile's, only
    the loads): FlashAttention-3's consumer warpgroups. Labels follow first appearance; a body
    whose consumer ops are all connected gets Triton's split."""
    consumers = [op.name for op in problem.ops if not op.variable_latency]
    graph = nx.Graph()
    graph.add_nodes_from(consumers)
    graph.add_edges_from((e.src, e.dst) for e in problem.edges if e.src in graph and e.dst in graph)
    component = {name: i for i, names in enumerate(nx.connected_components(graph)) for name in names}
    labels: dict[object, int] = {}
    out = []
    for op in problem.ops:
        key = "producer" if op.variable_latency else component[op.name]
        out.append((op.name, labels.setdefault(key, len(labels))))
    return tuple(out)
