"""Storage-aware modulo list scheduling under a fixed warp-group assignment.

Rau's iterative modulo scheduling (``twill.solver.ims``) places each op at the first cycle whose
units and issue slot are free and sizes warps and registers afterwards. Where a memory binds, that
fails at every II: independent chains all start at the top of the iteration, so their TMEM tiles
or register tiles are live at once and no II makes the peak fit. This scheduler keeps Rau's
interval modulo reservation table and his eviction, and adds what a storage-bound body needs:

* **Memories are resources while placing.** A value occupies its memories from its producer's
  issue to the end of its last read (``twill.problem.read_time``), on the II circle (a lifetime
  above II wraps: its full turns are a constant load). A cycle is taken only if, with the op
  there, the TMEM columns fit, every group's live register words still admit warps and
  ``setmaxnreg`` budgets within the register file and the CTA (``_Registers``: narrow groups share
  one budget where the arch says so), and the SMEM rings (``ceil(life / II)`` copies) fit beside
  the hand-off staging buffers and the static SMEM. A reader not placed yet counts at its least
  distance, and the readers one group issues count one after another; a group's register words
  never count below their average over the circle (``sum(words x shortest life) / II``), so that
  the groups placed first cannot take the register file the others need.
* **Placement keeps lifetimes short.** An op with placed producers goes as early as they allow,
  one with placed readers as late as they allow, one with both towards the side holding more
  storage; windows are bounded by the longest paths to and from every placed op (through ops not
  placed yet and through recurrences), so a path between two placed ops always has room.
* **Conflicts evict.** When no cycle of the window fits, an op whose own value is what overflows
  evicts the readers that pin its end and is placed anew where the whole value fits (its readers
  follow it); otherwise it is forced in as in Rau's scheme and evicts what it collides with on a
  unit or issue slot, the neighbours whose dependences it breaks, and the biggest values live
  where a memory overflows. A budget of steps bounds an attempt, and so do signs of going round
  in circles (one op evicted again and again, no more ops placed than before for a while).

Each II is tried with a few strategies (``STRATEGIES``: data, not branches): Swing Modulo
Scheduling's order (J. Llosa et al., PACT 1996); whole chains of values one after another in
time, each new chain after what is placed, so that tiles of independent chains take turns in a
memory; Rau's height order with the path-bounded windows; and Rau's IMS itself with memories as
resources. The II search is ``ims``'s: a few single steps up from the grouping's own bound (units,
issue slots, recurrences with hand-off costs, memory averages), then doubling steps, then the gap
below the first success bisected; when no II up to one iteration's length works, ops run one at a
time (``_one_at_a_time``). Every schedule returned is built by ``assemble`` and passes
``twill.validate.validate``. Everything is deterministic; the only clock is the optional
``deadline``, which stops the search (and says so in the attempts).
"""

from __future__ import annotations

import bisect
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise

from twill.options import SolveOptions
from twill.problem import Problem, read_time
from twill.schedule import Schedule
from twill.solver.assemble import Assignment, assemble, copies_needed
from twill.solver.ims import (
    CUT,
    Dep,
    ModuloTable,
    Segment,
    checked,
    heights,
    past,
    reservation_plan,
    search_ii,
    search_resolution,
)
from twill.solver.sequential import witness_order

__all__ = ["ConstructResult", "construct_schedule"]

BUDGET_RATIO = 4  # placement steps per op and II before the II grows (Rau's BudgetRatio)
LINEAR_STEPS = 2  # single-cycle steps of II before the step starts doubling (``ims`` takes 8)
STALL_STEPS = 40  # steps without placing more ops than ever before: the evictions go round in circles
RAU_STALL_STEPS = 80  # the same for Rau's IMS, whose forced placements creep on one cycle at a time
MAX_PLACEMENTS = 12  # times one op may be placed in one attempt: more means two ops evict each other in turn
JITTER = 3.0  # how far (in places) a jittered order may move an op
JITTER_WORK = 1152  # ops^2 x jittered copies of the strategies tried per II: 8 up to 12 ops, 4 at 16, none from 34
MAX_JITTERED = 8
MAX_CANDIDATES = 24  # cycles of the II window checked for storage before the op is forced in

Pool = tuple[str, int]  # ("tmem", 0), ("smem", 0) or ("regs", group)


@dataclass(frozen=True, slots=True)
class ConstructResult:
    """What the constructive scheduler found: a validated schedule (or None) and every II it
    tried, in order, with the outcome there ("scheduled", "budget exhausted", a storage reason or
    the validator's first complaint)."""

    schedule: Schedule | None
    start_ii: int
    attempts: tuple[tuple[int, str], ...]
    seconds: float
    impossible: str = ""  # why no II can work under this grouping, when nothing was tried

    @property
    def reason(self) -> str:
        """Why no schedule came out, or why the last failed II failed (empty when nothing failed)."""
        failed = [outcome for _, outcome in self.attempts if outcome != "scheduled"]
        return self.impossible or (failed[-1] if failed else "")


@dataclass(frozen=True, slots=True)
class _Reader:
    """One read of a value: the reader, the edge's distance, how long the reader reads after its
    issue, and the least cycles between the producer's issue and the reader's (hand-off included)."""

    op: str
    distance: int
    read: int
    latency: int
    group: int
    hold: int


@dataclass(frozen=True, slots=True)
class _Value:
    """An op's result as storage: where it lives, how big it is there, and who reads it."""

    name: str
    pools: tuple[tuple[Pool, int], ...]  # (pool, words / columns / bytes)
    readers: tuple[_Reader, ...]
    latency: int  # its lifetime when nothing reads it

    def shortest_life(self) -> int:
        """Cycles the value is held in every schedule (each reader at its least distance)."""
        return max((r.latency + r.read for r in self.readers), default=self.latency)


# -- registers: warps and setmaxnreg budgets for given peaks ------------------------------------
class _Registers:
    """Chooses each group's warps and register budget for given live-register peaks: the fewest
    register-file words (hence also the fewest warps), honouring legal sizes, the CTA's warps and,
    where setmaxnreg is per warpgroup, one shared budget for the narrow groups packed together."""

    def __init__(self, problem: Problem, options: SolveOptions, allowed: Mapping[int, Sequence[int]]) -> None:
        arch = problem.arch
        self.sizes = sorted(arch.warp_group_sizes())
        self.budgets = sorted(arch.register_budgets())
        self.reserved = arch.limit("regs_reserved_per_thread")
        self.file = arch.limit("regs_per_sm")
        self.cta = options.max_warps if options.max_warps is not None else arch.limit("warps_per_cta")
        self.per_budget = arch.reg_alloc_warps()
        self.allowed = {g: tuple(sizes) for g, sizes in allowed.items()}  # legal sizes per group (Problem.group_sizes)
        self._memo: dict[tuple[int, ...], tuple[dict[int, int], dict[int, int]] | None] = {}

    def least_budget(self, warps: int, words: int) -> int | None:
        """The smallest legal budget whose room above the reserve holds ``words`` in ``warps``."""
        want = self.reserved + -(-words // (32 * warps))
        i = bisect.bisect_left(self.budgets, want)
        return self.budgets[i] if i < len(self.budgets) else None

    def fit(self, peaks: Mapping[int, int]) -> tuple[dict[int, int], dict[int, int]] | None:
        """(warps, budgets) per group holding ``peaks``, or None when nothing fits."""
        key = tuple(peaks[g] for g in sorted(self.allowed))
        if key not in self._memo:
            self._memo[key] = self._fit(dict(zip(sorted(self.allowed), key, strict=True)))
        return self._memo[key]

    def _fit(self, peaks: dict[int, int]) -> tuple[dict[int, int], dict[int, int]] | None:
        options = {g: [(w, b) for w in self.allowed[g]
                       for b in [self.least_budget(w, peaks[g])] if b is not None] for g in peaks}
        if any(not opts for opts in options.values()):
            return None
        shared = sorted({b for opts in options.values() for w, b in opts if w < self.per_budget})
        best: tuple[int, int, dict[int, int], dict[int, int]] | None = None
        for narrow_budget in [None, *shared]:
            choice = self._choose(options, narrow_budget)
            if choice is None:
                continue
            words, warps, sizes, budgets = choice
            if words <= self.file and warps <= self.cta and (best is None or (words, warps) < best[:2]):
                best = (words, warps, sizes, budgets)
        return None if best is None else (best[2], best[3])

    def _choose(self, options: Mapping[int, list[tuple[int, int]]], narrow_budget: int | None
                ) -> tuple[int, int, dict[int, int], dict[int, int]] | None:
        """Each group's cheapest option when narrow groups share ``narrow_budget`` (None: no group
        is narrow), with the register words and warps the CTA is charged."""
        sizes, budgets, narrow = {}, {}, 0
        words = warps = 0
        for g, opts in options.items():
            cands = [(32 * w * b, w, b) for w, b in opts if w >= self.per_budget]
            if narrow_budget is not None:
                cands += [(32 * w * narrow_budget, w, narrow_budget) for w, b in opts
                          if w < self.per_budget and b <= narrow_budget]
            if not cands:
                return None
            cost, sizes[g], budgets[g] = min(cands)
            if sizes[g] < self.per_budget:
                narrow += sizes[g]
            else:
                words, warps = words + cost, warps + sizes[g]
        packs = self.per_budget * -(-narrow // self.per_budget)
        if narrow_budget is not None:
            words += 32 * packs * narrow_budget
        return words, warps + packs, sizes, budgets


# -- the plan: everything that does not depend on II -------------------------------------------
@dataclass(frozen=True, slots=True)
class _Plan:
    """The grouping's dependences, reservation tables, storage and limits."""

    names: tuple[str, ...]
    deps: tuple[Dep, ...]
    preds: Mapping[str, tuple[Dep, ...]]
    succs: Mapping[str, tuple[Dep, ...]]
    segments: Mapping[str, tuple[Segment, ...]]
    capacity: Mapping[str, int]
    values: Mapping[str, _Value]  # ops whose result needs storage
    pools: Mapping[Pool, tuple[tuple[str, int], ...]]  # the values in each pool, with their sizes
    groups: Mapping[str, int]
    tmem_cols: int
    smem_room: int  # SMEM left for rings after static SMEM and hand-off staging buffers
    handoff_bytes: int  # SMEM the hand-off staging buffers of this grouping take
    floor_ii: int  # units, issue slots and recurrences (``ims.reservation_plan``)
    registers: _Registers
    topo: tuple[str, ...]  # the ops in an order of the iteration's (distance-0) dependences
    latency: Mapping[str, int]  # each op's result latency (Rau's heights end with it)

    def pool_cap(self, pool: Pool) -> float:
        """A pool's size, to compare how much of it different values take."""
        if pool[0] == "tmem":
            return float(self.tmem_cols or 1)
        if pool[0] == "smem":
            return float(max(self.smem_room, 1))
        return float(32 * self.registers.sizes[-1] * (self.registers.budgets[-1] - self.registers.reserved))


def _make_plan(problem: Problem, options: SolveOptions, groups: Mapping[str, int]) -> _Plan:
    deps, segments, capacity, floor_ii = reservation_plan(problem, groups)
    names = tuple(op.name for op in problem.ops)
    preds: dict[str, list[Dep]] = {n: [] for n in names}
    succs: dict[str, list[Dep]] = {n: [] for n in names}
    for d in deps:
        if d.src != d.dst:
            succs[d.src].append(d)
            preds[d.dst].append(d)
    readers: dict[str, list[_Reader]] = {n: [] for n in names}
    for e, d in zip(problem.edges, deps, strict=True):  # ``reservation_plan`` lists one dependence per edge, in order
        readers[e.src].append(_Reader(e.dst, e.distance, read_time(e, problem.op(e.dst)), d.latency, groups[e.dst],
                                      problem.hold_in(e.dst, groups)))
    values: dict[str, _Value] = {}
    pools: dict[Pool, list[tuple[str, int]]] = {}
    for op in problem.ops:
        where = tuple((pool, size) for pool, size in ((("regs", groups[op.name]), op.regs),
                                                      (("tmem", 0), op.tmem_cols), (("smem", 0), op.smem_bytes))
                      if size)
        if not where:
            continue
        values[op.name] = _Value(op.name, where, tuple(readers[op.name]), op.latency)
        for pool, size in where:
            pools.setdefault(pool, []).append((op.name, size))
    handoffs = sum(problem.handoff_bytes(e) for e in problem.edges if groups[e.src] != groups[e.dst])
    arch = problem.arch
    members: dict[int, list[str]] = {}
    for op in problem.ops:
        members.setdefault(groups[op.name], []).append(op.name)
    allowed = {g: problem.group_sizes(names) for g, names in members.items()}
    return _Plan(names=names, deps=tuple(deps), preds={n: tuple(v) for n, v in preds.items()},
                 succs={n: tuple(v) for n, v in succs.items()}, segments=segments, capacity=capacity,
                 values=values, pools={k: tuple(v) for k, v in pools.items()}, groups=dict(groups),
                 tmem_cols=arch.limit("tmem_cols") if "tmem_cols" in arch.limits else 0,
                 smem_room=arch.limit("smem_bytes_per_cta") - problem.body.static_smem - handoffs, handoff_bytes=handoffs,
                 floor_ii=floor_ii, registers=_Registers(problem, options, allowed), topo=_topological(names, deps),
                 latency={op.name: op.latency for op in problem.ops})


def _topological(names: tuple[str, ...], deps: list[Dep]) -> tuple[str, ...]:
    """The ops in an order of the distance-0 dependences (Kahn's algorithm, ties by body order)."""
    indeg = dict.fromkeys(names, 0)
    for d in deps:
        if d.distance == 0:
            indeg[d.dst] += 1
    topo = [n for n in names if indeg[n] == 0]
    for n in topo:  # ``topo`` grows while it is walked
        for d in deps:
            if d.src == n and d.distance == 0:
                indeg[d.dst] -= 1
                if indeg[d.dst] == 0:
                    topo.append(d.dst)
    return tuple(topo)


def _paths(plan: _Plan, ii: int) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """Longest dependence paths between every two ops at ``ii`` (weights latency - II x
    distance): after[u][v] and before[v][u]. A placed op bounds an unplaced one through the ops
    between them too, and through recurrences, so a window never leaves too little room for a
    path still to be placed. Per source: passes in topological order, each followed by the
    loop-carried edges, until nothing changes (II >= RecMII: no positive cycle)."""
    position = {n: i for i, n in enumerate(plan.topo)}
    forward = sorted((d for d in plan.deps if d.distance == 0), key=lambda d: position[d.src])
    carried = [d for d in plan.deps if d.distance and d.src != d.dst]
    after: dict[str, dict[str, int]] = {}
    for u in plan.names:
        far = {u: 0}
        for _ in range(len(plan.names) + 1):
            for d in forward:
                if d.src in far and far[d.src] + d.latency > far.get(d.dst, far[d.src] + d.latency - 1):
                    far[d.dst] = far[d.src] + d.latency
            changed = False
            for d in carried:
                w = d.latency - ii * d.distance
                if d.src in far and far[d.src] + w > far.get(d.dst, far[d.src] + w - 1) and d.dst != u:
                    far[d.dst], changed = far[d.src] + w, True
            if not changed:
                break
        del far[u]
        after[u] = far
    before: dict[str, dict[str, int]] = {n: {} for n in plan.names}
    for u, far in after.items():
        for v, length in far.items():
            before[v][u] = length
    return after, before


# -- storage on the II circle ----------------------------------------------------------------
def _circle_load(items: Iterable[tuple[int, int, int]], ii: int) -> tuple[int, int]:
    """(peak, a residue where it occurs) of (begin, length, weight) intervals wrapped on [0, II):
    full turns are a constant load, the rest a sweep over the intervals' ends (O(items), not O(II))."""
    base, events = 0, {}
    for begin, length, weight in items:
        turns, rest = divmod(length, ii)
        base += turns * weight
        if rest:
            p = begin % ii
            for lo, hi in ((p, p + rest),) if p + rest <= ii else ((p, ii), (0, p + rest - ii)):
                events[lo] = events.get(lo, 0) + weight
                events[hi] = events.get(hi, 0) - weight
    peak, where, run = 0, 0, 0
    for x in sorted(events):
        run += events[x]
        if run > peak:
            peak, where = run, x
    return base + peak, where


def _covers(begin: int, length: int, ii: int, r: int) -> bool:
    """Whether [begin, begin + length) holds a cycle congruent to r modulo II."""
    return length >= ii or (length > 0 and (r - begin) % ii < length)


class _Profile:
    """One memory's load on the II circle from the placed spans, built once per change, so that
    "the peak if these few spans changed" costs O(changes x log pieces) (a sparse table of range
    maxima over the load's pieces), not a sweep over every live value for every candidate cycle."""

    def __init__(self, items: Iterable[tuple[int, int, int]], ii: int) -> None:
        self.ii = ii
        self.base, events = 0, {}
        for begin, length, weight in items:
            self.base += self._arcs(begin, length, weight, events)
        self.xs = sorted(set(events) | {0})
        loads, run = [], 0
        for x in self.xs:
            run += events.get(x, 0)
            loads.append(run)
        self.table = [loads]
        while 2 ** len(self.table) <= len(loads):
            prev, half = self.table[-1], 2 ** (len(self.table) - 1)
            self.table.append([max(prev[i], prev[i + half]) for i in range(len(prev) - half)])

    def _arcs(self, begin: int, length: int, weight: int, events: dict[int, int]) -> int:
        """Add the interval's partial turn to ``events``; its full turns, a constant, returned."""
        ii = self.ii
        turns, rest = divmod(length, ii)
        if rest:
            p = begin % ii
            for lo, hi in ((p, p + rest),) if p + rest <= ii else ((p, ii), (0, p + rest - ii)):
                events[lo] = events.get(lo, 0) + weight
                events[hi] = events.get(hi, 0) - weight
        return turns * weight

    def _max(self, a: int, b: int) -> int:
        """The largest load on residues [a, b)."""
        i = bisect.bisect_right(self.xs, a) - 1
        j = bisect.bisect_left(self.xs, b) - 1
        k = (j - i + 1).bit_length() - 1
        return max(self.table[k][i], self.table[k][j - 2 ** k + 1])

    def peak(self, delta: Iterable[tuple[int, int, int]] = ()) -> int:
        """The peak once the (begin, length, weight) intervals of ``delta`` are added (negative
        weights take placed spans away)."""
        const, events = self.base, {}
        for begin, length, weight in delta:
            const += self._arcs(begin, length, weight, events)
        points = sorted(set(events) | {0, self.ii})
        best, run = None, 0
        for a, b in pairwise(points):
            run += events.get(a, 0)
            if a < b:
                here = run + self._max(a, b)
                best = here if best is None else max(best, here)
        return const + (best or 0)


@dataclass(frozen=True, slots=True)
class _Overflow:
    """A memory a placement overflows: the pool (("regs", g) for the register file) and why."""

    pool: Pool
    what: str


class _Storage:
    """The spans of placed values on the II circle, and the memory checks a placement must pass.

    A placed value spans from its producer's issue to the end of its last read; a reader not yet
    placed counts at its shortest distance. Values of unplaced producers count only through the
    averages: their shortest lifetimes in the register floors, the TMEM area and the SMEM copies.
    """

    def __init__(self, plan: _Plan, ii: int, starts: dict[str, int]) -> None:
        self.plan, self.ii, self.starts = plan, ii, starts
        self.span: dict[str, tuple[int, int]] = {}
        self.size = {(v, pool): size for pool, members in plan.pools.items() for v, size in members}
        shortest = {v: val.shortest_life() for v, val in plan.values.items()}
        self.shortest = shortest
        self.floors = {g: 0 for g in plan.registers.allowed}
        for (kind, g), members in plan.pools.items():
            if kind == "regs":
                area = sum(size * shortest[v] for v, size in members)
                self.floors[g] = max([-(-area // ii)] + [size for _, size in members])
        self.peaks = {g: 0 for g in plan.registers.allowed}
        self.profiles: dict[Pool, _Profile] = {}  # circle pools' loads from the placed spans
        self.smem_used = sum(size * -(-shortest[v] // ii) for v, size in plan.pools.get(("smem", 0), ()))
        self.tmem_area = sum(size * shortest[v] for v, size in plan.pools.get(("tmem", 0), ()))

    # -- spans
    def span_of(self, name: str) -> tuple[int, int]:
        """(begin, length) of placed value ``name`` under the current starts. Readers not placed
        yet count at their least distance, and those of one iteration that one group issues also
        one after another (in-order issue): without that, an MMA's tile read by seven loads would
        look live for one load's time, and its placement would not leave room for the rest."""
        value, s = self.plan.values[name], self.starts[name]
        if not value.readers:
            return s, value.latency
        end = s
        queued: dict[int, list[_Reader]] = {}  # group -> its unplaced readers of this iteration
        for r in value.readers:
            t = self.starts.get(r.op)
            if t is not None:
                end = max(end, t + r.distance * self.ii + r.read)
                continue
            end = max(end, s + r.latency + r.read)
            if r.distance == 0 and r.op != name:
                queued.setdefault(r.group, []).append(r)
        for readers in queued.values():
            if len(readers) > 1:  # the last one issues after the others' holds, then reads
                holds = sum(r.hold for r in readers) - max(r.hold for r in readers)
                end = max(end, s + min(r.latency for r in readers) + holds + min(r.read for r in readers))
        return s, end - s

    def touched(self, name: str) -> list[str]:
        """The placed values whose spans depend on where op ``name`` issues: its own and its
        producers'."""
        out = [name] if name in self.plan.values else []
        for d in self.plan.preds[name]:
            if d.src in self.plan.values and d.src in self.starts and d.src not in out:
                out.append(d.src)
        return out

    def _copies(self, name: str, span: tuple[int, int] | None) -> int:
        life = self.shortest[name] if span is None else span[1]
        return -(-life // self.ii)

    def _length(self, name: str, span: tuple[int, int] | None) -> int:
        return self.shortest[name] if span is None else span[1]

    # -- checks
    def check(self, name: str, t: int) -> tuple[list[_Overflow], dict[str, tuple[int, int]]]:
        """The memories op ``name`` at cycle ``t`` overflows (empty when it fits), and the new
        spans of the values it touches."""
        self.starts[name] = t
        try:
            spans = {v: self.span_of(v) for v in self.touched(name)}
        finally:
            del self.starts[name]
        return self.overflows(spans), spans

    def overflows(self, spans: Mapping[str, tuple[int, int]]) -> list[_Overflow]:
        """What overflows once the values in ``spans`` take those spans (the others as placed)."""
        if not spans:
            return []
        out: list[_Overflow] = []
        pools = {pool for v in spans for pool, _ in self.plan.values[v].pools}
        if ("tmem", 0) in pools:
            out += self._tmem(spans)
        if ("smem", 0) in pools:
            out += self._smem(spans)
        groups = sorted(g for kind, g in pools if kind == "regs")
        if groups:
            out += self._registers(spans, groups)
        return out

    def _items(self, pool: Pool, spans: Mapping[str, tuple[int, int]]) -> list[tuple[str, int, int, int]]:
        out = []
        for v, size in self.plan.pools[pool]:
            span = spans.get(v, self.span.get(v))
            if span is not None:
                out.append((v, span[0], span[1], size))
        return out

    def _profile(self, pool: Pool) -> _Profile:
        if pool not in self.profiles:
            self.profiles[pool] = _Profile(((b, n, w) for _, b, n, w in self._items(pool, {})), self.ii)
        return self.profiles[pool]

    def _peak(self, pool: Pool, spans: Mapping[str, tuple[int, int]]) -> int:
        """The pool's peak once the values in ``spans`` take those spans."""
        delta = []
        for v, span in spans.items():
            size = self.size.get((v, pool))
            if size:
                old = self.span.get(v)
                if old is not None:
                    delta.append((old[0], old[1], -size))
                delta.append((span[0], span[1], size))
        return self._profile(pool).peak(delta)

    def culprits(self, pool: Pool, spans: Mapping[str, tuple[int, int]]) -> tuple[str, ...]:
        """The values to blame for an overflow of ``pool`` once ``spans`` are taken, most to blame
        first: for a circle, those live at the peak, the biggest first; for SMEM, those with more
        ring copies than their shortest lifetime needs."""
        if pool[0] == "smem":
            extra = [(-(self._copies(v, s) - -(-self.shortest[v] // self.ii)) * size, v)
                     for v, size in self.plan.pools[pool] for s in [spans.get(v, self.span.get(v))] if s is not None]
            return tuple(v for neg, v in sorted(extra) if neg < 0)
        items = self._items(pool, spans)
        _, r = _circle_load(((b, n, w) for _, b, n, w in items), self.ii)
        live = [(-size * (length // self.ii + 1), v) for v, b, length, size in items if _covers(b, length, self.ii, r)]
        return tuple(v for _, v in sorted(live))

    def _tmem(self, spans: Mapping[str, tuple[int, int]]) -> list[_Overflow]:
        cap = self.plan.tmem_cols
        peak = self._peak(("tmem", 0), spans)
        if peak > cap:
            return [_Overflow(("tmem", 0), f"tmem: {peak} columns live at once, {cap} exist")]
        area = self.tmem_area + sum(self.size[v, ("tmem", 0)] * (self._length(v, s) - self._length(v, self.span.get(v)))
                                    for v, s in spans.items() if (v, ("tmem", 0)) in self.size)
        if area > cap * self.ii:
            return [_Overflow(("tmem", 0), f"tmem: {area} column-cycles, {cap} x II exist")]
        return []

    def _smem(self, spans: Mapping[str, tuple[int, int]]) -> list[_Overflow]:
        delta = sum(self.size[v, ("smem", 0)] * (self._copies(v, s) - self._copies(v, self.span.get(v)))
                    for v, s in spans.items() if (v, ("smem", 0)) in self.size)
        if self.smem_used + delta <= self.plan.smem_room:
            return []
        return [_Overflow(("smem", 0), f"smem: rings need {self.smem_used + delta} B, "
                          f"{self.plan.smem_room} B are left beside static SMEM and hand-offs")]

    def _registers(self, spans: Mapping[str, tuple[int, int]], groups: list[int]) -> list[_Overflow]:
        peaks = dict(self.peaks)
        for g in groups:
            peaks[g] = self._peak(("regs", g), spans)
        if self.plan.registers.fit({g: max(peaks[g], self.floors[g]) for g in peaks}) is not None:
            return []
        return [_Overflow(("regs", g), f"registers: group {g} would hold {peaks[g]} words live; the groups' warps "
                          "and budgets no longer fit the register file")
                for g in groups if peaks[g] >= self.floors[g]]  # above its floor: this group binds

    # -- updates
    def commit(self, spans: Mapping[str, tuple[int, int]]) -> None:
        """Take the spans ``check`` returned for a placement."""
        for v, s in spans.items():
            self._set(v, s)
        self._repeak({g for v in spans for (kind, g), _ in self.plan.values[v].pools if kind == "regs"})

    def forget(self, name: str) -> None:
        """Op ``name`` left the schedule (``starts`` no longer has it): drop its value and shorten
        its producers' spans."""
        changed = []
        if name in self.span:
            self._set(name, None)
            changed.append(name)
        for d in self.plan.preds[name]:
            if d.src in self.span:
                self._set(d.src, self.span_of(d.src))
                changed.append(d.src)
        self._repeak({g for v in changed for (kind, g), _ in self.plan.values[v].pools if kind == "regs"})

    def _set(self, name: str, span: tuple[int, int] | None) -> None:
        old = self.span.get(name)
        if ("smem", 0) in [p for p, _ in self.plan.values[name].pools]:
            self.smem_used += self.size[name, ("smem", 0)] * (self._copies(name, span) - self._copies(name, old))
        if (name, ("tmem", 0)) in self.size:
            self.tmem_area += self.size[name, ("tmem", 0)] * (self._length(name, span) - self._length(name, old))
        if span is None:
            self.span.pop(name, None)
        else:
            self.span[name] = span
        for pool, _ in self.plan.values[name].pools:
            self.profiles.pop(pool, None)

    def _repeak(self, groups: Iterable[int]) -> None:
        for g in groups:
            self.peaks[g] = self._profile(("regs", g)).peak()

    def averages(self) -> str:
        """Why no placement can fit at this II, from the averages alone (empty when they fit)."""
        if self.plan.registers.fit(self.floors) is None:
            return f"registers: the groups' average live words {dict(sorted(self.floors.items()))} do not fit"
        if self.smem_used > self.plan.smem_room:
            return f"smem: the rings need {self.smem_used} B at least; {self.plan.smem_room} B are left"
        if self.tmem_area > self.plan.tmem_cols * self.ii:
            return f"tmem: the tiles occupy {self.tmem_area} column-cycles at least, more than {self.plan.tmem_cols} x II"
        return ""


# -- the order: Swing Modulo Scheduling's ------------------------------------------------------
def _longest_from_sources(plan: _Plan, ii: int) -> dict[str, int]:
    """Each op's earliest start relative to the iteration (longest path of latency - II x
    distance from any op, at least 0); II is at least RecMII, so there is no positive cycle."""
    asap = dict.fromkeys(plan.names, 0)
    for _ in range(len(plan.names) + 1):
        changed = False
        for d in plan.deps:
            if d.src != d.dst and asap[d.src] + d.latency - ii * d.distance > asap[d.dst]:
                asap[d.dst], changed = asap[d.src] + d.latency - ii * d.distance, True
        if not changed:
            break
    return asap


def _recurrences(plan: _Plan) -> list[list[str]]:
    """The dependence graph's strongly connected components of more than one op (Tarjan's
    algorithm, iterative), in body order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in plan.names:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on.add(v)
            succ = plan.succs[v]
            if i < len(succ):
                work.append((v, i + 1))
                w = succ[i].dst
                if w not in index:
                    work.append((w, 0))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(comp)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    position = {n: i for i, n in enumerate(plan.names)}
    return sorted((sorted(c, key=position.get) for c in out), key=lambda c: position[c[0]])


def _sms_order(plan: _Plan, ii: int) -> list[str]:
    """Swing Modulo Scheduling's order: the most critical recurrence first, then the others, then
    the rest; inside each set, sweeps that alternate between the successors of the ordered ops
    (highest height first) and their predecessors (deepest first), so that every op but a set's
    first is ordered next to a neighbour already ordered."""
    asap = _longest_from_sources(plan, ii)
    height = heights(list(plan.names), list(plan.deps), dict.fromkeys(plan.names, 0), ii) or dict.fromkeys(plan.names, 0)
    length = max(asap[n] + height[n] for n in plan.names)
    mobility = {n: length - height[n] - asap[n] for n in plan.names}
    position = {n: i for i, n in enumerate(plan.names)}

    def criticality(ops: list[str]) -> int:
        inside = set(ops)
        return max((asap[d.src] + d.latency - ii * d.distance - asap[d.dst]
                    for d in plan.deps if d.src in inside and d.dst in inside), default=0)

    sets = sorted(_recurrences(plan), key=lambda c: (-criticality(c), position[c[0]]))
    rest = [n for n in plan.names if not any(n in c for c in sets)]
    order: list[str] = []
    done: set[str] = set()
    for group in [*sets, rest]:
        members = set(group)
        while members - done:
            preds = {d.src for n in done for d in plan.preds[n]} & members - done
            succs = {d.dst for n in done for d in plan.succs[n]} & members - done
            if preds:
                ready, down = preds, False
            elif succs:
                ready, down = succs, True
            else:
                seed = max(members - done, key=lambda n: (asap[n], -mobility[n], -position[n]))
                ready, down = {seed}, False
            while ready:
                while ready:
                    key = (lambda n: (height[n], -mobility[n], -position[n])) if down else \
                          (lambda n: (asap[n], -mobility[n], -position[n]))
                    v = max(ready, key=key)
                    order.append(v)
                    done.add(v)
                    ready.discard(v)
                    nxt = plan.succs[v] if down else plan.preds[v]
                    ready |= {d.dst if down else d.src for d in nxt} & members - done
                down = not down
                ready = ({d.dst for n in done for d in plan.succs[n]} if down else
                         {d.src for n in done for d in plan.preds[n]}) & members - done
    return order



def _height_order(plan: _Plan, ii: int) -> list[str]:
    """Rau's order: the longest latency path to the end of the iteration first (HeightR)."""
    height = heights(list(plan.names), list(plan.deps), plan.latency, ii) or plan.latency
    position = {n: i for i, n in enumerate(plan.names)}
    return sorted(plan.names, key=lambda n: (-height[n], position[n]))


def _chain_order(plan: _Plan, ii: int) -> list[str]:
    """A depth-first topological order of the iteration (distance-0 dependences): next comes a
    ready op that the op ordered last feeds, or that one of its readers still waits for (the
    unordered ancestors of a blocked reader, so an accumulator's correction joins the chain whose
    MMA it closes), the highest first; a new chain starts at the highest ready op. Each chain of
    values is thus ordered whole before the next one starts."""
    height = heights(list(plan.names), list(plan.deps), dict.fromkeys(plan.names, 0), ii) or dict.fromkeys(plan.names, 0)
    position = {n: i for i, n in enumerate(plan.names)}
    waiting = {n: sum(1 for d in plan.preds[n] if d.distance == 0) for n in plan.names}
    latest = dict.fromkeys(plan.names, -1)  # when the op was last wanted by the ordered chain
    ready = {n for n in plan.names if waiting[n] == 0}
    order: list[str] = []
    done: set[str] = set()

    def want(name: str, when: int) -> None:
        """Mark ``name`` and its unordered ancestors as wanted at ``when``."""
        stack = [name]
        while stack:
            n = stack.pop()
            if n in done or latest[n] == when:
                continue
            latest[n] = when
            stack += [d.src for d in plan.preds[n] if d.distance == 0]

    while ready:
        v = max(ready, key=lambda n: (latest[n], height[n], -position[n]))
        ready.discard(v)
        order.append(v)
        done.add(v)
        for d in plan.succs[v]:
            if d.distance == 0:
                waiting[d.dst] -= 1
                if waiting[d.dst] == 0:
                    ready.add(d.dst)
                want(d.dst, len(order) - 1)
    return order


# -- placement ----------------------------------------------------------------------------------
def _free_runs(arcs: list[tuple[int, int]], lo: int, hi: int, ii: int) -> list[tuple[int, int]] | None:
    """Maximal runs [a, b] of cycles in [lo, hi] (at most II cycles) whose residue no forbidden
    arc (residue, length) covers; None when an arc covers the whole circle."""
    covered: list[tuple[int, int]] = []
    for r, size in arcs:
        if size <= 0:
            continue
        if size >= ii:
            return None
        covered += [(r, r + size)] if r + size <= ii else [(r, ii), (0, r + size - ii)]
    covered.sort()
    free: list[tuple[int, int]] = []  # free residue runs [a, b)
    at = 0
    for a, b in covered:
        if a > at:
            free.append((at, a))
        at = max(at, b)
    if at < ii:
        free.append((at, ii))
    runs: list[tuple[int, int]] = []
    for base in range(lo - lo % ii, hi + 1, ii):
        for a, b in free:
            x, y = max(lo, base + a), min(hi, base + b - 1)
            if x > y:
                continue
            if runs and runs[-1][1] + 1 == x:
                runs[-1] = (runs[-1][0], y)
            else:
                runs.append((x, y))
    return runs


class _Placer:
    """One attempt at one II: places every op in ``order``, evicting on conflicts (Rau), with
    storage as a resource; ``run`` gives the starts or why it gave up."""

    def __init__(self, plan: _Plan, ii: int, strategy: _Strategy, paths: tuple[dict[str, dict[str, int]], ...],
                 deadline: float | None) -> None:
        self.plan, self.ii, self.deadline = plan, ii, deadline
        self.rau, self.stagger, self.stall = strategy.rau, strategy.stagger, strategy.stall
        self.memories = strategy.memories
        order = strategy.order(plan, ii)
        self.after, self.before = paths
        self.rank = {n: i for i, n in enumerate(order)}
        self.mrt = ModuloTable(ii, plan.capacity)
        self.starts: dict[str, int] = {}
        self.store = _Storage(plan, ii, self.starts)
        self.previous: dict[str, int] = {}
        self.placements = dict.fromkeys(plan.names, 0)
        self.unplaced = set(plan.names)

    def run(self, budget: int) -> dict[str, int] | str:
        """The starts of every op, or why the attempt gave up: Rau's budget of placements ran
        out, or (in the Swing-like modes) one op was evicted too often or the number of ops
        placed at once stopped growing, both signs of evictions going round in circles."""
        why = self.store.averages()
        if why:
            return why
        most, since = 0, 0  # the most ops placed at once so far, and the steps since
        while self.unplaced:
            if budget <= 0:
                return "budget exhausted"
            placed = len(self.starts)
            most, since = (placed, 0) if placed > most else (most, since + 1)
            if since > self.stall:
                return f"no progress in {self.stall} steps ({most} of {len(self.plan.names)} ops placed at most)"
            if self.deadline is not None and budget % 16 == 0 and time.monotonic() >= self.deadline:
                return CUT
            budget -= 1
            op = min(self.unplaced, key=self.rank.__getitem__)
            self.placements[op] += 1
            if self.placements[op] > MAX_PLACEMENTS and not self.rau:
                return f"{op} was evicted {MAX_PLACEMENTS} times"
            why = self._place(op)
            if why:
                return why
        return dict(self.starts)

    # -- where an op may go
    def _bounds(self, op: str) -> tuple[int | None, int | None]:
        """(earliest, latest) issue cycle the placed ops allow: through the iteration's paths
        (placed or not in between), and through loop-carried dependences on the op itself."""
        starts = self.starts
        if self.rau:  # Rau: the placed predecessors only, and never before cycle 0
            early = [0] + [starts[d.src] + d.latency - self.ii * d.distance for d in self.plan.preds[op]
                           if d.src in starts]
            return max(early), None
        early = [starts[u] + length for u, length in self.before[op].items() if u in starts]
        late = [starts[v] - length for v, length in self.after[op].items() if v in starts]
        return (max(early) if early else None), (min(late) if late else None)

    def _leans_late(self, op: str) -> bool:
        """With neighbours placed on both sides: whether the op's own value (shortened by a later
        issue) holds more storage than the inputs it reads (lengthened by it)."""
        plan = self.plan
        own = 0.0
        if op in plan.values and all(r.op in self.starts or r.op == op for r in plan.values[op].readers):
            own = sum(size / plan.pool_cap(pool) for pool, size in plan.values[op].pools)
        inputs = sum(size / plan.pool_cap(pool) for d in plan.preds[op] if d.src in plan.values and d.src in self.starts
                     for pool, size in plan.values[d.src].pools)
        return own > inputs

    def _window(self, op: str) -> tuple[int, int, bool]:
        """The cycles to scan, [lo, hi], and whether to scan from the late end. The direction
        follows the op's placed neighbours (after its producers, before its readers); paths
        through unplaced ops only narrow the window. When the placed ops leave no room, the window
        keeps to the predecessors and the successors will be evicted (Rau's rule)."""
        early, late = self._bounds(op)
        ii, starts = self.ii, self.starts
        if self.rau:
            return early, early + ii - 1, False
        after = any(d.src in starts for d in self.plan.preds[op] if d.distance == 0)
        before = any(d.dst in starts for d in self.plan.succs[op] if d.distance == 0)
        if early is not None and late is not None and early > late:
            return early, early + ii - 1, False
        if before and not (after and not self._leans_late(op)):
            return (late - ii + 1 if early is None else max(early, late - ii + 1)), late, True
        if after:
            return early, early + ii - 1 if late is None else min(late, early + ii - 1), False
        # a new chain: at the top of the iteration, or after what is placed (within its paths)
        begin = max(starts.values(), default=0) if self.stagger else 0
        lo = begin if early is None else max(early, min(begin, late if late is not None else begin))
        if late is not None:
            lo = min(lo, late)
        return lo, lo + ii - 1 if late is None else min(late, lo + ii - 1), False

    def _candidates(self, op: str, runs: list[tuple[int, int]], down: bool) -> list[int]:
        """Cycles to try, in scan order: each free run's first cycle, and the cycles at which the
        op's own value would start where a placed value of its memories ends (or end where one
        starts), so that a storage conflict can slide past it."""
        points = {b if down else a for a, b in runs}
        value = self.plan.values.get(op)
        if value is not None:
            length = value.shortest_life()
            ii = self.ii
            for pool, _ in value.pools:
                for v, _ in self.plan.pools[pool]:
                    span = self.store.span.get(v)
                    if span is None or v == op:
                        continue
                    for r in ((span[0] + span[1]) % ii, (span[0] - length) % ii):
                        for a, b in runs:
                            t = a + (r - a) % ii
                            if t <= b:
                                points.add(t)
        return sorted(points, reverse=down)[:MAX_CANDIDATES]

    # -- placing
    def _place(self, op: str) -> str:
        """Place ``op`` at the first cycle of its window where its units, issue slot and memories
        fit; when only its own value's memory is in the way, free it from the readers that pin
        it and try once more; else force it in (Rau)."""
        found = self._scan(op)
        if isinstance(found, tuple) and found[1] and self._unpin(op, found[0]):
            found = self._scan(op)
        if not isinstance(found, tuple):
            return found
        t, _ = found
        if t is None:
            lo, hi, down = self._window(op)
            t = self._forced(op, lo, hi, down, self._arcs(op) or [])
        return self._force(op, t)

    def _arcs(self, op: str) -> list[tuple[int, int]] | None:
        """Residue arcs where the op's units or issue slot are taken; None when all are."""
        arcs: list[tuple[int, int]] = []
        for seg in self.plan.segments[op]:
            bad = self.mrt.forbidden(seg)
            if bad is None:
                return None
            arcs += bad
        return arcs

    def _scan(self, op: str) -> str | tuple[int | None, bool]:
        """Place ``op`` at the first candidate where everything fits ("" or why forcing it
        failed); else (the first cycle free of unit and issue conflicts or None, whether memory
        was what stopped it). When the window the placed ops leave has no free cycle at all, the
        whole II past its near end is scanned too, and the neighbours on the far side are
        evicted (Rau's rule): they move cheaply, where evicting the ops that hold the units
        would send them back and forth."""
        lo, hi, down = self._window(op)
        early, late = self._bounds(op)
        clash = early is not None and late is not None and early > late  # some neighbour must go
        arcs = self._arcs(op)
        if arcs is None:
            return None, False
        runs = _free_runs(arcs, lo, hi, self.ii) or []
        wide = False
        if not runs and hi - lo + 1 < self.ii:
            lo, hi = (hi - self.ii + 1, hi) if down else (lo, lo + self.ii - 1)
            runs, wide = _free_runs(arcs, lo, hi, self.ii) or [], True
        first = None
        for t in self._candidates(op, runs, down):
            over, spans = self._check(op, t)
            if first is None:
                first = t
            if not over and not (clash or wide or self.rau):
                self._commit(op, t, spans)
                return ""
            if not over:
                return self._force(op, t)
        return first, first is not None

    def _unpin(self, op: str, t: int) -> bool:
        """When the op's own value is what overflows a memory at ``t`` (its inputs alone fit),
        evict the readers already placed after it, which fix where the value ends: placed anew,
        the op finds a place where the whole value fits, and its readers follow it there. Whether
        anything was evicted."""
        value = self.plan.values.get(op)
        if value is None:
            return False
        self.starts[op] = t
        try:
            inputs = {v: self.store.span_of(v) for v in self.store.touched(op) if v != op}
        finally:
            del self.starts[op]
        if self.store.overflows(inputs):
            return False
        pins = sorted({r.op for r in value.readers if r.op != op and r.op in self.starts},
                      key=self.rank.__getitem__)
        for name in pins:
            self._evict(name)
        return bool(pins)

    def _forced(self, op: str, lo: int, hi: int, down: bool, arcs: list[tuple[int, int]]) -> int:
        """Rau's forced slot: the window's scan start or, when the op was placed there before,
        the next cycle past its previous one where a reservation in its way begins or ends (Rau
        steps one cycle; on exact cycle counts that would take hundreds of steps to get past one
        tile-sized op), so that it cannot come back to the same place forever."""
        prev = self.previous.get(op)
        start = hi if down else lo
        if prev is None or (start < prev if down else start > prev):
            return start
        if self.rau:
            return prev + 1
        ii = self.ii
        edges = {e % ii for r, size in arcs for e in (r, r + size)}
        steps = [(prev - e) % ii for e in edges] if down else [(e - prev) % ii for e in edges]
        step = min((x for x in steps if x > 0), default=1)
        return prev - step if down else prev + step

    def _force(self, op: str, t: int) -> str:
        """Place ``op`` at ``t``, evicting whatever it collides with there; "" or why it cannot."""
        evict: set[str] = set()
        for seg in self.plan.segments[op]:
            bad = self.mrt.forbidden(seg)
            if bad is None or (_free_runs(bad, t, t, self.ii) or []) != [(t, t)]:
                evict |= self.mrt.colliders(seg, t)
        for d in self.plan.succs[op]:
            if d.dst in self.starts and self.starts[d.dst] + self.ii * d.distance < t + d.latency:
                evict.add(d.dst)
        for d in self.plan.preds[op]:
            if d.src in self.starts and t + self.ii * d.distance < self.starts[d.src] + d.latency:
                evict.add(d.src)
        for name in sorted(evict, key=self.rank.__getitem__):
            self._evict(name)
        while True:
            over, spans = self._check(op, t)
            if not over:
                break
            victim = self._victim(op, over, spans)
            if victim is None:
                return over[0].what
            self._evict(victim)
        self._commit(op, t, spans)
        return ""

    def _check(self, op: str, t: int) -> tuple[list[_Overflow], dict[str, tuple[int, int]]]:
        """The memories ``op`` at ``t`` overflows, and the spans it gives the values it touches;
        a strategy blind to memories (Rau's IMS as it is) sees no overflow."""
        over, spans = self.store.check(op, t)
        return (over if self.memories else []), spans

    def _victim(self, op: str, over: list[_Overflow], spans: Mapping[str, tuple[int, int]]) -> str | None:
        """Whom to evict for a memory overflow: the biggest value live at the overflow whose
        producer is not the op or one of its neighbours (those come straight back beside it)."""
        near = {op} | {d.src for d in self.plan.preds[op]} | {d.dst for d in self.plan.succs[op]}
        for o in over:
            for v in self.store.culprits(o.pool, spans):
                if v not in near and v in self.starts:
                    return v
        return None

    def _commit(self, op: str, t: int, spans: Mapping[str, tuple[int, int]]) -> None:
        self.mrt.place(op, t, self.plan.segments[op])
        self.starts[op] = self.previous[op] = t
        self.store.commit(spans)
        self.unplaced.discard(op)

    def _evict(self, name: str) -> None:
        self.mrt.remove(name)
        del self.starts[name]
        self.store.forget(name)
        self.unplaced.add(name)


# -- the II search ------------------------------------------------------------------------------
def _impossible(problem: Problem, options: SolveOptions, plan: _Plan) -> str:
    """Why no II can work under this grouping (empty when some might)."""
    reasons = problem.impossibilities()
    if reasons:
        return reasons[0]
    if options.isolate_variable_latency:
        for g in sorted(set(plan.groups.values())):
            members = [n for n in plan.names if plan.groups[n] == g]
            variable = [n for n in members if problem.op(n).variable_latency]
            fixed = [n for n in members if not problem.op(n).variable_latency and problem.hold(n) > 0]
            if variable and fixed:
                return f"group {g} issues variable-latency ops {', '.join(variable)} and fixed-latency ops {', '.join(fixed)}"
    for g, sizes in sorted(plan.registers.allowed.items()):
        if not sizes:
            ops = [problem.op(n) for n in plan.names if plan.groups[n] == g]
            wide = max(ops, key=lambda op: op.min_warps)
            capped = min((op for op in ops if op.max_warps), key=lambda op: op.max_warps)
            return (f"warps: group {g} issues {wide.name} (needs {wide.min_warps} warps) and {capped.name} (at most "
                    f"{capped.max_warps} warps: its accumulator's rows); no legal group size fits both")
    largest = {g: 0 for g in plan.registers.allowed}
    for (kind, g), members in plan.pools.items():
        if kind == "regs":
            largest[g] = max(size for _, size in members)
    if plan.registers.fit(largest) is None:
        return (f"registers: the groups' widest ops and largest values ({dict(sorted(largest.items()))} words) "
                "leave no warps and budgets that fit the register file and the CTA")
    rings = sum(size for v, size in plan.pools.get(("smem", 0), ()) if plan.values[v].shortest_life() > 0)
    if rings > plan.smem_room:
        return (f"smem: one slot of every ring needs {rings} B, but the hand-off staging buffers of this grouping "
                f"({plan.handoff_bytes} B) and the static SMEM ({problem.body.static_smem} B) leave "
                f"{max(plan.smem_room, 0)} B of {problem.arch.limit('smem_bytes_per_cta')} B")
    return ""


def _storage_floor(plan: _Plan, lo: int, hi: int) -> int:
    """The least II in [lo, hi] at which the memories' averages fit (they shrink as II grows), or
    hi when none does."""
    def fits(ii: int) -> bool:
        return not _Storage(plan, ii, {}).averages()
    if fits(lo):
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi


def _sequential_cap(problem: Problem, plan: _Plan) -> int:
    """An II at which one iteration runs alone, op after op: the search stops above it."""
    span = sum(problem.span(n, plan.groups) for n in plan.names)
    return span + sum(d.latency for d in plan.deps) + 1


def _one_at_a_time(problem: Problem, plan: _Plan) -> tuple[dict[str, int], int]:
    """The last resort: ops one after another in dependence order (``witness_order``), each once
    the previous one is done and its producers' results (hand-offs included) are ready, at an II
    past the iteration's end and its longest read, so that no two iterations overlap and every
    loop-carried dependence holds. Where even this overflows a memory, the grouping is the
    reason (the validator says which)."""
    starts: dict[str, int] = {}
    free = 0
    for name in witness_order(list(plan.names), problem.edges):
        ready = [starts[d.src] + d.latency for d in plan.preds[name] if d.distance == 0]
        starts[name] = max([free, *ready])
        free = starts[name] + max(problem.span(name, plan.groups), 1)
    longest = max((d.latency for d in plan.deps), default=0)
    reads = max((r.read for v in plan.values.values() for r in v.readers), default=0)
    return starts, free + longest + reads + 1


def _group_peaks(problem: Problem, plan: _Plan, starts: Mapping[str, int], ii: int) -> dict[int, int]:
    """Each group's live register words at its busiest cycle, from the finished schedule."""
    peaks = {g: 0 for g in plan.registers.allowed}
    for (kind, g), members in plan.pools.items():
        if kind == "regs":
            peaks[g] = _circle_load(((starts[v], problem.lifetime(starts, ii, v), size) for v, size in members), ii)[0]
    return peaks


def _assemble(problem: Problem, options: SolveOptions, plan: _Plan, starts: Mapping[str, int], ii: int, lb: int,
              how: str, seconds: float) -> Schedule | str:
    """The ``Schedule`` of placed starts, or why its warps and registers cannot be chosen."""
    peaks = _group_peaks(problem, plan, starts, ii)
    sized = plan.registers.fit(peaks)
    if sized is None:
        return (f"registers: the groups' peaks {dict(sorted(peaks.items()))} (words) leave no warps and budgets "
                f"that fit {plan.registers.file} registers and {plan.registers.cta} warps")
    warps, regs = sized
    copies = {op.name: copies_needed(problem, starts, ii, op.name) for op in problem.ops
              if op.smem_bytes or op.tmem_cols or op.regs}
    values = {"ii": ii, "length": problem.length(starts, plan.groups), "groups": len(warps),
              "handoffs": sum(problem.handoff_bytes(e) for e in problem.edges if plan.groups[e.src] != plan.groups[e.dst]),
              "regs": sum(32 * warps[g] * regs[g] for g in warps)}
    a = Assignment(ii=ii, starts=dict(starts), groups=dict(plan.groups), warps=warps, regs=regs, copies=copies,
                   objective_values={k: values[k] for k in options.objective if k in values})
    proof = f"heuristic: storage-aware modulo list scheduling under a fixed grouping; {how}; no optimality claim " \
            f"(lower bound {lb})"
    return assemble(problem, options, a, optimal=False, proven_lb=lb, proof=proof,
                    proven=dict.fromkeys(values, False), seconds=seconds)


def _attempt(problem: Problem, options: SolveOptions, plan: _Plan, ii: int, deadline: float | None
             ) -> dict[str, int] | str:
    """Starts (shifted to begin at cycle 0) of the first strategy that places every op at
    ``ii``, or why the first one failed."""
    why = ""
    paths = _paths(plan, ii)
    for strategy in _strategies(len(plan.names)):
        placed = _Placer(plan, ii, strategy, paths, deadline).run(strategy.budget * len(plan.names))
        if not isinstance(placed, str):
            break
        why = why or placed
    else:
        return why or "no strategy to place the ops with"
    first = min(placed.values())
    return {n: t - first for n, t in placed.items()}


@dataclass(frozen=True, slots=True)
class _Strategy:
    """How one attempt orders, places and seeds its ops."""

    name: str
    order: Callable[[_Plan, int], list[str]]
    rau: bool  # Rau's rules: earliest start from placed predecessors only, forced one cycle on
    stagger: bool  # a new chain starts after what is placed, not at the top of the iteration
    budget: int  # placement steps per op
    stall: int = STALL_STEPS  # steps without placing more ops than before, after which it gives up
    memories: bool = True  # memories are resources while placing (else only the validator checks them)


# The strategies tried in turn at each II (an II succeeds if one of them places every op, so
# their order only decides which schedule comes back, and the cheap ones go first): Swing's
# order, placing each op beside its placed neighbours within the bounds of the paths through the
# ops not placed yet; whole chains one after another in time, so that the tiles of independent
# chains take turns in a memory; Rau's height order with Swing's path-bounded windows; Rau's IMS
# with memories as resources; and Rau's IMS as ``ims`` runs it, blind to memories (the validator
# judges its schedule), since its passing states may overflow a memory that its final schedule
# does not. Both IMS copies have half of ``ims``'s budget.
STRATEGIES = (
    _Strategy("swing", _sms_order, rau=False, stagger=False, budget=BUDGET_RATIO),
    _Strategy("chains", _chain_order, rau=False, stagger=True, budget=BUDGET_RATIO),
    _Strategy("height", _height_order, rau=False, stagger=False, budget=BUDGET_RATIO),
    _Strategy("rau", _height_order, rau=True, stagger=False, budget=3, stall=RAU_STALL_STEPS),
    _Strategy("ims", _height_order, rau=True, stagger=False, budget=3, stall=RAU_STALL_STEPS, memories=False),
)




def _jittered(order: Callable[[_Plan, int], list[str]], seed: int) -> Callable[[_Plan, int], list[str]]:
    """``order`` with each op moved up to ``JITTER`` places, pseudo-randomly but the same way for
    the same seed and II: another greedy pass over nearly the same priorities, which on small
    bodies often packs the issue slots and units differently enough to fit a lower II."""
    def jittered(plan: _Plan, ii: int) -> list[str]:
        rng = random.Random(f"{seed}:{ii}")
        return [n for _, n in sorted((i + rng.uniform(0, JITTER), n) for i, n in enumerate(order(plan, ii)))]
    return jittered


def _strategies(ops: int) -> tuple[_Strategy, ...]:
    """The memory-aware ``STRATEGIES``, jittered copies of them, as many as ``JITTER_WORK`` affords
    for a body of ``ops`` ops (an attempt costs about ops^2 steps: small bodies, cheap to place,
    get several more tries per II, large ones none), and the memory-blind ones last."""
    copies = min(MAX_JITTERED, JITTER_WORK // max(ops, 1) ** 2)
    aware = tuple(s for s in STRATEGIES if s.memories)
    jittered = tuple(replace(s, name=f"{s.name}~{k}", order=_jittered(s.order, k)) for k in range(copies) for s in aware)
    return aware + jittered + tuple(s for s in STRATEGIES if not s.memories)  # the blind ones last: the
    # validator may still refuse what they place


def construct_schedule(problem: Problem, options: SolveOptions | None, groups: Mapping[str, int], *,
                       start_ii: int | None = None, upper: int | None = None, deadline: float | None = None,
                       lower_bound: int = 1) -> ConstructResult:
    """A validated schedule of ``problem`` under the fixed warp-group assignment ``groups``, at the
    smallest II this scheduler finds.

    Parameters
    ----------
    problem
        The loop body bound to an arch.
    options
        ``max_warps`` caps the CTA and ``isolate_variable_latency`` is checked; ``objective``
        names the values reported. ``swp_only`` makes no sense with groups and is refused.
    groups
        op name -> group label, for every op.
    start_ii, upper
        The first II tried (default: the grouping's own bound: units, issue slots, recurrences with
        hand-off costs, memory averages), and the last (default: one iteration alone).
    deadline
        A ``time.monotonic()`` value after which nothing more is tried; the result keeps the
        best schedule found by then.
    lower_bound
        The proven lower bound to print in the schedule (the scheduler claims no bound itself).

    Returns
    -------
    ConstructResult
        The schedule (status "feasible") or None, every II tried and what happened there.

    Examples
    --------
    >>> from twill.arch.registry import get_arch
    >>> from twill.frontend.programs import load_program
    >>> from twill.problem import build_problem
    >>> arch = get_arch("h100")
    >>> p = build_problem(load_program("toy", arch), arch)
    >>> r = construct_schedule(p, None, {"S": 0, "P": 0, "O": 0})
    >>> r.schedule.ii, [o.start for o in r.schedule.ops]
    (2, [0, 2, 3])
    """
    options = options or SolveOptions()
    if options.swp_only:
        raise ValueError("construct_schedule: a pure software-pipelining solve has no warp groups")
    missing = [op.name for op in problem.ops if op.name not in groups]
    if missing:
        raise ValueError(f"groups: no group for ops {missing}")
    clock = time.monotonic()
    plan = _make_plan(problem, options, groups)
    why = _impossible(problem, options, plan)
    cap = upper if upper is not None else _sequential_cap(problem, plan)
    first = max(plan.floor_ii, lower_bound, 1) if start_ii is None else start_ii
    if why:
        return ConstructResult(None, first, (), time.monotonic() - clock, impossible=why)
    if start_ii is None:
        first = _storage_floor(plan, first, max(first, cap))
    attempts: list[tuple[int, str]] = []

    def attempt(ii: int, placed: dict[str, int] | str | None = None) -> Schedule | None:
        how = (f"II {ii} is the first II on its search from {first} that placed every op within the budget and "
               "passed the validator") if placed is None else f"one iteration at a time at II {ii}"
        placed = _attempt(problem, options, plan, ii, deadline) if placed is None else placed
        if isinstance(placed, str):
            attempts.append((ii, placed))
            return None
        return checked(problem, ii, _assemble(problem, options, plan, placed, ii, lower_bound, how,
                                              time.monotonic() - clock), attempts)

    def out_of_time(ii: int) -> bool:
        return past(deadline, ii, attempts)

    found = search_ii(first, cap, attempt, out_of_time, LINEAR_STEPS, search_resolution(len(problem.ops)))
    if found is None and upper is None and not out_of_time(cap):
        starts, ii = _one_at_a_time(problem, plan)
        found = attempt(ii, starts)
    seconds = time.monotonic() - clock
    if found is not None:
        found = replace(found, solve_seconds=seconds)
    return ConstructResult(found, first, tuple(attempts), seconds)
