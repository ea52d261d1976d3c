"""The warp-group structure on its own: a relaxation over groupings that bounds II from below, and
the groupings it proposes to the heuristics (docs/design.md §3.1b).

A joint schedule at II fixes a grouping (which op each warp group issues, each group's warps and
``setmaxnreg`` budget). Whatever its starts, that grouping meets a few conditions that depend on
II but not on the starts:

* in-order issue: the holds of a group's ops sum to at most II (§2.7);
* variable-latency isolation, warps per group and per CTA, the register file (§2.6);
* registers on average: a group's values, each held at least its shortest lifetime at this II,
  fit the group's room over one II (the cut of §2.8a with the shortest lifetimes of §3.1a);
* registers at once: the values the dependences hold together (``bounds.colive_values``) that a
  group produces fit its room together, beside the copies long lifetimes keep live at every cycle;
* shared memory: ring slots for the shortest lifetimes plus the staging of every register value
  that crosses groups, plus the static buffers (§2.9);
* recurrences: a dependence cycle whose edges cross groups pays each crossing's hand-off cost, each
  edge within one group waits out its source's hold (in-order issue), and the cycle still fits its
  distance times II (§2.4, §2.7).

So a grouping that breaks one of them has no schedule at this II, and when no grouping meets them
all, II is infeasible: a proof by a model with no starts at all, far smaller than the joint model
(ops x groups Booleans), which decides in a fraction of a second what the joint model cannot decide
in minutes where registers, shared memory or in-order issue limit how ops can be split among groups.
Each condition is monotone in II (a shortest lifetime is a maximum of (latency sum + read) -
distance x II terms plus whole IIs, so lifetime / II never grows with II), so the least feasible II
is found by bisection and every II below it is refuted.

The same model, at an II where it is feasible, proposes groupings: the feasible grouping with the
fewest hand-off bytes and crossings is what a constructive scheduler (``twill.solver.ims``) is then
run under.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import networkx as nx
from ortools.sat.python import cp_model

from twill.bounds import colive_values, longest_paths, shortest_lifetimes, with_resident_rings
from twill.ir import Carrier, Edge, Op
from twill.options import SolveOptions
from twill.problem import Problem, per_problem, read_time
from twill.solver.model import group_relation, group_variables, isolate, upper
from twill.solver.run import Budget, Work, decision_solver

__all__ = ["StructureModel", "STRUCTURE_FAMILIES", "build_structure", "gallop", "structure_floor", "propose_grouping", "cycle_edges",
           "in_one_group", "StructureFloor"]

MAX_CYCLES = 200  # dependence cycles enumerated for the hand-off recurrence family (any subset is valid)
PROBE = Budget(share=0.0, at_least=1.0)  # one fixed-II decision of the relaxation
GALLOP_STEPS = 64  # structure_floor's first step above its lower end: that end / this
PROPOSE = Budget(share=0.0, at_least=0.5)  # a grouping with the fewest hand-offs at one II (best found)


@dataclass
class StructureModel:
    """The variables of the structure relaxation at one II: membership x[op, g], each group's
    use, warps and register budget, and which edges cross groups."""

    problem: Problem
    options: SolveOptions
    ii: int
    m: cp_model.CpModel = field(default_factory=cp_model.CpModel)
    x: dict[tuple[str, int], cp_model.IntVar] = field(default_factory=dict)
    used: list[cp_model.IntVar] = field(default_factory=list)
    warps: list[cp_model.IntVar] = field(default_factory=list)
    regs: list[cp_model.IntVar] = field(default_factory=list)
    words: list[cp_model.IntVar] = field(default_factory=list)
    group_of: dict[str, cp_model.IntVar] = field(default_factory=dict)
    cross: dict[int, cp_model.IntVar] = field(default_factory=dict)  # edge index -> ends in different groups
    apart: dict[int, cp_model.IntVar] = field(default_factory=dict)  # the same, edges that cost nothing to cross
    life: dict[str, int] = field(default_factory=dict)  # each value's shortest lifetime at this II (rings' shortfall in)
    own_life: dict[str, int] = field(default_factory=dict)  # the same without the rings' shortfall (per value)
    paths: dict[str, dict[str, int]] = field(default_factory=dict)  # longest paths at this II from each value
    held: dict[str, cp_model.IntVar] = field(default_factory=dict)  # lifetimes with the hand-offs on their paths
    copies: dict[str, cp_model.IntVar] = field(default_factory=dict)  # floor(held / II) per value
    handoffs: bool = True  # lengthen register lifetimes by the hand-offs on their paths (off: proposals)

    @property
    def groups(self) -> range:
        return range(min(self.options.max_groups, len(self.problem.ops)))

    def room(self, g: int) -> cp_model.LinearExprT:
        """Register words group ``g`` has for results (its budget above the reserved registers)."""
        reserved = self.problem.arch.limit("regs_reserved_per_thread")
        return 32 * (self.words[g] - reserved * self.warps[g])


def add_groups(s: StructureModel) -> None:
    """Groups, their warps and budgets, labelled in order of first use (``model.group_variables``, §2.6).

    Fact: every op is issued by one group at least as wide as the op needs; the CTA holds at most
    W warps; every group's budget comes from one register file. Charging each group its own
    warps x budget is at most what packing narrow groups into warpgroups charges (b200), so this
    is a relaxation there too.
    Math: sum_g x[v, g] = 1; x[v, g] => warps[g] >= min_warps(v); sum warps <= W;
    sum_g 32 warps[g] regs[g] <= registers per SM.
    """
    p, m, arch = s.problem, s.m, s.problem.arch
    gv = group_variables(m, p, s.groups)
    s.used, s.warps, s.regs, s.words, s.x, s.group_of = gv.used, gv.warps, gv.regs, gv.words, gv.member, gv.group_of
    for name, g in s.options.fixed_groups:
        m.add(s.group_of[name] == g)
    cta = s.options.max_warps if s.options.max_warps is not None else arch.limit("warps_per_cta")
    m.add(sum(s.warps) <= cta)
    m.add(32 * sum(s.words) <= arch.limit("regs_per_sm"))
    for i, e in enumerate(p.edges):
        if e.src != e.dst and (p.cross_group_cost(e) or p.handoff_bytes(e) or s.options.no_handoff):
            c = s.cross[i] = group_relation(m, s.group_of, e.src, e.dst, f"cross[{e.src}->{e.dst}#{i}]", apart=True)
            if s.options.no_handoff and e.carrier is Carrier.REGISTERS and p.op(e.src).regs > 0:
                m.add(c == 0)


def add_issue_sums(s: StructureModel) -> None:
    """In-order issue (§2.7): a group's ops hold it one after another within every II.
    Math: sum_v hold(v) x[v, g] <= II."""
    for g in s.groups:
        s.m.add(sum(s.problem.hold(op.name) * s.x[op.name, g] for op in s.problem.ops) <= s.ii)


def add_isolation(s: StructureModel) -> None:
    """Variable-latency ops share a group with no op that holds it (§2.7)."""
    if s.options.isolate_variable_latency:
        isolate(s.m, s.problem, s.groups, s.x)


def add_register_room(s: StructureModel) -> None:
    """Registers (§2.8, §2.8a): a value of w words held at least its lifetime L fills w x L of the
    II circle of its producer's group, never more on average than the group's room; and at the
    moment a co-live set is held together (``bounds.colive_values``) the group holds its own
    members of the set, one copy each at least, beside floor(L / II) copies of every other value of
    its own (a value held L cycles has that many copies live at every cycle of the steady state).
    L is the value's shortest lifetime with the hand-off of every crossing edge on its paths to its
    readers (``_handoff_lifetimes``): the producer holds a value it hands on until the other group's
    reader has it, so splitting a chain lengthens what the producer's group must hold.
    Math: sum_v regs(v) L_v x[v, g] <= room[g] II; regs(v) max(1, f_v) x[v, g] <= room[g] where
    L_v > 0; for each co-live set S: sum_{v in S} regs(v) max(1, f_v) x[v, g] + sum_{v not in S}
    regs(v) f_v x[v, g] <= room[g], f_v = floor(L_v / II) with each value's own lifetime (no ring
    shortfall); in a resident accumulator ring the sums keep the ring's constant lifetimes."""
    values = [op for op in s.problem.ops if op.regs]
    held = [op for op in values if s.life[op.name] > 0]  # a value held for no cycle takes no room
    longer = _handoff_lifetimes(s)
    rings = _ring_values(s.problem)
    sets = [set(c) for c in colive_values(s.problem)]
    for g in s.groups:
        if values:
            s.m.add(sum(op.regs * _average_term(s, op, g, longer, rings) for op in values) <= s.room(g) * s.ii)
        copies = {op.name: _copies_in(s, op, g, longer) for op in held}
        for op in held:
            s.m.add(op.regs * copies[op.name][1] <= s.room(g))
        for together in sets:
            terms = [op.regs * copies[op.name][op.name in together] for op in held
                     if op.name in together or copies[op.name][0] is not None]
            if len(terms) > 1:
                s.m.add(sum(terms) <= s.room(g))


def _average_term(s: StructureModel, op: Op, g: int, longer: dict[str, cp_model.IntVar],
                  rings: frozenset[str]) -> cp_model.LinearExprT:
    """L_v x[v, g]: the value's cycles on group g's circle, as its constant shortest lifetime times
    x (what the LP relaxation reads well) plus what the hand-offs add where v is in g; a ring's
    members keep their constant lifetimes."""
    x = s.x[op.name, g]
    if op.name not in longer or op.name in rings:
        return s.life[op.name] * x
    return s.life[op.name] * x + _excess(s, longer[op.name], s.life[op.name], x, f"held[{op.name},{g}]")


def _copies_in(s: StructureModel, op: Op, g: int, longer: dict[str, cp_model.IntVar]
               ) -> tuple[cp_model.LinearExprT | None, cp_model.LinearExprT]:
    """(f_v x[v, g], max(1, f_v) x[v, g]) with f_v = floor(L_v / II), the copies a lifetime keeps
    live at every cycle: the shortest lifetime's copies times x, plus what the hand-offs add (the
    first None where it is 0 whatever the grouping)."""
    x, least = s.x[op.name, g], s.own_life[op.name] // s.ii
    if op.name not in longer or upper(longer[op.name]) // s.ii == least:
        return least * x if least else None, max(1, least) * x
    f = s.copies.get(op.name)
    if f is None:
        life = longer[op.name]
        f = s.copies[op.name] = s.m.new_int_var(least, upper(life) // s.ii, f"copies[{op.name}]")
        s.m.add(f * s.ii >= life - s.ii + 1)
    return (least * x + _excess(s, f, least, x, f"copies[{op.name},{g}]"),
            max(1, least) * x + _excess(s, f, max(1, least), x, f"copies1[{op.name},{g}]"))


def _excess(s: StructureModel, var: cp_model.IntVar, base: int, x: cp_model.IntVar, name: str) -> cp_model.LinearExprT:
    """max(0, var - base) where x holds, else anything >= 0: the part of a lengthened quantity
    above its constant lower bound (0 where ``var`` cannot exceed it)."""
    top = upper(var) - base
    if top <= 0:
        return 0
    extra = s.m.new_int_var(0, top, name)
    s.m.add(extra >= var - base).only_enforce_if(x)
    return extra


def _handoff_lifetimes(s: StructureModel) -> dict[str, cp_model.IntVar]:
    """Each register value's lifetime L_v with the hand-offs of its grouping on its paths: per
    value, a start t_u for every op between it and its readers (t_v = 0) under the dependences
    with each crossing edge's hand-off cost (§2.4), and L_v >= t_r + distance x II + read for each
    reader r (§2.8). Its least value is the longest path with those costs, a maximum of terms
    (latency sum + costs + read) + (δ_e - Δ_path) II, so L_v / II never grows with II and the
    family stays monotone. Values whose paths cross no costly edge keep their constant lifetime."""
    if s.held or not s.cross or not s.handoffs:
        return s.held
    p, m, ii = s.problem, s.m, s.ii
    for name, (nodes, edges) in _between(p).items():
        if not p.op(name).regs:
            continue
        slack = sum(max(0, p.cross_group_cost(p.edges[i])) for i in edges if i in s.cross)
        if slack == 0:
            continue
        lp = s.paths[name]
        t = {u: 0 if u == name else m.new_int_var(lp[u], lp[u] + slack, f"t[{name},{u}]") for u in nodes}
        for i in edges:
            e = p.edges[i]
            cost = max(0, p.cross_group_cost(e)) * s.cross[i] if i in s.cross else 0  # a cost < 0 is no bound
            m.add(t[e.dst] >= t[e.src] + e.latency - e.distance * ii + cost)
        life = s.held[name] = m.new_int_var(s.own_life[name], s.own_life[name] + slack, f"life[{name}]")
        for e in p.body.out_edges(name):
            m.add(life >= t[e.dst] + e.distance * ii + read_time(e, p.op(e.dst)))
    return s.held


@per_problem
def _between(problem: Problem) -> dict[str, tuple[tuple[str, ...], tuple[int, ...]]]:
    """For each op with readers: the ops on some path of distance 0 from it to one of its readers (in the
    body's op order: a set's order follows the process's string hashing, and the model's variables would too),
    the distance-0 edges among them and its own edges to its readers. Longest paths that take a
    loop-carried edge are left out: fewer edges only shorten the lifetimes the starts imply, so the
    bound stays valid, and the starts form no cycle (CP-SAT's presolve loops long on cycles)."""
    g = nx.DiGraph()
    g.add_nodes_from(op.name for op in problem.ops)
    g.add_edges_from((e.src, e.dst) for e in problem.edges if e.src != e.dst and e.distance == 0)
    out = {}
    for op in problem.ops:
        readers = {e.dst for e in problem.body.out_edges(op.name)}
        if not readers:
            continue
        ahead = nx.descendants(g, op.name) | {op.name}
        behind = set().union(*(nx.ancestors(g, r) | {r} for r in readers & ahead))
        inside = (ahead & behind) | readers | {op.name}
        nodes = tuple(o.name for o in problem.ops if o.name in inside)
        out[op.name] = (nodes, tuple(i for i, e in enumerate(problem.edges) if e.src != e.dst and (
            e.src == op.name or (e.distance == 0 and e.src in behind and e.dst in behind and e.src in ahead))))
    return out


@per_problem
def _ring_values(problem: Problem) -> frozenset[str]:
    """Values joined by an in-place edge: a resident ring's lifetimes are summed as the ring's
    (``bounds.with_resident_rings``), which a lengthened member would count twice."""
    return frozenset(n for e in problem.edges if e.in_place for n in (e.src, e.dst))


def add_handoff_smem(s: StructureModel) -> None:
    """Shared memory (§2.9): ring slots for the shortest lifetimes, the staging buffer of every
    register value that crosses groups, and the static buffers fit the CTA's shared memory."""
    p = s.problem
    rings = sum(op.smem_bytes * -(-s.life[op.name] // s.ii) for op in p.ops if op.smem_bytes)
    staged = [p.handoff_bytes(p.edges[i]) * c for i, c in s.cross.items() if p.handoff_bytes(p.edges[i])]
    s.m.add(rings + sum(staged) + p.body.static_smem <= p.arch.limit("smem_bytes_per_cta"))


def add_handoff_recurrences(s: StructureModel) -> None:
    """Recurrences across and within groups (§2.4, §2.7): every crossing on a dependence cycle adds
    its hand-off cost, and the cycle's latency must still fit its distance times II. Within one group
    an edge waits out its source's hold where that exceeds its latency (in-order issue,
    ``Problem.same_group_latency``): those waits join a cycle's sum where the cycle kept in one group
    would not fit at this II (random-recurrence-16515: 3718 cycles of latency, 16 of waits); where it
    would, they are left out, which keeps the models (and the measured searches) of the bodies whose
    cycles never bind unchanged. Each cycle takes, per pair of ops, one parallel edge chosen without
    regard to II (the least distance, then the longest latency with its crossing cost), so each
    constraint is monotone in II; any subset of cycles, terms and parallel edges is a valid relaxation."""
    p = s.problem
    for cycle in _cycles(p):
        chosen = cycle_edges(p, cycle)
        latency, distance = sum(e.latency for _, e in chosen), sum(e.distance for _, e in chosen)
        waits = in_one_group(p, chosen) > distance * s.ii
        extra = [p.cross_group_cost(e) * s.cross[i] for i, e in chosen if i in s.cross]
        if waits:
            extra += [(p.same_group_latency(e) - e.latency) * (1 - _crossing(s, i)) for i, e in chosen
                      if p.same_group_latency(e) > e.latency]
        if distance > 0 and extra:
            s.m.add(latency + sum(extra) <= distance * s.ii)


def cycle_edges(problem: Problem, cycle: list[str]) -> list[tuple[int, Edge]]:
    """The edge (index, edge) the recurrences family takes between each pair of consecutive ops of ``cycle``:
    of parallel edges the least distance, then the longest latency with its crossing cost (chosen without
    regard to II, so the family stays monotone in II)."""
    return [min(((i, e) for i, e in enumerate(problem.edges) if e.src == a and e.dst == b),
                key=lambda ie: (ie[1].distance, -ie[1].latency - problem.cross_group_cost(ie[1]), ie[0]))
            for a, b in itertools.pairwise([*cycle, cycle[0]])]


def in_one_group(problem: Problem, chosen: list[tuple[int, Edge]]) -> int:
    """A cycle's latency (over ``cycle_edges``) with every edge's wait, as when one group issues all of it."""
    return sum(problem.same_group_latency(e) for _, e in chosen)


def _crossing(s: StructureModel, i: int) -> cp_model.IntVar:
    """Edge ``i`` ends in different groups: ``add_groups``'s variable, or one made for an edge that costs
    nothing to cross (kept apart from ``s.cross``, the edges whose crossings the proposals pay for)."""
    if i in s.cross:
        return s.cross[i]
    if i not in s.apart:
        e = s.problem.edges[i]
        s.apart[i] = group_relation(s.m, s.group_of, e.src, e.dst, f"apart[{e.src}->{e.dst}#{i}]", apart=True)
    return s.apart[i]


@per_problem
def _cycles(problem: Problem) -> list[list[str]]:
    """Up to ``MAX_CYCLES`` simple dependence cycles (Johnson's algorithm, networkx), once per problem. The
    graph's nodes are the ops' indices: networkx walks sets of nodes, and a set of names is ordered by the
    process's string hashing, so which cycles come first (and which fall past the cap) changed from run to run."""
    index = {op.name: k for k, op in enumerate(problem.ops)}
    g = nx.DiGraph()
    g.add_edges_from((index[e.src], index[e.dst]) for e in problem.edges if e.src != e.dst)
    return [[problem.ops[k].name for k in c] for c in itertools.islice(nx.simple_cycles(g), MAX_CYCLES)]


STRUCTURE_FAMILIES: tuple[tuple[str, Callable[[StructureModel], None]], ...] = (
    ("issue", add_issue_sums),
    ("isolation", add_isolation),
    ("registers", add_register_room),
    ("smem", add_handoff_smem),
    ("recurrences", add_handoff_recurrences),
)
# what each family is called in a sentence that says what binds the bound
_FAMILY_WORDS = {"issue": "in-order issue", "isolation": "load isolation", "registers": "registers",
                 "smem": "shared-memory hand-offs", "recurrences": "hand-offs and issue order on recurrences"}


def build_structure(problem: Problem, options: SolveOptions, ii: int, drop: tuple[str, ...] = (),
                    handoffs: bool = True) -> StructureModel:
    """The structure relaxation at ``ii`` (II >= RecMII, so shortest lifetimes are defined),
    without the families named in ``drop``; without ``handoffs``, each value's shortest lifetime
    alone (a weaker relaxation, still valid)."""
    names = [op.name for op in problem.ops if op.regs or op.smem_bytes]
    paths = longest_paths(problem, ii, names) if names else {}
    own = shortest_lifetimes(problem, ii, names, resident=False, paths=paths) if names else {}
    s = StructureModel(problem, options, ii, life=with_resident_rings(problem, ii, own), own_life=own, paths=paths,
                       handoffs=handoffs)
    add_groups(s)
    for name, family in STRUCTURE_FAMILIES:
        if name not in drop:
            family(s)
    return s


@dataclass(frozen=True, slots=True)
class StructureFloor:
    """The least II in a range at which the relaxation has a grouping (``ii``), and what binds it
    there (the families without which II - 1 would pass)."""

    ii: int
    binding: tuple[str, ...] = ()
    decided: bool = True  # False: a probe ran out of work, so ``ii`` is only what was refuted

    def sentence(self) -> str:
        what = " + ".join(_FAMILY_WORDS[f] for f in self.binding) or "the families together"
        return (f"warp-group structure: below II {self.ii} no grouping of the ops fits {what} "
                f"(a relaxation of the joint problem)")


def _decide(problem: Problem, options: SolveOptions, ii: int, work: Work, drop: tuple[str, ...] = ()) -> int:
    s = build_structure(problem, options, ii, drop)
    return decision_solver(work, PROBE.at_least).solve(s.m)


def gallop(decide: Callable[[int], int], lo: int, hi: int, more: Callable[[], bool]) -> tuple[int, bool] | None:
    """(floor, decided) of a relaxation whose feasible IIs are closed upwards, ``decide`` giving its CP-SAT status at
    one II: every II below the floor is refuted; ``decided`` False where a probe ran out of work or ``more`` ended
    the search first, so the floor is only what was refuted. None when ``decide`` does not refute ``lo``.

    The probes gallop up from ``lo`` (steps of lo/``GALLOP_STEPS``, doubling after each refutation, never past the
    midpoint of what is left) until one is not refuted, then bisect. A refutation far below the least feasible II
    is cheap and one near it is not, and ``hi`` (the first schedule's II) is often twice the floor: bisecting from
    the middle spent the budget undecided on probes far above it (random-regs-16010-n56-h100 at 2 units: 3666 by
    bisection, 4008 galloping; docs/benchmarks_notes.md, session 51)."""
    if lo > hi or not more() or decide(lo) != cp_model.INFEASIBLE:
        return None
    refuted, top, decided = lo, hi + 1, True  # refuted: proven infeasible; top: feasible (or past hi)
    step: float = max(1, lo // GALLOP_STEPS)  # the gallop's next step; infinite once a probe was not refuted
    while top - refuted > 1 and more():
        mid = int(min(refuted + step, (refuted + top) // 2))
        status = decide(mid)
        if status == cp_model.INFEASIBLE:
            refuted, step = mid, 2 * step
            continue
        step = math.inf  # from here on, bisection
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            top = mid
        else:  # undecided: what is proven so far stands
            top, decided = mid, False
    return refuted + 1, decided and top - refuted <= 1


def structure_floor(problem: Problem, options: SolveOptions, lo: int, hi: int, work: Work,
                    until: float | None = None) -> StructureFloor | None:
    """The least II in [lo, hi] that the structure relaxation does not refute (every family is monotone in II), or
    None when it refutes nothing at ``lo``, found by ``gallop``. Where a probe runs out of its budget, or the work
    mark ``until`` is reached, the floor stays at the last refuted II + 1, so the result is always a valid bound."""
    until = work.limit if until is None else until

    def more() -> bool:
        return work.left() > 0 and work.spent < until

    found = None if options.swp_only else gallop(lambda ii: _decide(problem, options, ii, work), lo, hi, more)
    if found is None:
        return None
    floor, decided = found
    refuted = floor - 1
    binding = tuple(name for name, _ in STRUCTURE_FAMILIES
                    if more() and _decide(problem, options, refuted, work, drop=(name,)) in
                    (cp_model.OPTIMAL, cp_model.FEASIBLE))
    return StructureFloor(floor, binding, decided)


def propose_grouping(problem: Problem, options: SolveOptions, ii: int, work: Work,
                     count: int | None = None, balanced: bool = False) -> dict[str, int] | None:
    """A grouping that meets the relaxation at ``ii`` (with exactly ``count`` groups, when given)
    with the fewest staged hand-off bytes, then the fewest crossing cycles, then the smallest
    largest hold sum (balanced groups leave each the most slack): what a schedule under it pays
    least for; with ``balanced``, the smallest largest hold sum first. None when the relaxation
    has none in its budget. It proposes under each value's shortest lifetime, without the hand-offs'
    lengthening (``_handoff_lifetimes``), which only the floor uses: proposed under it, the schedules
    of ten large suite bodies moved, six of them up (docs/benchmarks_notes.md, session 27)."""
    if options.swp_only or work.left() <= 0:
        return None
    s = build_structure(problem, options, ii, handoffs=False)
    p = problem
    if count is not None:
        if count > len(s.groups):
            return None
        s.m.add(sum(s.used) == count)
    staged = sum(p.handoff_bytes(p.edges[i]) * c for i, c in s.cross.items())
    delay = sum(p.cross_group_cost(p.edges[i]) * c for i, c in s.cross.items())
    busiest = s.m.new_int_var(0, ii, "busiest")
    for g in s.groups:
        s.m.add(busiest >= sum(p.hold(op.name) * s.x[op.name, g] for op in p.ops))
    cost = staged * (ii + 1) + delay  # bytes weigh more than any delay, which weighs more than balance
    top = sum(p.handoff_bytes(e) for e in p.edges) * (ii + 1) + sum(p.cross_group_cost(e) for e in p.edges) + 1
    s.m.minimize(busiest * top + cost if balanced else cost * (ii + 1) + busiest)
    sv = decision_solver(work, PROPOSE.at_least)
    if sv.solve(s.m) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return {op.name: int(sv.value(s.group_of[op.name])) for op in p.ops}
