"""Run a sweep: build each point's body, take what the cache knows, solve the rest, rank.

Ranking is by predicted throughput: the useful FLOPs of one iteration (the program's
``flops(**params)``, see docs/writing-programs.md) over the II, scaled to the whole chip as in
``twill.estimate`` (one CTA per SM at the arch's clock). A point without a schedule ranks below
every point with one. Ties break on fewer SMEM bytes, then fewer registers, then the space's
order, so a ranking never depends on which worker finished first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from twill.arch.model import Arch
from twill.body_json import body_document
from twill.errors import ProgramError, TwillError
from twill.ir import LoopBody
from twill.options import SolveOptions
from twill.schedule import Schedule
from twill.sweep.cache import ResultCache, cache_key
from twill.sweep.engines import ArchRef, Engine, InlineEngine, Task
from twill.sweep.source import ProgramSource
from twill.sweep.space import Space

__all__ = ["PointResult", "SweepResult", "evaluate", "rank", "sweep_grid", "steady_tflops", "tensor_flops"]

Report = Callable[[str], None]
# Statuses in the order a table lists points that share a throughput (none, for the last three).
STATUS_ORDER = {"optimal": 0, "feasible": 1, "timeout": 2, "infeasible": 3, "invalid": 4, "error": 5}


@dataclass(frozen=True, slots=True, kw_only=True)
class PointResult:
    """One point's answer. Equality ignores wall-clock seconds and whether it came from the cache,
    so runs with different engines or caches compare equal exactly when the answers agree."""

    params: tuple[tuple[str, Any], ...]
    index: int  # position in the space's order (the last tie-break)
    status: str  # optimal | feasible | timeout | infeasible | invalid | error
    ii: int | None
    bound: int | None  # proven: no II below it exists (the II itself when optimal)
    static_bound: int | None  # bound_and_reason's bound, before any search
    binds: str  # what binds the static bound
    flops: float | None  # useful FLOPs of one iteration
    tflops: float | None  # predicted at II
    tflops_bound: float | None  # the most the point could reach: at its proven bound
    regs: int | None  # registers of the CTA (warps x 32 x budget, summed over groups)
    smem_bytes: int | None  # SMEM rings and hand-off buffers
    warps: int | None
    groups: int | None
    objectives_proven: bool = False  # II and every secondary objective (groups, registers, ...) proven
    message: str = ""
    key: str = ""
    seconds: float = field(default=0.0, compare=False)
    cached: bool = field(default=False, compare=False)

    def label(self, names: Iterable[str] | None = None) -> str:
        shown = dict(self.params) if names is None else {n: dict(self.params)[n] for n in names}
        return " ".join(f"{k}={v}" for k, v in shown.items()) or "(defaults)"

    @property
    def has_schedule(self) -> bool:
        return self.ii is not None


@dataclass(frozen=True, slots=True)
class SweepResult:
    """The ranked points, and how many were solved now versus read from the cache."""

    program: str
    arch: str
    space: Space
    ranked: tuple[PointResult, ...]
    solved: int
    from_cache: int

    @property
    def best(self) -> PointResult | None:
        return self.ranked[0] if self.ranked and self.ranked[0].has_schedule else None


@dataclass(frozen=True, slots=True)
class _Prepared:
    index: int
    params: dict[str, Any]
    body: LoopBody | None
    flops: float | None
    key: str
    error: str = ""


def steady_tflops(arch: Arch, flops: float, ii: int) -> float:
    """Chip throughput in TFLOP/s of a loop doing ``flops`` per ``ii`` cycles on every SM at once
    (``twill.estimate``'s model without the prologue and wave tail: the steady state)."""
    return flops / ii * float(arch.chip["sms"].value) * float(arch.chip["clock_mhz"].value) * 1e6 / 1e12


def tensor_flops(body: LoopBody, arch: Arch) -> float | None:
    """Fallback work of an iteration for programs without ``flops()``: tensor-core busy cycles
    times the arch's FLOP/clk. It over-counts tiles shorter than the MMA's full-rate M (their
    cycles are paid in full), so a program that knows its FLOPs should say so."""
    unit = arch.unit_for_pipeline("TC")
    if unit is None:
        return None
    cycles = sum(op.work(name) for op in body.ops for name in {unit.name, *unit.aliases})
    dtype = str(body.params.get("dtype", "fp16"))
    rate_key = f"tensor_flops_per_clk_{dtype}" if f"tensor_flops_per_clk_{dtype}" in arch.rates else \
        "tensor_flops_per_clk_fp16"
    return float(cycles * arch.rate(rate_key)) or None


def _prepare(source: ProgramSource, arch: Arch, options: SolveOptions, index: int, params: dict[str, Any]
             ) -> _Prepared:
    """Build one point's body (here: cheap, or one Triton compile) and its cache key; a point whose
    program refuses the parameters (``subtiles`` not dividing ``block_m``) is an ``invalid`` row,
    not a failed sweep."""
    try:
        body = source.build(arch, params)
    except TwillError as err:
        return _Prepared(index, params, None, None, "", str(err))
    try:
        flops = source.flops(params)
    except ProgramError as err:
        if "flops()" in str(err):  # the program's own hook failed: say so on its row
            return _Prepared(index, params, None, None, "", str(err))
        flops = None  # a frontend whose files are not twill program modules (an imported kernel): no hook
    if flops is None:
        flops = tensor_flops(body, arch)
    return _Prepared(index, params, body, flops, cache_key(body, arch, options))


def _result(arch: Arch, prep: _Prepared, outcome: dict[str, Any], cached: bool) -> PointResult:
    """A ``PointResult`` from a solve's JSON outcome (fresh or cached: the same code reads both)."""
    sched = Schedule.from_dict(outcome["schedule"], "cached schedule") if outcome.get("schedule") else None
    ii = sched.ii if sched else None
    bound = outcome.get("bound")
    regs = smem = warps = groups = None
    if sched is not None:
        budgets = [g.regs_per_thread for g in sched.groups]
        regs = sum(g.warps * 32 * g.regs_per_thread for g in sched.groups) if None not in budgets else None
        smem = sum(b.bytes for b in sched.buffers if b.memory == "smem")
        warps, groups = sum(g.warps for g in sched.groups), len(sched.groups)
    proven = sched is not None and sched.status == "optimal" and all(sched.options.get("objective_proven", {}).values())
    flops = prep.flops
    return PointResult(
        params=tuple(prep.params.items()), index=prep.index, status=outcome["status"], ii=ii, bound=bound,
        static_bound=outcome.get("static_bound"), binds=outcome.get("binds", ""), flops=flops,
        tflops=steady_tflops(arch, flops, ii) if flops and ii else None,
        tflops_bound=steady_tflops(arch, flops, bound) if flops and bound else None,
        regs=regs, smem_bytes=smem, warps=warps, groups=groups, objectives_proven=proven,
        message=outcome.get("message", ""), key=prep.key,
        seconds=float(outcome.get("seconds", 0.0)), cached=cached,
    )


def _cached(arch: Arch, prep: _Prepared, cache: ResultCache) -> PointResult | None:
    """The cached result of a point; an entry that no longer reads as a schedule is solved again."""
    hit = cache.get(prep.key)
    if hit is None:
        return None
    try:
        return _result(arch, prep, hit, cached=True)
    except (TwillError, KeyError, TypeError):
        return None


def _invalid(prep: _Prepared) -> PointResult:
    return PointResult(params=tuple(prep.params.items()), index=prep.index, status="invalid", ii=None, bound=None,
                       static_bound=None, binds="", flops=None, tflops=None, tflops_bound=None, regs=None,
                       smem_bytes=None, warps=None, groups=None, message=prep.error)


def rank_key(r: PointResult) -> tuple:
    """Best first: a schedule, the highest throughput, then fewer SMEM bytes and registers."""
    return (not r.has_schedule, -(r.tflops or 0.0), STATUS_ORDER.get(r.status, 9), r.smem_bytes or 0, r.regs or 0,
            r.index)


def rank(results: Iterable[PointResult]) -> tuple[PointResult, ...]:
    return tuple(sorted(results, key=rank_key))


class _Progress:
    """One stderr line per finished point: done/total, best so far, and time left (mean seconds of
    the points solved so far, times the points left, over the parallel solves)."""

    def __init__(self, report: Report | None, total: int, workers: int, names: tuple[str, ...]) -> None:
        self.report, self.total, self.workers, self.names = report, total, workers, names
        self.done, self.solved_seconds, self.solved = 0, 0.0, 0
        self.best: PointResult | None = None

    def __call__(self, r: PointResult) -> None:
        self.done += 1
        if not r.cached:
            self.solved += 1
            self.solved_seconds += r.seconds
        if r.has_schedule and (self.best is None or rank_key(r) < rank_key(self.best)):
            self.best = r
        if self.report is None:
            return
        what = f"II {r.ii} {r.status}" if r.has_schedule else r.status
        best = f"best {self.best.label(self.names)} {self.best.tflops or 0:.0f} TFLOP/s" if self.best else "no schedule yet"
        left = self.total - self.done
        eta = ""
        if left and self.solved:
            eta = f"; ~{_duration(self.solved_seconds / self.solved * left / self.workers)} left"
        source = "cached" if r.cached else f"{r.seconds:.1f} s"
        self.report(f"sweep [{self.done}/{self.total}] {r.label(self.names)}: {what} ({source}); {best}{eta}")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def evaluate(source: ProgramSource, arch: Arch, points: list[tuple[int, dict[str, Any]]], options: SolveOptions,
             engine: Engine, cache: ResultCache, progress: Callable[[PointResult], None] | None = None
             ) -> list[PointResult]:
    """Results of ``points`` (index, params): cached ones at once, the rest through ``engine``,
    each written to the cache as it arrives so that an interruption loses only running solves."""
    options = replace(options, progress=None)  # a callback neither pickles nor belongs in a worker
    ref = ArchRef.of(arch)
    prepared = [_prepare(source, arch, options, i, p) for i, p in points]
    out: list[PointResult] = []
    pending: dict[str, list[_Prepared]] = {}
    for prep in prepared:
        if prep.body is None:
            out.append(_invalid(prep))
        elif (cached := _cached(arch, prep, cache)) is not None:
            out.append(cached)
        else:
            pending.setdefault(prep.key, []).append(prep)  # two spellings of one body solve once
            continue
        if progress:
            progress(out[-1])
    tasks = [Task(key, body_document(preps[0].body), ref, options) for key, preps in pending.items()]
    for key, outcome in engine.run(tasks):
        if outcome["status"] != "error":  # an internal error is solved again next time, not remembered
            cache.put(key, pending[key][0].params, outcome)
        for n, prep in enumerate(pending[key]):
            r = _result(arch, prep, outcome, cached=n > 0)
            out.append(r)
            if progress:
                progress(r)
    return out


def sweep_grid(program: str | ProgramSource, arch: Arch, space: Space, options: SolveOptions, *,
               engine: Engine | None = None,
               cache: ResultCache | None = None, report: Report | None = None,
               on_result: Callable[[PointResult], None] | None = None) -> SweepResult:
    """Solve every point of ``space`` and rank them.

    Examples
    --------
    >>> from twill.arch.registry import get_arch
    >>> from twill.sweep.space import parse_space
    >>> space = parse_space(["block_m=64,128"], {"block_m": 128, "block_n": 256, "block_k": 64, "dtype": "fp16"})
    >>> result = sweep_grid("gemm", get_arch("h100"), space, SolveOptions(workers=1, time_limit=30))
    >>> [(r.label(["block_m"]), r.ii, r.status) for r in result.ranked]
    [('block_m=128', 1428, 'optimal'), ('block_m=64', 967, 'optimal')]
    """
    source = ProgramSource(program) if isinstance(program, str) else program
    engine = engine or InlineEngine()
    cache = cache or ResultCache(None)
    points = list(enumerate(space.points()))
    tracker = _Progress(report, len(points), engine.workers, space.shown)

    def seen(r: PointResult) -> None:
        tracker(r)
        if on_result:
            on_result(r)

    with engine:
        results = evaluate(source, arch, points, options, engine, cache, seen)
    return SweepResult(source.spec, arch.name, space, rank(results), tracker.solved, tracker.done - tracker.solved)


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats: at most the resource (x) and at least the
    throughput (y), better in one. Sorted by x.

    >>> pareto_front([(1, 1), (2, 3), (2, 2), (3, 3), (0.5, 0.5)])
    [4, 0, 1]
    """
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front, best = [], -math.inf
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front
