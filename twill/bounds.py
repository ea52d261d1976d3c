"""Lower bounds on the initiation interval II, each with what binds it.

ResMII: a unit of capacity c used for W unit-cycles per iteration needs II >= ceil(W / c).
RecMII: a dependence cycle with total latency D and total distance k needs II >= ceil(D / k); the
bound is the exact maximum cycle ratio, found as the least integer II for which the graph with
edge weights latency - II * distance has no positive cycle (Bellman-Ford via networkx), with the
critical recurrence read off a positive cycle at II - 1. See docs/design.md §3.1.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import networkx as nx

from twill.errors import InfeasibleError
from twill.options import SolveOptions
from twill.problem import Problem, per_problem, read_time

__all__ = ["UnitBound", "Recurrence", "Bounds", "StorageBound", "ResidueCut", "res_mii", "rec_mii", "storage_mii",
           "monotone_in_ii",
           "compute_bounds", "residue_cuts", "lower_bound", "bound_and_reason", "sequential_ii",
           "stage_bound", "issue_mii", "under_pinned_groups", "longest_paths", "shortest_lifetimes", "with_resident_rings", "colive_values"]


@dataclass(frozen=True, slots=True)
class UnitBound:
    unit: str
    work: int  # unit-cycles reserved per iteration
    capacity: int

    @property
    def ii(self) -> int:
        return math.ceil(self.work / self.capacity)


@dataclass(frozen=True, slots=True)
class Recurrence:
    ops: tuple[str, ...]  # the critical cycle, in order
    latency: int
    distance: int

    @property
    def ii(self) -> int:
        return math.ceil(self.latency / self.distance) if self.distance else 0


@dataclass(frozen=True, slots=True)
class Bounds:
    units: tuple[UnitBound, ...]  # sorted, tightest first
    recurrence: Recurrence | None

    @property
    def res_mii(self) -> int:
        return max((u.ii for u in self.units), default=0)

    @property
    def rec_mii(self) -> int:
        return self.recurrence.ii if self.recurrence else 0

    @property
    def mii(self) -> int:
        return max(self.res_mii, self.rec_mii, 1)

    def binding(self) -> str:
        """A sentence naming what binds the larger bound."""
        if self.recurrence and self.rec_mii >= self.res_mii:
            ops = " -> ".join(self.recurrence.ops)
            return (f"recurrence {ops} (latency {self.recurrence.latency} over "
                    f"distance {self.recurrence.distance})")
        if self.units:
            u = self.units[0]
            return f"unit {u.unit!r} ({u.work} unit-cycles per iteration, capacity {u.capacity})"
        return "nothing (no unit work, no recurrence)"


def res_mii(problem: Problem) -> tuple[UnitBound, ...]:
    """Per-unit resource bounds, tightest first."""
    work: dict[str, int] = {}
    for op in problem.ops:
        for use in op.uses:
            work[use.unit] = work.get(use.unit, 0) + use.amount * use.length
    bounds = [UnitBound(u, w, problem.capacity[u]) for u, w in work.items()]
    return tuple(sorted(bounds, key=lambda b: (-b.ii, b.unit)))


def _weighted_graph(problem: Problem, ii: int) -> nx.DiGraph:
    """Edge weight = the most constraining parallel edge's (ii * distance - latency)."""
    g = nx.DiGraph()
    g.add_nodes_from(op.name for op in problem.ops)
    for e in problem.edges:
        w = ii * e.distance - e.latency
        if not g.has_edge(e.src, e.dst) or w < g[e.src][e.dst]["weight"]:
            g.add_edge(e.src, e.dst, weight=w)
    return g


def longest_paths(problem: Problem, ii: int, sources: list[str]) -> dict[str, dict[str, int]]:
    """Longest dependence path (weights latency - distance x II) from each source to each op it
    reaches; well defined at II >= RecMII, where no cycle is positive (else NetworkXUnbounded).

    All pairs at once (Floyd-Warshall on arrays): the structure relaxation and StorageMII ask for
    every value's paths at each II they probe, and one Bellman-Ford per source cost seconds of wall
    time on 80-op bodies."""
    g = _weighted_graph(problem, ii)  # weight = ii * distance - latency: shortest path = -longest
    nodes = list(g.nodes)
    dist = nx.floyd_warshall_numpy(g, nodelist=nodes, weight="weight")
    if any(dist[i, i] < 0 for i in range(len(nodes))):
        raise nx.NetworkXUnbounded(f"a dependence cycle is longer than its distance x II at II {ii}")
    where = {n: i for i, n in enumerate(nodes)}
    return {s: {t: -int(d) for t, d in zip(nodes, dist[where[s]].tolist(), strict=True) if d != math.inf}
            for s in sources}


def _has_positive_cycle(problem: Problem, ii: int) -> bool:
    return nx.negative_edge_cycle(_weighted_graph(problem, ii), weight="weight")


def rec_mii(problem: Problem) -> Recurrence | None:
    """The critical recurrence (exact maximum cycle ratio, rounded up), or None if acyclic."""
    if not any(e.distance > 0 for e in problem.edges):
        return None
    hi = sum(e.latency for e in problem.edges) + 1
    if not _has_positive_cycle(problem, 0):
        return None  # every recurrence has total latency 0: it never limits II
    lo = 0  # invariant: positive cycle at lo, none at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _has_positive_cycle(problem, mid):
            lo = mid
        else:
            hi = mid
    return _critical_cycle(problem, lo)


def _critical_cycle(problem: Problem, ii: int) -> Recurrence:
    """A cycle whose latency-to-distance ratio exceeds ``ii``."""
    g = _weighted_graph(problem, ii)
    # networkx 3.6's find_negative_cycle can return a self-loop of weight 0 next to a real negative
    # cycle (found by tests/test_differential.py); a self-loop that is not negative is in no
    # simple negative cycle, so dropping those changes nothing else
    g.remove_edges_from([(u, v) for u, v, w in g.edges(data="weight") if u == v and w >= 0])
    g.add_node("__source__")
    for n in list(g.nodes):
        if n != "__source__":
            g.add_edge("__source__", n, weight=0)
    cycle = nx.find_negative_cycle(g, "__source__", weight="weight")
    return _recurrence(problem, [n for n in cycle[:-1] if n != "__source__"], ii)


def _recurrence(problem: Problem, cycle: list[str], ii: int) -> Recurrence:
    latency = distance = 0
    for i, src in enumerate(cycle):
        dst = cycle[(i + 1) % len(cycle)]
        # the parallel edge that made this cycle positive: the tightest one at this II
        best = min((e for e in problem.edges if e.src == src and e.dst == dst),
                   key=lambda e: ii * e.distance - e.latency)
        latency += best.latency
        distance += best.distance
    return Recurrence(tuple(cycle), latency, distance)


def compute_bounds(problem: Problem) -> Bounds:
    return Bounds(res_mii(problem), rec_mii(problem))


# -- storage: what the memories hold, averaged over one II (joint problem only) -------------------
@dataclass(frozen=True, slots=True)
class StorageBound:
    """The least II at which every memory can hold, on average, what the schedule keeps in it."""

    ii: int
    memory: str  # "tmem" | "smem" | "registers"
    demand: int  # size x shortest lifetime summed over the values, in unit-cycles, at II - 1
    capacity: int  # what the memory holds per cycle

    def sentence(self) -> str:
        return (f"{self.memory}: the values kept there occupy {self.demand} unit-cycles per iteration at "
                f"II {self.ii - 1}, more than {self.capacity} x II")


def shortest_lifetimes(problem: Problem, ii: int, names: list[str], resident: bool = True,
                       paths: dict[str, dict[str, int]] | None = None) -> dict[str, int]:
    """Each value's shortest possible lifetime at ``ii``: from its issue to the end of its last
    read, where every reader is at least the longest dependence path away (weights latency -
    distance x II; no positive cycle once II >= RecMII). With ``resident``, a resident accumulator
    ring's shortfall is added to one member (``_resident_accumulators``): right for sums over the
    ring, not for that member alone, so per-value uses pass ``resident=False``. ``paths``: the
    names' ``longest_paths`` at ``ii``, where the caller has them already."""
    paths = longest_paths(problem, ii, names) if paths is None else paths
    out = {}
    for name in names:
        longest = paths[name]
        ends = [longest[e.dst] + e.distance * ii + read_time(e, problem.op(e.dst))
                for e in problem.body.out_edges(name) if e.dst in longest]
        out[name] = max(ends) if ends else problem.op(name).latency
    return with_resident_rings(problem, ii, out) if resident else out


def with_resident_rings(problem: Problem, ii: int, own: dict[str, int]) -> dict[str, int]:
    """``own`` (each value's own shortest lifetime) with every resident accumulator ring's shortfall
    added to one member (``_resident_accumulators``): the lifetimes sums over the values may use."""
    life = dict(own)
    _resident_accumulators(problem, ii, life)
    return life


MAX_COLIVE_SETS = 200  # maximal co-live sets kept (any subset of them gives valid constraints)


def _paths_one_turn(problem: Problem) -> dict[str, dict[tuple[str, int], int]] | None:
    """From each op w, the longest dependence latency to each op r over paths of total distance d
    (0: within one iteration; 1: into the next), keyed (r, d): a path P gives start[r] >= start[w] +
    latency(P) - d x II. Longest paths in the layered graph (op, d), acyclic when the distance-0
    edges are; None where those edges close a cycle (no II has a schedule; the bounds say so)."""
    g = nx.DiGraph()
    g.add_nodes_from((op.name, d) for op in problem.ops for d in (0, 1))
    for e in problem.edges:
        for d in range(2 - e.distance):
            a, b = (e.src, d), (e.dst, d + e.distance)
            if a != b and (not g.has_edge(a, b) or g[a][b]["latency"] < e.latency):
                g.add_edge(a, b, latency=e.latency)
    if not nx.is_directed_acyclic_graph(g):
        return None
    order = list(nx.topological_sort(g))
    paths: dict[str, dict[tuple[str, int], int]] = {}
    for op in problem.ops:
        far = {(op.name, 0): 0}
        for n in order:
            if n in far:
                for _, t, lat in g.out_edges(n, data="latency"):
                    far[t] = max(far.get(t, far[n] + lat), far[n] + lat)
        paths[op.name] = far
    return paths


End = tuple[str, int, int]  # a reader of a value: (reader, edge distance, cycles it reads for)


def _ends(problem: Problem, u: str) -> tuple[End, ...]:
    """Where u's life ends: each reader with the edge's distance and its read time. A value no one reads is held
    for its latency (``ScheduleModel.lifetime_of``). Computed once per value: ``colive_values`` compares every
    pair, and a 32-sub-tile FA backward has 191 values (``twill show`` spent 3 s rescanning the edges)."""
    ends = tuple((e.dst, e.distance, read_time(e, problem.op(e.dst))) for e in problem.body.out_edges(u))
    return ends or ((u, 0, problem.op(u).latency),)


def _outlives(paths: dict[str, dict[tuple[str, int], int]], ends: tuple[End, ...], w: str) -> bool:
    """Whether a value ending at ``ends`` (``_ends``) is still held when w issues, in every schedule at every II >= 1.

    The value's life ends at start[r] + δ x II + read for each reader r (edge distance δ), and a path from w
    to r of distance d <= δ gives start[r] >= start[w] + latency - d x II; so it outlives w's issue
    when latency + (δ - d) + read >= 1, the worst case being II = 1 (the term grows with II)."""
    reach = paths[w]
    return any((r, d) in reach and reach[r, d] + (dist - d) + read >= 1
               for r, dist, read in ends for d in range(min(dist, 1) + 1))


@per_problem
def colive_values(problem: Problem) -> tuple[tuple[str, ...], ...]:
    """Maximal sets of register values that are all held at one moment, in every schedule.

    Two values held on intervals [start, end) of one iteration overlap whenever each outlives the
    other's issue (``_outlives``), which the dependences alone can force: FA's S tile is still held
    when its row max issues, since the exp that reads S comes after the max. Intervals that pairwise overlap share a point
    (Helly's property on a line), so a clique of this graph is a set held together; its values that
    one group produces must fit that group's registers at once, at any II (design.md §3.1b). Every
    value with registers is in at least one set (possibly alone). Sets are the graph's maximal
    cliques (networkx), at most ``MAX_COLIVE_SETS``, largest total first."""
    paths = _paths_one_turn(problem)
    values = [op.name for op in problem.ops if op.regs]
    if paths is None or not values:
        return ()
    g = nx.Graph()
    g.add_nodes_from(values)
    ends = {v: _ends(problem, v) for v in values}
    g.add_edges_from((a, b) for i, a in enumerate(values) for b in values[i + 1:]
                     if _outlives(paths, ends[a], b) and _outlives(paths, ends[b], a))
    sets = [tuple(sorted(c, key=values.index)) for c in itertools.islice(nx.find_cliques(g), 5 * MAX_COLIVE_SETS)]
    sets.sort(key=lambda c: (-sum(problem.op(n).regs for n in c), [values.index(n) for n in c]))
    return tuple(sets[:MAX_COLIVE_SETS])


def _resident_accumulators(problem: Problem, ii: int, life: dict[str, int]) -> None:
    """Lengthen the lifetimes of an accumulator that stays resident: values joined by in-place
    edges into one ring whose distances sum to δ hand one storage on around the ring, so together
    they hold it for exactly δ x II cycles (FA4's O in TMEM: P·V_a -> P·V_b -> next P·V_a), however
    short each one's own shortest lifetime is. The shortfall goes to the smallest member."""
    nxt: dict[str, list[tuple[str, int]]] = {}
    for e in problem.edges:
        if e.in_place and e.src in life and e.dst in life:
            nxt.setdefault(e.src, []).append((e.dst, e.distance))
    seen: set[str] = set()
    for first in sorted(nxt):
        ring, dist, here = [first], 0, first
        while len(nxt.get(here, ())) == 1:
            here, d = nxt[here][0]
            dist += d
            if here == first or here in ring:
                break
            ring.append(here)
        if here != first or dist == 0 or seen & set(ring):
            continue
        seen |= set(ring)
        short = dist * ii - sum(life[n] for n in ring)
        if short > 0:
            smallest = min(ring, key=lambda n: (max(problem.op(n).tmem_cols, problem.op(n).regs), n))
            life[smallest] += short


def register_capacity(problem: Problem) -> int:
    """Register words every group's values can hold at once: the register file less the reserved registers of the
    fewest warps the body can run on (its widest op's)."""
    a = problem.arch
    widest = max(op.min_warps for op in problem.ops)
    return a.limit("regs_per_sm") - 32 * a.limit("regs_reserved_per_thread") * widest


def _storage_excess(problem: Problem, ii: int) -> tuple[str, int, int] | None:
    """The first memory whose average demand exceeds its capacity at ``ii``, or None."""
    a = problem.arch
    memories = (
        ("tmem", lambda op: op.tmem_cols, a.limit("tmem_cols")),
        ("smem", lambda op: op.smem_bytes, a.limit("smem_bytes_per_cta")),
        ("registers", lambda op: op.regs, register_capacity(problem)),
    )
    for memory, size, capacity in memories:
        names = [op.name for op in problem.ops if size(op)]
        if not names:
            continue
        life = shortest_lifetimes(problem, ii, names)
        demand = sum(size(problem.op(n)) * life[n] for n in names)
        if demand > capacity * ii:
            return memory, demand, capacity
    return None


def storage_mii(problem: Problem, lo: int, cap: int) -> StorageBound | None:
    """The least II >= ``lo`` at which every memory's average occupancy fits, or None when ``lo``
    already fits; raises ValueError when no II up to ``cap`` fits.

    A value of size s alive L cycles fills s x L unit-cycles of the II circle and a peak is never
    below the average, so sum_v s_v x L_v <= C x II is necessary for TMEM, SMEM (ring copies >=
    L / II) and the register file (all groups' budgets together, less the reserved registers).
    With II >= RecMII each shortest lifetime is a maximum of linear functions of II, so each
    condition's excess is convex in II and the IIs that pass form an interval: galloping up to a
    passing II and bisecting back finds its first element exactly (design.md §3.1).
    """
    if _storage_excess(problem, lo) is None:
        return None
    bad, step, good = lo, 1, None
    while good is None:
        probe = min(cap, bad + step)
        if _storage_excess(problem, probe) is None:
            good = probe
        elif probe >= cap:
            raise ValueError(f"no II up to {cap} leaves room for the values the memories hold")
        else:
            bad, step = probe, 2 * step
    while good - bad > 1:
        mid = (bad + good) // 2
        if _storage_excess(problem, mid) is None:
            good = mid
        else:
            bad = mid
    memory, demand, capacity = _storage_excess(problem, good - 1)
    return StorageBound(good, memory, demand, capacity)


# -- residues: two ops of one single-capacity unit, joined by a dependence path -------------------
@dataclass(frozen=True, slots=True)
class ResidueCut:
    """start[after] - start[before] >= turns * II + gap, for every II in [ii_from, ii_to]."""

    before: str
    after: str
    turns: int
    gap: int
    ii_from: int
    ii_to: int


def residue_cuts(problem: Problem, lo: int, hi: int) -> list[ResidueCut]:
    """Distances between two ops on one unit of capacity 1 that the dependences and the modular
    reservation imply together, for II in [lo, hi] (design.md §2.5a).

    Fact: a capacity-1 unit serves one op at a time in every cycle of the steady state, so when
    op a holds it for [oa, oa + la) after its issue and op b for [ob, ob + lb), b's reservation
    starts at a modular distance r in [la, II - lb] after a's. A dependence path of length P
    from a to b says D = start[b] - start[a] >= P; the residue rule then excludes every D whose
    shifted distance D' = D + ob - oa falls in a gap (II - lb, II + la) modulo II. When P' lies
    in the gap after turn q, D' jumps to the turn's next free residue: D' >= (q + 1) II + la.
    For FA forward with 2 sub-tiles on b200 at II 2048 this is P·V_j - Q·K_j >= 2560 where the
    path gives 1846, the step CP-SAT's modular no-overlap leaves to branching (design.md §5).
    P is taken at II = ``hi``: a path's length latency - distance x II only falls as II grows.
    """
    uses: dict[str, list[tuple[str, int, int]]] = {}
    for op in problem.ops:
        for use in op.uses:
            if problem.capacity[use.unit] == 1 and use.amount == 1 and use.length < lo:
                uses.setdefault(use.unit, []).append((op.name, use.offset, use.length))
    sources = sorted({name for items in uses.values() if len(items) > 1 for name, _, _ in items})
    paths = longest_paths(problem, hi, sources)
    cuts = []
    for items in uses.values():
        for a, oa, la in items:
            for b, ob, lb in items:
                if a != b and b in paths[a] and la + lb <= lo:
                    cuts += _gap_cuts(a, b, paths[a][b] + ob - oa, la, lb, oa - ob, lo, hi)
    return cuts


def _gap_cuts(a: str, b: str, p: int, la: int, lb: int, shift: int, lo: int, hi: int) -> list[ResidueCut]:
    """Cuts D' >= t * II + la for each turn t whose gap (t II - lb, t II + la) holds the path
    length ``p`` (shifted) for some II in [lo, hi]; ``shift`` takes D' back to D. A turn may be
    negative when loop-carried edges make the path negative, and turn 0 holds for every II."""
    out = []
    # the turns whose gap holds p for some II in [lo, hi]: (p - la) / II < t < (p + lb) / II
    lowest = (p - la) // (lo if p < la else hi) + 1
    highest = -(-(p + lb) // (lo if p + lb > 0 else hi)) - 1
    for t in range(lowest, highest + 1):
        if t > 0:  # t II - lb < p < t II + la  <=>  (p - la) / t < II < (p + lb) / t
            first, last = (p - la) // t + 1, -(-(p + lb) // t) - 1
        elif t < 0:  # the same with -t > 0:  -(p + lb) / -t < II < (la - p) / -t
            first, last = -(p + lb) // -t + 1, -((p - la) // -t) - 1
        else:
            first, last = lo, hi
        first, last = max(lo, first), min(hi, last)
        if first <= last:
            out.append(ResidueCut(a, b, t, la + shift, first, last))
    return out


def monotone_in_ii(problem: Problem) -> bool:
    """Whether the problem's feasible IIs are closed upwards: a schedule at II gives one at II + 1.

    They are when every reservation segment starts at its op's issue (offset 0), as in every built-in
    program and curated graph on every arch but FA4's granularity (docs/design.md §3.1e). Stretch the
    schedule: issue k·II + o moves to k·(II + 1) + o. The map is increasing and never shrinks a
    distance, so dependences and hand-offs hold; every interval the model places (busy segments, holds,
    lifetimes) begins at an issue and ends no later than the stretched image of its old end, so each
    cycle of the stretched steady state is covered by no more than some cycle of the old one was, and
    units, issue slots, registers, TMEM and SMEM rings still fit; groups, warps and budgets are kept.
    A segment that starts o > 0 cycles after issue can land one cycle early against the stretched
    others, and there feasibility is not monotone (uses at offsets 0 and 3 of one unit fit II 2, not 3).
    So refuting one II refutes every smaller one, and the search bisects (``phases.sweep``)."""
    return all(use.offset == 0 for op in problem.ops for use in op.uses)


def lower_bound(problem: Problem, options: SolveOptions, bounds: Bounds | None = None) -> int:
    """II can be no smaller than the unit and recurrence bounds, nor than any op's group hold,
    nor (joint problem) than the II at which the memories hold their values on average."""
    return bound_and_reason(problem, options, bounds)[0]


def bound_and_reason(problem: Problem, options: SolveOptions, bounds: Bounds | None = None) -> tuple[int, str]:
    """``lower_bound`` and a sentence naming what binds it."""
    lb, why, _ = _bound(problem, options, bounds)
    return lb, why


def binding_memory(problem: Problem, options: SolveOptions) -> str | None:
    """The memory whose average occupancy sets ``lower_bound`` ("tmem", "smem", "registers"), or None where a
    unit, a recurrence, a hold or in-order issue does."""
    storage = _bound(problem, options, None)[2]
    return None if storage is None else storage.memory


def _bound(problem: Problem, options: SolveOptions, bounds: Bounds | None) -> tuple[int, str, StorageBound | None]:
    b = bounds or compute_bounds(problem)
    lb, why = b.mii, b.binding()
    if options.swp_only:
        return lb, why, None
    holder = max(problem.ops, key=lambda op: problem.hold(op.name))
    if problem.hold(holder.name) > lb:
        lb, why = problem.hold(holder.name), f"op {holder.name!r} holds its warp group {problem.hold(holder.name)} cycles"
    issue = issue_mii(problem, options)
    if issue is not None and issue[0] > lb:
        lb, why = issue
    try:
        storage = storage_mii(problem, lb, sequential_ii(problem))
    except ValueError as err:
        raise InfeasibleError(f"{problem.body.name!r} on {problem.arch.name!r}: infeasible: {err}",
                              reason=str(err)) from None
    if storage is not None:
        lb, why = storage.ii, storage.sentence()
    pinned = _pinned_bound(problem, options, lb)
    if pinned is not None:
        lb, why = pinned
    return lb, why, storage


def under_pinned_groups(problem: Problem, options: SolveOptions) -> Problem | None:
    """``problem`` with every edge whose two ends ``--groups`` pins carrying the least issue distance that
    grouping imposes, or None when nothing is pinned (or the problem has no warp groups).

    An edge between two groups waits for its hand-off (``Problem.cross_group_cost``, the model's
    dependence family); an edge within one group waits out its source's hold (in-order issue,
    ``Problem.same_group_latency``). Every schedule under the pins meets these distances, so the bounds
    of the result (recurrences, and the memories on average, whose shortest lifetimes run along the
    same paths) are bounds of the pinned problem: FA4's roles pinned on b200 put the P store and its
    P·V in different groups, and the S tile in TMEM lives 92 cycles longer per iteration."""
    pins = dict(options.fixed_groups)
    if options.swp_only or not pins:
        return None
    edges = []
    for e in problem.edges:
        if e.src not in pins or e.dst not in pins:
            edges.append(e)
        elif pins[e.src] == pins[e.dst]:
            edges.append(replace(e, latency=problem.same_group_latency(e), cross_latency=None))
        else:
            edges.append(replace(e, latency=e.latency + max(0, problem.cross_group_cost(e)), cross_latency=None))
    return replace(problem, body=replace(problem.body, edges=tuple(edges)))


def _pinned_bound(problem: Problem, options: SolveOptions, lb: int) -> tuple[int, str] | None:
    """A bound above ``lb`` that holds only under the options' pinned groups (``under_pinned_groups``): the
    holds of the ops pinned to one group sum to at most II (in-order issue), and the recurrences and the
    memories' average occupancy with the pinned edges' distances. None where none exceeds ``lb``."""
    pinned = under_pinned_groups(problem, options)
    if pinned is None:
        return None
    found: list[tuple[int, str]] = [(lb, "")]
    holds: dict[int, int] = {}
    pins = dict(options.fixed_groups)
    for name, group in pins.items():
        holds[group] = holds.get(group, 0) + pinned_hold(problem, name, pins)
    group, total = max(holds.items(), key=lambda gh: (gh[1], -gh[0]))
    found.append((total, f"in-order issue: the ops pinned to group {group} hold it {total} cycles per iteration"
                         f"{_copies_words(problem, pins, group)}"))
    recurrence = rec_mii(pinned)
    if recurrence is not None:
        found.append((recurrence.ii, f"recurrence {' -> '.join(recurrence.ops)} with the pinned groups' hand-offs "
                                     f"and in-order waits (latency {recurrence.latency} over distance "
                                     f"{recurrence.distance})"))
    floor = max(ii for ii, _ in found)
    try:
        storage = storage_mii(pinned, floor, sequential_ii(pinned))
    except ValueError as err:
        raise InfeasibleError(f"{problem.body.name!r} on {problem.arch.name!r}: infeasible with the pinned groups: "
                              f"{err}", reason=str(err)) from None
    if storage is not None:
        found.append((storage.ii, f"{storage.sentence()}, with the pinned groups' hand-offs and in-order waits"))
    best = max(found, key=lambda f: f[0])  # the first of equals: lb itself, then the cheaper reasons
    return best if best[0] > lb else None


def pinned_hold(problem: Problem, name: str, pins: Mapping[str, int]) -> int:
    """Cycles op ``name`` holds its pinned group in every schedule under ``pins``: its hold, plus the SMEM copy of
    each register hand-off whose other end is pinned to another group (``Problem.hold_in``: the store on the
    producer's group, the load on the reader's). An edge with an unpinned end may stay within one group, so its
    copy is left out: the sum over a group stays a bound of every completion of the pins."""
    here = pins[name]
    groups = {op.name: pins.get(op.name, here) for op in problem.ops}
    return problem.hold_in(name, groups)


def _copies_words(problem: Problem, pins: Mapping[str, int], group: int) -> str:
    """What the pinned hand-offs add to ``group``'s holds, in words ('' where nothing)."""
    copies = sum(pinned_hold(problem, n, pins) - problem.hold(n) for n, g in pins.items() if g == group)
    return f", {copies} of them the SMEM copies of its register hand-offs to other groups" if copies else ""


def issue_mii(problem: Problem, options: SolveOptions) -> tuple[int, str] | None:
    """In-order issue: a warp group issues its ops one after another, each keeping it busy for its
    hold, so the holds in one group sum to at most II (design.md §2.7). An op that needs m warps
    sits in a group of at least m warps, and a CTA has room for at most
    min(max groups, W / m, register file / (32 m r_min)) such groups (W warps, r_min the least
    register budget). So for every m, II >= (sum of the holds of the ops needing >= m warps) / that
    count, whatever the grouping. (II, what binds it), or None when no op holds its group."""
    arch = problem.arch
    warps = options.max_warps if options.max_warps is not None else arch.limit("warps_per_cta")
    least_budget = min(arch.register_budgets())
    best: tuple[int, str] | None = None
    for m in sorted({op.min_warps for op in problem.ops}):
        total = sum(problem.hold(op.name) for op in problem.ops if op.min_warps >= m)
        groups = min(options.max_groups, warps // m, arch.limit("regs_per_sm") // (32 * m * least_budget))
        if total == 0 or groups < 1:
            continue
        ii = math.ceil(total / groups)
        if best is None or ii > best[0]:
            best = ii, (f"in-order issue: ops needing {m}+ warps hold their groups {total} cycles per iteration, "
                        f"and at most {groups} groups of {m}+ warps fit the CTA")
    return best


def sequential_ii(problem: Problem) -> int:
    """An II at which one iteration runs alone, op after op: the search stops above it."""
    span = sum(problem.most_span(op.name) for op in problem.ops)
    return span + sum(problem.cross_group_cost(e) + e.latency for e in problem.edges) + 1


def stage_bound(problem: Problem, ii_lo: int, joint: bool) -> int:
    """Stages any optimal schedule needs at most at II >= ``ii_lo`` (design.md §2.2): with offsets
    fixed, the least stage assignment of the difference constraints spans at most (|V|-1) * M stages."""
    worst_cost = max((problem.cross_group_cost(e) for e in problem.edges), default=0) if joint else 0
    m = max(
        [math.ceil((e.latency + worst_cost) / ii_lo) + 1 + e.distance for e in problem.edges]
        + [math.ceil((problem.most_span(op.name) if joint else problem.span(op.name)) / ii_lo) + 1 for op in problem.ops]
    )
    return max(1, (len(problem.ops) - 1) * m)
