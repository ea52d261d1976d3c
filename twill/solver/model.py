"""The CP-SAT model of joint software pipelining and warp specialization (docs/design.md §2).

``ScheduleModel`` holds the variables (start, stage and offset of every op; group membership,
warps and register budget of every warp group; lifetimes of every stored value) for one window
[ii_lo, ii_hi] of the initiation interval, and ``JOINT_FAMILIES`` adds the constraints, one function
per hardware fact. II is a variable of the model, so one solve covers every II of its window and
CP-SAT's objective bound proves the smallest one. Modulo time is handled without a time grid:
an interval at offset p in [0, II) is placed twice, at p and at p - II, and a plain cumulative
(or no-overlap) over both copies equals the circular one on [0, II) (design.md §2.3).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, fields, replace

from ortools.sat.python import cp_model

from twill.bounds import residue_cuts, stage_bound
from twill.ir import Carrier, Op
from twill.options import SolveOptions
from twill.problem import Problem, per_problem
from twill.problem import read_time as _read_time

__all__ = ["ScheduleModel", "JOINT_FAMILIES", "build_model", "GroupVars", "group_variables", "isolate", "upper"]

LinearExpr = cp_model.LinearExprT


def upper(var: cp_model.IntVar) -> int:
    """A variable's largest value (the proto wrapper does not index from the end)."""
    return list(var.proto.domain)[-1]


@dataclass(frozen=True, slots=True)
class LineCopy:
    """One copy of a value's live range on the line, k II earlier (``ScheduleModel.line_window``): present while
    ``le`` (stage <= k) and ``ge`` (stage >= k - R) both hold."""

    k: int
    le: cp_model.IntVar
    ge: cp_model.IntVar
    begin: LinearExpr
    finish: LinearExpr


class ScheduleModel:
    """Variables of one window of II, and the queries constraint families need."""

    def __init__(self, problem: Problem, options: SolveOptions, ii_lo: int, ii_hi: int,
                 max_stage: int | None = None) -> None:
        self.p, self.o = problem, options
        self.m = cp_model.CpModel()
        self.ii_lo, self.ii_hi = ii_lo, ii_hi
        self.ii = self.m.new_int_var(ii_lo, ii_hi, "ii")
        self.joint = not options.swp_only
        bound = stage_bound(self.p, self.ii_lo, self.joint)
        self.max_stage = bound if max_stage is None else min(max_stage, bound)
        horizon = (self.max_stage + 1) * ii_hi
        self.start: dict[str, cp_model.IntVar] = {}
        self.stage: dict[str, cp_model.IntVar] = {}
        self.offset: dict[str, cp_model.IntVar] = {}
        for op in problem.ops:
            s = self.start[op.name] = self.m.new_int_var(0, horizon, f"start[{op.name}]")
            k = self.stage[op.name] = self.m.new_int_var(0, self.max_stage, f"stage[{op.name}]")
            f = self.offset[op.name] = self.m.new_int_var(0, ii_hi - 1, f"offset[{op.name}]")
            self.m.add(f <= self.ii - 1)
            base = self.m.new_int_var(0, horizon, f"stage_start[{op.name}]")
            self.m.add_multiplication_equality(base, [k, self.ii])
            self.m.add(s == base + f)
        most = max(self.p.most_span(op.name) for op in problem.ops)
        self.length = self.m.new_int_var(0, horizon + most, "length")
        for op in problem.ops:
            self.m.add(self.length >= self.start[op.name] + self.p.span(op.name))
        self.groups = range(min(options.max_groups, len(problem.ops))) if self.joint else range(1)
        self.in_group: dict[tuple[str, int], cp_model.IntVar] = {}
        self.group_of: dict[str, cp_model.IntVar] = {}
        self.used: list[cp_model.IntVar] = []
        self.warps: list[cp_model.IntVar] = []
        self.regs: list[cp_model.IntVar] = []
        self.reg_words: list[cp_model.IntVar] = []  # warps x regs per thread of each group
        self.same: dict[int, cp_model.IntVar] = {}  # per edge index: both ends in one group
        self.lifetime: dict[str, tuple[cp_model.IntVar, cp_model.IntVar]] = {}  # full copies, remainder
        self.life: dict[str, cp_model.IntVar] = {}  # cycles each result's storage is held
        self.life_here: dict[tuple[str, int], cp_model.IntVar] = {}  # the same where group g issues it, else 0
        self.handoff_terms: list[LinearExpr] = []  # SMEM bytes staged by cross-group hand-offs
        self.held: dict[str, cp_model.IntVar] = {}  # grouping-dependent holds (``hold_of``)
        self.copying: dict[str, cp_model.IntVar] = {}  # an op that holds nothing else: its copies charged
        self.objective_terms: dict[str, LinearExpr] = {"ii": self.ii, "length": self.length}
        self.symmetry = True
        self.anchored: cp_model.IntVar | None = None  # the rotation anchor's switch (§2.8c), see release_anchor
        self.elastic = False  # storage peaks may overflow, by ``overflow`` (design.md §3.2, the elastic slice)
        self.line = False  # the register peaks on the line, not the circle (``add_register_budgets``, design.md §2.8)
        self.windows: dict[tuple[str, int], list[LineCopy]] = {}  # per value and size: its copies on the line
        self.overflow: list[cp_model.IntVar] = []

    def release_anchor(self) -> None:
        """Let the anchor's op leave offset 0 from the next solve on (the model's solutions so far
        stay solutions). The anchor keeps one representative per rotation, which is all the II,
        group and register objectives need; schedule length is not rotation-invariant (starts
        count from 0), so its phase runs released."""
        if self.anchored is not None:
            self.anchored.proto.domain[0] = 0

    # -- facts derived from the problem ------------------------------------------------------
    def hold_of(self, op: Op) -> int | cp_model.IntVar:
        """``op``'s hold where the groups are chosen (``Problem.hold_in``): its own hold plus the
        SMEM copy of every hand-off it stores or loads, each where its edge crosses groups (made
        once; a constant where no hand-off of ``op`` is charged, or without warp groups)."""
        base = self.p.hold(op.name)
        parts = [(self.p.handoff_holds(e)[k], i) for i, e in enumerate(self.p.edges) for k, end in enumerate((e.src, e.dst))
                 if end == op.name and e.src != e.dst and i in self.same]
        parts = [(c, i) for c, i in parts if c]
        if not parts:
            return base
        if op.name not in self.held:
            h = self.held[op.name] = self.m.new_int_var(base, base + sum(c for c, _ in parts), f"hold[{op.name}]")
            self.m.add(h == base + sum(c * (1 - self.same[i]) for c, i in parts))
        return self.held[op.name]

    def lifetime_of(self, op: Op) -> tuple[cp_model.IntVar, cp_model.IntVar]:
        """(full copies, remainder) of the storage of ``op``'s result: it is held from the op's
        issue until its last reader is done, ``full * II + remainder`` cycles."""
        if op.name in self.lifetime:
            return self.lifetime[op.name]
        m, start = self.m, self.start[op.name]
        ends = [self.start[e.dst] + e.distance * self.ii + _read_time(e, self.p.op(e.dst))
                for e in self.p.body.out_edges(op.name)]
        if not ends:
            ends = [start + op.latency]
        top = upper(self.length) + self.max_stage * self.ii_hi + 2 * self.ii_hi
        end = m.new_int_var(0, top, f"end[{op.name}]")
        m.add_max_equality(end, ends)
        life = m.new_int_var(0, top, f"life[{op.name}]")
        m.add(life == end - start)
        self.life[op.name] = life
        full = m.new_int_var(0, top // self.ii_lo + 1, f"copies_full[{op.name}]")
        m.add_division_equality(full, life, self.ii)
        full_ii = m.new_int_var(0, top, f"copies_full_ii[{op.name}]")
        m.add_multiplication_equality(full_ii, [full, self.ii])
        rest = m.new_int_var(0, self.ii_hi - 1, f"copies_rest[{op.name}]")
        m.add(rest == life - full_ii)
        self.lifetime[op.name] = (full, rest)
        return full, rest

    def life_in(self, op: Op, g: int) -> cp_model.IntVar:
        """``op``'s lifetime where group ``g`` issues it, else 0: its cycles on g's register circle
        (made once per op and group; the average and rounded register cuts share it)."""
        key = (op.name, g)
        if key not in self.life_here:
            self.lifetime_of(op)
            life, x = self.life[op.name], self.in_group[op.name, g]
            here = self.life_here[key] = self.m.new_int_var(0, upper(life), f"life_here[{op.name},{g}]")
            self.m.add(here == life).only_enforce_if(x)
            self.m.add(here == 0).only_enforce_if(~x)
        return self.life_here[key]

    def line_window(self, op: Op, size: int, capacity: int) -> list[LineCopy]:
        """``op``'s live range [start, end) laid on the line with its copies k II earlier, each present only while
        stage <= k <= stage + R (made once per value and size; design.md §2.8). R = capacity // size + 1 is the most IIs the
        value can live: floor(life / II) copies are live at every cycle and must fit ``capacity``, so life <= R II,
        stated (an implied constraint the copies rely on) where R is below the stage bound's reach K (every start
        is below (max_stage + 1) II, every end below that plus the last reader's distance and read)."""
        if (op.name, size) in self.windows:
            return self.windows[op.name, size]
        m, start, stage = self.m, self.start[op.name], self.stage[op.name]
        self.lifetime_of(op)
        life = self.life[op.name]
        reads = [(e.distance, _read_time(e, self.p.op(e.dst))) for e in self.p.body.out_edges(op.name)] or [(0, op.latency)]
        turns = self.max_stage + 1 + max(d for d, _ in reads) + -(-max(r for _, r in reads) // self.ii_lo)
        reach = min(turns, capacity // size + 1)
        if reach < turns:
            m.add(life <= reach * self.ii)
        end = m.new_int_var(0, upper(start) + upper(life), f"lend[{op.name}]")
        m.add(end == start + life)
        copies = []
        for k in range(min(turns, self.max_stage + reach) + 1):
            le = m.new_bool_var(f"le[{op.name},{k}]")  # stage <= k
            m.add(stage <= k).only_enforce_if(le)
            m.add(stage >= k + 1).only_enforce_if(~le)
            ge = m.new_bool_var(f"ge[{op.name},{k}]")  # stage >= k - R
            m.add(stage >= k - reach).only_enforce_if(ge)
            m.add(stage <= k - reach - 1).only_enforce_if(~ge)
            if k == 0 or self.ii_lo == self.ii_hi:
                begin, finish = start - k * self.ii_lo, end - k * self.ii_lo
            else:
                begin = m.new_int_var(-k * self.ii_hi, upper(start), f"lb[{op.name},{k}]")
                m.add(begin == start - k * self.ii)
                finish = m.new_int_var(-k * self.ii_hi, upper(end), f"lf[{op.name},{k}]")
                m.add(finish == end - k * self.ii)
            copies.append(LineCopy(k, le, ge, begin, finish))
        self.windows[op.name, size] = copies
        return copies

    def line_copies(self, op: Op, size: int, capacity: int, name: str,
                    present: cp_model.IntVar | None = None) -> list[cp_model.IntervalVar]:
        """``op``'s copies on the line (``line_window``) as intervals, each present within its stage window and, where
        ``present`` is given, only while that literal holds (the group issues the value)."""
        copies = self.line_window(op, size, capacity)  # makes life[op] where no family has yet
        life, out = self.life[op.name], []
        for c in copies:
            lits = [c.le, c.ge] + ([present] if present is not None else [])
            on = self.m.new_bool_var(f"{name}#{c.k}.on")
            self.m.add_bool_and(lits).only_enforce_if(on)
            self.m.add_bool_or([~x for x in lits] + [on])
            out.append(self.m.new_optional_interval_var(c.begin, life, c.finish, on, f"{name}#{c.k}"))
        return out

    def excess(self, most: int, name: str) -> LinearExpr:
        """What a storage peak may exceed its capacity by: 0, or in an elastic model a variable in
        [0, most] that the objective drives to 0. A schedule whose excesses are all 0 is one of the
        full model (design.md §3.2)."""
        if not self.elastic:
            return 0
        x = self.m.new_int_var(0, most, f"excess[{name}]")
        self.overflow.append(x)
        return x

    def register_room(self, g: int) -> LinearExpr:
        """Register words group ``g`` has for results: its budget above the reserved registers."""
        reserved = self.p.arch.limit("regs_reserved_per_thread")
        return 32 * (self.reg_words[g] - reserved * self.warps[g])

    def copies_of(self, op: Op) -> LinearExpr:
        """Ring depth of ``op``'s buffer: the most copies alive at once, ceil(lifetime / II)."""
        full, rest = self.lifetime_of(op)
        partial = self.m.new_bool_var(f"copies_partial[{op.name}]")
        self.m.add(rest >= 1).only_enforce_if(partial)
        self.m.add(rest == 0).only_enforce_if(~partial)
        return full + partial

    def modular_copies(
        self, position: LinearExpr, size: LinearExpr | int, name: str, present: cp_model.IntVar | None = None
    ) -> list[cp_model.IntervalVar]:
        """An interval at modular ``position`` placed at p and at p - II (design.md §2.3)."""
        out = []
        lo, hi = -self.ii_hi, self.ii_hi + (size if isinstance(size, int) else self.ii_hi)
        for k in (0, 1):
            # CP-SAT needs interval bounds affine in one variable: name the shifted ends
            if k == 0 and isinstance(position, cp_model.IntVar):
                begin = position
            else:
                begin = self.m.new_int_var(lo, hi, f"{name}#{k}.begin")
                self.m.add(begin == position - k * self.ii)
            if isinstance(size, int):
                end = begin + size
            else:
                end = self.m.new_int_var(lo, hi + self.ii_hi, f"{name}#{k}.end")
                self.m.add(end == begin + size)
            if present is None:
                out.append(self.m.new_interval_var(begin, size, end, f"{name}#{k}"))
            else:
                out.append(self.m.new_optional_interval_var(begin, size, end, present, f"{name}#{k}"))
        return out

    def position(self, op: Op, delay: int, name: str) -> cp_model.IntVar:
        """(start[op] + delay) mod II, as a variable."""
        off = self.offset[op.name]
        if delay == 0:
            return off
        p = self.m.new_int_var(0, self.ii_hi - 1, f"pos[{name}]")
        self.m.add(p <= self.ii - 1)
        if delay < self.ii_lo:
            wrap = self.m.new_bool_var(f"wrap[{name}]")
            self.m.add(p == off + delay - self.ii).only_enforce_if(wrap)
            self.m.add(p == off + delay).only_enforce_if(~wrap)
        else:
            shifted = self.m.new_int_var(0, self.ii_hi + delay, f"shifted[{name}]")
            self.m.add(shifted == off + delay)
            self.m.add_modulo_equality(p, shifted, self.ii)
        return p

    def wraps(self, length: int, name: str) -> tuple[LinearExpr, LinearExpr]:
        """(full turns, remainder) of a fixed ``length`` around a circle of II cycles."""
        if length < self.ii_lo:
            return 0, length
        full = self.m.new_int_var(0, length // self.ii_lo, f"turns[{name}]")
        self.m.add_division_equality(full, length, self.ii)
        full_ii = self.m.new_int_var(0, length, f"turns_ii[{name}]")
        self.m.add_multiplication_equality(full_ii, [full, self.ii])
        return full, length - full_ii


# -- constraint families -----------------------------------------------------------------------
def add_dependences(v: ScheduleModel) -> None:
    """A consumer cannot issue before its producer's result is visible.

    Fact: a result is visible ``latency`` cycles after issue; a loop-carried value comes from
    ``distance`` iterations (distance * II cycles) earlier; a value crossing warp groups arrives
    later by the hand-off cost (register data through SMEM plus an mbarrier, or the signal alone).
    Math: start[dst] + distance * II >= start[src] + latency (+ handoff if groups differ), §2.4.
    """
    for i, e in enumerate(v.p.edges):
        lhs = v.start[e.dst] + e.distance * v.ii
        v.m.add(lhs >= v.start[e.src] + e.latency)
        cost = v.p.cross_group_cost(e)
        if v.joint and i in v.same and cost:
            v.m.add(lhs >= v.start[e.src] + e.latency + cost).only_enforce_if(~v.same[i])


def add_modulo_resources(v: ScheduleModel) -> None:
    """Each unit serves at most ``capacity`` ops at any cycle of the steady state.

    Fact: in the steady state iteration i+k runs over iteration i shifted by k * II, so a
    reservation at time t occupies modular slot t mod II in every iteration (§2.3).
    Math: for every unit u and slot r in [0, II): sum of amounts of segments covering r <= cap(u).
    """
    by_unit: dict[str, list[tuple[list, int, LinearExpr]]] = {}
    for op in v.p.ops:
        for k, use in enumerate(op.uses):
            name = f"{op.name}@{use.unit}#{k}"
            turns, rest = v.wraps(use.length, name)
            pos = v.position(op, use.offset, name)
            copies = v.modular_copies(pos, rest, name)
            by_unit.setdefault(use.unit, []).append((copies, use.amount, turns))
    for unit, items in sorted(by_unit.items()):
        cap = v.p.capacity[unit]
        if cap == 1 and all(isinstance(t, int) and t == 0 and a == 1 for _, a, t in items):
            v.m.add_no_overlap([iv for copies, _, _ in items for iv in copies])
            continue
        intervals, demands = [], []
        for copies, amount, turns in items:
            intervals += copies
            demands += [amount, amount]
            if not isinstance(turns, int) or turns:
                intervals.append(v.m.new_interval_var(0, v.ii, v.ii, f"turns_window[{unit}]"))
                demands.append(amount * turns)
        v.m.add_cumulative(intervals, demands, cap)


def add_residue_cuts(v: ScheduleModel) -> None:
    """Implied cuts: distances that the dependences and a single-capacity unit force together.

    Fact: two ops of one capacity-1 unit reserve it at modular distances that avoid each other's
    busy cycles, so a dependence path that ends inside such a gap pushes the later op to the next
    free turn (``bounds.residue_cuts``, design.md §2.5a). The no-overlap of §2.5 implies this,
    but only after a case split over the unit's order that CP-SAT finds slowly.
    Math: start[b] - start[a] >= t * II + gap whenever II lies in the cut's range.
    """
    at_least: dict[int, cp_model.IntVar] = {}

    def ii_at_least(k: int) -> cp_model.IntVar:
        if k not in at_least:
            at_least[k] = v.m.new_bool_var(f"ii>={k}")
            v.m.add(v.ii >= k).only_enforce_if(at_least[k])
            v.m.add(v.ii <= k - 1).only_enforce_if(~at_least[k])
        return at_least[k]

    for cut in residue_cuts(v.p, v.ii_lo, v.ii_hi):
        within = ([ii_at_least(cut.ii_from)] if cut.ii_from > v.ii_lo else []) + (
            [~ii_at_least(cut.ii_to + 1)] if cut.ii_to < v.ii_hi else [])
        v.m.add(v.start[cut.after] - v.start[cut.before] >= cut.turns * v.ii + cut.gap).only_enforce_if(within)


@dataclass
class GroupVars:
    """The variables of warp groups shared by the joint model and the structure relaxation
    (``twill.solver.structure``): each group's use, warps, register budget and their product, each
    op's membership x[op, g] and its group label."""

    used: list[cp_model.IntVar]
    warps: list[cp_model.IntVar]
    regs: list[cp_model.IntVar]
    words: list[cp_model.IntVar]  # warps x registers per thread
    member: dict[tuple[str, int], cp_model.IntVar]
    group_of: dict[str, cp_model.IntVar]


def group_variables(m: cp_model.CpModel, problem: Problem, groups: range) -> GroupVars:
    """Groups with their warps and budgets (0 when unused, used in order), and every op in exactly one
    group at least as wide as it needs and no wider than its cap (``Op.max_warps``), labelled in order
    of first use: an op opens at most the next unused label (label symmetry breaking, §2.6)."""
    arch = problem.arch
    sizes, budgets = sorted(arch.warp_group_sizes()), sorted(arch.register_budgets())
    out = GroupVars([], [], [], [], {}, {})
    for g in groups:
        out.used.append(m.new_bool_var(f"used[{g}]"))
        out.warps.append(m.new_int_var_from_domain(cp_model.Domain.from_values([0, *sizes]), f"warps[{g}]"))
        out.regs.append(m.new_int_var_from_domain(cp_model.Domain.from_values([0, *budgets]), f"regs[{g}]"))
        m.add(out.warps[g] == 0).only_enforce_if(~out.used[g])
        m.add(out.warps[g] >= 1).only_enforce_if(out.used[g])
        m.add(out.regs[g] == 0).only_enforce_if(~out.used[g])
        m.add(out.regs[g] >= budgets[0]).only_enforce_if(out.used[g])
        words = m.new_int_var(0, sizes[-1] * budgets[-1], f"warp_regs[{g}]")
        m.add_multiplication_equality(words, [out.warps[g], out.regs[g]])
        out.words.append(words)
    for a, b in zip(out.used, out.used[1:], strict=False):
        m.add_implication(b, a)  # groups are used in order: breaks label symmetry
    prefix_max = None
    for op in problem.ops:
        xs = [m.new_bool_var(f"in_group[{op.name},{g}]") for g in groups]
        m.add_exactly_one(xs)
        for g, x in zip(groups, xs, strict=True):
            out.member[op.name, g] = x
            m.add_implication(x, out.used[g])
            m.add(out.warps[g] >= op.min_warps).only_enforce_if(x)
            if op.max_warps:
                m.add(out.warps[g] <= op.max_warps).only_enforce_if(x)
        grp = out.group_of[op.name] = m.new_int_var(0, len(groups) - 1, f"group[{op.name}]")
        m.add(grp == sum(g * x for g, x in zip(groups, xs, strict=True)))
        # an op opens at most the next unused group label (symmetry breaking, §2.6)
        if prefix_max is None:
            m.add(grp == 0)
            prefix_max = grp
        else:
            m.add(grp <= prefix_max + 1)
            nxt = m.new_int_var(0, len(groups) - 1, f"group_prefix_max[{op.name}]")
            m.add_max_equality(nxt, [prefix_max, grp])
            prefix_max = nxt
    return out


def group_relation(m: cp_model.CpModel, group_of: dict[str, cp_model.IntVar], a: str, b: str, name: str,
                   apart: bool = False) -> cp_model.IntVar:
    """A literal true iff ops ``a`` and ``b`` sit in one group (``apart``: in different groups), by their labels."""
    lit = m.new_bool_var(name)
    same, other = (group_of[a] != group_of[b], group_of[a] == group_of[b]) if apart else \
        (group_of[a] == group_of[b], group_of[a] != group_of[b])
    m.add(same).only_enforce_if(lit)
    m.add(other).only_enforce_if(~lit)
    return lit


def add_warp_groups(v: ScheduleModel) -> None:
    """Every op is issued by exactly one warp group; a group is as wide as its widest op needs.

    Fact: wgmma and the softmax on its accumulator rows need a warpgroup (4 warps); a wgmma's
    register accumulator lives in the warpgroups that issue it, 64 rows each, so its group has at
    most 4 warps per 64 rows; TMA and tcgen05.mma are issued by one thread; a CTA holds at most
    ``warps_per_cta`` warps (§2.6).
    Math: sum_g x[v,g] = 1; x[v,g] => min_warps(v) <= warps[g] <= max_warps(v); sum_g warps[g] <= W.
    """
    m, arch = v.m, v.p.arch
    budgets = sorted(arch.register_budgets())
    max_warps = v.o.max_warps if v.o.max_warps is not None else arch.limit("warps_per_cta")
    gv = group_variables(m, v.p, v.groups)
    v.used, v.warps, v.regs, v.reg_words, v.in_group, v.group_of = (gv.used, gv.warps, gv.regs, gv.words, gv.member,
                                                                     gv.group_of)
    for g in v.groups:
        m.add_bool_or([v.in_group[op.name, g] for op in v.p.ops]).only_enforce_if(v.used[g])
    warps, words = _allocated(v, budgets)
    m.add(warps <= max_warps)
    m.add(32 * words <= arch.limit("regs_per_sm"))  # every group's budget fits the register file
    for i, e in enumerate(v.p.edges):
        if v.p.cross_group_cost(e) or v.p.handoff_bytes(e) or v.o.no_handoff:
            same = v.same[i] = group_relation(m, v.group_of, e.src, e.dst, f"same_group[{e.src}->{e.dst}#{i}]")
            if v.o.no_handoff and e.carrier is Carrier.REGISTERS and v.p.op(e.src).regs > 0:
                m.add(same == 1)
            hb = v.p.handoff_bytes(e)
            if hb:
                v.handoff_terms.append(hb * (1 - same))
    v.objective_terms["groups"] = sum(v.used)
    v.objective_terms["handoffs"] = sum(v.handoff_terms)
    v.objective_terms["regs"] = 32 * words


def _allocated(v: ScheduleModel, budgets: list[int]) -> tuple[LinearExpr, LinearExpr]:
    """(warps, register words per lane) the groups take from the CTA and the register file.

    setmaxnreg sets one budget per warpgroup (PTX: every warp of a warpgroup executes the same
    setmaxnreg), so on an arch with ``reg_alloc_group_warps`` W > 1 the groups narrower than W
    (a load warp, an MMA warp) are packed into whole warpgroups that share one budget: they are
    charged ceil(their warps / W) x W warps at that budget (FA4: warps 12-15 at one value). Groups
    of W warps or more are whole warpgroups. One shared budget for every narrow group is a
    simplification: with more than W narrow warps two warpgroups could differ.
    """
    m, w = v.m, v.p.arch.reg_alloc_warps()
    if w == 1:
        return sum(v.warps), sum(v.reg_words)
    top = upper(v.warps[0]) if v.groups else 0
    shared = m.new_int_var_from_domain(cp_model.Domain.from_values(budgets), "narrow_budget")
    narrow_warps, wide_warps, wide_words = [], [], []
    for g in v.groups:
        narrow = m.new_bool_var(f"narrow[{g}]")  # used and narrower than a warpgroup
        m.add(v.warps[g] < w).only_enforce_if(narrow)
        m.add(v.warps[g] >= w).only_enforce_if([v.used[g], ~narrow])
        m.add_implication(narrow, v.used[g])
        m.add(v.regs[g] == shared).only_enforce_if(narrow)
        nw = m.new_int_var(0, w - 1, f"narrow_warps[{g}]")
        m.add(nw == v.warps[g]).only_enforce_if(narrow)
        m.add(nw == 0).only_enforce_if(~narrow)
        narrow_warps.append(nw)
        ww = m.new_int_var(0, top, f"wide_warps[{g}]")
        m.add(ww == v.warps[g] - nw)
        wide_warps.append(ww)
        wr = m.new_int_var(0, upper(v.reg_words[g]), f"wide_words[{g}]")
        m.add(wr == v.reg_words[g]).only_enforce_if(~narrow)
        m.add(wr == 0).only_enforce_if(narrow)
        wide_words.append(wr)
    # the k-th packed warpgroup is a Boolean (open in order), so its words are a reified copy of the
    # shared budget: linear, where a product packs x budget made CP-SAT's proofs slower
    most = -(-len(v.groups) * (w - 1) // w)
    opened = [m.new_bool_var(f"narrow_warpgroup[{k}]") for k in range(most)]
    for a, b in zip(opened, opened[1:], strict=False):
        m.add_implication(b, a)
    packs = sum(opened)
    m.add(w * packs >= sum(narrow_warps))
    m.add(w * packs <= sum(narrow_warps) + w - 1)
    packed = []
    for k, on in enumerate(opened):
        words = m.new_int_var(0, budgets[-1], f"narrow_warpgroup_regs[{k}]")
        m.add(words == shared).only_enforce_if(on)
        m.add(words == 0).only_enforce_if(~on)
        packed.append(words)
    return sum(wide_warps) + w * packs, sum(wide_words) + w * sum(packed)


def add_in_order_issue(v: ScheduleModel) -> None:
    """A warp group issues in order: while it runs a synchronous op or waits, it issues nothing else.

    Fact: each warp issues its instruction stream in order; a synchronous op (FP32 work, exp,
    a TMEM load with its wait) occupies its group for its busy span, an asynchronous op (TMA,
    wgmma, tcgen05.mma) for its issue slots, and a blocking wait adds its own cost (§2.7).
    A hand-off's SMEM store and load extend the hold of the producer and of a reader that loads
    (``ScheduleModel.hold_of``), contiguous from issue, where the edge crosses groups.
    Math: per group g, the modular intervals [offset(v), offset(v) + hold(v)) of its ops do not overlap;
    hold(v) = hold_0(v) + sum over crossing hand-off edges e at v of copy(e).
    """
    holds = {op.name: v.hold_of(op) for op in v.p.ops}
    for op in v.p.ops:
        hold = holds[op.name]
        if not isinstance(hold, int):
            v.m.add(v.ii >= hold)
            v.m.add(v.length >= v.start[op.name] + hold)
    for g in v.groups:
        intervals, total = [], []
        for op in v.p.ops:
            hold, x = holds[op.name], v.in_group[op.name, g]
            if isinstance(hold, int):
                if hold == 0:
                    continue
                v.m.add(v.ii >= hold)  # (once per group, as the model always had it: its search follows the proto)
            intervals += v.modular_copies(v.offset[op.name], hold, f"hold[{op.name},{g}]", _issuing(v, op, hold, x, g))
            total.append(hold * x if isinstance(hold, int) else _when(v, hold, x, f"hold[{op.name},{g}]"))
        v.m.add_no_overlap(intervals)
        if total:
            v.m.add(sum(total) <= v.ii)  # implied by the no-overlap; a linear cut the LP sees


def _issuing(v: ScheduleModel, op: Op, hold: int | cp_model.IntVar, x: cp_model.IntVar, g: int) -> cp_model.IntVar:
    """The presence of ``op``'s hold interval in group g: x[op, g], and, for an op that holds nothing but
    its copies, those copies being charged. CP-SAT's no-overlap keeps a zero-size interval out of another
    interval's inside, where an op that holds nothing stalls nothing (§2.7): such an interval must be absent."""
    if isinstance(hold, int) or v.p.hold(op.name) > 0:
        return x
    copying = v.copying.get(op.name)
    if copying is None:  # one literal per op: whether its copies are charged does not depend on g
        copying = v.copying[op.name] = v.m.new_bool_var(f"copying[{op.name}]")
        v.m.add(hold >= 1).only_enforce_if(copying)
        v.m.add(hold == 0).only_enforce_if(~copying)
    present = v.m.new_bool_var(f"issuing[{op.name},{g}]")
    v.m.add_bool_and([x, copying]).only_enforce_if(present)
    v.m.add_bool_or([~x, ~copying, present])
    return present


def _when(v: ScheduleModel, var: cp_model.IntVar, x: cp_model.IntVar, name: str) -> cp_model.IntVar:
    """At least ``var`` where ``x`` holds, else anything >= 0: a linear lower bound on var * x."""
    out = v.m.new_int_var(0, upper(var), f"{name}.when")
    v.m.add(out >= var - upper(var) * (1 - x))
    return out


def add_variable_latency_isolation(v: ScheduleModel) -> None:
    """Variable-latency ops (TMA) get warp groups of their own.

    Fact: a TMA copy can take 10x longer than usual; a group that waits for it stalls every op
    behind it in issue order, so fixed-latency work must not share its stream (Twill §4.3;
    design.md §2.7 on why ops that emit no instructions are exempt).
    Math: x[v,g] => vl[g] for variable-latency v; x[v,g] => not vl[g] for other ops that issue.
    """
    if v.o.isolate_variable_latency:
        isolate(v.m, v.p, v.groups, v.in_group)


def isolate(m: cp_model.CpModel, problem: Problem, groups: range, member: dict[tuple[str, int], cp_model.IntVar]) -> None:
    """x[v, g] => vl[g] for variable-latency v; x[v, g] => not vl[g] for other ops that issue (§2.7)."""
    for g in groups:
        vl = m.new_bool_var(f"variable_latency_group[{g}]")
        for op in problem.ops:
            if op.variable_latency:
                m.add_implication(member[op.name, g], vl)
            elif problem.hold(op.name) > 0:
                m.add_implication(member[op.name, g], ~vl)


def add_register_budgets(v: ScheduleModel) -> None:
    """Per group, the registers live at any cycle fit the group's per-thread budget.

    Fact: a result in registers is held from issue until its last reader is done; in the steady
    state ``full`` copies are always live and one more during ``rest`` cycles of each II window.
    Budgets follow setmaxnreg (multiples of 8 in [24, 256], at most 255 usable) above the
    registers every thread reserves, and all groups together fit the register file (§2.8).
    Math: per group g and cycle t: sum_v regs(v) * live_v(t) <= 32 * warps[g] * (budget[g] - reserved);
    sum_g 32 * warps[g] * budget[g] <= registers per SM.
    """
    if v.line and not v.elastic:
        _register_line(v)
        return
    m = v.m
    for g in v.groups:
        intervals, demands, full_words = [], [], []
        for op in v.p.ops:
            if not op.regs:
                continue
            full, rest = v.lifetime_of(op)
            x = v.in_group[op.name, g]
            intervals += v.modular_copies(v.offset[op.name], rest, f"live[{op.name},{g}]", x)
            demands += [op.regs, op.regs]
            full_here = m.new_int_var(0, upper(full), f"live_full[{op.name},{g}]")
            m.add(full_here == full).only_enforce_if(x)
            m.add(full_here == 0).only_enforce_if(~x)
            full_words.append(op.regs * full_here)
        if intervals:
            # The full copies are live at every cycle, so their words come off the capacity. (They
            # used to sit on a [0, II) interval with a variable demand under this variable capacity:
            # CP-SAT 9.15 then proves feasible models infeasible; docs/benchmarks_notes.md.)
            most = sum(op.regs * (upper(v.lifetime_of(op)[0]) + 2) for op in v.p.ops if op.regs)
            room = m.new_int_var(0, 32 * upper(v.reg_words[g]) + most, f"register_room[{g}]")
            m.add(room == v.register_room(g) - sum(full_words) + v.excess(most, f"registers[{g}]"))
            m.add_cumulative(intervals, demands, room)


def _register_line(v: ScheduleModel) -> None:
    """The register peaks of ``add_register_budgets`` on the line: per group, every value's copies in their stage
    window (``ScheduleModel.line_copies``), present where the group issues the value, under the group's room.

    Why: over [0, II) the copies cover each cycle exactly as often as the steady state holds the value there, and
    elsewhere never more often, so the statement is exact; it has no full-copy term and no division, and one-II
    probes that stall on the circle's statement decide on it (random-regs-16508: 1600 refuted in 3.1 units, the
    circle undecided after 60; design.md §2.8)."""
    room = v.p.arch.limit("regs_per_sm")
    m = v.m
    for g in v.groups:
        intervals, demands = [], []
        for op in v.p.ops:
            if not op.regs:
                continue
            copies = v.line_copies(op, op.regs, room, f"L[{op.name},{g}]", v.in_group[op.name, g])
            intervals += copies
            demands += [op.regs] * len(copies)
        if intervals:
            r = m.new_int_var(0, 32 * upper(v.reg_words[g]) + sum(demands), f"Lroom[{g}]")
            m.add(r == v.register_room(g))
            m.add_cumulative(intervals, demands, r)


def add_smem_capacity(v: ScheduleModel) -> None:
    """Shared memory holds every ring buffer and every hand-off buffer.

    Fact: a TMA stream whose buffer lives L cycles needs ceil(L / II) ring slots; a register
    value handed to another group is staged in SMEM; buffers the kernel allocates outside the
    loop (FA's Q tiles and O staging) stay allocated throughout (§2.9).
    Math: sum_v smem(v) * ceil(life_v / II) + sum of crossing hand-off bytes + static <= SMEM per CTA.
    """
    smem = [op.smem_bytes * v.copies_of(op) for op in v.p.ops if op.smem_bytes]
    if smem or v.handoff_terms or v.p.body.static_smem:
        v.m.add(sum(smem) + sum(v.handoff_terms) + v.p.body.static_smem <= v.p.arch.limit("smem_bytes_per_cta"))


def add_tmem_capacity(v: ScheduleModel) -> None:
    """Tensor memory holds every live accumulator tile (Blackwell).

    Fact: TMEM columns are allocated per live tile; tiles with disjoint lifetimes can share
    columns, so the peak over the steady state is what must fit (§2.9).
    Math: per cycle t of the steady state: sum_v tmem(v) * live_v(t) <= TMEM columns.
    """
    intervals, demands = [], []
    for op in v.p.ops:
        if op.tmem_cols == 0:
            continue
        full, rest = v.lifetime_of(op)
        intervals += v.modular_copies(v.offset[op.name], rest, f"tmem[{op.name}]")
        demands += [op.tmem_cols, op.tmem_cols]
        intervals.append(v.m.new_interval_var(0, v.ii, v.ii, f"tmem_full[{op.name}]"))
        demands.append(op.tmem_cols * full)
    if intervals:
        most = sum(op.tmem_cols * (upper(v.lifetime_of(op)[0]) + 2) for op in v.p.ops if op.tmem_cols)
        v.m.add_cumulative(intervals, demands, v.p.arch.limit("tmem_cols") + v.excess(most, "tmem"))


def add_average_occupancy(v: ScheduleModel) -> None:
    """Implied cuts: the storage in use, averaged over one II, fits the capacity.

    Fact: a value of size s held L cycles occupies s * L unit-cycles of the II circle, and a peak
    is never below the average. The peak families (cumulatives) imply these sums, but CP-SAT's
    linear relaxation does not see through a cumulative; the sums let it, and they let the
    relaxation that omits peak families (design.md §3.2) steer clear of lifetimes no peak can hold.
    Math: sum_v tmem(v) * life_v <= C_tmem * II; per group g:
    sum_v regs(v) * life_v * x[v,g] <= 32 * (words[g] - reserved * warps[g]) * II.
    """
    m, arch = v.m, v.p.arch
    tmem = [(op.tmem_cols, op) for op in v.p.ops if op.tmem_cols]
    if tmem:
        for _, op in tmem:
            v.lifetime_of(op)
        m.add(sum(c * v.life[op.name] for c, op in tmem) <= arch.limit("tmem_cols") * v.ii)

def add_register_average(v: ScheduleModel) -> None:
    """The register half of ``add_average_occupancy``, per warp group (see there)."""
    m = v.m
    regs = [op for op in v.p.ops if op.regs]
    if not v.joint or not regs:
        return
    for g in v.groups:
        terms = [op.regs * v.life_in(op, g) for op in regs]
        room = m.new_int_var(0, 32 * upper(v.reg_words[g]), f"register_room_avg[{g}]")
        m.add(room == v.register_room(g))
        if v.ii_lo == v.ii_hi:
            m.add(sum(terms) <= room * v.ii_lo)
        else:
            capacity = m.new_int_var(0, upper(room) * v.ii_hi, f"register_room_cycles[{g}]")
            m.add_multiplication_equality(capacity, [room, v.ii])
            m.add(sum(terms) <= capacity)


ROUNDED_MOST = 24  # register_rounded: sizes s with at most this many values of s words in one group's room


def add_register_rounded(v: ScheduleModel) -> None:
    """Implied cuts: the average of ``add_register_average`` counted in whole values of a size.

    Fact: at every cycle a group's live values fit its room R (``add_register_budgets``), so for any
    size s the live values of at least s words number at most floor(R / s), and more generally
    sum over live v of floor(regs(v) / s) <= floor(sum regs(v) / s) <= floor(R / s). Summed over
    one II, a value held life_v cycles counts life_v times. Where s is a large share of R the floor
    is what the average loses: two 12544-word values in a room of 20000 cannot be live at once, so
    their lifetimes sum to at most II, where the average allows 1.6 II (random-handoff-16524).
    Math: at a fixed II, per group g and each value size s with floor(R_max / s) <= ``ROUNDED_MOST``:
    sum_v floor(regs(v) / s) * life_v * x[v, g] <= k[g, s] * II, s * k[g, s] <= room[g], k integer.
    Windows leave it out (k * II would be one more product per size and group); so does any model
    without the register peaks, like the average.
    """
    m = v.m
    regs = [op for op in v.p.ops if op.regs]
    if not v.joint or not regs or v.ii_lo != v.ii_hi:
        return
    for g in v.groups:
        most = min(32 * upper(v.reg_words[g]), v.p.arch.limit("regs_per_sm"))
        for size in sorted({op.regs for op in regs}):
            if most // size > ROUNDED_MOST:
                continue
            whole = m.new_int_var(0, most // size, f"register_whole[{g},{size}]")
            m.add(size * whole <= v.register_room(g))
            m.add(sum(op.regs // size * v.life_in(op, g) for op in regs if op.regs >= size) <= whole * v.ii_lo)


@per_problem
def automorphisms(problem: Problem, limit: int = 64) -> list[dict[str, str]]:
    """Automorphisms σ of the loop body other than the identity: maps op -> identical op (same
    costs, units, footprints) that carry edges to identical edges. Two sub-tiles of FlashAttention
    are one. At most ``limit`` are enumerated (networkx's VF2 matcher), once per problem: the
    search builds many models of one problem.

    VF2 alone backtracks through thousands of partial maps on bodies with many identical
    sub-tiles (16 in fa_bwd: 30 s). Ops are therefore first coloured by Weisfeiler-Lehman
    refinement, an isomorphism invariant, so ops VF2 may map onto each other share a colour and no
    automorphism is lost."""
    import networkx as nx
    from networkx.algorithms import isomorphism

    # nodes are op indices: networkx walks sets and dicts of nodes, and a set of names is ordered by the process's
    # string hashing, so which automorphisms came first (and which fell past ``limit``) changed from run to run
    index = {op.name: k for k, op in enumerate(problem.ops)}
    g = nx.MultiDiGraph()
    for k, op in enumerate(problem.ops):
        g.add_node(k, key=tuple(getattr(op, f.name) for f in fields(op) if f.name not in ("name", "ref")))
    for e in problem.edges:
        g.add_edge(index[e.src], index[e.dst],
                   sig=tuple(getattr(e, f.name) for f in fields(e) if f.name not in ("src", "dst")))
    simple = nx.DiGraph()
    simple.add_nodes_from((n, {"label": repr(d["key"])}) for n, d in g.nodes(data=True))
    for a, b in sorted({(a, b) for a, b in g.edges()}):
        simple.add_edge(a, b, label=repr(sorted(repr(d["sig"]) for d in g.get_edge_data(a, b).values())))
    with warnings.catch_warnings():  # networkx >= 3.5 notes that directed hashes changed; any version is exact here
        warnings.simplefilter("ignore", UserWarning)
        hashes = nx.weisfeiler_lehman_subgraph_hashes(simple, edge_attr="label", node_attr="label", iterations=3)
    colour = {n: h[-1] for n, h in hashes.items()}
    for n in g.nodes:
        g.nodes[n]["colour"] = (g.nodes[n]["key"], colour[n])

    def same_edges(a: dict, b: dict) -> bool:
        return sorted(repr(d["sig"]) for d in a.values()) == sorted(repr(d["sig"]) for d in b.values())

    matcher = isomorphism.MultiDiGraphMatcher(g, g, node_match=lambda a, b: a["colour"] == b["colour"],
                                              edge_match=same_edges)
    out = []
    for k, sigma in enumerate(matcher.isomorphisms_iter()):
        if k >= limit:
            break
        if any(a != b for a, b in sigma.items()):
            out.append({problem.ops[a].name: problem.ops[b].name for a, b in sorted(sigma.items())})
    return out


def interchangeable_ops(problem: Problem, limit: int = 64,
                        sigmas: list[dict[str, str]] | None = None) -> list[tuple[str, str]]:
    """Pairs (v, σ(v)) for automorphisms σ of the loop body, v the first op σ moves.

    Any schedule mapped through σ is a schedule with the same objective values, so requiring
    start[v] <= start[σ(v)] for each σ keeps an optimal schedule (the lexicographically least of
    its orbit satisfies them all) while cutting off its mirror images, which an infeasibility
    proof would otherwise refute again. Any subset of the automorphisms is still valid.
    ``sigmas``: the automorphisms, where the caller has them already.
    """
    order = {op.name: i for i, op in enumerate(problem.ops)}
    pairs: list[tuple[str, str]] = []
    for sigma in automorphisms(problem, limit) if sigmas is None else sigmas:
        moved = sorted((n for n in sigma if sigma[n] != n), key=order.__getitem__)
        if (moved[0], sigma[moved[0]]) not in pairs:
            pairs.append((moved[0], sigma[moved[0]]))
    return pairs


@dataclass(frozen=True, slots=True)
class Anchor:
    """Where the rotation symmetry is cut (design.md §2.8c).

    ``op`` is fixed at offset 0. ``twin`` is set when an automorphism swaps ``op`` with another op:
    that op then sits in the first half of the circle. ``keeps_starts`` says whether the start
    cuts of ``add_symmetry_breaking`` stay valid next to the anchor (no automorphism moves ``op``).
    """

    op: str
    twin: str | None
    keeps_starts: bool


def rotation_anchor(problem: Problem, sigmas: list[dict[str, str]] | None = None) -> Anchor:
    """The op whose offset is fixed: the first op on the most loaded unit, whose placement the
    proofs hinge on (on b200 with 2 sub-tiles, fixing Q·K_0 instead of the K load turns a 32 s
    proof at II 2319 into a 0.3 s one). ``sigmas``: the automorphisms, where the caller has them."""
    load: dict[str, int] = {}
    for op in problem.ops:
        for use in op.uses:
            load[use.unit] = load.get(use.unit, 0) + use.length * use.amount
    anchor = problem.ops[0].name
    if load:
        unit = max(sorted(load), key=lambda u: load[u] / problem.capacity[u])
        anchor = next(op.name for op in problem.ops if any(use.unit == unit for use in op.uses))
    moving = [s for s in (automorphisms(problem) if sigmas is None else sigmas) if s[anchor] != anchor]
    if not moving:
        return Anchor(anchor, None, True)
    twin = next((s[anchor] for s in moving if all(s[s[n]] == n for n in s)), None)
    return Anchor(anchor, twin, False)


def add_symmetry_breaking(v: ScheduleModel) -> None:
    """Rotations and mirror images of a schedule are cut off (design.md §2.8b, §2.8c).

    Fact: shifting every start by the same amount changes no rule, and interchangeable ops (two
    identical sub-tiles) give each schedule a twin with the same II, groups and registers.
    Math, while ``v.anchored``: offset[a] = 0 for the anchor a, and 2 * offset[σ(a)] <= II for an
    involution σ that moves a; start[u] <= start[σ(u)] for the automorphisms σ of
    ``interchangeable_ops`` (only while not anchored, when some σ moves a).
    Mirror-image cuts are skipped when groups are pinned (a baseline), which may tell twins apart.
    """
    if not v.symmetry:
        return
    sigmas = automorphisms(v.p)  # one VF2 enumeration serves both cuts
    anchor = rotation_anchor(v.p, sigmas) if v.anchored is not None else None
    if anchor is not None:
        v.m.add(v.offset[anchor.op] == 0).only_enforce_if(v.anchored)
    if v.o.fixed_groups:
        return
    if anchor is not None and anchor.twin is not None:
        v.m.add(2 * v.offset[anchor.twin] <= v.ii).only_enforce_if(v.anchored)
    for a, b in interchangeable_ops(v.p, sigmas=sigmas):
        if anchor is None or anchor.keeps_starts:
            v.m.add(v.start[a] <= v.start[b])
        else:
            v.m.add(v.start[a] <= v.start[b]).only_enforce_if(~v.anchored)


# The order matters only where a family reads variables another creates (groups before the rest).
JOINT_FAMILIES: tuple[tuple[str, Callable[[ScheduleModel], None]], ...] = (
    ("warp_groups", add_warp_groups),
    ("dependences", add_dependences),
    ("modulo_resources", add_modulo_resources),
    ("residue_cuts", add_residue_cuts),
    ("in_order_issue", add_in_order_issue),
    ("variable_latency_isolation", add_variable_latency_isolation),
    ("register_budgets", add_register_budgets),
    ("smem_capacity", add_smem_capacity),
    ("tmem_capacity", add_tmem_capacity),
    ("average_occupancy", add_average_occupancy),
    ("register_average", add_register_average),
    ("register_rounded", add_register_rounded),
    ("symmetry_breaking", add_symmetry_breaking),
)
RELAXED_AWAY = ("register_budgets", "tmem_capacity", "register_average", "register_rounded")  # peak-storage families: slow to satisfy, checked after
IMPLIED_CUTS = ("average_occupancy",)  # implied by the peak families: ``cuts=False`` leaves them out
AVERAGE_CUTS = ("average_occupancy", "register_average", "register_rounded")  # the peaks on average: an elastic model leaves them out
SWP_FAMILIES = (("dependences", add_dependences), ("modulo_resources", add_modulo_resources),
                ("residue_cuts", add_residue_cuts),
                ("symmetry_breaking", add_symmetry_breaking))
# the joint problem without warp groups or registers: units, dependences and TMEM, a
# relaxation whose proofs are much faster where TMEM binds (search._memory_bound, design.md §3.1)
# (SMEM's ring depths are left out: they bind little here and made the proof at b200's II 2048 take 19 s, not 3)
MEMORY_FAMILIES = SWP_FAMILIES + (("tmem_capacity", add_tmem_capacity), ("average_occupancy", add_average_occupancy))


def add_strategy_restrictions(v: ScheduleModel) -> None:
    """Restrictions that turn the model into a baseline strategy (``twill compare``).

    A fixed warp split (Triton's: loads on a producer, the rest on one consumer group) pins every
    op's group; "no cross-iteration pipelining" makes each iteration finish within its own II
    window (length <= II), as warp-specialised code without a software pipeline does.
    """
    if v.joint:
        for name, group in v.o.fixed_groups:
            v.m.add(v.group_of[name] == group)
    if v.o.single_stage:
        v.m.add(v.length <= v.ii)


def build_model(problem: Problem, options: SolveOptions, ii_lo: int, ii_hi: int, relaxed: bool = False,
                max_stage: int | None = None, symmetry: bool = True, cuts: bool = True,
                memory_only: bool = False, anchor: bool = True, elastic: bool = False,
                line: bool = False) -> ScheduleModel:
    """A model of every schedule of ``problem`` with II in [ii_lo, ii_hi].

    ``relaxed`` leaves out the peak-storage families (register budgets, TMEM), which make
    feasible schedules hard to find; with the full stage bound it is a relaxation, so when it is
    infeasible the full model is too.
    ``max_stage`` caps the stages (a heuristic search space for hints, design.md §3.2).
    ``cuts=False`` also leaves out the average-occupancy cut, for a relaxation that only has to
    propose a hint (``search._probe_fixed``).
    ``memory_only`` drops warp groups and registers but keeps the memories (``MEMORY_FAMILIES``):
    another relaxation, which proves TMEM-bound windows empty where the joint model stalls.
    ``anchor`` fixes one op's offset at 0 (rotation symmetry, §2.8c) until ``release_anchor``;
    off with ``symmetry`` and for a one-stage baseline, whose length <= II is not rotation-invariant.
    ``elastic`` lets the register and TMEM peaks overflow and minimises the overflow (the average
    cuts, which would hold the peaks on average, are left out): every schedule of the relaxation is
    one of this model, and its optimum 0 is a schedule of the full model (design.md §3.2).
    ``line`` states the register peaks on the line (``_register_line``) instead of the circle: the same schedules,
    another propagation, which the search uses in its cold solves at one II (design.md §2.8, §3.1e).
    """
    if memory_only:
        options = replace(options, swp_only=True)
    v = ScheduleModel(problem, options, ii_lo, ii_hi, max_stage)
    v.symmetry = symmetry  # off to adopt a given schedule, which may be the mirror image
    v.elastic = elastic
    v.line = line
    if anchor and symmetry and not options.single_stage:
        v.anchored = v.m.new_bool_var("anchored")
        v.anchored.proto.domain[0] = 1  # on: domain {1}, widened by release_anchor
    families = MEMORY_FAMILIES if memory_only else SWP_FAMILIES if options.swp_only else JOINT_FAMILIES
    for name, family in families:
        if not (relaxed and name in RELAXED_AWAY) and (cuts or name not in IMPLIED_CUTS) \
                and not (elastic and name in AVERAGE_CUTS):
            family(v)
    add_strategy_restrictions(v)
    if elastic:
        v.m.minimize(sum(v.overflow))
    return v
