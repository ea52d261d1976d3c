"""Turn a solver's answer into a ``Schedule``, whichever backend or heuristic produced it.

A backend hands over an ``Assignment``: II, each op's start and warp group, each group's warps
and registers, each value's ring-buffer copies and which edges cross groups. Everything the
schedule reports beyond that (stages, offsets, roles, buffers, length) is derived here once, so
CP-SAT, z3 and the heuristics print schedules in exactly the same form.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from twill.options import SolveOptions
from twill.problem import Problem
from twill.schedule import Buffer, Group, Schedule, ScheduledOp

__all__ = ["Assignment", "assemble", "copies_needed", "peak_registers", "role_of", "size_groups"]


@dataclass(frozen=True, slots=True)
class Assignment:
    """The decisions a backend made; groups may carry any integer labels (renumbered here)."""

    ii: int
    starts: Mapping[str, int]
    groups: Mapping[str, int] = field(default_factory=dict)  # op -> group label; empty for SWP-only
    warps: Mapping[int, int] = field(default_factory=dict)  # group label -> warps
    regs: Mapping[int, int] = field(default_factory=dict)  # group label -> registers per thread
    copies: Mapping[str, int] = field(default_factory=dict)  # value (op name) -> buffer copies
    objective_values: Mapping[str, int] = field(default_factory=dict)


def role_of(problem: Problem, ops: list[str]) -> str:
    """A short human name for a group from the kinds of work it issues ("load", "mma+exp", ...)."""
    kinds: list[str] = []
    for name in ops:
        op = problem.op(name)
        if problem.hold(name) == 0 and not op.uses:
            continue
        k = "load" if op.variable_latency and op.streaming else op.kind
        if k not in kinds:
            kinds.append(k)
    return "+".join(kinds[:4]) + ("+..." if len(kinds) > 4 else "") if kinds else "bookkeeping"


def copies_needed(problem: Problem, starts: Mapping[str, int], ii: int, name: str) -> int:
    """Ring-buffer copies of ``name``'s result: ceil(lifetime / II) (``Problem.lifetime``)."""
    return -(-problem.lifetime(starts, ii, name) // ii)


def assemble(problem: Problem, options: SolveOptions, a: Assignment, *, optimal: bool, proven_lb: int, proof: str,
             proven: Mapping[str, bool], seconds: float) -> Schedule:
    """The ``Schedule`` for assignment ``a``: groups renumbered 0.. in order of first use."""
    ii = a.ii
    raw_group = {op.name: a.groups.get(op.name, 0) for op in problem.ops}
    labels = sorted(set(raw_group.values()))
    renumber = {g: i for i, g in enumerate(labels)}
    ops = [ScheduledOp(id=op.name, name=op.kind, unit=op.uses[0].unit if op.uses else None, start=a.starts[op.name],
                       stage=a.starts[op.name] // ii, offset=a.starts[op.name] % ii, group=renumber[raw_group[op.name]])
           for op in problem.ops]
    groups = []
    for g in labels:
        members = [op.name for op in problem.ops if raw_group[op.name] == g]
        warps = a.warps.get(g, max(problem.op(n).min_warps for n in members))
        groups.append(Group(id=renumber[g], warps=warps, regs_per_thread=a.regs.get(g), role=role_of(problem, members),
                            ops=tuple(members)))
    buffers = []
    for op in problem.ops:
        if not (op.smem_bytes or op.tmem_cols or op.regs) or op.name not in a.copies:
            continue
        copies = a.copies[op.name]
        for memory, size in (("smem", op.smem_bytes), ("tmem", op.tmem_cols * 512), ("regs", op.regs * 4)):
            if size:
                buffers.append(Buffer(value=op.name, memory=memory, copies=copies, bytes=size * copies))
    if a.groups:
        for e in problem.edges:
            if raw_group[e.src] != raw_group[e.dst] and problem.handoff_bytes(e):
                buffers.append(Buffer(value=f"{e.src}->{e.dst}", memory="smem", copies=1,
                                      bytes=problem.handoff_bytes(e)))
    length = problem.length({o.id: o.start for o in ops}, raw_group if a.groups else None)
    values = dict(a.objective_values)
    if "length" in values:  # the model's length is only bounded below by the starts where it was not minimised
        values["length"] = length
    return Schedule(
        program=problem.body.name, arch=problem.arch.name, status="optimal" if optimal else "feasible", ii=ii,
        ii_lower_bound=ii if optimal else proven_lb, length=length, solve_seconds=seconds, ops=tuple(ops),
        groups=tuple(groups), buffers=tuple(buffers), body=problem.body, proof=proof, swp_only=options.swp_only,
        objective=tuple(options.objective), objective_values=values,
        options={"max_groups": options.max_groups, "max_warps": options.max_warps, "no_handoff": options.no_handoff,
                 "isolate_variable_latency": options.isolate_variable_latency, "objective_proven": dict(proven)},
        arch_path=str(problem.arch.path) if problem.arch.origin == "file" and problem.arch.path else None,
    )


# -- warps and registers after scheduling -----------------------------------------------------
def peak_registers(problem: Problem, starts: Mapping[str, int], ii: int, members: list[str]) -> int:
    """The most register words a group's live results need at any cycle of the steady state
    (a sweep over the lifetimes' ends on the circle: O(values), whatever II is)."""
    base, events = 0, {}
    for name in members:
        words = problem.op(name).regs
        if not words:
            continue
        turns, rest = divmod(problem.lifetime(starts, ii, name), ii)
        base += turns * words
        if rest:
            p = starts[name] % ii
            for lo, hi in ((p, p + rest),) if p + rest <= ii else ((p, ii), (0, p + rest - ii)):
                events[lo] = events.get(lo, 0) + words
                events[hi] = events.get(hi, 0) - words
    peak = run = 0
    for x in sorted(events):
        run += events[x]
        peak = max(peak, run)
    return base + peak


def size_groups(problem: Problem, options: SolveOptions, starts: Mapping[str, int], ii: int,
                groups: Mapping[str, int]) -> tuple[dict[int, int], dict[int, int]] | str:
    """Each group's warps and setmaxnreg budget: the fewest register words that hold its peak
    (a compiler's choice after scheduling); or why no choice fits the CTA."""
    arch = problem.arch
    budgets = arch.register_budgets()
    reserved = arch.limit("regs_reserved_per_thread")
    warps, regs = {}, {}
    for g in sorted(set(groups.values())):
        members = [n for n in groups if groups[n] == g]
        peak = peak_registers(problem, starts, ii, members)
        fits = [(32 * w * b, w, b) for w in problem.group_sizes(members) for b in budgets
                if 32 * w * (b - reserved) >= peak]
        if not fits:
            return f"group {g} needs {peak} live register words, more than any legal group holds"
        _, warps[g], regs[g] = min(fits)
    cta = options.max_warps if options.max_warps is not None else arch.limit("warps_per_cta")
    if sum(warps.values()) > cta:
        return f"the groups need {sum(warps.values())} warps; the CTA allows {cta}"
    words = sum(32 * warps[g] * regs[g] for g in warps)
    if words > arch.limit("regs_per_sm"):
        return f"the groups need {words} registers; the SM has {arch.limit('regs_per_sm')}"
    return warps, regs
