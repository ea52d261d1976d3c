"""Stage compaction (``twill.solver.compact``): the least stages under a schedule's offsets, groups
and lifetimes, validated."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tests.conftest import H100_ISSUE8
from twill.options import SolveOptions
from twill.schedule import Schedule
from twill.solver.assemble import Assignment, assemble
from twill.solver.compact import compact_stages
from twill.validate import problem_for, validate

DATA = Path(__file__).parent / "data"


def _read_31_stages() -> Schedule:
    """The stored schedule, on the issue-8 H100 model it was solved on (tests/archs/h100_issue8.toml)."""
    sched = Schedule.read(DATA / "fa_fwd_h100_31_stages.json")
    return replace(sched, arch="h100-issue8", arch_path=H100_ISSUE8)


def _lifetimes(problem, sched: Schedule) -> dict[str, int]:
    starts = {o.id: o.start for o in sched.ops}
    return {op.name: problem.lifetime(starts, sched.ii, op.name) for op in problem.ops}


def test_a_31_stage_one_tile_fa_schedule_compacts_to_3_stages():
    """The schedule the search printed for `twill solve fa_fwd --arch h100` when its budget ran out
    before the length objective (session 15): 31 stages, 75671 cycles at II 2441."""
    sched = _read_31_stages()
    p = problem_for(sched)
    assert (sched.stages, sched.length) == (31, 75671) and not validate(p, sched)
    out = compact_stages(p, sched)
    assert (out.stages, out.length, out.ii) == (3, 7323, 2441)
    assert not validate(p, out)
    assert [(o.offset, o.group) for o in out.ops] == [(o.offset, o.group) for o in sched.ops]
    before, after = _lifetimes(p, sched), _lifetimes(p, out)
    assert all(after[n] <= before[n] for n in before)
    assert out.objective_values["length"] == 7323
    assert [(b.value, b.copies) for b in out.buffers] == [(b.value, b.copies) for b in sched.buffers]


def test_compaction_keeps_a_lifetime_from_growing():
    """A load with no producer would go to stage 0 (V's load, two stages before P·V: a 3-deep ring);
    its lifetime, hence its ring depth, may not grow, so it stays in its reader's stage, as the
    schedule had it."""
    sched = _read_31_stages()
    p = problem_for(sched)
    out = compact_stages(p, sched)
    assert out.op("pv0").stage - out.op("load_v").stage == sched.op("pv0").stage - sched.op("load_v").stage == 0
    assert out.op("load_v").stage == 2
    assert next(b.copies for b in out.buffers if b.value == "load_v") == 1


def test_a_compact_schedule_comes_back_unchanged():
    sched = _read_31_stages()
    p = problem_for(sched)
    once = compact_stages(p, sched)
    assert compact_stages(p, once) is once
    shifted = replace(once, ops=tuple(replace(o, stage=o.stage + 4, start=o.start + 4 * once.ii) for o in once.ops),
                      length=once.length + 4 * once.ii)
    assert not validate(p, shifted)
    assert compact_stages(p, shifted).ops == once.ops


def test_the_reported_length_is_the_schedules_own():
    """Where the budget ran out before the length objective, the model's length variable is only bounded below by
    the starts (the search once printed "length 1841482 (best found)" for a 16176-cycle schedule of
    random-regs-16011): the schedule reports the length of its starts."""
    sched = _read_31_stages()
    p = problem_for(sched)
    a = Assignment(ii=sched.ii, starts={o.id: o.start for o in sched.ops}, groups={o.id: o.group for o in sched.ops},
                   warps={g.id: g.warps for g in sched.groups}, regs={g.id: g.regs_per_thread for g in sched.groups},
                   copies={b.value: b.copies for b in sched.buffers if "->" not in b.value},
                   objective_values={"ii": sched.ii, "length": 10**6})
    out = assemble(p, SolveOptions(), a, optimal=False, proven_lb=sched.ii_lower_bound, proof="", proven={},
                   seconds=0.0)
    assert out.length == sched.length == 75671 and out.objective_values["length"] == 75671
