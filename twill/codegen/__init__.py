"""Code generation: a Gluon kernel (Triton 3.6, Hopper) from a ``twill.schedule/1`` schedule.

Layers inside the package: ``plan`` reads every structural decision off the schedule and is the
legality check; ``templates`` holds the op-kind constructs; ``frames`` the per-program code
outside the loop; ``emit`` assembles the module; ``compile`` builds it for sm_90a without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from twill.codegen.emit import emit_source
from twill.codegen.plan import CodegenError, Plan, make_plan
from twill.schedule import Schedule

__all__ = ["CodegenError", "Generated", "generate", "generate_file"]


@dataclass(frozen=True, slots=True)
class Generated:
    source: str
    plan: Plan


def generate(sched: Schedule, name: str = "", turns: bool | str = True) -> Generated:
    """Plan (refusing what cannot be lowered faithfully) and emit the kernel module of ``sched``.

    ``turns``: the tensor-core turn token on hardware named barriers (``True`` or 'named', the
    default), on an mbarrier array ('mbarrier'), or left out (``False``: an ablation)."""
    from twill.validate import problem_for, validate

    problem = problem_for(sched)
    violations = validate(problem, sched)
    if violations:
        v = violations[0]
        raise CodegenError(f"codegen: the schedule breaks a rule ({v.rule}: {v.message}); "
                           f"{len(violations)} violation(s) in all (twill validate lists them)")
    plan = make_plan(sched, problem, turns=turns)
    return Generated(emit_source(plan, name), plan)


def generate_file(schedule_path: str | Path, out: str | Path, turns: bool | str = True) -> Generated:
    g = generate(Schedule.read(schedule_path), Path(schedule_path).name, turns)
    Path(out).write_text(g.source, encoding="utf-8")
    return g
