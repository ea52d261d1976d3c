"""The validator: solver schedules pass, and each deliberately broken schedule is caught by the
rule it breaks (and only that rule, where the breakage is that clean)."""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

from twill.arch.model import Arch, Fact
from twill.arch.registry import get_arch
from twill.frontend.programs import load_program
from twill.ir import Issuer, LoopBody, Op, Use
from twill.problem import Problem, build_problem
from twill.schedule import Buffer, Group, Schedule, ScheduledOp
from twill.solver import SolveOptions, solve
from twill.validate import RULES, Violation, problem_for, validate

# The H100 model before calibration (issue 8; tests/data/h100_datasheet.toml, checked against archs/h100.toml by
# tests/test_calibrate.py): the hand-worked cycle counts in this file are its datasheet and proxy costs, so a
# new calibration of the built-in h100 does not rewrite them.
H100 = str(Path(__file__).resolve().parent / "data" / "h100_datasheet.toml")


@cache
def solved(program: str, arch_name: str, **params: int) -> tuple[Problem, Schedule]:
    arch = get_arch(arch_name)
    p = build_problem(load_program(program, arch, params), arch)
    return p, solve(p, SolveOptions(work_limit=30, time_limit=900))


def moved(schedule: Schedule, **starts: int) -> Schedule:
    """``schedule`` with some ops moved to new start cycles (stage and offset kept consistent)."""
    ii = schedule.ii
    ops = tuple(replace(o, start=starts[o.id], stage=starts[o.id] // ii, offset=starts[o.id] % ii)
                if o.id in starts else o for o in schedule.ops)
    return replace(schedule, ops=ops)


def with_group(schedule: Schedule, gid: int, **fields) -> Schedule:
    return replace(schedule, groups=tuple(replace(g, **fields) if g.id == gid else g for g in schedule.groups))


def with_limit(arch: Arch, **limits: int) -> Arch:
    return replace(arch, limits={**arch.limits, **{k: Fact(v, "test: lowered limit") for k, v in limits.items()}})


def rules(violations: list[Violation]) -> set[str]:
    return {v.rule for v in violations}


# -- solver schedules pass ---------------------------------------------------------------------
@pytest.mark.parametrize("program", ["toy", "gemm"])
@pytest.mark.parametrize("arch_name", ["h100", "b200"])
def test_solver_schedules_pass(program: str, arch_name: str) -> None:
    p, s = solved(program, arch_name)
    assert s.status == "optimal"
    assert validate(p, s) == []


def test_solver_gemm_h100_is_the_tma_bound_schedule() -> None:
    """The numbers the broken-schedule tests below rely on."""
    p, s = solved("gemm", H100)
    assert s.ii == 1367  # TMA: 456 (A, 16 KiB) + 911 (B, 32 KiB) cycles at 36 B/clk
    assert [(o.id, o.start, o.group) for o in s.ops] == [("load_a", 0, 0), ("load_b", 456, 0), ("mma", 1807, 1)]
    assert {b.value: b.copies for b in s.buffers if b.memory == "smem"} == {"load_a": 3, "load_b": 2}


@pytest.mark.slow
def test_solver_fa_fwd_h100_passes() -> None:
    p, s = solved("fa_fwd", "h100", subtiles=2)
    assert s.ii == 2048
    assert validate(p, s) == []
    # a register budget one step lower no longer holds the softmax group's live tiles (peak 20672 words)
    g = next(g for g in s.groups if "exp0" in g.ops)
    tight = with_group(s, g.id, regs_per_thread=g.regs_per_thread - 8)
    found = validate(p, tight)
    assert rules(found) == {"registers"}
    assert "live results need 20672 registers" in found[0].message


def test_swp_only_schedule_passes() -> None:
    arch = get_arch("h100")
    p = build_problem(load_program("toy", arch), arch)
    s = solve(p, SolveOptions(swp_only=True, time_limit=30))
    assert s.swp_only and validate(p, s) == []


def test_problem_for_rebuilds_from_json() -> None:
    _, s = solved("gemm", "b200")
    again = Schedule.from_dict(s.to_dict())
    p = problem_for(again)
    assert p.arch.name == "b200"
    assert validate(p, again) == [] and validate(None, again) == []


# -- broken schedules -------------------------------------------------------------------------
def test_dependence_violated() -> None:
    p, s = solved("gemm", H100)
    found = validate(p, moved(s, mma=1700))
    assert found == [Violation("dependence", "dependence load_b -> mma: mma starts at 1700 but load_b's result is "
                                             "ready at 1807", ("load_b", "mma"), 1700)]


def test_loop_carried_dependence_violated() -> None:
    """At II 1000 the next iteration's MMA would start before this one's 1024 tensor-core cycles end."""
    p, s = solved("gemm", H100)
    fast = moved(replace(s, ii=1000), **{o.id: o.start for o in s.ops})
    found = [v for v in validate(p, fast) if v.rule == "dependence"]
    assert found == [Violation("dependence", "dependence mma -> mma: mma of the iteration 1 later starts at 2807 "
                                             "(1807 + 1 x II 1000) but mma's result is ready at 2831",
                               ("mma", "mma"), 2807)]


def test_two_ops_on_one_unit() -> None:
    p, s = solved("gemm", H100)
    found = validate(p, moved(s, load_b=400))  # its 911 TMA cycles now overlap load_a's [0, 456)
    assert rules(found) == {"unit_capacity"}
    assert found[0].ops == ("load_a", "load_b") and found[0].cycle == 400
    assert found[0].message == "unit tma: at cycle 400 (mod II 1367) ops load_a, load_b use 2 instances; capacity is 1"


def test_ring_too_shallow_for_shared_memory() -> None:
    """GEMM's rings need 3 x 16 KiB (A) + 2 x 32 KiB (B) = 114688 B beside the C tile's staging
    (65536 B, allocated outside the loop): 180224 B, which a 100000 B CTA cannot hold."""
    arch, (_, s) = get_arch(H100), solved("gemm", H100)
    small = with_limit(arch, smem_bytes_per_cta=100_000)
    found = validate(build_problem(s.body, small), s)
    assert rules(found) == {"smem"}
    assert "180224 B" in found[0].message and "outside the loop 65536 B" in found[0].message
    assert found[0].ops == ("load_a", "load_b")


def test_declared_ring_shallower_than_lifetime() -> None:
    p, s = solved("gemm", H100)
    shallow = replace(s, buffers=tuple(replace(b, copies=2, bytes=32768) if b.value == "load_a" else b
                                       for b in s.buffers))
    found = validate(p, shallow)
    assert rules(found) == {"buffers"}
    assert "lives 2847 cycles" in found[0].message and "= 3" in found[0].message  # mma 1807 + its 1040 cycles


def test_register_budget_exceeded() -> None:
    """The wgmma accumulator is 128 x 256 = 32768 words: 8 warps x (152 - 24) x 32 holds it, 144 does not."""
    p, s = solved("gemm", H100)
    found = validate(p, with_group(s, 1, regs_per_thread=144))
    assert rules(found) == {"registers"}
    assert found[0].message.endswith("but 8 warps x (144 - 24 reserved) x 32 lanes = 30720")
    found = validate(p, with_group(s, 1, regs_per_thread=150))  # not a multiple of 8
    assert rules(found) == {"registers"}


def test_register_file_exceeded() -> None:
    """Two 8-warp groups at 248 registers a thread allocate 2 x 32 x 8 x 248 = 126976 of 65536."""
    p, s = solved("gemm", H100)
    wide = replace(s, groups=tuple(replace(g, warps=8, regs_per_thread=248) for g in s.groups))
    found = validate(p, wide)
    assert rules(found) == {"registers"}
    assert found[0].message.startswith("groups allocate 126976 registers")


def test_warps() -> None:
    p, s = solved("gemm", H100)
    assert "warps" in rules(validate(p, with_group(s, 1, warps=2)))  # wgmma needs a warpgroup
    assert "warps" in rules(validate(p, with_group(s, 1, warps=3)))  # not a legal group size
    assert "warps" in rules(validate(p, with_group(s, 0, warps=32)))  # 40 warps in one CTA


def test_a_wgmma_group_is_no_wider_than_its_accumulator_rows() -> None:
    """A 64-row wgmma accumulator lives in one warpgroup: the 4-warp group the solver gives it is
    legal, the same schedule with that group widened to 8 warps is not (it would hold the
    accumulator at half the registers a thread really needs)."""
    p, s = solved("gemm", H100, block_m=64)
    assert p.op("mma").max_warps == 4
    mma_group = next(o.group for o in s.ops if o.id == "mma")
    assert validate(p, s) == [] and s.groups[mma_group].warps == 4
    found = validate(p, with_group(s, mma_group, warps=8))
    assert rules(found) == {"warps"}
    assert found[0].ops == ("mma",) and "at most 4 warps" in found[0].message


def test_variable_latency_isolation() -> None:
    p, s = solved("gemm", H100)
    merged = replace(s, ops=tuple(replace(o, group=0) for o in s.ops),
                     groups=(replace(s.groups[0], warps=8, regs_per_thread=152, ops=("load_a", "load_b", "mma")),))
    found = validate(p, merged)
    assert rules(found) == {"variable_latency"}
    assert found[0].ops == ("load_a", "load_b", "mma")


def test_tmem_exceeded() -> None:
    """B200's tcgen05 accumulator is 256 TMEM columns, always live (an in-place chain)."""
    arch, (_, s) = get_arch("b200"), solved("gemm", "b200")
    found = validate(build_problem(s.body, with_limit(arch, tmem_cols=128)), s)
    assert rules(found) == {"tmem"} and found[0].ops == ("mma",)
    assert "256 columns" in found[0].message


def _two_sync_ops() -> Problem:
    arch = get_arch(H100)
    body = LoopBody("two", (
        Op(name="A", uses=(Use(unit="fp32", length=4),), latency=4, issuer=Issuer.WARPGROUP),
        Op(name="B", uses=(Use(unit="mufu", length=4),), latency=4, issuer=Issuer.WARPGROUP),
    ), ())
    return build_problem(body, arch)


def _hand_schedule(p: Problem, ii: int, starts: dict[str, int], groups: dict[str, int],
                   warps: int = 4, regs: int = 24, buffers: tuple[Buffer, ...] = ()) -> Schedule:
    ops = tuple(ScheduledOp(id=n, name=p.op(n).kind, unit=p.op(n).uses[0].unit if p.op(n).uses else None,
                            start=t, stage=t // ii, offset=t % ii, group=groups[n]) for n, t in starts.items())
    gs = tuple(Group(id=g, warps=warps, regs_per_thread=regs, role="test",
                     ops=tuple(n for n in starts if groups[n] == g)) for g in sorted(set(groups.values())))
    return Schedule(program=p.body.name, arch=p.arch.name, status="feasible", ii=ii, ii_lower_bound=ii,
                    length=max(starts.values()) + 8, solve_seconds=0.0, ops=ops, groups=gs, buffers=buffers,
                    body=p.body)


def test_in_order_issue_overlap() -> None:
    p = _two_sync_ops()
    assert validate(p, _hand_schedule(p, 8, {"A": 0, "B": 4}, {"A": 0, "B": 0})) == []
    found = validate(p, _hand_schedule(p, 8, {"A": 0, "B": 2}, {"A": 0, "B": 0}))
    assert rules(found) == {"in_order_issue"}
    assert found[0].ops == ("A", "B") and found[0].cycle == 2
    # wrapping around the circle: B at offset 6 holds the group over cycles 6, 7, 0, 1
    found = validate(p, _hand_schedule(p, 8, {"A": 9, "B": 6}, {"A": 0, "B": 0}))
    assert rules(found) == {"in_order_issue"}
    # a hold longer than II
    found = validate(p, _hand_schedule(p, 3, {"A": 0, "B": 0}, {"A": 0, "B": 1}))
    assert "in_order_issue" in rules(found) and "unit_capacity" in rules(found)


def test_unit_segment_longer_than_ii_wraps() -> None:
    """A 4-cycle segment at II 3 covers one residue twice: 2 instances of a 1-instance unit."""
    p = _two_sync_ops()
    found = validate(p, _hand_schedule(p, 3, {"A": 0, "B": 0}, {"A": 0, "B": 1}))
    unit = [v for v in found if v.rule == "unit_capacity"]
    assert len(unit) == 2 and unit[0].message.endswith("use 2 instances; capacity is 1")


def test_structure() -> None:
    p, s = solved("gemm", H100)
    found = validate(p, replace(s, ops=s.ops[:2]))
    assert rules(found) == {"structure"} and any(v.ops == ("mma",) for v in found)
    found = validate(p, replace(s, ops=(replace(s.ops[0], stage=1), *s.ops[1:])))
    assert rules(found) == {"structure"}
    found = validate(p, replace(s, ops=(*s.ops[:2], replace(s.ops[2], group=7))))
    assert rules(found) == {"structure"}


def test_rule_names_are_listed() -> None:
    assert set(RULES) >= {"dependence", "unit_capacity", "in_order_issue", "variable_latency", "warps",
                          "registers", "smem", "tmem", "structure", "buffers"}


def test_modular_counting_matches_brute_force() -> None:
    """The circle arithmetic every steady-state rule uses, against counting cycle by cycle."""
    import random

    from twill.validate import _circle_counts, _copies_at

    rng = random.Random(0)
    for _ in range(300):
        ii = rng.randint(1, 12)
        items = [(rng.randint(0, 40), rng.randint(0, 30), rng.randint(1, 3)) for _ in range(rng.randint(1, 4))]
        brute = [sum(w for b, n, w in items for c in range(b, b + n) if c % ii == r) for r in range(ii)]
        assert _circle_counts(ii, items) == brute
        start, life = items[0][0], items[0][1]
        for t in range(ii):
            tp = t + 100 * ii  # any cycle congruent to t, far enough from 0 that every copy counts
            live = sum(1 for k in range(-100, 300) if start + k * ii <= tp < start + life + k * ii)
            assert _copies_at(start, life, ii, t) == live
