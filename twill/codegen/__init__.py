"""Code generation: a Gluon kernel (Triton 3.6, Hopper) from a ``twill.schedule/1`` schedule.

Layers inside the package: ``plan`` reads every structural decision off the schedule and is the
legality check; ``templates`` holds the op-kind constructs; ``frames`` the per-program code
outside the loop; ``emit`` assembles the module; ``compile`` builds it for sm_90a without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from twill.codegen.emit import emit_source
from twill.codegen.plan import CodegenError, Plan, make_plan
from twill.schedule import Schedule

__all__ = ["CodegenError", "Generated", "generate", "generate_file"]


@dataclass(frozen=True, slots=True)
class Generated:
    source: str
    plan: Plan


def generate(sched: Schedule, name: str = "", turns: bool | str = True, arch: str | Path | None = None) -> Generated:
    """Plan (refusing what cannot be lowered faithfully) and emit the kernel module of ``sched``.

    ``turns``: the tensor-core turn token on hardware named barriers (``True`` or 'named', the
    default), on an mbarrier array ('mbarrier'), or left out (``False``: an ablation).
    ``arch``: rebuild the problem on this arch (a built-in name or a TOML file) instead of the one the
    schedule names, for a schedule solved on an arch variant whose file it does not record (e.g.
    ``bench/codegen/h200_warpgroup_rates.toml``); the schedule must still validate on it, and the
    kernel's header names it."""
    from twill.validate import problem_for, validate

    if arch is not None:
        from twill.arch.registry import get_arch

        path = str(arch)
        chosen = get_arch(path)
        is_file = path.endswith(".toml") or "/" in path
        sched = replace(sched, arch=chosen.name, arch_path=path if is_file else None)
    problem = problem_for(sched)
    violations = validate(problem, sched)
    if violations:
        v = violations[0]
        raise CodegenError(f"codegen: the schedule breaks a rule ({v.rule}: {v.message}); "
                           f"{len(violations)} violation(s) in all (twill validate lists them)")
    plan = make_plan(sched, problem, turns=turns)
    return Generated(emit_source(plan, name), plan)


def generate_file(schedule_path: str | Path, out: str | Path, turns: bool | str = True,
                  arch: str | Path | None = None) -> Generated:
    g = generate(Schedule.read(schedule_path), Path(schedule_path).name, turns, arch)
    Path(out).write_text(g.source, encoding="utf-8")
    return g
