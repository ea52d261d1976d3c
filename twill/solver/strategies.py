"""Fixed warp-group strategies that compilers use, as op -> group assignments a solve can impose.

Triton's automatic warp specialisation puts the variable-latency loads on a producer group and
everything else on one consumer group; ``twill compare`` and the IMS baseline both impose it.
"""

from __future__ import annotations

from twill.problem import Problem

__all__ = ["producer_consumer_split"]


def producer_consumer_split(problem: Problem) -> tuple[tuple[str, int], ...]:
    """Triton's warp specialisation: variable-latency loads on a producer group, everything else
    on one consumer group; labels follow the order in which the groups first appear."""
    role = {op.name: "producer" if op.variable_latency else "consumer" for op in problem.ops}
    labels: dict[str, int] = {}
    for op in problem.ops:
        labels.setdefault(role[op.name], len(labels))
    return tuple((op.name, labels[role[op.name]]) for op in problem.ops)
