"""Timelines: a schedule or a simulated run as a flat list of spans, the input of every drawing.

A ``Span`` says that something occupied one track of the machine over ``[start, end)`` cycles:
a functional unit (``kind="busy"``) or a warp group (``"hold"``/``"issue"`` while it issues,
``"wait"`` while it stalls). The static schedule and the simulator's trace are both lists of
spans, so the Gantt chart (``twill.viz.gantt``) and the Perfetto export (``twill.viz.perfetto``) draw
either one, and a claimed schedule can be laid next to what the simulator says happened.
"""

from __future__ import annotations

from dataclasses import dataclass

from twill.errors import UsageError
from twill.problem import Problem
from twill.schedule import Schedule

__all__ = ["Span", "KINDS", "static_spans"]

KINDS = ("busy", "hold", "issue", "wait")


@dataclass(frozen=True, slots=True)
class Span:
    """One occupation of a track over ``[start, end)`` cycles.

    ``unit`` is set for a functional unit's occupation, ``group`` for a warp group's; a span may
    carry both (a busy segment knows which group issued it), and a drawing puts it on its unit's
    track when ``unit`` is set and on its group's track otherwise.
    """

    op: str
    iteration: int
    group: int | None
    unit: str | None
    start: int
    end: int
    kind: str

    @property
    def cycles(self) -> int:
        return self.end - self.start


def static_spans(problem: Problem, schedule: Schedule, iterations: int = 3) -> list[Span]:
    """The spans the schedule claims for its first ``iterations`` iterations.

    Iteration i issues each op at ``start + i * II``; each reservation segment occupies its unit
    from ``offset`` for ``length`` cycles, and the op keeps its group busy for ``problem.hold``
    cycles (nothing when it holds 0: a bookkeeping op, or an async op with free issue).

    Examples
    --------
    >>> from twill.frontend.programs import load_program
    >>> from twill.problem import build_problem
    >>> from twill.arch.registry import get_arch
    >>> from twill.solver import SolveOptions, solve
    >>> arch = get_arch("h100")
    >>> p = build_problem(load_program("toy", arch), arch)
    >>> spans = static_spans(p, solve(p, SolveOptions(time_limit=10)), iterations=2)
    >>> sorted({(s.kind, s.unit or f"group {s.group}") for s in spans})
    [('busy', 'mufu'), ('busy', 'tc'), ('hold', 'group 0')]
    """
    if iterations < 0:
        raise UsageError(f"iterations {iterations}: must be >= 0")
    spans: list[Span] = []
    groups = {so.id: so.group for so in schedule.ops} if not schedule.swp_only else {}
    for i in range(iterations):
        for so in schedule.ops:
            issue = so.start + i * schedule.ii
            op = problem.op(so.id)
            for seg in op.uses:
                begin = issue + seg.offset
                spans.append(Span(so.id, i, so.group, seg.unit, begin, begin + seg.length, "busy"))
            hold = problem.hold_in(so.id, groups) if groups else problem.hold(so.id)
            if hold > 0:
                spans.append(Span(so.id, i, so.group, None, issue, issue + hold, "hold"))
    return spans
