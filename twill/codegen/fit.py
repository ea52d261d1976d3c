"""Register budgets ptxas fits: where the schedule's budgets spill, the register file's spare goes to the groups.

Why: the model's budget for a group is the least ``setmaxnreg`` value above its live results and the per-thread
reserve, and ptxas does not always agree. On the H200, FA3's order (``fa_variants/fa_opt2.json``) spills at its 224
registers (152/204 B) and runs 535 TFLOP/s at 4x32x16384; with both consumers at 240, which the register file
holds, it spills nothing and runs 601, level with fa_opt (bench/gpu/regs_sweep.py, docs/benchmarks_notes.md,
session 62). Where raising every group together runs out of register file first, one group is raised at a time
(the one whose raise leaves the fewest spill bytes). Raising a budget never breaks the schedule: every group keeps
at least the room the model gave it, and the raised budgets must still fit the register file (the validator) and the
compiler's grant (the plan).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from twill.codegen import Generated, generate
from twill.codegen.compile import Compiled, compile_generated
from twill.codegen.plan import CodegenError
from twill.schedule import Schedule

__all__ = ["Fitted", "fit_registers"]


@dataclass(frozen=True, slots=True)
class Fitted:
    generated: Generated
    compiled: Compiled
    raised: dict[int, int]  # group -> registers added to its budget (empty: the schedule's own)
    spilled: tuple[int, int]  # (stores, loads) in bytes at the schedule's own budgets

    @property
    def raised_by(self) -> int:
        """The most registers any group was given above the schedule's budget."""
        return max(self.raised.values(), default=0)

    def said(self) -> str:
        """One phrase for what was raised: every register-holding group alike, or group by group."""
        if len(set(self.raised.values())) == 1 and len(self.raised) > 1:
            return f"register budgets {self.raised_by} above the schedule's"
        return "register budgets raised (" + ", ".join(f"group {g} +{n}" for g, n in sorted(self.raised.items())) + ")"


def _holding(sched: Schedule, floor: int) -> list[int]:
    """The groups whose budget is above ``floor`` (the loaders sit at it): the ones a fit may raise."""
    return [g.id for g in sched.groups if g.regs_per_thread is not None and g.regs_per_thread > floor]


def _raised(sched: Schedule, by: int, floor: int, cap: int) -> Schedule:
    """``sched`` with every group whose budget is above ``floor`` (the loaders sit at it) given ``by`` more, up to
    ``cap``."""
    holding = _holding(sched, floor)
    groups = [replace(g, regs_per_thread=min(cap, g.regs_per_thread + by)) if g.id in holding else g
              for g in sched.groups]
    return replace(sched, groups=groups)


def _spill(c: Compiled) -> int:
    return c.spill_stores + c.spill_loads


def _fitted(trial: Generated, compiled: Compiled, raised: dict[int, int], spilled: tuple[int, int]) -> Fitted:
    fitted = Fitted(trial, compiled, raised, spilled)
    note = (f" -- do not edit; {fitted.said()}, where ptxas spilled {spilled[0]}/{spilled[1]} B (stores/loads): "
            "twill codegen --fit-registers")
    return replace(fitted, generated=replace(trial, source=trial.source.replace(" -- do not edit.", note + ".", 1)))


def _one_group_at_a_time(sched: Schedule, gen: Generated, first: Compiled, name: str, turns: bool | str,
                         arch: str | Path | None) -> tuple[Generated, Compiled, dict[int, int]] | None:
    """Where raising every group together runs out of register file, the spills may sit in one group: raise
    one group a step at a time, each round the group whose raise leaves the fewest spill bytes, while that
    lowers them. (ptxas reports one kernel's spills, not a partition's, so each candidate is compiled.)"""
    a = gen.plan.problem.arch
    floor, cap, step = (a.limit(k) for k in ("reg_alloc_min", "reg_alloc_max", "reg_alloc_step"))
    holding = _holding(sched, floor)
    by = dict.fromkeys(holding, 0)
    best = (gen, first)
    while _spill(best[1]):
        trials = []
        for g in holding:
            raised = {**by, g: by[g] + step}
            groups = [replace(x, regs_per_thread=min(cap, x.regs_per_thread + raised[x.id])) if x.id in raised else x
                      for x in sched.groups]
            try:
                trial = generate(replace(sched, groups=groups), name, turns, arch)
            except CodegenError:  # the register file or the grant is spent for this group
                continue
            trials.append((_spill(c := compile_generated(trial.source, trial.plan.frame, "twill_fit")), g, trial, c))
        if not trials or min(trials, key=lambda t: t[:2])[0] >= _spill(best[1]):
            return None
        _, g, trial, c = min(trials, key=lambda t: t[:2])
        by[g] += step
        best = (trial, c)
    return best[0], best[1], {g: n for g, n in by.items() if n}


def fit_registers(sched: Schedule, name: str = "", turns: bool | str = True,
                  arch: str | Path | None = None) -> Fitted:
    """Generate and compile ``sched``; while ptxas spills, raise the register-holding groups' budgets together by
    one ``setmaxnreg`` step and try again, until it spills nothing or the register file (or the compiler's grant)
    has no more to give; then one group at a time (``_one_group_at_a_time``). The first budgets without spills,
    else the schedule's own."""
    gen = generate(sched, name, turns, arch)
    first = compile_generated(gen.source, gen.plan.frame, "twill_fit")
    spilled = (first.spill_stores, first.spill_loads)
    a = gen.plan.problem.arch
    floor, cap, step = (a.limit(k) for k in ("reg_alloc_min", "reg_alloc_max", "reg_alloc_step"))
    by, compiled = 0, first
    while compiled.spill_stores or compiled.spill_loads:
        by += step
        try:
            trial = generate(_raised(sched, by, floor, cap), name, turns, arch)
        except CodegenError:  # the register file or the grant is spent
            break
        compiled = compile_generated(trial.source, trial.plan.frame, "twill_fit")
        if not (compiled.spill_stores or compiled.spill_loads):
            return _fitted(trial, compiled, dict.fromkeys(_holding(sched, floor), by), spilled)
        if all(g.regs_per_thread is None or g.regs_per_thread <= floor or g.regs_per_thread + by >= cap
               for g in sched.groups):
            break
    if _spill(first):
        found = _one_group_at_a_time(sched, gen, first, name, turns, arch)
        if found is not None:
            return _fitted(*found, spilled)
    return Fitted(gen, first, {}, spilled)
