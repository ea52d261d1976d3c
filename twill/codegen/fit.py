"""Register budgets ptxas fits: where the schedule's budgets spill, the register file's spare goes to the groups.

Why: the model's budget for a group is the least ``setmaxnreg`` value above its live results and the per-thread
reserve, and ptxas does not always agree. On the H200, FA3's order (``fa_variants/fa_opt2.json``) spills at its 224
registers (152/204 B) and runs 535 TFLOP/s at 4x32x16384; with both consumers at 240, which the register file
holds, it spills nothing and runs 601, level with fa_opt (bench/gpu/regs_sweep.py, docs/benchmarks_notes.md,
session 62). Raising a budget never breaks the schedule: every group keeps at least the room the model gave it,
and the raised budgets must still fit the register file (the validator) and the compiler's grant (the plan).
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
    raised_by: int  # registers added to every register-holding group's budget (0: the schedule's own)
    spilled: tuple[int, int]  # (stores, loads) in bytes at the schedule's own budgets


def _raised(sched: Schedule, by: int, floor: int, cap: int) -> Schedule:
    """``sched`` with every group whose budget is above ``floor`` (the loaders sit at it) given ``by`` more, up to
    ``cap``."""
    groups = [replace(g, regs_per_thread=min(cap, g.regs_per_thread + by))
              if g.regs_per_thread is not None and g.regs_per_thread > floor else g for g in sched.groups]
    return replace(sched, groups=groups)


def fit_registers(sched: Schedule, name: str = "", turns: bool | str = True,
                  arch: str | Path | None = None) -> Fitted:
    """Generate and compile ``sched``; while ptxas spills, raise the register-holding groups' budgets together by
    one ``setmaxnreg`` step and try again, until it spills nothing or the register file (or the compiler's grant)
    has no more to give; the first budgets without spills, else the schedule's own."""
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
            return Fitted(gen, first, 0, spilled)
        compiled = compile_generated(trial.source, trial.plan.frame, "twill_fit")
        if not (compiled.spill_stores or compiled.spill_loads):
            note = (f" -- do not edit; register budgets {by} above the schedule's, where ptxas spilled "
                    f"{spilled[0]}/{spilled[1]} B (stores/loads): twill codegen --fit-registers")
            return Fitted(replace(trial, source=trial.source.replace(" -- do not edit.", note + ".", 1)),
                          compiled, by, spilled)
        if all(g.regs_per_thread is None or g.regs_per_thread <= floor or g.regs_per_thread + by >= cap
               for g in sched.groups):
            break
    return Fitted(gen, first, 0, spilled)
