"""The generalization profiles of ``twill.random_loops``: pure, exactly sized, provably solvable
on the archs they are meant for, and each stressing what its name says (bench/suite/ relies on
all three). The "fa" and "tiny" profiles are covered by tests/test_differential.py."""

from __future__ import annotations

from functools import cache

import pytest

from twill.arch.registry import get_arch
from twill.bounds import bound_and_reason, compute_bounds
from twill.ir import Carrier, Issuer
from twill.options import SolveOptions
from twill.problem import Problem, build_problem
from twill.random_loops import PROFILE_ARCHS, PROFILES, random_body, sequential_witness, witness_ii
from twill.validate import validate

NEW = [p for p in PROFILES if p not in ("fa", "tiny")]


@cache
def problem(profile: str, seed: int, n: int, arch: str) -> Problem:
    return build_problem(random_body(seed, n, profile=profile), get_arch(arch))


@pytest.mark.parametrize("profile", NEW)
def test_a_body_is_a_pure_function_of_seed_size_and_profile(profile):
    for n in (1, 2, 3, 7, 30):
        a, b = random_body(4, n, profile=profile), random_body(4, n, profile=profile)
        assert a == b and len(a.ops) == n
    assert random_body(4, 30, profile=profile) != random_body(5, 30, profile=profile)
    assert random_body(4, 30, profile=profile).params["profile"] == profile


@pytest.mark.parametrize("profile", NEW)
def test_the_sequential_witness_is_valid_on_every_arch_the_profile_names(profile):
    """Joint and swp-only, a few seeds and sizes up to the suite's 80 ops: a schedule exists."""
    assert PROFILE_ARCHS[profile]
    for arch in PROFILE_ARCHS[profile]:
        for seed, n in ((0, 1), (1, 4), (2, 9), (3, 23), (4, 80)):
            p = problem(profile, seed, n, arch)
            assert p.impossibilities() == [], (arch, seed, n)
            for swp_only in (False, True):
                sched = sequential_witness(p, swp_only=swp_only)
                assert validate(p, sched) == [], (arch, seed, n, swp_only)
                assert sched.ii == witness_ii(p)


def test_tmem_bodies_keep_their_tiles_in_tensor_memory():
    """MMAs are issued by one thread into TMEM columns, tcgen05.ld/st use the tmem port, and the
    port or a TMEM-carried recurrence is what binds II in most bodies."""
    binding = []
    for seed in range(8):
        p = problem("tmem", seed, 24, "b200")
        mmas = [op for op in p.ops if op.units() == ("tc",)]
        assert mmas and all(op.issuer is Issuer.THREAD and op.tmem_cols and not op.regs for op in mmas)
        assert any(op.units() == ("tmem",) for op in p.ops)
        assert any(e.carrier is Carrier.TMEM and e.blocking for e in p.edges)
        b = compute_bounds(p)
        binding.append(b.units[0].unit == "tmem" or b.rec_mii >= b.res_mii)
    assert sum(binding) >= 6


def test_recurrence_bodies_are_bound_by_their_recurrence():
    bound = [compute_bounds(problem("recurrence", seed, 30, "h100")) for seed in range(10)]
    assert sum(b.rec_mii >= b.res_mii for b in bound) >= 8


def test_register_bodies_need_more_than_the_units_allow():
    """For most bodies the register file, averaged over II, lifts the bound above MII."""
    lifted = 0
    for seed in range(8):
        p = problem("regs", seed, 40, "h100")
        lb, why = bound_and_reason(p, SolveOptions())
        lifted += lb > compute_bounds(p).mii and why.startswith("registers")
    assert lifted >= 4


def test_units_bodies_load_every_unit_about_equally():
    for seed in range(6):
        units = compute_bounds(problem("units", seed, 40, "h100")).units
        assert {u.unit for u in units} == {"tma", "tc", "mufu", "fp32", "alu"}
        assert min(u.ii for u in units) >= max(u.ii for u in units) // 3
    assert any(len(op.units()) == 2 for op in random_body(0, 40, profile="units").ops)


def test_load_bodies_have_slow_loads_and_deep_rings():
    slow = dependent = lifted = 0
    for seed in range(8):
        p = problem("loads", seed, 30, "h100")
        loads = [op for op in p.ops if op.variable_latency]
        slow += all(op.latency - op.busy_cycles >= 800 for op in loads)
        dependent += any(not op.streaming for op in loads)
        lb, why = bound_and_reason(p, SolveOptions())
        lifted += lb > compute_bounds(p).mii and why.startswith("smem")
    assert slow == 8 and dependent >= 3 and lifted >= 2


def test_handoff_bodies_issue_more_than_one_group_can():
    """The warpgroup work's holds add up to at least twice the busiest unit's work, and register
    tiles cross between producer and consumer ops."""
    for seed in range(6):
        p = problem("handoff", seed, 30, "h100")
        holds = sum(p.hold(op.name) for op in p.ops if op.min_warps == 4 and not op.is_async)
        assert holds >= 2 * compute_bounds(p).res_mii
        kinds = {op.name: op.kind for op in p.ops}
        crossing = [e for e in p.edges if e.carrier is Carrier.REGISTERS
                    and {kinds[e.src], kinds[e.dst]} & {"producer", "producer_mma"} and "consumer" in
                    (kinds[e.src], kinds[e.dst])]
        assert len(crossing) >= 5
