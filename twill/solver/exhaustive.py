"""Exhaustive search on tiny loop bodies: a reference whose verdict is the validator's.

For II = lower bound, lower bound + 1, ... it enumerates every candidate schedule and returns the
first one ``twill.validate.validate`` accepts, so the optimal II it reports rests on the
validator's rules, not on any solver model. It shares with CP-SAT only the proven lower bound,
the stage bound K (design.md §2.2) and the sequential cap on II; everything else is a plain loop.
Candidates are pruned with necessary conditions only (a pruned candidate would fail the
validator), and a few symmetries are used, each because it maps valid schedules to valid ones:

* rotation: shifting every start by the same amount changes no rule, so the first op's offset
  is 0 and stages start at 0 (the stage range is K + 1 to absorb the rotation);
* group labels: groups are numbered in order of first use (any labelling is a renaming);
* per group, only the smallest register budget for each warp count is tried (a larger budget
  only uses more of the register file);
* with offsets and groups fixed, stages matter only through dependences (difference
  constraints) and lifetimes (register, SMEM and TMEM peaks grow with them). An op whose
  lifetime cannot change with its stage (no storage, or no reader but itself) is best at its
  earliest stage, so only the other ops' stages are enumerated; the rest take their least values.

The search enumerates offsets and groups op by op, checking unit capacity, in-order issue,
variable-latency isolation and warps as it goes and keeping the longest-path closure of the
stage constraints, so a dependence cycle that no stages can satisfy is cut at once. This is
exponential and meant for bodies of at most five or six ops (the "tiny" profile of
``twill.random_loops``); a time limit stops it with ``InfeasibleError``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from twill.bounds import lower_bound, sequential_ii, stage_bound
from twill.errors import InfeasibleError
from twill.options import SolveOptions
from twill.problem import Problem, read_time
from twill.schedule import Schedule
from twill.solver.assemble import Assignment, assemble, copies_needed
from twill.validate import validate

__all__ = ["solve_exhaustive", "SearchStats"]

NONE = -(10**9)  # "no path" in the longest-path closure


@dataclass
class SearchStats:
    """What the search did: tree nodes, complete offset/group assignments, validator calls."""

    nodes: int = 0
    leaves: int = 0
    candidates: int = 0  # schedules handed to the validator
    rejected: int = 0  # of those, schedules the validator refused (the prechecks are only necessary)


@dataclass(frozen=True)
class _EdgeFacts:
    src: int
    dst: int
    latency: int
    distance: int
    cost: int  # cross-group cost (joint only)
    read: int  # read_time: how long the reader keeps the storage
    handoff_bytes: int


class _Search:
    """The search for one problem; ``at(ii)`` yields every valid schedule's decisions at ``ii``."""

    def __init__(self, problem: Problem, options: SolveOptions, max_stage: int, stats: SearchStats) -> None:
        self.p, self.o, self.stats = problem, options, stats
        self.joint = not options.swp_only
        self.ops = list(problem.ops)
        self.n = len(self.ops)
        self.index = {op.name: i for i, op in enumerate(self.ops)}
        self.hold = [problem.hold(op.name) for op in self.ops]
        # per op: (the other end, cycles its hold grows by) of each hand-off copy it makes when
        # that end sits in another group (``Problem.handoff_holds``)
        self.copies: list[list[tuple[int, int]]] = [[] for _ in self.ops]
        for e in problem.edges if self.joint else ():
            store, load = problem.handoff_holds(e)
            for mine, other, cycles in ((e.src, e.dst, store), (e.dst, e.src, load)):
                if cycles:
                    self.copies[self.index[mine]].append((self.index[other], cycles))
        self.edges = [_EdgeFacts(self.index[e.src], self.index[e.dst], e.latency, e.distance,
                                 problem.cross_group_cost(e) if self.joint else 0,
                                 read_time(e, problem.op(e.dst)), problem.handoff_bytes(e) if self.joint else 0)
                      for e in problem.edges]
        self.out = [[e for e in self.edges if e.src == i] for i in range(self.n)]
        self.back = [[e for e in self.edges if max(e.src, e.dst) == i] for i in range(self.n)]  # to placed ops
        self.min_warps = [op.min_warps for op in self.ops]
        self.variable = [op.variable_latency for op in self.ops]
        self.stored = [self.joint and bool(op.regs or op.smem_bytes or op.tmem_cols) for op in self.ops]
        # ops whose lifetime depends on their stage: the only stages worth enumerating
        self.branching = [i for i in range(self.n) if self.stored[i] and any(e.dst != i for e in self.out[i])]
        self.max_stage = max_stage + 1  # + 1: the rotation that puts the first op at offset 0
        arch = problem.arch
        self.sizes = sorted(arch.warp_group_sizes())
        self.budgets = sorted(arch.register_budgets())
        self.reserved = arch.limit("regs_reserved_per_thread")
        self.max_warps = options.max_warps if options.max_warps is not None else arch.limit("warps_per_cta")
        self.fixed = dict(options.fixed_groups)
        self.units = sorted({u.unit for op in self.ops for u in op.uses})
        self.width = {w: min(s for s in self.sizes if s >= w) for w in set(self.min_warps) | {1}}
        self.cap = [op.warp_cap(self.max_warps) for op in self.ops]  # a wgmma's accumulator rows

    # -- necessary conditions on lifetimes -------------------------------------------------------
    def max_life(self, i: int, ii: int) -> int | None:
        """The longest lifetime op i's result can have in a valid schedule (its full copies must
        fit the widest group's room, SMEM or TMEM on their own), or None if unbounded."""
        op, arch, out = self.ops[i], self.p.arch, []
        if not self.stored[i]:
            return None
        if op.regs:
            room = 32 * self.sizes[-1] * (self.budgets[-1] - self.reserved)
            out.append((room // op.regs + 1) * ii - 1)
        if op.smem_bytes:
            out.append((arch.limit("smem_bytes_per_cta") // op.smem_bytes) * ii)
        if op.tmem_cols:
            out.append((arch.limit("tmem_cols") // op.tmem_cols + 1) * ii - 1)
        return min(out)

    # -- offsets and groups ------------------------------------------------------------------------
    def at(self, ii: int, deadline: float) -> Iterator[tuple[list[int], list[int], dict[int, int], dict[int, int]]]:
        """Every (starts, groups, warps, regs) at ``ii`` that passes the prechecks, in search order."""
        self.ii, self.deadline = ii, deadline
        if any(h > ii for h in self.hold) and self.joint:
            return
        self.caps = [self.max_life(i, ii) for i in range(self.n)]
        self.load = {u: [0] * ii for u in self.units}
        self.offset = [0] * self.n
        self.group = [-1] * self.n
        self.closure = [[NONE] * self.n for _ in range(self.n)]
        yield from self._place(0, 0)

    def _segments(self, i: int, o: int) -> list[tuple[str, int, int]]:
        """(unit, residue, amount) for every cycle op i at offset o reserves, modulo II."""
        out = []
        for u in self.ops[i].uses:
            for c in range(u.length):
                out.append((u.unit, (o + u.offset + c) % self.ii, u.amount))
        return out

    def _reserve(self, i: int, o: int) -> list[tuple[str, int, int]] | None:
        segs = self._segments(i, o)
        for unit, r, a in segs:
            self.load[unit][r] += a
        if any(self.load[unit][r] > self.p.capacity[unit] for unit, r, _ in segs):
            self._release(segs)
            return None
        return segs

    def _release(self, segs: list[tuple[str, int, int]]) -> None:
        for unit, r, a in segs:
            self.load[unit][r] -= a

    def _group_choices(self, i: int, labels: int) -> list[int]:
        if not self.joint:
            return [0]
        if self.fixed:
            return [self.fixed[self.ops[i].name]]
        return list(range(min(labels + 1, self.o.max_groups)))

    def _group_ok(self, i: int, g: int) -> bool:
        """In-order issue, variable-latency isolation, warps and the no-hand-off ablation between
        op i in group g and the ops already placed."""
        if not self.joint:
            return True
        self.group[i] = g
        ii, hi, vi = self.ii, self._held(i), self.variable[i]
        isolate = self.o.isolate_variable_latency
        for j in range(i):
            if self.group[j] != g:
                continue
            hj = self._held(j)
            if hi and hj:
                d = (self.offset[i] - self.offset[j]) % ii
                if d < hj or (ii - d) % ii < hi:
                    return False
            if isolate and vi != self.variable[j] and (self.hold[j] if vi else self.hold[i]):  # own holds (§2.7)
                return False
        if self.o.no_handoff:
            for e in self.back[i]:
                src, dst = (self.group[e.src] if e.src != i else g), (self.group[e.dst] if e.dst != i else g)
                if e.handoff_bytes and src != dst:
                    return False
        need: dict[int, int] = {g: self.min_warps[i]}
        cap: dict[int, int] = {g: self.cap[i]}
        for j in range(i):
            h = self.group[j]
            need[h] = max(need.get(h, 1), self.min_warps[j])
            cap[h] = min(cap.get(h, self.max_warps), self.cap[j])
        if any(self.width[w] > cap[h] for h, w in need.items()):
            return False
        return sum(self.width[w] for w in need.values()) <= self.max_warps

    def _held(self, i: int) -> int:
        """Op i's hold with the hand-off copies to the ops placed so far (all of them at a leaf)."""
        g = self.group[i]
        return self.hold[i] + sum(c for k, c in self.copies[i] if self.group[k] >= 0 and self.group[k] != g)

    def _issue_ok(self) -> bool:
        """In-order issue with every op placed: the copies of hand-offs to ops placed after an op
        lengthen its hold beyond what ``_group_ok`` saw."""
        held = [self._held(i) for i in range(self.n)]
        if any(h > self.ii for h in held):
            return False
        for i in range(self.n):
            for j in range(i):
                if self.group[i] == self.group[j] and held[i] and held[j]:
                    d = (self.offset[i] - self.offset[j]) % self.ii
                    if d < held[j] or (self.ii - d) % self.ii < held[i]:
                        return False
        return True

    def _constraints(self, i: int) -> list[tuple[int, int, int]]:
        """Stage constraints k[b] - k[a] >= w between op i and the placed ops (and itself)."""
        ii, out = self.ii, []
        for e in self.back[i]:
            os, od = self.offset[e.src], self.offset[e.dst]
            cost = e.cost if self.joint and self.group[e.src] != self.group[e.dst] else 0
            # start[dst] + δ·II >= start[src] + d (+ cost), starts = II·k + offset
            out.append((e.src, e.dst, -((od - os - e.latency - cost) // ii) - e.distance))
            cap = self.caps[e.src]
            if cap is not None:
                # lifetime: start[dst] + δ·II + read - start[src] <= cap
                out.append((e.dst, e.src, -((cap - od - e.distance * ii - e.read + os) // ii)))
        if self.o.single_stage:
            span = [max(op.latency, self._held(j), op.busy_cycles) for j, op in enumerate(self.ops)]
            for j in range(i + 1):
                for a, b in ((i, j), (j, i)):
                    # start[b] + span[b] - start[a] <= II
                    out.append((b, a, -((ii - span[b] - self.offset[b] + self.offset[a]) // ii)))
        return out

    def _close(self, i: int) -> list[list[int]] | None:
        """The longest-path closure with op i added, or None if a cycle is positive."""
        c = self.closure
        to_i: dict[int, int] = {}  # k -> weight of the strongest direct constraint k -> i
        from_i: dict[int, int] = {}
        for a, b, w in self._constraints(i):
            if a == b:
                if w > 0:
                    return None
            elif b == i:
                to_i[a] = max(to_i.get(a, NONE), w)
            else:
                from_i[b] = max(from_i.get(b, NONE), w)
        into, out = [NONE] * i, [NONE] * i  # longest paths j -> i and i -> j
        for k, w in to_i.items():
            for j in range(i):
                via = 0 if j == k else c[j][k]
                if via > NONE and via + w > into[j]:
                    into[j] = via + w
        for k, w in from_i.items():
            for j in range(i):
                via = 0 if j == k else c[k][j]
                if via > NONE and via + w > out[j]:
                    out[j] = via + w
        for j in range(i):
            if into[j] > NONE and out[j] > NONE and into[j] + out[j] > 0:
                return None
        new = [row[:] for row in c]
        for a in range(i):
            if into[a] > NONE:
                row = new[a]
                for b in range(i):
                    if out[b] > NONE and into[a] + out[b] > row[b]:
                        row[b] = into[a] + out[b]
            new[a][i], new[i][a] = into[a], out[a]
        new[i][i] = 0
        return new

    def _place(self, i: int, labels: int) -> Iterator:
        self.stats.nodes += 1
        if time.monotonic() > self.deadline:
            raise TimeoutError
        if i == self.n:
            self.stats.leaves += 1
            if not any(self.copies) or self._issue_ok():
                yield from self._stages()
            return
        for o in range(self.ii) if i else (0,):
            segs = self._reserve(i, o)
            if segs is None:
                continue
            self.offset[i] = o
            for g in self._group_choices(i, labels):
                if not self._group_ok(i, g):
                    continue
                self.group[i] = g
                closure = self._close(i)
                if closure is None:
                    continue
                saved, self.closure = self.closure, closure
                yield from self._place(i + 1, max(labels, g + 1))
                self.closure = saved
            self.group[i] = -1
            self._release(segs)

    # -- stages ----------------------------------------------------------------------------------
    def _least(self, fixed: dict[int, int]) -> list[int]:
        """Least stages given the branching ops' stages (every other op as early as it can be)."""
        c = self.closure
        return [fixed[v] if v in fixed else
                max([0] + [fixed[b] + c[b][v] for b in fixed if c[b][v] > NONE] +
                    [c[u][v] for u in range(self.n) if u not in fixed and c[u][v] > NONE])
                for v in range(self.n)]

    def _lifetimes(self, stages: list[int]) -> list[int]:
        ii = self.ii
        starts = [ii * k + o for k, o in zip(stages, self.offset, strict=True)]
        lives = []
        for v in range(self.n):
            ends = [starts[e.dst] + e.distance * ii + e.read for e in self.out[v]]
            lives.append(max(0, max(ends) - starts[v]) if ends else self.ops[v].latency)
        return lives

    def _life_floor(self) -> list[int]:
        """A lower bound on every lifetime over all stage choices (each reader as early as it can be)."""
        ii, c = self.ii, self.closure
        out = []
        for v in range(self.n):
            ends = [(c[v][e.dst] if e.dst != v else 0) * ii + self.offset[e.dst] + e.distance * ii + e.read
                    - self.offset[v] for e in self.out[v]]
            out.append(max(0, max(ends)) if ends else self.ops[v].latency)
        return out

    def _stages(self) -> Iterator:
        if not self.joint:
            stages = self._least({})
            yield [self.ii * k + o for k, o in zip(stages, self.offset, strict=True)], self.group, {}, {}
            return
        if self._storage(self._life_floor()) is None:
            return
        seen: set[tuple[int, ...]] = set()
        for stages in self._branch(0, {}):
            lives = tuple(self._lifetimes(stages))
            if lives in seen:
                continue
            seen.add(lives)
            sized = self._storage(list(lives))
            if sized is not None:
                yield [self.ii * k + o for k, o in zip(stages, self.offset, strict=True)], self.group, *sized

    def _branch(self, b: int, fixed: dict[int, int]) -> Iterator[list[int]]:
        """Stage vectors: every value of each branching op (within the closure), least values elsewhere."""
        if b == len(self.branching):
            yield self._least(fixed)
            return
        v, c = self.branching[b], self.closure
        lo = max([0] + [fixed[a] + c[a][v] for a in fixed if c[a][v] > NONE] +
                 [c[u][v] for u in range(self.n) if u not in fixed and c[u][v] > NONE])
        hi = min([self.max_stage] + [fixed[a] - c[v][a] for a in fixed if c[v][a] > NONE] +
                 [self.max_stage - c[v][u] for u in self.branching[b + 1:] if c[v][u] > NONE])
        for k in range(lo, hi + 1):
            fixed[v] = k
            yield from self._branch(b + 1, fixed)
            del fixed[v]

    # -- registers, SMEM, TMEM -------------------------------------------------------------------
    def _circle_peak(self, items: list[tuple[int, int, int]]) -> int:
        """Largest Σ weight x copies alive at one point of the II circle, for (begin, life, weight)."""
        ii = self.ii
        live = [0] * ii
        for begin, life, weight in items:
            turns, rest = divmod(life, ii)
            for r in range(ii):
                live[r] += weight * (turns + (1 if (r - begin) % ii < rest else 0))
        return max(live, default=0)

    def _storage(self, lives: list[int]) -> tuple[dict[int, int], dict[int, int]] | None:
        """Warps and budgets per group that hold these lifetimes, SMEM and TMEM checked, or None."""
        ii, arch = self.ii, self.p.arch
        smem = sum(op.smem_bytes * -(-lives[v] // ii) for v, op in enumerate(self.ops) if op.smem_bytes)
        smem += sum(e.handoff_bytes for e in self.edges if self.group[e.src] != self.group[e.dst])
        if smem > arch.limit("smem_bytes_per_cta"):
            return None
        tmem = [(self.offset[v], lives[v], op.tmem_cols) for v, op in enumerate(self.ops) if op.tmem_cols]
        if tmem and self._circle_peak(tmem) > arch.limit("tmem_cols"):
            return None
        groups = sorted(set(self.group))
        choices = []
        for g in groups:
            members = [v for v in range(self.n) if self.group[v] == g]
            legal = self.p.group_sizes([self.ops[v].name for v in members], self.max_warps)
            holders = [(self.offset[v], lives[v], self.ops[v].regs) for v in members if self.ops[v].regs]
            peak = self._circle_peak(holders) if holders else 0
            options = []
            for w in legal:
                fit = [r for r in self.budgets if not holders or 32 * w * (r - self.reserved) >= peak]
                if fit:
                    options.append((w, fit[0]))
            if not options:
                return None
            choices.append(options)
        rf = arch.limit("regs_per_sm")
        for combo in _product(choices, self.max_warps, rf):
            return {g: w for g, (w, _) in zip(groups, combo, strict=True)}, \
                   {g: r for g, (_, r) in zip(groups, combo, strict=True)}
        return None


def _product(choices: list[list[tuple[int, int]]], warps_left: int, words_left: int) -> Iterator[list]:
    """Combinations of (warps, budget) per group within the CTA's warps and the register file."""
    if not choices:
        yield []
        return
    for w, r in choices[0]:
        if w <= warps_left and 32 * w * r <= words_left:
            for rest in _product(choices[1:], warps_left - w, words_left - 32 * w * r):
                yield [(w, r), *rest]


def solve_exhaustive(problem: Problem, options: SolveOptions | None = None, *, stats: SearchStats | None = None,
                     ii_from: int | None = None, ii_to: int | None = None) -> Schedule:
    """The first schedule, in order of II, that the validator accepts; optimal by enumeration.

    Honours ``swp_only``, ``max_groups``, ``max_warps``, ``no_handoff``,
    ``isolate_variable_latency``, ``fixed_groups``, ``single_stage`` and ``time_limit``;
    secondary objectives are not optimised (only II is proven). The search starts at
    ``lower_bound`` (the solvers' proven bound) unless ``ii_from`` says otherwise: starting at 1
    trusts no bound at all, and tests the bounds themselves. ``ii_to`` ends the search early: an
    ``InfeasibleError`` then refutes the window [``ii_from``, ``ii_to``] only, which is how a test
    checks that no schedule lies between a weaker bound and a stronger one.

    Raises
    ------
    InfeasibleError
        When no II up to a fully sequential iteration has a schedule, or the time ran out.

    Examples
    --------
    >>> from twill.frontend.programs import load_program
    >>> from twill.problem import build_problem
    >>> from twill.arch.registry import get_arch
    >>> arch = get_arch("h100")
    >>> sched = solve_exhaustive(build_problem(load_program("toy", arch), arch))
    >>> sched.ii, sched.status
    (2, 'optimal')
    """
    options = options or SolveOptions()
    stats = stats if stats is not None else SearchStats()
    began = time.monotonic()
    lb = lower_bound(problem, options) if ii_from is None else ii_from
    cap = sequential_ii(problem) if ii_to is None else ii_to
    if not options.swp_only and problem.impossibilities():
        cap = lb - 1  # no II can hold a buffer that is larger than its memory
    search = _Search(problem, options, stage_bound(problem, lb, not options.swp_only), stats)
    for ii in range(lb, cap + 1):
        try:
            for starts, groups, warps, regs in search.at(ii, began + options.time_limit):
                stats.candidates += 1
                sched = _schedule(problem, options, ii, starts, groups, warps, regs, lb, time.monotonic() - began)
                if not validate(problem, sched):
                    return sched
                stats.rejected += 1
        except TimeoutError:
            raise InfeasibleError(f"{problem.body.name!r} on {problem.arch.name!r}: exhaustive search ran out of "
                                  f"time at II {ii}", reason="time limit") from None
    raise InfeasibleError(f"{problem.body.name!r} on {problem.arch.name!r}: no schedule exists for any II in "
                          f"[{lb}, {cap}] (exhaustive search)", reason="search exhausted")


def _schedule(problem: Problem, options: SolveOptions, ii: int, starts: list[int], groups: list[int],
              warps: dict[int, int], regs: dict[int, int], lb: int, seconds: float) -> Schedule:
    names = [op.name for op in problem.ops]
    start = dict(zip(names, starts, strict=True))
    joint = not options.swp_only
    copies = {op.name: copies_needed(problem, start, ii, op.name) for op in problem.ops
              if joint and (op.regs or op.smem_bytes or op.tmem_cols)}
    a = Assignment(ii=ii, starts=start, groups=dict(zip(names, groups, strict=True)) if joint else {},
                   warps=warps, regs=regs, copies=copies, objective_values={"ii": ii})
    proof = (f"optimal: II meets the lower bound {lb}" if ii == lb else
             f"optimal: exhaustive search found no schedule for any II in [{lb}, {ii - 1}]")
    return assemble(problem, options, a, optimal=True, proven_lb=ii, proof=proof, proven={"ii": True},
                    seconds=seconds)
