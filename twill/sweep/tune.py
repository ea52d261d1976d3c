"""A sweep on a budget: Optuna's TPE sampler proposes which points to solve.

When the grid is larger than the solves one can afford (``--budget N``), a sequential
model-based optimiser picks the next points from the results so far, as BaCO does for compiler
autotuning. Optuna is well kept, pip-installable, and its ask/tell interface lets the proposals
run through the same engines and cache as a grid sweep. Proposals come in batches of a fixed
size (``batch``, not ``-j``), each batch told back in proposal order, so with a fixed seed the
points chosen do not depend on the engine or on which solve finished first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twill.arch.model import Arch
from twill.errors import TwillError
from twill.options import SolveOptions
from twill.sweep.cache import ResultCache
from twill.sweep.engines import Engine, InlineEngine
from twill.sweep.run import PointResult, Report, SweepResult, _Progress, evaluate, rank
from twill.sweep.source import ProgramSource
from twill.sweep.space import Space

__all__ = ["sweep_tuned"]

_ASKS_PER_POINT = 50  # proposals tried per new point before the sampler counts as converged


def _optuna() -> Any:
    try:
        import optuna
    except ImportError as err:
        raise TwillError("--budget needs Optuna: pip install 'twill[tune]'") from err
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def sweep_tuned(program: str | ProgramSource, arch: Arch, space: Space, options: SolveOptions, *, budget: int, batch: int = 4,
                seed: int = 0, engine: Engine | None = None, cache: ResultCache | None = None,
                report: Report | None = None, on_result: Callable[[PointResult], None] | None = None) -> SweepResult:
    """Solve at most ``budget`` distinct points of ``space``, chosen by TPE to maximise throughput.

    Stops early when the sampler keeps proposing points already solved (it has converged).
    """
    if budget < 1 or batch < 1:
        raise TwillError(f"--budget {budget} and --batch {batch}: both must be at least 1")
    optuna = _optuna()
    source = ProgramSource(program) if isinstance(program, str) else program
    engine = engine or InlineEngine()
    cache = cache or ResultCache(None)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    distributions = {n: optuna.distributions.CategoricalDistribution(list(vs))
                     for n, vs in space.choices().items() if len(vs) > 1}
    points = space.points()
    index = {tuple(p.items()): i for i, p in enumerate(points)}
    goal = min(budget, len(points))
    tracker = _Progress(report, goal, engine.workers, space.shown)
    results: dict[int, PointResult] = {}

    def seen(r: PointResult) -> None:
        tracker(r)
        if on_result:
            on_result(r)

    with engine:
        while len(results) < goal:
            proposals = _propose(study, distributions, points, index, results, min(batch, goal - len(results)))
            fresh = sorted({i for _, i in proposals if i not in results})
            if not fresh:
                break
            for r in evaluate(source, arch, [(i, points[i]) for i in fresh], options, engine, cache, seen):
                results[r.index] = r
            for trial, i in proposals:
                study.tell(trial, results[i].tflops or 0.0)
    return SweepResult(source.spec, arch.name, space, rank(results.values()), tracker.solved, tracker.done - tracker.solved)


def _propose(study: Any, distributions: dict[str, Any], points: list[dict[str, Any]], index: dict[tuple, int],
             results: dict[int, PointResult], want: int) -> list[tuple[Any, int]]:
    """Ask until ``want`` new points are proposed; a repeat of a solved point is told its value at
    once (it costs nothing), a repeat within the batch is told with the batch."""
    proposals: list[tuple[Any, int]] = []
    new: set[int] = set()
    for _ in range(_ASKS_PER_POINT * want):
        if len(new) >= want:
            break
        trial = study.ask(distributions)
        i = index[tuple({**points[0], **trial.params}.items())]
        if i in results:
            study.tell(trial, results[i].tflops or 0.0)
            continue
        proposals.append((trial, i))
        new.add(i)
    return proposals
