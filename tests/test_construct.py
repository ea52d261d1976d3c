"""The storage-aware modulo list scheduler: every schedule it returns is valid, it places memories
that Rau's IMS overflows at every II, it says why a grouping can never work, and it is
deterministic."""

from __future__ import annotations

import time

import pytest

from tests.conftest import H100_ISSUE8, problem
from twill.ir import Carrier, Edge, Issuer, LoopBody, Op, Use
from twill.options import SolveOptions
from twill.problem import build_problem
from twill.random_loops import random_body
from twill.solver import lower_bound
from twill.solver.construct import _circle_load, _Registers, construct_schedule
from twill.solver.ims import iterative_modulo_schedule
from twill.solver.strategies import producer_consumer_split
from twill.validate import validate

PROGRAMS = [("toy", "h100", {}), ("gemm", "b200", {}), ("fa_fwd", "h100", {}), ("fa_fwd", "b200", {"subtiles": 2}),
            ("fa_bwd", "b200", {})]


@pytest.fixture
def no_jitter(monkeypatch):
    """Only the base strategies (no jittered copies): the IIs pinned below are theirs, and the
    tests stay fast."""
    from twill.solver import construct
    monkeypatch.setattr(construct, "JITTER_WORK", 0)


def _tiles(n: int = 3, cols: int = 256) -> LoopBody:
    """``n`` independent MMAs, each writing a ``cols``-column TMEM tile that one tcgen05.ld reads:
    scheduled as soon as possible, every tile is live at once."""
    ops, edges = [], []
    for i in range(n):
        ops.append(Op(name=f"mma{i}", kind="mma", uses=(Use(unit="tc", length=100),), latency=150, is_async=True,
                      issue_cycles=4, issuer=Issuer.THREAD, tmem_cols=cols))
        ops.append(Op(name=f"ld{i}", kind="tmem_load", uses=(Use(unit="tmem", length=100),), latency=120,
                      issuer=Issuer.WARPGROUP, regs=1024))
        edges.append(Edge(src=f"mma{i}", dst=f"ld{i}", latency=150, carrier=Carrier.TMEM, blocking=True))
    return LoopBody("tiles", tuple(ops), tuple(edges))


def _register_tiles(n: int = 4, words: int = 20000) -> LoopBody:
    """``n`` wgmmas with ``words``-word register accumulators, each read by one FP32 op of the
    same warpgroup: issued together, three of them overflow any register budget."""
    ops, edges = [], []
    for i in range(n):
        ops.append(Op(name=f"mma{i}", kind="mma", uses=(Use(unit="tc", length=50),), latency=100, is_async=True,
                      issue_cycles=2, issuer=Issuer.WARPGROUP, regs=words))
        ops.append(Op(name=f"use{i}", kind="fp32", uses=(Use(unit="fp32", length=100),), latency=104,
                      issuer=Issuer.WARPGROUP))
        edges.append(Edge(src=f"mma{i}", dst=f"use{i}", latency=100, blocking=True))
    return LoopBody("register_tiles", tuple(ops), tuple(edges))


def _loads_apart(p) -> dict[str, int]:
    return {op.name: (0 if op.name.startswith("mma") else 1) for op in p.ops}


@pytest.mark.parametrize("name, arch, params", PROGRAMS)
def test_every_builtin_program_schedules_validly(name, arch, params, no_jitter):
    """Under Triton's split, every built-in program gets a valid schedule at or above the lower
    bound, and never a worse II than IMS under the same split."""
    p = problem(name, arch, **params)
    groups = dict(producer_consumer_split(p))
    result = construct_schedule(p, SolveOptions(), groups, lower_bound=lower_bound(p, SolveOptions()))
    s = result.schedule
    assert s is not None and s.status == "feasible" and validate(p, s) == []
    assert s.ii >= lower_bound(p, SolveOptions()) == s.ii_lower_bound
    assert all(ii >= result.start_ii for ii, _ in result.attempts)
    assert s.ii <= iterative_modulo_schedule(p, SolveOptions(), groups=groups).schedule.ii


def test_small_bodies_get_jittered_tries():
    """FA forward, one tile, h100: 11 ops, so each II also gets jittered copies of the strategies,
    which find II 2573 where the base strategies stop at 3611 (IMS: 3825; the exact search, 2492)."""
    p = problem("fa_fwd", H100_ISSUE8)
    groups = dict(producer_consumer_split(p))
    s = construct_schedule(p, SolveOptions(), groups).schedule
    assert s is not None and validate(p, s) == [] and s.ii == 2573


def test_toy_reaches_the_papers_ii():
    """One group at II 2: S, then O as soon as the tensor core is free again, and P just before
    O (Swing's order places it beside its placed reader)."""
    p = problem("toy", "h100")
    s = construct_schedule(p, None, dict.fromkeys(("S", "P", "O"), 0)).schedule
    assert s.ii == 2 and [(o.id, o.start) for o in s.ops] == [("S", 0), ("P", 2), ("O", 3)]


def test_tmem_tiles_take_turns_where_ims_overflows(b200):
    """Three 256-column tiles: IMS issues the three MMAs back to back at every II and needs 768
    of 512 columns; the constructive scheduler staggers them so that at most two are live."""
    p = build_problem(_tiles(), b200)
    groups = _loads_apart(p)
    ims = iterative_modulo_schedule(p, SolveOptions(), groups=groups)
    assert ims.schedule is None and ims.reason.startswith("tmem:") and "768 columns" in ims.reason
    result = construct_schedule(p, SolveOptions(), groups)
    s = result.schedule
    assert s is not None and validate(p, s) == []
    # the TMEM average: 3 tiles x 256 columns x (150 + 100 cycles) / 512 columns, met exactly
    assert result.start_ii == s.ii == 375 and result.attempts == ((375, "scheduled"),)


def test_register_tiles_are_staggered_where_ims_overflows(h100, no_jitter):
    """Four 20000-word accumulators in one group: IMS issues them together and needs 80000 words
    at every II; the constructive scheduler keeps at most two live and sizes the group for them."""
    p = build_problem(_register_tiles(), h100)
    groups = dict.fromkeys((op.name for op in p.ops), 0)
    ims = iterative_modulo_schedule(p, SolveOptions(), groups=groups)
    assert ims.schedule is None and "80000 live register words" in ims.reason
    s = construct_schedule(p, SolveOptions(), groups).schedule
    assert s is not None and validate(p, s) == [] and s.ii == 816  # in-order issue alone needs 668
    (group,) = s.groups
    assert (group.warps, group.regs_per_thread) == (8, 184)  # 8 x (184 - 24) x 32 = 40960 >= 2 x 20000


def test_random_tmem_bodies_beat_ims_under_the_same_split(b200, no_jitter):
    """TMEM-heavy generated bodies under Triton's split: every schedule is valid, and on these
    seeds the II is below IMS's (IMS lets the tiles of independent chains pile up)."""
    found = {}
    for seed in (1, 5):
        p = build_problem(random_body(seed, 16, profile="tmem"), b200)
        groups = dict(producer_consumer_split(p))
        s = construct_schedule(p, SolveOptions(), groups).schedule
        assert s is not None and validate(p, s) == []
        found[seed] = (s.ii, iterative_modulo_schedule(p, SolveOptions(), groups=groups).schedule.ii)
    assert found == {1: (1078, 1138), 5: (1493, 1628)}


def test_a_grouping_that_can_never_fit_says_why(b200):
    """A load sharing a group with fixed-latency work breaks variable-latency isolation at every
    II, and two groups that each must hold a 40000-word value never fit the register file
    together: both are said at once."""
    p = problem("fa_fwd", "b200")
    mixed = dict.fromkeys((op.name for op in p.ops), 0)
    result = construct_schedule(p, SolveOptions(), mixed)
    assert result.schedule is None and result.attempts == ()
    assert result.impossible.startswith("group 0 issues variable-latency ops")
    big = LoopBody("big", tuple(Op(name=n, uses=(Use(unit="fp32", length=8),), latency=8, issuer=Issuer.WARPGROUP,
                                   regs=40000) for n in "ab"), ())
    p = build_problem(big, b200)
    result = construct_schedule(p, SolveOptions(), {"a": 0, "b": 1})  # 2 x 8 warps x 184 registers > 64 Ki
    assert result.schedule is None and result.impossible.startswith("registers: the groups' widest ops")
    s = construct_schedule(p, SolveOptions(), {"a": 0, "b": 0}).schedule  # one group holds one at a time
    assert s is not None and validate(p, s) == []


def test_a_group_cannot_both_need_and_cap_its_warps(h100):
    """An op that needs 8 warps cannot share a group with a 64-row wgmma, whose accumulator
    caps its group at one warpgroup; apart, each gets its size."""
    body = LoopBody("capped", (
        Op(name="wide", uses=(Use(unit="fp32", length=8),), latency=8, issuer=Issuer.WARPGROUP, warps=8),
        Op(name="mma", uses=(Use(unit="tc", length=8),), latency=8, is_async=True, issuer=Issuer.WARPGROUP,
           regs=4096, max_warps=4)), ())
    p = build_problem(body, h100)
    result = construct_schedule(p, SolveOptions(), {"wide": 0, "mma": 0})
    assert result.schedule is None and result.impossible.startswith("warps: group 0 issues wide (needs 8 warps) "
                                                                    "and mma (at most 4 warps")
    s = construct_schedule(p, SolveOptions(), {"wide": 0, "mma": 1}).schedule
    assert s is not None and [g.warps for g in s.groups] == [8, 4] and validate(p, s) == []


def test_hand_offs_that_leave_no_room_for_the_rings_say_so(h100):
    """A load and a chain of eight 32 KiB register tiles alternating between two groups: the seven
    hand-off staging buffers take 224 KiB, and the load's ring slot no longer fits in 227 KiB."""
    ops = [Op(name="load", kind="load", uses=(Use(unit="tma", length=92),), latency=552, is_async=True,
              issuer=Issuer.THREAD, smem_bytes=8192, variable_latency=True, streaming=True)]
    ops += [Op(name=f"a{i}", uses=(Use(unit="fp32", length=32),), latency=36, issuer=Issuer.WARPGROUP, regs=8192)
            for i in range(8)]
    edges = [Edge(src="load", dst="a0", latency=552, carrier=Carrier.SMEM, blocking=True)]
    edges += [Edge(src=f"a{i}", dst=f"a{i + 1}", latency=36) for i in range(7)]
    p = build_problem(LoopBody("handoffs", tuple(ops), tuple(edges)), h100)
    result = construct_schedule(p, SolveOptions(), {"load": 0, **{f"a{i}": 1 + i % 2 for i in range(8)}})
    assert result.schedule is None and result.attempts == ()
    assert result.impossible == ("smem: one slot of every ring needs 8192 B, but the hand-off staging buffers of this "
                                 "grouping (229376 B) and the static SMEM (0 B) leave 3072 B of 232448 B")
    s = construct_schedule(p, SolveOptions(), {"load": 0, **{f"a{i}": 1 for i in range(8)}}).schedule
    assert s is not None and validate(p, s) == []  # one consumer group: nothing is handed off


def test_the_search_stays_within_its_window_and_deadline(h100, no_jitter):
    """``upper`` below the first working II: nothing is returned and no II above it was tried; a
    deadline already past stops the search before its first attempt."""
    p = build_problem(_register_tiles(), h100)
    groups = dict.fromkeys((op.name for op in p.ops), 0)
    result = construct_schedule(p, SolveOptions(), groups, upper=700)
    assert result.schedule is None and result.attempts and max(ii for ii, _ in result.attempts) == 700
    late = construct_schedule(p, SolveOptions(), groups, deadline=time.monotonic() - 1)
    assert late.schedule is None and late.attempts == ((result.start_ii, "wall-clock cap reached"),)


def test_when_no_ii_places_the_ops_they_run_one_at_a_time(monkeypatch):
    """The last resort, here with every strategy taken away: one iteration at a time, each op
    after the previous one is done, at an II past the iteration's end; still a valid schedule."""
    from twill.solver import construct
    monkeypatch.setattr(construct, "STRATEGIES", ())
    p = problem("fa_fwd", "b200")
    groups = dict(producer_consumer_split(p))
    result = construct_schedule(p, SolveOptions(), groups)
    s = result.schedule
    assert s is not None and validate(p, s) == [] and "one iteration at a time" in s.proof
    assert result.attempts[-1] == (s.ii, "scheduled") and s.length < s.ii
    assert all(why == "no strategy to place the ops with" for _, why in result.attempts[:-1])


def test_the_same_input_gives_the_same_schedule(b200):
    """Deterministic, jittered copies included: the same body and grouping give byte-identical
    schedules and attempts."""
    p = build_problem(random_body(7, 10, profile="tmem"), b200)
    groups = dict(producer_consumer_split(p))
    a, b = construct_schedule(p, SolveOptions(), groups), construct_schedule(p, SolveOptions(), groups)
    assert a.attempts == b.attempts
    assert a.schedule.reproducible_dict() == b.schedule.reproducible_dict()


@pytest.mark.parametrize("arch", ["b200", "h100"])
def test_registers_pack_narrow_groups_into_one_budget(arch, b200, h100):
    """setmaxnreg is per warpgroup (sm_90a and sm_100a alike: ``reg_alloc_group_warps`` 4): two 1-warp groups
    share one 4-warp pack at one budget, and the pack is charged whole."""
    p = problem("fa_fwd", arch)
    sizes = sorted(p.arch.warp_group_sizes())
    regs = _Registers(p, SolveOptions(), {0: sizes, 1: sizes, 2: [w for w in sizes if w >= 4]})
    warps, budgets = regs.fit({0: 0, 1: 1000, 2: 40000})
    # 2 warps at 40 (1000 <= 2 x 16 x 32) beat 1 warp at 56: the pack of 4 warps is charged at 40
    assert warps == {0: 1, 1: 2, 2: 8} and budgets[0] == budgets[1] == 40 and budgets[2] == 184
    assert regs.fit({0: 0, 1: 0, 2: 60000}) is None


def test_without_warpgroup_allocation_each_narrow_group_keeps_its_budget(h100):
    """An arch whose register allocation is per warp (no ``reg_alloc_group_warps``) gives each group its own
    budget: the 1-warp loader keeps the floor, the other the least that holds its 1000 words."""
    from dataclasses import replace

    p = problem("fa_fwd", "h100")
    limits = {k: v for k, v in p.arch.limits.items() if k != "reg_alloc_group_warps"}
    p = replace(p, arch=replace(p.arch, limits=limits))
    sizes = sorted(p.arch.warp_group_sizes())
    warps, budgets = _Registers(p, SolveOptions(), {0: sizes, 1: sizes}).fit({0: 0, 1: 1000})
    assert warps == {0: 1, 1: 1} and budgets == {0: 24, 1: 56}


def test_circle_load_wraps_and_counts_full_turns():
    """Intervals on the II circle: one wrapping past II meets one at the start, and a lifetime of
    more than II is a constant copy plus its remainder."""
    assert _circle_load([(90, 20, 3), (0, 5, 2)], 100) == (5, 0)
    assert _circle_load([(10, 250, 1), (70, 10, 4)], 100) == (6, 70)
