"""Baselines a compiler would use, solved on the same model and set beside the optimum.

Each strategy is the joint model with restrictions (``SolveOptions.fixed_groups``,
``single_stage``), so its II can never beat the proven optimum and every schedule it prints passes
the same validator. ``rows`` gives the table ``twill compare`` prints.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from .errors import InfeasibleError
from .problem import Problem
from .schedule import Schedule
from .solver import SolveOptions, solve
from .solver.search import producer_consumer_split

__all__ = ["StrategyResult", "triton_split", "compare"]


@dataclass(frozen=True, slots=True)
class StrategyResult:
    strategy: str
    schedule: Schedule | None
    seconds: float
    note: str = ""


def triton_split(problem: Problem) -> tuple[tuple[str, int], ...]:
    """Triton's warp specialisation: loads on a producer group, everything else on one consumer."""
    return producer_consumer_split(problem)


def _run(name: str, problem: Problem, options: SolveOptions) -> StrategyResult:
    t = time.monotonic()
    try:
        return StrategyResult(name, solve(problem, options), time.monotonic() - t)
    except InfeasibleError as err:
        return StrategyResult(name, None, time.monotonic() - t, str(err).split(": ", 1)[-1])


def compare(problem: Problem, options: SolveOptions) -> list[StrategyResult]:
    """The optimum, then: SWP with Triton's fixed warp split, and warp specialisation without a
    cross-iteration software pipeline."""
    return [
        _run("twill (joint optimum)", problem, options),
        _run("SWP, then Triton's fixed warp split", problem, replace(options, fixed_groups=triton_split(problem))),
        _run("warp specialization, no cross-iteration pipelining", problem, replace(options, single_stage=True)),
    ]
