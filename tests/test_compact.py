"""Stage compaction (``twill.solver.compact``): the least stages under a schedule's offsets, groups
and lifetimes, validated."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from twill.schedule import Schedule
from twill.solver.compact import compact_stages
from twill.validate import problem_for, validate

DATA = Path(__file__).parent / "data"


def _lifetimes(problem, sched: Schedule) -> dict[str, int]:
    starts = {o.id: o.start for o in sched.ops}
    return {op.name: problem.lifetime(starts, sched.ii, op.name) for op in problem.ops}


def test_a_31_stage_one_tile_fa_schedule_compacts_to_3_stages():
    """The schedule the search printed for `twill solve fa_fwd --arch h100` when its budget ran out
    before the length objective (session 15): 31 stages, 75671 cycles at II 2441."""
    sched = Schedule.read(DATA / "fa_fwd_h100_31_stages.json")
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
    sched = Schedule.read(DATA / "fa_fwd_h100_31_stages.json")
    p = problem_for(sched)
    out = compact_stages(p, sched)
    assert out.op("pv0").stage - out.op("load_v").stage == sched.op("pv0").stage - sched.op("load_v").stage == 0
    assert out.op("load_v").stage == 2
    assert next(b.copies for b in out.buffers if b.value == "load_v") == 1


def test_a_compact_schedule_comes_back_unchanged():
    sched = Schedule.read(DATA / "fa_fwd_h100_31_stages.json")
    p = problem_for(sched)
    once = compact_stages(p, sched)
    assert compact_stages(p, once) is once
    shifted = replace(once, ops=tuple(replace(o, stage=o.stage + 4, start=o.start + 4 * once.ii) for o in once.ops),
                      length=once.length + 4 * once.ii)
    assert not validate(p, shifted)
    assert compact_stages(p, shifted).ops == once.ops
