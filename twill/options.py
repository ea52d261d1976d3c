"""What a solve is asked for: the objectives in order, the constraint families, limits and ablations.

Every backend (CP-SAT, z3, the exhaustive reference, the IMS heuristic) reads the same options, so
they live beside ``Problem`` and not inside any one backend's model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from twill.errors import TwillError

__all__ = ["OBJECTIVES", "UNITS_PER_SECOND", "SolveOptions", "default_work", "pin_groups"]

OBJECTIVES = ("ii", "groups", "handoffs", "regs", "length")
UNITS_PER_SECOND = 0.25  # deterministic work per second of the wall-clock cap, by default (``default_work``)


@dataclass(frozen=True, slots=True, kw_only=True)
class SolveOptions:
    """What to optimise and which constraint families to apply."""

    objective: tuple[str, ...] = OBJECTIVES
    swp_only: bool = False  # pure modulo scheduling: no groups, registers, hand-offs or memory
    time_limit: float = 120.0  # wall-clock safety cap in seconds: the solve returns by then, saying if it cut
    work_limit: float | None = None  # deterministic work (CP-SAT units) for the search; None: UNITS_PER_SECOND x time_limit
    phase_limit: float = 10.0  # deterministic units for each secondary objective (its proof may end it sooner)
    workers: int = 0  # CP-SAT search workers; 0 = one per core
    max_groups: int = 8
    max_warps: int | None = None  # ablation: fewer warps than the CTA allows
    no_handoff: bool = False  # ablation: no register value may cross warp groups
    isolate_variable_latency: bool = True
    fixed_groups: tuple[tuple[str, int], ...] = ()  # baseline strategies: op -> warp group, imposed
    single_stage: bool = False  # baseline: no cross-iteration pipelining (each iteration within II)
    progress: Callable[[str], None] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        unknown = [o for o in self.objective if o not in OBJECTIVES]
        if unknown or not self.objective or self.objective[0] != "ii" or len(set(self.objective)) != len(self.objective):
            raise TwillError(
                f"objective {','.join(self.objective)!r}: must start with 'ii' and then name, once each, any of "
                f"{', '.join(OBJECTIVES[1:])}"
            )
        if self.time_limit <= 0 or (self.work_limit is not None and self.work_limit <= 0):
            raise TwillError(f"time limit {self.time_limit:g} s / work limit {self.work_limit}: must be positive")
        if self.max_groups < 1:
            raise TwillError(f"max_groups {self.max_groups}: must be at least 1")

    @property
    def work(self) -> float:
        """The search's budget in deterministic units (``UNITS_PER_SECOND`` of the wall-clock cap
        by default)."""
        return self.work_limit if self.work_limit is not None else default_work(self.time_limit)


def default_work(time_limit: float) -> float:
    """The work budget that goes with a wall-clock cap: with two workers a unit takes 1.5-2.2 s of
    a quiet 2-core machine (docs/benchmarks_notes.md, "A reproducible search"), so the default budget
    is spent in about half the cap, and a machine with one CPU-burning process beside the solve
    (1.5x slower) still finishes the same work inside it; the answer then does not depend on the
    load (design.md §3). Under heavier load the cap cuts, and the result says so."""
    return UNITS_PER_SECOND * time_limit


def pin_groups(op_names: Sequence[str], spec: str) -> tuple[tuple[str, int], ...]:
    """``SolveOptions.fixed_groups`` from a text spec: groups separated by ``;``, each a comma list
    of op-name patterns (fnmatch: ``exc0_*``); every op must match exactly one group.

    The model numbers groups by first use in op order (label symmetry breaking, design.md §2.6),
    so the labels are renumbered that way; pinning a labelling it forbids would make every II
    infeasible.
    """
    groups = [[p.strip() for p in part.split(",") if p.strip()] for part in spec.split(";") if part.strip()]
    where: dict[str, int] = {}
    for name in op_names:
        hits = [g for g, pats in enumerate(groups) if any(fnmatchcase(name, p) for p in pats)]
        if len(hits) != 1:
            raise TwillError(f"groups {spec!r}: op {name!r} matches {len(hits)} groups; it must match exactly one")
        where[name] = hits[0]
    for g, pats in enumerate(groups):
        if g not in where.values():
            raise TwillError(f"groups {spec!r}: group {g} ({', '.join(pats)}) matches no op")
    label: dict[int, int] = {}
    for name in op_names:
        label.setdefault(where[name], len(label))
    return tuple((name, label[where[name]]) for name in op_names)
