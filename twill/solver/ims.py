"""Rau's iterative modulo scheduling: the heuristic software pipeliner a compiler would run.

B. R. Rau, "Iterative Modulo Scheduling", MICRO-27 (1994) and IJPP 24(1) (1996). For II = MII,
MII + 1, ... the scheduler places one op at a time, highest ``HeightR`` first, at the earliest
cycle at or after its ``Estart`` (the earliest cycle its scheduled predecessors allow) where its
reservation table fits the modulo reservation table (MRT). When no cycle of the II cycles from
``Estart`` fits, the op is forced in and the ops it collides with (on a unit, or through a
dependence on an already scheduled successor) are evicted and rescheduled later. A budget of
scheduling steps (``budget_ratio`` x ops) bounds the work per II; when it runs out, II grows.

Here the MRT is on exact cycles: a reservation is ``Op.uses`` (unit, offset, length, amount) and a
unit holds ``problem.capacity`` instances. The MRT is kept as intervals, not as a II-long array,
so one placement costs O(reservations), not O(II) (II is ~2000 cycles on the FlashAttention bodies).

Two uses:

* ``swp_only``: pure software pipelining (units and dependences, no warps), the compiler's plan
  before warp specialisation; checked like ``twill solve --swp-only``.
* a fixed warp split (``groups``), by default Triton's (``producer_consumer_split``: loads on a
  producer, everything else on one consumer). Edges between groups pay ``problem.cross_group_cost``;
  each group issues in order, so its issue slot is one more MRT resource of capacity 1 that an op
  holds for ``problem.hold_in(op, groups)`` cycles from its issue (its hand-off copies included). Variable-latency isolation holds by the
  split's construction. Warps and register budgets are chosen after scheduling, as a compiler
  does (the narrowest legal group whose ``setmaxnreg`` budget holds its live registers), and the
  result must pass ``twill.validate.validate``; a II whose schedule fails (registers, SMEM, TMEM)
  counts as a failed II, where a compiler would spill or give up.

Rau raises II by one cycle at a time. On exact cycle counts (MII ~ 2000) that can take hundreds of
attempts, so after ``LINEAR_STEPS`` single steps the step doubles, and once an II succeeds the gap
to the last failed II is bisected. Scheduling success is not monotone in II, so the result is the
smallest successful II on that path, as Rau's is the first on his. Everything is deterministic.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from twill.bounds import compute_bounds, lower_bound
from twill.options import SolveOptions
from twill.problem import Problem
from twill.schedule import Schedule
from twill.solver.assemble import Assignment, assemble, copies_needed, size_groups
from twill.solver.strategies import producer_consumer_split
from twill.validate import validate

__all__ = ["ImsResult", "iterative_modulo_schedule", "ims_swp", "ims_triton_split", "LINEAR_STEPS", "Dep", "Segment",
           "ModuloTable", "heights", "reservation_plan", "search_ii", "search_resolution", "past", "checked", "CUT"]

LINEAR_STEPS = 8  # Rau's +1 steps of II before the step starts doubling
SEARCH_RESOLUTION = 0.01  # on large bodies the heuristics' II search stops within 1% of the least success on its path
# From 40 ops on an attempt costs 0.1-0.2 s of Python (attempts by 77-op bodies: 0.2 s; 10-20 ops: milliseconds,
# unless jittered); below, the bisection stays exact, which costs nothing and keeps small bodies' schedules as they were.
COARSE_OPS = 40


def search_resolution(n_ops: int) -> float:
    """The relative II resolution of ``search_ii`` for a body of ``n_ops`` ops: 0 (exact) below ``COARSE_OPS``."""
    return SEARCH_RESOLUTION if n_ops >= COARSE_OPS else 0.0


@dataclass(frozen=True, slots=True)
class Segment:
    """One row of an op's reservation table: ``amount`` of ``resource`` for ``length`` cycles from
    ``offset`` cycles after issue. Resources are unit names and ``issue[g]`` slots of groups."""

    resource: str
    offset: int
    length: int
    amount: int


@dataclass(frozen=True, slots=True)
class Dep:
    """A dependence with its effective latency (plus the hand-off cost when it crosses groups)."""

    src: str
    dst: str
    latency: int
    distance: int


@dataclass(frozen=True, slots=True)
class ImsResult:
    """What the heuristic found: a validated schedule (or None), and every II it tried, in order,
    with what happened there ("scheduled", "budget exhausted", or the first validator complaint)."""

    schedule: Schedule | None
    start_ii: int
    attempts: tuple[tuple[int, str], ...]
    seconds: float
    impossible: str = ""  # why no II can work (``Problem.impossibilities``), when nothing was tried

    @property
    def reason(self) -> str:
        """Why no schedule came out, or why the last failed II failed (empty when nothing failed)."""
        failed = [outcome for _, outcome in self.attempts if outcome != "scheduled"]
        return self.impossible or (failed[-1] if failed else "")


# -- the modulo reservation table, as intervals ------------------------------------------------
def _arc_overlap(b1: int, l1: int, b2: int, l2: int, ii: int) -> bool:
    """Whether [b1, b1 + l1) and [b2, b2 + l2) share a cycle modulo II."""
    if l1 >= ii or l2 >= ii:
        return l1 > 0 and l2 > 0
    return (b2 - b1) % ii < l1 or (b1 - b2) % ii < l2


class ModuloTable:
    """Per resource, the reservations placed so far: (op, absolute begin, length, amount)."""

    def __init__(self, ii: int, capacity: Mapping[str, int]) -> None:
        self.ii = ii
        self.capacity = capacity
        self.placed: dict[str, list[tuple[str, int, int, int]]] = {}
        # per resource, until a placement or removal changes it: the profile and its peak load
        self._profiles: dict[str, tuple[int, list[tuple[int, int, int]], int]] = {}

    def _cached(self, resource: str) -> tuple[int, list[tuple[int, int, int]], int]:
        """The profile and its peak piece load, kept until the resource changes: a storage-aware attempt
        asks for the same profiles many times between two placements."""
        if resource not in self._profiles:
            base, pieces = self._build_profile(resource)
            self._profiles[resource] = (base, pieces, max(load for _, _, load in pieces))
        return self._profiles[resource]

    def _build_profile(self, resource: str) -> tuple[int, list[tuple[int, int, int]]]:
        """(constant load from full turns, [(lo, hi, load)] pieces of the rest on [0, II))."""
        ii, base, events = self.ii, 0, {}
        for _, begin, length, amount in self.placed.get(resource, ()):
            turns, rest = divmod(length, ii)
            base += turns * amount
            if not rest:
                continue
            p = begin % ii
            for lo, hi in ((p, p + rest),) if p + rest <= ii else ((p, ii), (0, p + rest - ii)):
                events[lo] = events.get(lo, 0) + amount
                events[hi] = events.get(hi, 0) - amount
        pieces, load, last = [], 0, 0
        for x in sorted(events):
            if x > last:
                pieces.append((last, x, load))
            load += events[x]
            last = x
        if last < ii:
            pieces.append((last, ii, load))
        return base, pieces

    def forbidden(self, seg: Segment) -> list[tuple[int, int]] | None:
        """Issue cycles (as arcs (residue, length) of II) at which ``seg`` would overload its
        resource; None when every cycle would."""
        ii, cap = self.ii, self.capacity[seg.resource]
        base, pieces, peak = self._cached(seg.resource)
        turns, rest = divmod(seg.length, ii)
        if base + peak + seg.amount * turns > cap:
            return None
        if not rest:
            return []
        arcs = []
        for lo, hi, load in pieces:
            if base + load + seg.amount * (turns + 1) > cap:
                # the segment [b, b + rest) meets bad slots [lo, hi) iff b in [lo - rest + 1, hi - 1]
                size = hi - lo + rest - 1
                if size >= ii:
                    return None
                arcs.append(((lo - rest + 1 - seg.offset) % ii, size))
        return arcs

    def colliders(self, seg: Segment, t: int) -> set[str]:
        """Ops whose reservations share a cycle with ``seg`` issued at ``t`` on its resource."""
        begin = t + seg.offset
        return {name for name, b, length, _ in self.placed.get(seg.resource, ())
                if _arc_overlap(begin, seg.length, b, length, self.ii)}

    def place(self, name: str, t: int, segments: Iterable[Segment]) -> None:
        for seg in segments:
            self.placed.setdefault(seg.resource, []).append((name, t + seg.offset, seg.length, seg.amount))
            self._profiles.pop(seg.resource, None)

    def remove(self, name: str) -> None:
        for resource, items in self.placed.items():
            kept = [item for item in items if item[0] != name]
            if len(kept) != len(items):
                self.placed[resource] = kept
                self._profiles.pop(resource, None)


def _first_free(arcs: list[tuple[int, int]], earliest: int, ii: int) -> int | None:
    """The first cycle t in [earliest, earliest + II) whose residue no arc covers, or None."""
    covered: list[tuple[int, int]] = []
    for r, size in arcs:
        if size <= 0:
            continue
        covered += [(r, r + size)] if r + size <= ii else [(r, ii), (0, r + size - ii)]
    covered.sort()
    r0 = earliest % ii
    for shift in (0, 1):  # residues r0..II-1 first, then 0..r0-1 (one turn later)
        candidate = r0 if shift == 0 else 0
        limit = ii if shift == 0 else r0
        for lo, hi in covered:
            if hi <= candidate:
                continue
            if lo > candidate:
                break
            candidate = hi
        if candidate < limit:
            return earliest + (candidate - r0) % ii
    return None


# -- the scheduler --------------------------------------------------------------------------------
def heights(names: list[str], deps: list[Dep], base: Mapping[str, int], ii: int) -> dict[str, int] | None:
    """Rau's HeightR: the longest latency path (latency - II * distance) to the end of the
    iteration; None when a recurrence cannot meet this II (a positive cycle)."""
    h = dict(base)
    for _ in range(len(names) + 1):
        changed = False
        for d in deps:
            v = h[d.dst] + d.latency - ii * d.distance
            if v > h[d.src]:
                h[d.src], changed = v, True
        if not changed:
            return h
    return None


def _rec_mii(names: list[str], deps: list[Dep]) -> int:
    """The smallest II at which no recurrence of the effective latencies is violated."""
    zero = dict.fromkeys(names, 0)
    if heights(names, deps, zero, 0) is not None:
        return 0
    lo, hi = 0, sum(d.latency for d in deps) + 1  # every cycle has distance >= 1 (LoopBody), so hi holds
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if heights(names, deps, zero, mid) is not None else (mid, hi)
    return hi


def _schedule_at(ii: int, names: list[str], deps: list[Dep], segments: Mapping[str, tuple[Segment, ...]],
                 capacity: Mapping[str, int], tails: Mapping[str, int], budget: int,
                 deadline: float | None = None) -> dict[str, int] | None:
    """One IterativeSchedule(II, budget) of Rau's paper; the issue cycle of every op, or None
    (also when ``time.monotonic()`` passes ``deadline``)."""
    height = heights(names, deps, tails, ii)
    if height is None:
        return None
    order = {n: i for i, n in enumerate(names)}
    preds: dict[str, list[Dep]] = {n: [] for n in names}
    succs: dict[str, list[Dep]] = {n: [] for n in names}
    for d in deps:
        if d.src != d.dst:  # a self-loop holds at every II >= its recurrence bound
            succs[d.src].append(d)
            preds[d.dst].append(d)
    mrt = ModuloTable(ii, capacity)
    time_of: dict[str, int] = {}
    previous: dict[str, int] = {}
    unscheduled = set(names)
    while unscheduled:
        if budget <= 0 or (deadline is not None and budget % 16 == 0 and time.monotonic() >= deadline):
            return None
        budget -= 1
        op = max(unscheduled, key=lambda n: (height[n], -order[n]))
        estart = max([0] + [time_of[d.src] + d.latency - ii * d.distance for d in preds[op] if d.src in time_of])
        arcs: list[tuple[int, int]] = []
        full = False
        for seg in segments[op]:
            bad = mrt.forbidden(seg)
            if bad is None:
                full = True
                break
            arcs += bad
        t = None if full else _first_free(arcs, estart, ii)
        if t is None:  # forced: Rau's rule keeps an op from returning to the same cycle forever
            t = estart if op not in previous or estart > previous[op] else previous[op] + 1
        evict: set[str] = set()
        for seg in segments[op]:
            bad = mrt.forbidden(seg)
            if bad is None or _first_free(bad, t, ii) != t:
                evict |= mrt.colliders(seg, t)
        for d in succs[op]:
            if d.dst in time_of and time_of[d.dst] + ii * d.distance < t + d.latency:
                evict.add(d.dst)
        for d in preds[op]:
            if d.src in time_of and t + ii * d.distance < time_of[d.src] + d.latency:
                evict.add(d.src)
        for name in evict:
            mrt.remove(name)
            del time_of[name]
            unscheduled.add(name)
        mrt.place(op, t, segments[op])
        time_of[op] = previous[op] = t
        unscheduled.discard(op)
    return time_of


# -- entry points ---------------------------------------------------------------------------------
def reservation_plan(problem: Problem, groups: Mapping[str, int] | None) -> tuple[list[Dep], dict[str, tuple[Segment, ...]],
                                                                      dict[str, int], int]:
    """Effective dependences, reservation tables and capacities, and the II below which no
    schedule of this strategy exists (its own ResMII, issue slots included, and RecMII)."""
    deps, segments = [], {}
    capacity = dict(problem.capacity)
    for e in problem.edges:
        cost = problem.cross_group_cost(e) if groups is not None and groups[e.src] != groups[e.dst] else 0
        deps.append(Dep(e.src, e.dst, e.latency + cost, e.distance))
    for op in problem.ops:
        segs = [Segment(u.unit, u.offset, u.length, u.amount) for u in op.uses]
        hold = problem.hold_in(op.name, groups) if groups is not None else 0
        if hold:
            slot = f"issue[{groups[op.name]}]"
            capacity[slot] = 1
            segs.append(Segment(slot, 0, hold, 1))
        segments[op.name] = tuple(segs)
    work: dict[str, int] = {}
    for segs in segments.values():
        for s in segs:
            work[s.resource] = work.get(s.resource, 0) + s.amount * s.length
    res_mii = max([math.ceil(w / capacity[r]) for r, w in work.items()] + [1])
    longest = max((s.length for segs in segments.values() for s in segs if s.resource.startswith("issue[")), default=1)
    return deps, segments, capacity, max(res_mii, longest, _rec_mii([op.name for op in problem.ops], deps))


def _sequential_ii(problem: Problem, deps: list[Dep]) -> int:
    """An II at which one iteration runs alone, op after op: the search gives up above it."""
    span = sum(problem.most_span(op.name) for op in problem.ops)
    return span + sum(d.latency for d in deps) + 1


def iterative_modulo_schedule(problem: Problem, options: SolveOptions | None = None, *,
                              groups: Mapping[str, int] | None = None, budget_ratio: int = 6,
                              deadline: float | None = None, start: int | None = None,
                              upper: int | None = None) -> ImsResult:
    """Rau's iterative modulo scheduling of ``problem``, validated.

    Parameters
    ----------
    problem
        The loop body bound to an arch.
    options
        ``swp_only`` schedules units and dependences only (``groups`` is then ignored);
        ``max_warps`` caps the CTA. Other fields only label the schedule.
    groups
        A fixed warp split (op -> group label); None means Triton's producer/consumer split.
    budget_ratio
        Scheduling steps per op and II before II grows (Rau's BudgetRatio).
    deadline
        A ``time.monotonic()`` value after which no further II is tried (the solver's wall-clock
        cap): the result then has the schedule found so far, or none.
    start, upper
        Try no II below ``start`` nor at or above ``upper``: a search that already holds a
        schedule at ``upper`` (or has refuted every II below ``start``) asks only for a better one.

    Returns
    -------
    ImsResult
        The first validated schedule on the II search path ("feasible", with the problem's lower
        bound as ``ii_lower_bound``), or None with the reason, and every II tried.

    Examples
    --------
    >>> from twill.frontend.programs import load_program
    >>> from twill.problem import build_problem
    >>> from twill.arch.registry import get_arch
    >>> arch = get_arch("h100")
    >>> r = iterative_modulo_schedule(build_problem(load_program("toy", arch), arch))
    >>> r.schedule.ii, r.schedule.status, [o.start for o in r.schedule.ops]
    (2, 'feasible', [0, 1, 3])
    """
    options = options or SolveOptions()
    clock = time.monotonic()
    lb = lower_bound(problem, options, compute_bounds(problem))
    reasons = [] if options.swp_only else problem.impossibilities()
    if reasons:  # memory that never fits: no II can help, as the exact search also says at once
        return ImsResult(None, lb, (), time.monotonic() - clock, impossible=reasons[0])
    if options.swp_only:
        fixed = None
    else:
        fixed = dict(groups) if groups is not None else dict(producer_consumer_split(problem))
        missing = [op.name for op in problem.ops if op.name not in fixed]
        if missing:
            raise ValueError(f"groups: no group for ops {missing}")
    deps, segments, capacity, start_ii = reservation_plan(problem, fixed)
    start_ii = max(start_ii, lb, start or 0)
    names = [op.name for op in problem.ops]
    tails = {op.name: op.latency for op in problem.ops}
    budget = max(1, budget_ratio) * len(names)
    attempts: list[tuple[int, str]] = []

    def attempt(ii: int) -> Schedule | None:
        starts = _schedule_at(ii, names, deps, segments, capacity, tails, budget, deadline)
        if starts is None:
            attempts.append((ii, "budget exhausted"))
            return None
        return checked(problem, ii, _assemble(problem, options, fixed, starts, ii, lb, start_ii,
                                              time.monotonic() - clock), attempts)

    cap = _sequential_ii(problem, deps) if upper is None else min(_sequential_ii(problem, deps), upper - 1)
    found = search_ii(start_ii, cap, attempt, lambda ii: past(deadline, ii, attempts), LINEAR_STEPS,
                      search_resolution(len(names)))
    seconds = time.monotonic() - clock
    if found is not None:
        found = replace(found, solve_seconds=seconds)
    return ImsResult(found, start_ii, tuple(attempts), seconds)


CUT = "wall-clock cap reached"  # the attempt that the deadline stopped


def search_ii(first: int, cap: int, attempt: Callable[[int], Schedule | None], stopped: Callable[[int], bool],
              linear_steps: int, resolution: float = 0.0) -> Schedule | None:
    """Rau's search for the least II on exact cycles: single steps up from ``first``, doubling steps
    after ``linear_steps`` attempts (an II near 2000 would otherwise take hundreds), then the gap below
    the first success bisected until it is at most ``resolution`` of the success's II; nothing above
    ``cap``. ``stopped(ii)`` is asked before each attempt. Success is not monotone in II, so the result
    is the least success on this path, to within ``resolution``: a first schedule is an upper bound the
    exact search then lowers, and on a large body each attempt costs a fifth of a second, where the
    last bisection steps of a 1000-cycle gap gain a few cycles each (docs/design.md §3.1c)."""
    ii, step, failed, found, tries = first, 1, None, None, 0
    while ii <= cap and not stopped(ii):
        found = attempt(ii)
        tries += 1
        if found is not None:
            break
        failed = ii
        if tries >= linear_steps:
            step *= 2
        ii = min(ii + step, cap) if ii < cap else cap + 1
    if found is not None and failed is not None:
        lo, hi = failed, found.ii  # bisect the gap the doubling steps jumped over
        while hi - lo > max(1, int(hi * resolution)) and not stopped(lo):
            mid = (lo + hi) // 2
            better = attempt(mid)
            lo, hi, found = (lo, mid, better) if better is not None else (mid, hi, found)
    return found


def past(deadline: float | None, ii: int, attempts: list[tuple[int, str]]) -> bool:
    """Whether the deadline has passed (recording the cut once in ``attempts``)."""
    if attempts and attempts[-1][1] == CUT:
        return True
    if deadline is not None and time.monotonic() >= deadline:
        attempts.append((ii, CUT))
        return True
    return False


def checked(problem: Problem, ii: int, sched: Schedule | str, attempts: list[tuple[int, str]]) -> Schedule | None:
    """A heuristic's schedule at ``ii`` if the validator accepts it; else None, with why in ``attempts``
    (``sched`` is a string when its warps and registers could not even be chosen)."""
    if isinstance(sched, str):
        attempts.append((ii, sched))
        return None
    violations = validate(problem, sched)
    if violations:
        attempts.append((ii, f"{violations[0].rule}: {violations[0].message}"))
        return None
    attempts.append((ii, "scheduled"))
    return sched


def _assemble(problem: Problem, options: SolveOptions, groups: Mapping[str, int] | None, starts: Mapping[str, int],
              ii: int, lb: int, start_ii: int, seconds: float) -> Schedule | str:
    """The ``Schedule`` of an IMS result, or why its warps and registers cannot be chosen."""
    copies = {op.name: copies_needed(problem, starts, ii, op.name) for op in problem.ops
              if op.smem_bytes or op.tmem_cols or op.regs}
    length = problem.length(starts, groups)
    values = {"ii": ii, "length": length}
    warps: dict[int, int] = {}
    regs: dict[int, int] = {}
    if groups is not None:
        sized = size_groups(problem, options, starts, ii, groups)
        if isinstance(sized, str):
            return sized
        warps, regs = sized
        values["groups"] = len(warps)
        values["handoffs"] = sum(problem.handoff_bytes(e) for e in problem.edges if groups[e.src] != groups[e.dst])
        values["regs"] = sum(32 * warps[g] * regs[g] for g in warps)
    a = Assignment(ii=ii, starts=dict(starts), groups=dict(groups or {}), warps=warps, regs=regs, copies=copies,
                   objective_values={k: values[k] for k in options.objective if k in values})
    proof = (f"heuristic: Rau's iterative modulo scheduling; II {ii} is the first II on its search from {start_ii} "
             f"that scheduled within the budget and passed the validator; no optimality claim (lower bound {lb})")
    return assemble(problem, options, a, optimal=False, proven_lb=lb, proof=proof,
                    proven=dict.fromkeys(values, False), seconds=seconds)


def ims_swp(problem: Problem, options: SolveOptions | None = None, deadline: float | None = None) -> ImsResult:
    """Pure software pipelining by IMS: units and dependences only, no warp groups."""
    return iterative_modulo_schedule(problem, replace(options or SolveOptions(), swp_only=True), deadline=deadline)


def ims_triton_split(problem: Problem, options: SolveOptions | None = None, deadline: float | None = None) -> ImsResult:
    """The compiler's pipeline: IMS under Triton's fixed warp split (loads on a producer group,
    everything else on one consumer group), with hand-off costs and in-order issue."""
    opts = replace(options or SolveOptions(), swp_only=False)
    return iterative_modulo_schedule(problem, opts, groups=dict(producer_consumer_split(problem)), deadline=deadline)
