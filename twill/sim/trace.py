"""What a simulation run did: spans of unit occupancy and group activity, and issue times.

A ``Span`` is one interval of one (op, iteration): ``busy`` on a unit, ``issue`` (an async op's
issue slots) or ``hold`` (a sync op's busy span) on its warp group, or ``wait`` while the group
is stalled before issuing it. ``Trace`` keeps them in issue order with each (op, iteration)'s
issue cycle, which is what tests and plots compare against the static schedule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from twill.timeline import Span

__all__ = ["Span", "Trace", "SPAN_KINDS"]

SPAN_KINDS = ("busy", "issue", "hold", "wait")


@dataclass(frozen=True, slots=True)
class Trace:
    """Every span of a run and the issue cycle of every (op, iteration)."""

    spans: tuple[Span, ...]
    issues: Mapping[tuple[str, int], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "issues", MappingProxyType(dict(self.issues)))

    def issue(self, op: str, iteration: int) -> int:
        return self.issues[op, iteration]

    def iteration(self, k: int) -> dict[str, int]:
        """Issue cycles of iteration ``k``, by op."""
        return {op: t for (op, i), t in self.issues.items() if i == k}

    def timeline(self) -> list[tuple[str, int, int]]:
        """(op, iteration, issue cycle) sorted by cycle, then iteration, then op."""
        return sorted(((op, i, t) for (op, i), t in self.issues.items()), key=lambda x: (x[2], x[1], x[0]))

    def of(self, kind: str) -> tuple[Span, ...]:
        return tuple(s for s in self.spans if s.kind == kind)
