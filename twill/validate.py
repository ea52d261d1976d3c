"""The schedule validator: an independent re-check of every rule a ``twill.schedule/1`` must meet.

The solver states its rules as CP-SAT constraints (``twill.solver.model``); a bug there yields a
schedule that looks optimal and is wrong. This module restates the same hardware rules directly
on the integers of a finished schedule, with plain loops over modular time, and imports nothing
from the solver, so the two implementations check each other. Each ``check_<rule>`` returns
``Violation`` values whose message is one line naming the ops and cycles involved.

Rules (design.md §2): ``structure``, ``dependence``, ``unit_capacity``, ``in_order_issue``,
``variable_latency``, ``warps``, ``registers``, ``smem``, ``tmem``, ``buffers``. A pure
software-pipelining schedule (``swp_only``) is checked only for structure, dependences (without
hand-off costs) and unit capacity.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from twill.arch.model import Arch
from twill.arch.registry import get_arch
from twill.errors import ScheduleError
from twill.ir import Carrier, Edge, Op
from twill.problem import Problem, build_problem
from twill.schedule import Group, Schedule

__all__ = ["Violation", "RULES", "validate", "problem_for", "read_time", "lifetime", "ring_depth",
           "check_structure", "check_dependences", "check_unit_capacity", "check_in_order_issue",
           "check_variable_latency", "check_warps", "check_registers", "check_smem", "check_tmem", "held_cycles",
           "check_buffers"]

RULES = ("structure", "dependence", "unit_capacity", "in_order_issue", "variable_latency", "warps", "registers",
         "smem", "tmem", "buffers")


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule: ``rule`` is one of ``RULES``; ``cycle`` is where it breaks (absolute, or
    modular for the steady-state rules), ``None`` when the rule has no time."""

    rule: str
    message: str
    ops: tuple[str, ...] = ()
    cycle: int | None = None

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"


# -- shared facts (the simulator reads these too) ----------------------------------------------
def read_time(edge: Edge, dst: Op) -> int:
    """Cycles after the consumer issues during which it still reads the value's storage.

    Independent restatement of the storage rule: an in-place consumer takes the storage over at
    issue; an async consumer reads its operands until it completes; a sync consumer reads
    registers as it issues and shared/tensor memory for its whole busy span.
    """
    if edge.in_place:
        return 0
    if dst.is_async:
        return dst.latency
    return 0 if edge.carrier is Carrier.REGISTERS else dst.busy_cycles


def lifetime(problem: Problem, starts: dict[str, int], ii: int, name: str) -> int:
    """Cycles op ``name``'s result storage is held: from its issue to its last reader's end."""
    outs = problem.body.out_edges(name)
    if not outs:
        return problem.op(name).latency
    end = max(starts[e.dst] + e.distance * ii + read_time(e, problem.op(e.dst)) for e in outs)
    return max(0, end - starts[name])


def ring_depth(life: int, ii: int) -> int:
    """Copies of a buffer alive at once in the steady state: ceil(life / II)."""
    return -(-life // ii)


def _circle_counts(ii: int, items: Iterable[tuple[int, int, int]]) -> list[int]:
    """Per residue r in [0, II): sum of ``weight`` x (cycles c in [begin, begin + length) with
    c mod II == r), for (begin, length, weight) items; a long interval wraps several times."""
    diff = [0] * (ii + 1)
    base = 0
    for begin, length, weight in items:
        if length <= 0 or weight == 0:
            continue
        turns, rest = divmod(length, ii)
        base += turns * weight
        if rest:
            p = begin % ii
            diff[p] += weight
            if p + rest <= ii:
                diff[p + rest] -= weight
            else:
                diff[ii] -= weight
                diff[0] += weight
                diff[p + rest - ii] -= weight
    out, run = [], base
    for r in range(ii):
        run += diff[r]
        out.append(run)
    return out


def _covers(begin: int, length: int, ii: int, r: int) -> bool:
    """Whether [begin, begin + length) contains a cycle congruent to r modulo II."""
    return length >= ii or (r - begin) % ii < length


def _peak(values: list[int]) -> tuple[int, int]:
    """(largest value, first residue holding it)."""
    best = max(values)
    return best, values.index(best)


def _names(ops: Iterable[str]) -> str:
    return ", ".join(ops)


# -- the rules ----------------------------------------------------------------------------------
def check_structure(problem: Problem, schedule: Schedule) -> list[Violation]:
    """Every body op is scheduled exactly once with consistent stage/offset and an existing group;
    the other rules read these fields, so they run only when this one passes."""
    out: list[Violation] = []
    ii = schedule.ii
    if ii < 1:
        return [Violation("structure", f"II is {ii}; an initiation interval is at least 1 cycle")]
    body = {op.name for op in problem.ops}
    seen: dict[str, int] = {}
    for o in schedule.ops:
        seen[o.id] = seen.get(o.id, 0) + 1
    for name in problem.ops:
        n = seen.get(name.name, 0)
        if n != 1:
            out.append(Violation("structure", f"op {name.name} appears {n} times in the schedule; expected once",
                                 (name.name,)))
    for name in sorted(set(seen) - body):
        out.append(Violation("structure", f"op {name} is scheduled but is not in loop body {problem.body.name!r}",
                             (name,)))
    group_ids = [g.id for g in schedule.groups]
    for gid in sorted({g for g in group_ids if group_ids.count(g) > 1}):
        out.append(Violation("structure", f"group {gid} is defined {group_ids.count(gid)} times"))
    for o in schedule.ops:
        if o.start < 0:
            out.append(Violation("structure", f"op {o.id} starts at {o.start}; starts are >= 0", (o.id,), o.start))
        if (o.stage, o.offset) != (o.start // ii, o.start % ii):
            out.append(Violation("structure", f"op {o.id}: start {o.start} at II {ii} is stage {o.start // ii} "
                                 f"offset {o.start % ii}, but the schedule says stage {o.stage} offset {o.offset}",
                                 (o.id,), o.start))
        if o.group not in group_ids:
            out.append(Violation("structure", f"op {o.id} is in group {o.group}, which the schedule does not define "
                                 f"(groups: {_names(map(str, group_ids))})", (o.id,)))
    for g in schedule.groups:
        members = sorted(o.id for o in schedule.ops if o.group == g.id)
        if sorted(g.ops) != members:
            out.append(Violation("structure", f"group {g.id} lists ops {_names(g.ops) or '(none)'} but the ops "
                                 f"placed in it are {_names(members) or '(none)'}", tuple(sorted(set(g.ops) ^ set(members)))))
    return out


def check_dependences(problem: Problem, schedule: Schedule) -> list[Violation]:
    """A consumer issues no earlier than its producer's result is visible (plus the hand-off cost
    when the two sit in different warp groups): start[dst] + δ·II >= start[src] + latency (+ cost)."""
    out: list[Violation] = []
    ii = schedule.ii
    for e in problem.edges:
        src, dst = schedule.op(e.src), schedule.op(e.dst)
        cost = problem.cross_group_cost(e) if src.group != dst.group and not schedule.swp_only else 0
        ready = src.start + e.latency + cost
        when = dst.start + e.distance * ii
        if when < ready:
            later = f" of the iteration {e.distance} later" if e.distance else ""
            at = f"{when} ({dst.start} + {e.distance} x II {ii})" if e.distance else f"{when}"
            extra = f" (latency {e.latency} + hand-off {cost} from group {src.group} to {dst.group})" if cost else ""
            out.append(Violation("dependence", f"dependence {e.src} -> {e.dst}: {e.dst}{later} starts at {at} but "
                                 f"{e.src}'s result is ready at {ready}{extra}", (e.src, e.dst), when))
    return out


def check_unit_capacity(problem: Problem, schedule: Schedule) -> list[Violation]:
    """In the steady state every iteration overlaps every other shifted by II, so at each residue
    r of II the segments covering r on a unit may use at most the unit's capacity."""
    out: list[Violation] = []
    ii = schedule.ii
    segments: dict[str, list[tuple[str, int, int, int]]] = {}
    for op in problem.ops:
        start = schedule.start(op.name)
        for use in op.uses:
            segments.setdefault(use.unit, []).append((op.name, start + use.offset, use.length, use.amount))
    for unit, segs in sorted(segments.items()):
        cap = problem.capacity.get(unit, 0)
        load = _circle_counts(ii, ((b, n, a) for _, b, n, a in segs))
        peak, r = _peak(load)
        if peak > cap:
            who = tuple(dict.fromkeys(name for name, b, n, _ in segs if _covers(b, n, ii, r)))
            out.append(Violation("unit_capacity", f"unit {unit}: at cycle {r} (mod II {ii}) ops {_names(who)} use "
                                 f"{peak} instances; capacity is {cap}", who, r))
    return out


def held_cycles(problem: Problem, schedule: Schedule, name: str) -> int:
    """Cycles op ``name`` holds its group in ``schedule``: its own hold, plus the SMEM store of each
    hand-off it produces and the load of each it reads (``Problem.handoff_holds``) where the other
    end sits in another group, all contiguous from its issue (design.md §2.7)."""
    g = schedule.group_of(name)
    stores = sum(problem.handoff_holds(e)[0] for e in problem.body.out_edges(name) if schedule.group_of(e.dst) != g)
    loads = sum(problem.handoff_holds(e)[1] for e in problem.body.in_edges(name) if schedule.group_of(e.src) != g)
    return problem.hold(name) + stores + loads


def check_in_order_issue(problem: Problem, schedule: Schedule) -> list[Violation]:
    """A warp group issues in order: while one of its ops holds it, no other op of the group may
    start, so the modular hold intervals of a group's ops are disjoint, and each fits in II."""
    out: list[Violation] = []
    ii = schedule.ii
    for g in schedule.groups:
        held = [(name, schedule.start(name), held_cycles(problem, schedule, name)) for name in _members(schedule, g.id)]
        held = [h for h in held if h[2] > 0]
        for name, start, hold in held:
            if hold > ii:
                out.append(Violation("in_order_issue", f"op {name} holds group {g.id} for {hold} cycles, more than "
                                     f"II {ii}", (name,), start))
        for i, (a, sa, ha) in enumerate(held):
            for b, sb, hb in held[i + 1:]:
                if (sb - sa) % ii < ha or (sa - sb) % ii < hb:
                    out.append(Violation(
                        "in_order_issue",
                        f"group {g.id} issues {a} at {sa} (holding it {ha} cycles, offset {sa % ii}) and {b} at {sb} "
                        f"(holding {hb}, offset {sb % ii}); the two overlap modulo II {ii}", (a, b), sb % ii))
    return out


def check_variable_latency(problem: Problem, schedule: Schedule) -> list[Violation]:
    """A group that waits on a variable-latency op (TMA) must not also issue fixed-latency work,
    which would stall behind it; ops that emit no instructions (hold 0) are exempt."""
    if schedule.options.get("isolate_variable_latency") is False:
        return []
    out: list[Violation] = []
    for g in schedule.groups:
        members = _members(schedule, g.id)
        variable = [n for n in members if problem.op(n).variable_latency]
        fixed = [n for n in members if not problem.op(n).variable_latency and problem.hold(n) > 0]
        if variable and fixed:
            out.append(Violation("variable_latency", f"group {g.id} issues variable-latency ops {_names(variable)} "
                                 f"and fixed-latency ops {_names(fixed)}", tuple(variable + fixed)))
    return out


def check_warps(problem: Problem, schedule: Schedule) -> list[Violation]:
    """Each group is a legal warp-group size, as wide as its widest op needs, no wider than any of
    its ops allows (a wgmma's accumulator rows), and all groups fit in one CTA."""
    out: list[Violation] = []
    arch = problem.arch
    sizes = arch.warp_group_sizes()
    for g in schedule.groups:
        if g.warps not in sizes:
            out.append(Violation("warps", f"group {g.id} has {g.warps} warps; legal group sizes on {arch.name} are "
                                 f"{_names(map(str, sizes))}", tuple(g.ops)))
        for name in _members(schedule, g.id):
            op = problem.op(name)
            if g.warps < op.min_warps:
                out.append(Violation("warps", f"op {name} needs {op.min_warps} warps but group {g.id} has {g.warps}",
                                     (name,)))
            if op.max_warps and g.warps > op.max_warps:
                out.append(Violation("warps", f"op {name} may be issued by at most {op.max_warps} warps (its "
                                     f"accumulator's rows) but group {g.id} has {g.warps}", (name,)))
    total, cap = _charged_warps(schedule.groups, arch.reg_alloc_warps()), arch.limit("warps_per_cta")
    if total > cap:
        out.append(Violation("warps", f"groups use {total} warps in all; a CTA on {arch.name} holds {cap}"))
    return out


def _charged_warps(groups: Iterable[Group], per_budget: int) -> int:
    """Warps the groups occupy: groups narrower than a setmaxnreg warpgroup (``per_budget`` warps)
    are packed together into whole warpgroups."""
    wide = sum(g.warps for g in groups if g.warps >= per_budget)
    narrow = sum(g.warps for g in groups if g.warps < per_budget)
    return wide + per_budget * -(-narrow // per_budget)


def _register_file(arch: Arch, groups: list[Group]) -> list[Violation]:
    """The budgets fit the register file. setmaxnreg is per warpgroup (PTX: all its warps execute
    the same one), so groups narrower than ``reg_alloc_group_warps`` share one budget and are
    charged as whole warpgroups at it."""
    w = arch.reg_alloc_warps()
    narrow = [g for g in groups if g.warps < w]
    budgets = sorted({g.regs_per_thread or 0 for g in narrow})
    if len(budgets) > 1:
        return [Violation("registers", f"groups {_names(str(g.id) for g in narrow)} are narrower than a {w}-warp "
                          f"warpgroup, so they share warpgroups and one setmaxnreg value, but their budgets are "
                          f"{_names(map(str, budgets))}", tuple(n for g in narrow for n in g.ops))]
    total = sum(32 * g.warps * (g.regs_per_thread or 0) for g in groups if g.warps >= w)
    parts = [f"32 x {g.warps} x {g.regs_per_thread}" for g in groups if g.warps >= w]
    if narrow:
        packed = w * -(-sum(g.warps for g in narrow) // w)
        total += 32 * packed * budgets[0]
        parts.append(f"32 x {packed} x {budgets[0]} (groups {_names(str(g.id) for g in narrow)} packed "
                     f"into whole warpgroups)")
    if total > arch.limit("regs_per_sm"):
        return [Violation("registers", f"groups allocate {total} registers ({' + '.join(parts)}); the SM has "
                          f"{arch.limit('regs_per_sm')}")]
    return []


def check_registers(problem: Problem, schedule: Schedule) -> list[Violation]:
    """Each group's budget is a legal setmaxnreg value, all budgets fit the register file, and at
    every cycle of the steady state the live register results of a group fit its budget above
    the per-thread reserve."""
    out: list[Violation] = []
    arch, ii = problem.arch, schedule.ii
    budgets, reserved = arch.register_budgets(), arch.limit("regs_reserved_per_thread")
    starts = _starts(schedule)
    for g in schedule.groups:
        if g.regs_per_thread not in budgets:
            have = "no register budget" if g.regs_per_thread is None else f"{g.regs_per_thread} registers per thread"
            out.append(Violation("registers", f"group {g.id} has {have}; legal "
                                 f"budgets on {arch.name} are {budgets[0]}..{budgets[-1]} in steps of "
                                 f"{arch.limit('reg_alloc_step')}", tuple(g.ops)))
    out += _register_file(arch, list(schedule.groups))
    for g in schedule.groups:
        holders = [n for n in _members(schedule, g.id) if problem.op(n).regs > 0]
        if not holders:
            continue
        lives = {n: lifetime(problem, starts, ii, n) for n in holders}
        live = _circle_counts(ii, ((starts[n], lives[n], problem.op(n).regs) for n in holders))
        peak, t = _peak(live)
        room = 32 * g.warps * ((g.regs_per_thread or 0) - reserved)
        if peak > room:
            who = tuple(n for n in holders if _copies_at(starts[n], lives[n], ii, t))
            parts = ", ".join(f"{n} x{_copies_at(starts[n], lives[n], ii, t)}: "
                              f"{problem.op(n).regs * _copies_at(starts[n], lives[n], ii, t)}" for n in who)
            out.append(Violation("registers", f"group {g.id}: at cycle {t} (mod II {ii}) live results need {peak} "
                                 f"registers ({parts}) but {g.warps} warps x ({g.regs_per_thread} - {reserved} "
                                 f"reserved) x 32 lanes = {room}", who, t))
    return out


def check_smem(problem: Problem, schedule: Schedule) -> list[Violation]:
    """Shared memory holds one ring slot per copy of every SMEM buffer alive at once, plus one
    staging buffer per register value handed across warp groups."""
    ii, starts = schedule.ii, _starts(schedule)
    parts: list[tuple[str, int, tuple[str, ...]]] = []  # (what, bytes, ops)
    for op in problem.ops:
        if op.smem_bytes:
            depth = ring_depth(lifetime(problem, starts, ii, op.name), ii)
            if depth:
                parts.append((f"{op.name} {depth} x {op.smem_bytes} B", op.smem_bytes * depth, (op.name,)))
    for e in problem.edges:
        if schedule.group_of(e.src) != schedule.group_of(e.dst) and problem.handoff_bytes(e) > 0:
            parts.append((f"hand-off {e.src}->{e.dst} {problem.handoff_bytes(e)} B", problem.handoff_bytes(e),
                          (e.src, e.dst)))
    if problem.body.static_smem:
        parts.append((f"outside the loop {problem.body.static_smem} B", problem.body.static_smem, ()))
    total, cap = sum(b for _, b, _ in parts), problem.arch.limit("smem_bytes_per_cta")
    if total <= cap:
        return []
    ops = tuple(dict.fromkeys(n for _, _, names in parts for n in names))
    return [Violation("smem", f"shared memory needs {total} B ({'; '.join(what for what, _, _ in parts)}); "
                      f"{problem.arch.name} has {cap} B per CTA", ops)]


def check_tmem(problem: Problem, schedule: Schedule) -> list[Violation]:
    """At every cycle of the steady state the live TMEM tiles fit the tensor memory's columns."""
    users = [op.name for op in problem.ops if op.tmem_cols]
    if not users:
        return []
    ii, starts = schedule.ii, _starts(schedule)
    lives = {n: lifetime(problem, starts, ii, n) for n in users}
    cols = _circle_counts(ii, ((starts[n], lives[n], problem.op(n).tmem_cols) for n in users))
    peak, t = _peak(cols)
    cap = problem.arch.limit("tmem_cols")
    if peak <= cap:
        return []
    who = tuple(n for n in users if _copies_at(starts[n], lives[n], ii, t))
    parts = ", ".join(f"{n} x{_copies_at(starts[n], lives[n], ii, t)}" for n in who)
    return [Violation("tmem", f"at cycle {t} (mod II {ii}) live TMEM tiles need {peak} columns ({parts}); "
                      f"{problem.arch.name} has {cap}", who, t)]


def check_buffers(problem: Problem, schedule: Schedule) -> list[Violation]:
    """The buffers a schedule declares (what code generation allocates) have as many copies as
    the lifetimes need: a ring shallower than ceil(life / II) would be overwritten while read."""
    out: list[Violation] = []
    ii, starts = schedule.ii, _starts(schedule)
    body = {op.name for op in problem.ops}
    sizes = {"smem": lambda o: o.smem_bytes, "tmem": lambda o: o.tmem_cols * 512, "regs": lambda o: o.regs * 4}
    for b in schedule.buffers:
        if b.value not in body or b.memory not in sizes:
            continue  # hand-off staging buffers ("src->dst") are checked by the smem rule
        op = problem.op(b.value)
        depth = ring_depth(lifetime(problem, starts, ii, op.name), ii)
        if b.copies != depth:
            life = lifetime(problem, starts, ii, op.name)
            out.append(Violation("buffers", f"buffer {b.value} ({b.memory}) has {b.copies} copies but its value lives "
                                 f"{life} cycles from {starts[op.name]}, which needs ceil({life} / II {ii}) = {depth}",
                                 (op.name,), starts[op.name]))
        if b.bytes != sizes[b.memory](op) * b.copies:
            out.append(Violation("buffers", f"buffer {b.value} ({b.memory}) declares {b.bytes} B for {b.copies} copies "
                                 f"of {sizes[b.memory](op)} B", (op.name,)))
    return out


# -- entry points ---------------------------------------------------------------------------------
STATIC_CHECKS: tuple[Callable[[Problem, Schedule], list[Violation]], ...] = (check_dependences, check_unit_capacity)
JOINT_CHECKS: tuple[Callable[[Problem, Schedule], list[Violation]], ...] = (
    check_in_order_issue, check_variable_latency, check_warps, check_registers, check_smem, check_tmem, check_buffers)


def validate(problem: Problem | None, schedule: Schedule) -> list[Violation]:
    """Every rule ``schedule`` breaks, in rule order; an empty list means the schedule is valid.

    ``problem`` defaults to ``problem_for(schedule)``. Structural breaks stop the check, since the
    other rules read the fields they concern.

    Examples
    --------
    >>> from twill.arch.registry import get_arch
    >>> from twill.frontend.programs import load_program
    >>> from twill.problem import build_problem
    >>> from twill.solver import solve, SolveOptions
    >>> arch = get_arch("h100")
    >>> p = build_problem(load_program("toy", arch), arch)
    >>> validate(p, solve(p, SolveOptions(workers=1)))
    []
    """
    problem = problem if problem is not None else problem_for(schedule)
    found = check_structure(problem, schedule)
    if found:
        return found
    checks = STATIC_CHECKS if schedule.swp_only else STATIC_CHECKS + JOINT_CHECKS
    return [v for check in checks for v in check(problem, schedule)]


def problem_for(schedule: Schedule) -> Problem:
    """The problem a schedule file claims to solve, rebuilt from its embedded body and its arch,
    so a schedule can be checked without the program that produced it."""
    arch = get_arch(schedule.arch_path or schedule.arch)
    if arch.name != schedule.arch:
        raise ScheduleError(f"schedule: arch file {schedule.arch_path} defines {arch.name!r}, "
                            f"but the schedule is for {schedule.arch!r}")
    return build_problem(schedule.body, arch)


def _starts(schedule: Schedule) -> dict[str, int]:
    return {o.id: o.start for o in schedule.ops}


def _members(schedule: Schedule, group: int) -> list[str]:
    return [o.id for o in schedule.ops if o.group == group]


def _copies_at(start: int, life: int, ii: int, t: int) -> int:
    """Copies of a value alive at modular time t: life // II always, one more during the first
    life % II cycles after each issue."""
    full, rest = divmod(life, ii)
    return full + (1 if rest and (t - start) % ii < rest else 0)
