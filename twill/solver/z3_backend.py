"""A second backend on z3 (SMT over linear integer arithmetic), for differential testing.

Same input (``Problem``, ``SolveOptions``), same output (``Schedule``, through ``assemble``), a
different solver and a different encoding of modular time, so the two backends check each other
(design.md §3.4). II is fixed in each model, which keeps every constraint linear:

* an op issues at ``start = II * stage + offset`` with ``offset`` in [0, II);
* a busy segment, a hold or a live value is an arc on the circle of II cycles. Two arcs overlap
  iff one's start lies in the other, and a sum of arcs peaks at some arc's start, so a capacity
  is checked at each arc start (pairwise when the capacity is 1), with no time grid;
* a segment of length s >= II is ``s // II`` full turns, a constant load, plus an arc of ``s % II``.

The facts are the ones CP-SAT reads: ``Problem.hold``, ``cross_group_cost``, ``handoff_bytes``,
``problem.read_time`` (when a value's storage is free), the stage bound ``ScheduleModel`` computes
(design.md §2.2), ``lower_bound`` and the search's sequential cap on II. II goes up one value at a
time from the lower bound; an unsatisfiable model proves that II impossible, so the first
satisfiable one is optimal when every smaller II was refuted, and only "feasible" with the first
undecided II as its proven bound when a check ran out of time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import z3

from twill.bounds import bound_and_reason, compute_bounds, sequential_ii, stage_bound
from twill.errors import InfeasibleError
from twill.ir import Carrier, Op
from twill.options import SolveOptions
from twill.problem import Problem, read_time
from twill.schedule import Schedule
from twill.solver.assemble import Assignment, assemble, copies_needed

__all__ = ["solve_z3", "Z3Model", "build_z3_model"]

Expr = z3.ArithRef


@dataclass
class Z3Model:
    """The variables of one fixed-II model and the expressions the objectives read."""

    problem: Problem
    options: SolveOptions
    ii: int
    max_stage: int
    ctx: z3.Context  # one context per model: z3's answers then depend on nothing built before
    solver: z3.Solver
    start: dict[str, Expr] = field(default_factory=dict)
    offset: dict[str, z3.ArithRef] = field(default_factory=dict)
    member: dict[tuple[str, int], z3.BoolRef] = field(default_factory=dict)  # (op, group): op issued by group
    used: list[z3.BoolRef] = field(default_factory=list)
    warps: list[z3.ArithRef] = field(default_factory=list)
    regs: list[z3.ArithRef] = field(default_factory=list)
    reg_words: list[Expr] = field(default_factory=list)  # warps x registers per thread, per group
    lifetime: dict[str, tuple[z3.ArithRef, z3.ArithRef]] = field(default_factory=dict)  # full, rest
    objectives: dict[str, Expr] = field(default_factory=dict)

    @property
    def joint(self) -> bool:
        return not self.options.swp_only

    def int_var(self, name: str) -> z3.ArithRef:
        return z3.Int(name, self.ctx)

    def bool_var(self, name: str) -> z3.BoolRef:
        return z3.Bool(name, self.ctx)

    def total(self, terms: list) -> Expr:
        return z3.Sum(terms) if terms else z3.IntVal(0, self.ctx)

    def never(self) -> None:
        """This II is impossible whatever the other decisions."""
        self.solver.add(z3.BoolVal(False, self.ctx))

    # -- modular time on the circle of II cycles ---------------------------------------------------
    def position(self, op: Op, delay: int) -> Expr:
        """(start[op] + delay) mod II: the offset moved by ``delay``, wrapped once at most."""
        off, d = self.offset[op.name], delay % self.ii
        if d == 0:
            return off
        return z3.If(off + d >= self.ii, off + d - self.ii, off + d)

    def covers(self, begin: Expr, length: int | Expr, t: Expr) -> z3.BoolRef:
        """Whether the arc [begin, begin + length) of the circle contains point ``t`` (both in
        [0, II)), for an arc shorter than II: (t - begin) mod II < length."""
        d = t - begin
        return z3.If(d >= 0, d < length, d + self.ii < length)

    def same_group(self, a: str, b: str) -> z3.BoolRef:
        if not self.joint or a == b:
            return z3.BoolVal(True, self.ctx)
        return z3.Or([z3.And(self.member[a, g], self.member[b, g]) for g in range(len(self.used))])

    def group_of(self, name: str) -> Expr:
        return self.total([g * z3.If(self.member[name, g], 1, 0) for g in range(len(self.used))])

    def lifetime_of(self, op: Op) -> tuple[z3.ArithRef, z3.ArithRef]:
        """(full copies, remainder) of ``op``'s result storage: held from its issue until its last
        reader is done (``problem.read_time``), ``full * II + rest`` cycles."""
        if op.name in self.lifetime:
            return self.lifetime[op.name]
        s = self.solver
        outs = self.problem.body.out_edges(op.name)
        life = self.int_var(f"life[{op.name}]")
        if outs:
            ends = [self.start[e.dst] + e.distance * self.ii + read_time(e, self.problem.op(e.dst)) for e in outs]
            end = self.int_var(f"end[{op.name}]")
            s.add(*[end >= x for x in ends], z3.Or([end == x for x in ends]))
            s.add(life == end - self.start[op.name])
        else:
            s.add(life == op.latency)
        full, rest = self.int_var(f"copies_full[{op.name}]"), self.int_var(f"copies_rest[{op.name}]")
        s.add(life == self.ii * full + rest, rest >= 0, rest < self.ii, full >= 0)
        self.lifetime[op.name] = (full, rest)
        return full, rest

    def live_at(self, op: Op, t: Expr) -> Expr:
        """Copies of ``op``'s result alive at modular point ``t``: the full copies, plus one while
        ``t`` lies in the remainder's arc from the op's offset."""
        full, rest = self.lifetime_of(op)
        return full + z3.If(self.covers(self.offset[op.name], rest, t), 1, 0)


# -- constraint families (the same names and facts as model.py) ----------------------------------
def add_stages(v: Z3Model) -> None:
    """start = II * stage + offset, stage in [0, K] (design.md §2.1-2.2), length >= every span."""
    s, ii = v.solver, v.ii
    length = v.int_var("length")
    for op in v.problem.ops:
        k, o = v.int_var(f"stage[{op.name}]"), v.int_var(f"offset[{op.name}]")
        s.add(k >= 0, k <= v.max_stage, o >= 0, o < ii)
        v.offset[op.name] = o
        v.start[op.name] = ii * k + o
        span = max(op.latency, v.problem.hold(op.name), op.busy_cycles)
        s.add(length >= v.start[op.name] + span)
    v.objectives.update(ii=z3.IntVal(ii, v.ctx), length=length)


def add_warp_groups(v: Z3Model) -> None:
    """One issuing group per op, as wide as its widest op, all groups within the CTA (§2.6);
    labels open in op order (symmetry breaking), and every budget fits the register file."""
    s, p, o = v.solver, v.problem, v.options
    arch = p.arch
    sizes, budgets = sorted(arch.warp_group_sizes()), sorted(arch.register_budgets())
    n_groups = min(o.max_groups, len(p.ops))
    for i, op in enumerate(p.ops):
        xs = [v.bool_var(f"in_group[{op.name},{g}]") for g in range(n_groups)]
        s.add(z3.PbEq([(x, 1) for x in xs], 1))
        for g, x in enumerate(xs):
            v.member[op.name, g] = x
            if g and not o.fixed_groups:
                # op i may open group g only after an earlier op opened g - 1 (label symmetry, §2.6)
                opened = [v.member[q.name, g - 1] for q in p.ops[:i]]
                s.add(z3.Implies(x, z3.Or(opened)) if opened else z3.Not(x))
    for name, label in o.fixed_groups:
        if label < n_groups:
            s.add(v.member[name, label])
        else:
            v.never()
    for g in range(n_groups):
        members = [v.member[op.name, g] for op in p.ops]
        used, w, r = v.bool_var(f"used[{g}]"), v.int_var(f"warps[{g}]"), v.int_var(f"regs[{g}]")
        s.add(used == z3.Or(members))
        s.add(z3.If(used, z3.Or([w == x for x in sizes]), w == 0))
        s.add(z3.If(used, z3.Or([r == x for x in budgets]), r == 0))
        for op, member in zip(p.ops, members, strict=True):
            if op.min_warps > 1:
                s.add(z3.Implies(member, w >= op.min_warps))
            if op.max_warps:
                s.add(z3.Implies(member, w <= op.max_warps))
        v.used.append(used)
        v.warps.append(w)
        v.regs.append(r)
        v.reg_words.append(v.total([z3.If(w == x, x * r, 0) for x in sizes]))  # linear: w takes few values
    if n_groups > 1 and not o.fixed_groups:
        for g in range(1, n_groups):
            s.add(z3.Implies(v.used[g], v.used[g - 1]))
    warps, words = _allocated(v, budgets)
    s.add(warps <= (o.max_warps if o.max_warps is not None else arch.limit("warps_per_cta")))
    s.add(32 * words <= arch.limit("regs_per_sm"))
    crossing = [p.handoff_bytes(e) * z3.If(v.same_group(e.src, e.dst), 0, 1) for e in p.edges if p.handoff_bytes(e)]
    if o.no_handoff:
        for e in p.edges:
            if e.carrier is Carrier.REGISTERS and p.op(e.src).regs > 0:
                s.add(v.same_group(e.src, e.dst))
    v.objectives.update(groups=v.total([z3.If(u, 1, 0) for u in v.used]), handoffs=v.total(crossing),
                        regs=32 * words)


def _allocated(v: Z3Model, budgets: list[int]) -> tuple[Expr, Expr]:
    """(warps, register words per lane) taken from the CTA: groups narrower than a setmaxnreg
    warpgroup (``reg_alloc_group_warps`` W) share one budget and are charged whole warpgroups."""
    w = v.problem.arch.reg_alloc_warps()
    if w == 1:
        return v.total(v.warps), v.total(v.reg_words)
    s = v.solver
    shared = v.int_var("narrow_budget")
    s.add(z3.Or([shared == b for b in budgets]))
    narrow = [z3.And(v.used[g], v.warps[g] < w) for g in range(len(v.warps))]
    for g, n in enumerate(narrow):
        s.add(z3.Implies(n, v.regs[g] == shared))
    narrow_warps = v.total([z3.If(n, v.warps[g], 0) for g, n in enumerate(narrow)])
    packs = v.int_var("narrow_warpgroups")
    s.add(w * packs >= narrow_warps, w * packs <= narrow_warps + w - 1)
    wide_warps = v.total([z3.If(n, 0, v.warps[g]) for g, n in enumerate(narrow)])
    wide_words = v.total([z3.If(n, 0, v.reg_words[g]) for g, n in enumerate(narrow)])
    packed = v.total([z3.If(packs == k, k * w * shared, 0) for k in range(len(v.warps) + 1)])  # linear
    return wide_warps + w * packs, wide_words + packed


def add_dependences(v: Z3Model) -> None:
    """start[dst] + δ·II >= start[src] + latency, plus the hand-off cost across groups (§2.4)."""
    for e in v.problem.edges:
        lhs, rhs = v.start[e.dst] + e.distance * v.ii, v.start[e.src] + e.latency
        cost = v.problem.cross_group_cost(e) if v.joint else 0
        v.solver.add(lhs >= (rhs + z3.If(v.same_group(e.src, e.dst), 0, cost) if cost else rhs))


def add_modulo_resources(v: Z3Model) -> None:
    """At every point of the II circle a unit serves at most its capacity (§2.5): the constant
    load of full turns plus the arcs covering each arc's start."""
    by_unit: dict[str, list[tuple[Expr, int, int]]] = {}  # unit -> (position, arc length, amount)
    base: dict[str, int] = {}
    for op in v.problem.ops:
        for use in op.uses:
            turns, rest = divmod(use.length, v.ii)
            base[use.unit] = base.get(use.unit, 0) + turns * use.amount
            if rest:
                by_unit.setdefault(use.unit, []).append((v.position(op, use.offset), rest, use.amount))
    for unit in sorted(base):
        cap = v.problem.capacity[unit]
        arcs = by_unit.get(unit, [])
        if base[unit] > cap:
            v.never()
            continue
        for i, (p, _, amount) in enumerate(arcs):
            room = cap - base[unit] - amount
            others = [(q, n, a) for j, (q, n, a) in enumerate(arcs) if j != i]
            if all(a > room for _, _, a in others):
                v.solver.add(*[z3.Not(v.covers(q, n, p)) for q, n, _ in others])  # pairwise exclusion
                if room < 0:
                    v.never()
            else:
                v.solver.add(v.total([z3.If(v.covers(q, n, p), a, 0) for q, n, a in others]) <= room)


def _hold(v: Z3Model, op: Op) -> int | Expr:
    """``op``'s hold with the SMEM copy of each hand-off it stores or loads where the edge crosses
    groups (``Problem.handoff_holds``, §2.7); an int where none is charged."""
    p = v.problem
    copies = [(p.handoff_holds(e)[0], e.dst) for e in p.body.out_edges(op.name) if e.dst != op.name]
    copies += [(p.handoff_holds(e)[1], e.src) for e in p.body.in_edges(op.name) if e.src != op.name]
    copies = [(c, other) for c, other in copies if c]
    if not copies:
        return p.hold(op.name)
    return p.hold(op.name) + v.total([z3.If(v.same_group(op.name, other), 0, c) for c, other in copies])


def add_in_order_issue(v: Z3Model) -> None:
    """Within a group, the hold arcs [offset, offset + hold) of its ops are disjoint (§2.7); a
    hand-off's store and load lengthen the producer's and the reader's holds where it crosses."""
    holds = {op.name: _hold(v, op) for op in v.problem.ops}
    held = [op for op in v.problem.ops if not isinstance(holds[op.name], int) or holds[op.name] > 0]
    for op in held:
        hold = holds[op.name]
        if isinstance(hold, int):
            if hold > v.ii:
                v.never()
        else:
            v.solver.add(hold <= v.ii, v.objectives["length"] >= v.start[op.name] + hold)
    for g in range(len(v.used)):  # implied by the disjoint arcs: a group's holds fit in II
        v.solver.add(v.total([z3.If(v.member[op.name, g], holds[op.name], 0) for op in held]) <= v.ii)
    for i, a in enumerate(held):
        for b in held[i + 1:]:
            oa, ob = v.offset[a.name], v.offset[b.name]
            ha, hb = holds[a.name], holds[b.name]
            overlap = z3.Or(v.covers(oa, ha, ob), v.covers(ob, hb, oa))
            if not (isinstance(ha, int) and isinstance(hb, int)):  # an op that holds nothing stalls nothing
                overlap = z3.And(ha > 0, hb > 0, overlap)
            v.solver.add(z3.Implies(v.same_group(a.name, b.name), z3.Not(overlap)))


def add_variable_latency_isolation(v: Z3Model) -> None:
    """A group issuing a variable-latency op issues no other op that holds it (§2.7)."""
    if not v.options.isolate_variable_latency:
        return
    ops = v.problem.ops
    for a in ops:
        if not a.variable_latency:
            continue
        for b in ops:
            if not b.variable_latency and v.problem.hold(b.name) > 0:
                v.solver.add(z3.Not(v.same_group(a.name, b.name)))


def add_register_budgets(v: Z3Model) -> None:
    """Per group, the live register results at every point fit 32 x warps x (budget - reserved)
    (§2.8), checked at the start of each register-holding op's live arc."""
    p, s = v.problem, v.solver
    reserved = p.arch.limit("regs_reserved_per_thread")
    holders = [op for op in p.ops if op.regs]
    for g in range(len(v.used)):
        room = 32 * (v.reg_words[g] - reserved * v.warps[g])
        # implied: the live words averaged over the II circle fit too (a peak is never below the
        # mean); it lets the arithmetic solver refute long lifetimes without case splits
        occupancy = [z3.If(v.member[b.name, g], b.regs * (v.ii * v.lifetime_of(b)[0] + v.lifetime_of(b)[1]), 0)
                     for b in holders]
        if occupancy:
            s.add(v.total(occupancy) <= v.ii * room)
        for a in holders:
            load = v.total([z3.If(v.member[b.name, g], b.regs * v.live_at(b, v.offset[a.name]), 0) for b in holders])
            s.add(z3.Implies(v.member[a.name, g], load <= room))


def add_smem_capacity(v: Z3Model) -> None:
    """Ring slots ceil(life / II) of every SMEM buffer plus the crossing hand-offs fit (§2.9)."""
    terms = []
    for op in v.problem.ops:
        if op.smem_bytes:
            full, rest = v.lifetime_of(op)
            terms.append(op.smem_bytes * (full + z3.If(rest > 0, 1, 0)))
    static = v.problem.body.static_smem  # allocated outside the loop
    v.solver.add(v.total(terms) + v.objectives["handoffs"] + static <= v.problem.arch.limit("smem_bytes_per_cta"))


def add_tmem_capacity(v: Z3Model) -> None:
    """The live TMEM tiles at every point fit the tensor memory's columns (§2.9)."""
    users = [op for op in v.problem.ops if op.tmem_cols]
    cols = v.problem.arch.limit("tmem_cols")
    for a in users:
        v.solver.add(v.total([b.tmem_cols * v.live_at(b, v.offset[a.name]) for b in users]) <= cols)


def add_strategy_restrictions(v: Z3Model) -> None:
    """``single_stage``: each iteration finishes within its own II window (model.py's meaning)."""
    if v.options.single_stage:
        v.solver.add(v.objectives["length"] <= v.ii)


JOINT_FAMILIES: tuple[tuple[str, Callable[[Z3Model], None]], ...] = (
    ("stages", add_stages),
    ("warp_groups", add_warp_groups),
    ("dependences", add_dependences),
    ("modulo_resources", add_modulo_resources),
    ("in_order_issue", add_in_order_issue),
    ("variable_latency_isolation", add_variable_latency_isolation),
    ("register_budgets", add_register_budgets),
    ("smem_capacity", add_smem_capacity),
    ("tmem_capacity", add_tmem_capacity),
    ("strategy_restrictions", add_strategy_restrictions),
)
SWP_FAMILIES = (("stages", add_stages), ("dependences", add_dependences), ("modulo_resources", add_modulo_resources),
                ("strategy_restrictions", add_strategy_restrictions))


def build_z3_model(problem: Problem, options: SolveOptions, ii: int, max_stage: int) -> Z3Model:
    """A z3 model of every schedule of ``problem`` at initiation interval ``ii`` with stages <= ``max_stage``."""
    ctx = z3.Context()
    v = Z3Model(problem, options, ii, max_stage, ctx, z3.SolverFor("QF_LIA", ctx=ctx))
    for _, family in SWP_FAMILIES if options.swp_only else JOINT_FAMILIES:
        family(v)
    return v


# -- the search ------------------------------------------------------------------------------------
def _check(v: Z3Model, seconds: float) -> z3.CheckSatResult:
    v.solver.set("timeout", max(1, int(seconds * 1000)))
    return v.solver.check()


def _minimize(v: Z3Model, expr: Expr, model: z3.ModelRef, low: int, deadline: float):
    """Smallest value of ``expr``: (value, model, proven). First asks for one better than the
    model's (often the first model is already optimal, and one refutation settles it), then
    bisects between the lower bound and the best value found."""
    best = model.eval(expr, model_completion=True).as_long()
    first = True
    while low < best:
        target = best - 1 if first else (low + best) // 2
        first = False
        v.solver.push()
        v.solver.add(expr <= target)
        verdict = _check(v, deadline - time.monotonic())
        if verdict == z3.sat:
            model = v.solver.model()
            best = model.eval(expr, model_completion=True).as_long()
        v.solver.pop()
        if verdict == z3.unsat:
            low = target + 1
        elif verdict != z3.sat:
            return best, model, False
    return best, model, True


def solve_z3(problem: Problem, options: SolveOptions | None = None) -> Schedule:
    """The smallest II, proven by refuting every smaller one with z3, then the secondary
    objectives in ``options.objective`` order, each minimised with II fixed.

    Raises
    ------
    InfeasibleError
        When no schedule can exist, or when the time limit ran out before one was found.

    Examples
    --------
    >>> from twill.frontend.programs import load_program
    >>> from twill.problem import build_problem
    >>> from twill.arch.registry import get_arch
    >>> arch = get_arch("h100")
    >>> sched = solve_z3(build_problem(load_program("toy", arch), arch), SolveOptions())
    >>> sched.ii, sched.status, len(sched.groups)
    (2, 'optimal', 1)
    """
    options = options or SolveOptions()
    began = time.monotonic()
    deadline = began + options.time_limit
    report = options.progress
    if not options.swp_only:
        problem.require_possible()
    bounds = compute_bounds(problem)
    lb, why = bound_and_reason(problem, options, bounds)
    cap = sequential_ii(problem)
    max_stage = stage_bound(problem, lb, not options.swp_only)  # the stage bound at lb covers every II >= lb
    undecided: int | None = None  # the first II whose check ran out of time
    found: tuple[Z3Model, z3.ModelRef] | None = None
    ii = lb
    while ii <= cap and time.monotonic() < deadline:
        v = build_z3_model(problem, options, ii, max_stage)
        verdict = _check(v, deadline - time.monotonic())
        if report:
            report(f"z3: II {ii}: {verdict} ({time.monotonic() - began:.1f}s)")
        if verdict == z3.sat:
            found = v, v.solver.model()
            break
        if verdict != z3.unsat and undecided is None:
            undecided = ii
        ii += 1
    if found is None:
        if ii > cap and undecided is None:
            raise InfeasibleError(f"{problem.body.name!r} on {problem.arch.name!r}: no schedule exists for any II up "
                                  f"to {cap} (a fully sequential iteration); a constraint can never be met",
                                  reason="search exhausted")
        bound = undecided if undecided is not None else ii
        raise InfeasibleError(f"{problem.body.name!r} on {problem.arch.name!r}: z3 found no schedule within "
                              f"{options.time_limit:g}s; II >= {bound} is proven (raise --time-limit)",
                              reason="time limit")
    v, model = found
    optimal = undecided is None
    proven = {"ii": optimal}
    lows = {"groups": 1, "handoffs": 0, "regs": 0, "length": max(max(op.latency, problem.hold(op.name),
                                                                        op.busy_cycles) for op in problem.ops)}
    for name in options.objective[1:]:
        if name not in v.objectives:
            continue
        phase_end = min(deadline, time.monotonic() + options.phase_limit)
        value, model, proven[name] = _minimize(v, v.objectives[name], model, lows[name], phase_end)
        v.solver.add(v.objectives[name] <= value)
        if report:
            report(f"z3: {name} = {value} ({'proven' if proven[name] else 'best found'})")
    proof = _proof(optimal, ii, lb, undecided, why)
    return assemble(problem, options, _assignment(v, model), optimal=optimal,
                    proven_lb=ii if optimal else undecided, proof=proof, proven=proven,
                    seconds=time.monotonic() - began)


def _proof(optimal: bool, ii: int, lb: int, undecided: int | None, binding: str) -> str:
    if not optimal:
        return f"feasible: time limit reached; every II below {undecided} is proven infeasible by z3"
    if ii == lb:
        return f"optimal: II meets the lower bound {lb} ({binding})"
    return f"optimal: every II in [{lb}, {ii - 1}] is proven infeasible by z3 (lower bound {lb}: {binding})"


def _assignment(v: Z3Model, model: z3.ModelRef) -> Assignment:
    def value(x) -> int:
        return model.eval(x, model_completion=True).as_long()

    p = v.problem
    starts = {name: value(x) for name, x in v.start.items()}
    groups = {op.name: value(v.group_of(op.name)) for op in p.ops} if v.joint else {}
    labels = set(groups.values())
    copies = {op.name: copies_needed(p, starts, v.ii, op.name) for op in p.ops
              if v.joint and (op.regs or op.smem_bytes or op.tmem_cols)}
    values = {name: value(v.objectives[name]) for name in v.options.objective if name in v.objectives}
    if "length" in values:  # the model's length is only an upper bound unless it was minimised
        values["length"] = p.length(starts, groups or None)
    return Assignment(
        ii=v.ii, starts=starts, groups=groups,
        warps={g: value(v.warps[g]) for g in labels}, regs={g: value(v.regs[g]) for g in labels}, copies=copies,
        objective_values=values)
