"""The simulator: hand-computed timelines, stalls by cause, deadlocks, and the promise that a valid
schedule replays at exactly its II."""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

from twill.arch.registry import get_arch
from twill.errors import SimulationError
from twill.frontend.programs import load_program
from twill.ir import Carrier, Edge, Issuer, LoopBody, Op, Use
from twill.problem import Problem, build_problem
from twill.schedule import Buffer, Group, Schedule, ScheduledOp
from twill.sim import Span, simulate
from twill.sim.engine import Engine
from twill.solver import SolveOptions, solve
from twill.validate import validate

# The H100 model before calibration (issue 8; tests/data/h100_datasheet.toml, checked against archs/h100.toml by
# tests/test_calibrate.py): the hand-worked cycle counts in this file are its datasheet and proxy costs, so a
# new calibration of the built-in h100 does not rewrite them.
H100 = str(Path(__file__).resolve().parent / "data" / "h100_datasheet.toml")


def problem(program: str, arch_name: str = H100, **params: int) -> Problem:
    arch = get_arch(arch_name)
    return build_problem(load_program(program, arch, params), arch)


@cache
def solved(program: str, arch_name: str, **params: int) -> tuple[Problem, Schedule]:
    p = problem(program, arch_name, **params)
    return p, solve(p, SolveOptions(work_limit=30, time_limit=900))


def hand_schedule(p: Problem, ii: int, starts: dict[str, int], groups: dict[str, int],
                  shapes: dict[int, tuple[int, int]], buffers: tuple[Buffer, ...] = ()) -> Schedule:
    """A schedule written by hand: ``shapes`` maps a group to (warps, registers per thread)."""
    ops = tuple(ScheduledOp(id=n, name=p.op(n).kind, unit=p.op(n).uses[0].unit if p.op(n).uses else None,
                            start=t, stage=t // ii, offset=t % ii, group=groups[n]) for n, t in starts.items())
    gs = tuple(Group(id=g, warps=w, regs_per_thread=r, role="hand", ops=tuple(n for n in starts if groups[n] == g))
               for g, (w, r) in sorted(shapes.items()))
    return Schedule(program=p.body.name, arch=p.arch.name, status="feasible", ii=ii, ii_lower_bound=ii,
                    length=max(starts.values()) + ii, solve_seconds=0.0, ops=ops, groups=gs, buffers=buffers,
                    body=p.body)


# -- the event core ----------------------------------------------------------------------------
def test_engine_orders_by_time_then_priority_then_posting() -> None:
    e, seen = Engine(), []
    e.at(5, lambda: seen.append("t5 p1"), priority=1)
    e.at(5, lambda: seen.append("t5 p0 first"), priority=0)
    e.at(5, lambda: seen.append("t5 p0 second"), priority=0)
    e.at(2, lambda: e.at(5, lambda: seen.append("t5 p0 posted at 2"), priority=0))
    e.run()
    assert seen == ["t5 p0 first", "t5 p0 second", "t5 p0 posted at 2", "t5 p1"]
    with pytest.raises(ValueError):
        e.at(1, lambda: None)


# -- hand-computed timelines ----------------------------------------------------------------------
def toy_schedule() -> tuple[Problem, Schedule]:
    """The Twill paper's optimum: II 2 with S, P, O at cycles 0, 2, 3, one group."""
    p = problem("toy")
    return p, hand_schedule(p, 2, {"S": 0, "P": 2, "O": 3}, dict.fromkeys("SPO", 0), {0: (1, 24)})


def test_toy_timeline() -> None:
    p, s = toy_schedule()
    assert validate(p, s) == []
    r = simulate(p, s, iterations=3)
    # iteration k issues each op at its start + 2k: S(1) and P(0) share cycle 2, S holding no issue slot
    assert r.trace.timeline() == [
        ("S", 0, 0),
        ("P", 0, 2), ("S", 1, 2),
        ("O", 0, 3),
        ("P", 1, 4), ("S", 2, 4),
        ("O", 1, 5),
        ("P", 2, 6),
        ("O", 2, 7),
    ]
    assert r.achieved_ii == 2.0
    assert r.total_cycles == 8  # O(2) issues at 7 and completes 1 cycle later
    assert r.unit_utilization == {"mufu": 3 / 8, "tc": 6 / 8}
    assert r.stalls == {0: {"dependence": 0, "unit": 0, "ring": 0, "handoff": 0}}
    assert r.warnings == []
    assert Span("P", 1, 0, "mufu", 4, 5, "busy") in r.trace.spans
    assert Span("P", 1, 0, None, 4, 5, "hold") in r.trace.spans
    assert r.trace.of("wait") == ()


# GEMM on H100 (block 128 x 256 x 64, fp16), from the arch's rates:
#   load_a: 128*64*2 = 16384 B / 36 B/clk -> 456 TMA cycles, + 440 latency = 896
#   load_b: 256*64*2 = 32768 B / 36 B/clk -> 911 TMA cycles, + 440 latency = 1351
#   mma:    2*128*256*64 / 4096 FLOP/clk -> 1024 tensor-core cycles, + 16 latency = 1040;
#           8 issue slots + 8 for its blocking wait hold its warpgroup 16 cycles
# II = 456 + 911 = 1367 (the TMA is the bottleneck). Loads in group 0 back to back at 0 and 456;
# the MMA waits for B: 456 + 1351 = 1807. Rings: A lives until mma + 1040 = 2847 -> 3 slots,
# B lives 2847 - 456 = 2391 -> 2 slots.
GEMM_STARTS = {"load_a": 0, "load_b": 456, "mma": 1807}
GEMM_BUFFERS = (Buffer(value="load_a", memory="smem", copies=3, bytes=49152),
                Buffer(value="load_b", memory="smem", copies=2, bytes=65536),
                Buffer(value="mma", memory="regs", copies=1, bytes=131072))


def gemm_schedule(buffers: tuple[Buffer, ...] = GEMM_BUFFERS) -> tuple[Problem, Schedule]:
    p = problem("gemm")
    assert [(o.uses[0].length, o.latency) for o in p.ops] == [(456, 896), (911, 1351), (1024, 1040)]
    assert p.hold("mma") == 16 and p.hold("load_a") == 1
    s = hand_schedule(p, 1367, GEMM_STARTS, {"load_a": 0, "load_b": 0, "mma": 1}, {0: (1, 24), 1: (8, 152)},
                      buffers)
    return p, s


def test_gemm_timeline() -> None:
    p, s = gemm_schedule()
    assert validate(p, s) == []
    r = simulate(p, s, iterations=4)
    assert [r.trace.iteration(k) for k in range(4)] == [
        {"load_a": 0, "load_b": 456, "mma": 1807},
        {"load_a": 1367, "load_b": 1823, "mma": 3174},
        {"load_a": 2734, "load_b": 3190, "mma": 4541},
        {"load_a": 4101, "load_b": 4557, "mma": 5908},
    ]
    assert r.achieved_ii == 1367.0
    assert r.total_cycles == 5908 + 1040
    assert r.unit_utilization["tma"] == pytest.approx(4 * 1367 / 6948)
    assert r.unit_utilization["tc"] == pytest.approx(4 * 1024 / 6948)
    assert Span("mma", 2, 1, None, 4541, 4557, "issue") in r.trace.spans
    assert r.warnings == []


def test_gemm_ring_one_slot_short() -> None:
    """With 2 slots for A instead of 3, load_a(k) waits for mma(k-2) to finish reading its slot:
    a(k) = mma(k-2) + 1040, b(k) = a(k) + 456 (TMA busy), mma(k) = b(k) + 1351, so two iterations
    take 1040 + 456 + 1351 = 2847 cycles: 1423.5 per iteration instead of 1367."""
    short = (replace(GEMM_BUFFERS[0], copies=2, bytes=32768), *GEMM_BUFFERS[1:])
    p, s = gemm_schedule(short)
    assert {v.rule for v in validate(p, s)} == {"buffers"}
    r = simulate(p, s, iterations=13)
    assert [r.trace.iteration(k) for k in range(5)] == [
        {"load_a": 0, "load_b": 456, "mma": 1807},
        {"load_a": 1367, "load_b": 1823, "mma": 3174},
        {"load_a": 2847, "load_b": 3303, "mma": 4654},  # 1807 + 1040: 113 cycles late
        {"load_a": 4214, "load_b": 4670, "mma": 6021},  # 3174 + 1040
        {"load_a": 5694, "load_b": 6150, "mma": 7501},  # 4654 + 1040
    ]
    assert r.achieved_ii == 1423.5
    # 6 of the 13 loads of A wait 113 cycles for a slot; the MMA group waits the same on B
    assert r.stalls == {0: {"dependence": 0, "unit": 0, "ring": 678, "handoff": 0},
                        1: {"dependence": 678, "unit": 0, "ring": 0, "handoff": 0}}
    assert r.warnings == ["achieved interval 1423.5 exceeds II 1367 by 4.1%: group 0 stalled 52 cycles per "
                          "iteration on ring buffer load_a"]
    assert Span("load_a", 2, 0, None, 2734, 2847, "wait") in r.trace.spans


def test_handoff_stall() -> None:
    """A register value crossing groups pays the hand-off (4 KiB: 61 + 16.1 x 4 + 92 -> 218 cycles)
    once: the consumer slips by it, and pipelining keeps the interval."""
    arch = get_arch(H100)
    body = LoopBody("handoff", (
        Op(name="A", uses=(Use(unit="fp32", length=4),), latency=8, issuer=Issuer.WARPGROUP, regs=1024),
        Op(name="B", uses=(Use(unit="mufu", length=4),), latency=8, issuer=Issuer.WARPGROUP),
    ), (Edge(src="A", dst="B", latency=8, carrier=Carrier.REGISTERS),))
    p = build_problem(body, arch)
    assert p.cross_group_cost(p.edges[0]) == 218
    s = hand_schedule(p, 8, {"A": 0, "B": 8}, {"A": 0, "B": 1}, {0: (4, 32), 1: (4, 32)})
    assert [v.rule for v in validate(p, s)] == ["dependence"]  # the schedule forgot the hand-off
    r = simulate(p, s, iterations=10)
    assert [r.trace.issue("B", k) for k in range(3)] == [226, 234, 242]
    assert r.stalls[1] == {"dependence": 0, "unit": 0, "ring": 0, "handoff": 218}
    assert r.achieved_ii == 8.0 and r.warnings == []


def test_unit_contention_between_groups() -> None:
    """Two groups' ops on the FP32 pipes 1 cycle apart: the later one waits for the unit once."""
    arch = get_arch(H100)
    body = LoopBody("contend", (
        Op(name="A", uses=(Use(unit="fp32", length=4),), latency=4, issuer=Issuer.WARPGROUP),
        Op(name="B", uses=(Use(unit="fp32", length=4),), latency=4, issuer=Issuer.WARPGROUP),
    ), ())
    p = build_problem(body, arch)
    s = hand_schedule(p, 8, {"A": 0, "B": 1}, {"A": 0, "B": 1}, {0: (4, 24), 1: (4, 24)})
    assert [v.rule for v in validate(p, s)] == ["unit_capacity"]
    r = simulate(p, s, iterations=6)
    assert [r.trace.issue("B", k) for k in range(3)] == [4, 12, 20]
    assert r.stalls[1]["unit"] == 3 and r.stalls[0]["unit"] == 0


# -- deadlocks ------------------------------------------------------------------------------------
def window_problem() -> Problem:
    """A consumer that reads this iteration's tile and the previous one: two slots in flight."""
    arch = get_arch(H100)
    load = Op(name="load", kind="load", uses=(Use(unit="tma", length=10),), latency=50, is_async=True,
              issuer=Issuer.THREAD, smem_bytes=1024, variable_latency=True, streaming=True)
    window = Op(name="window", uses=(Use(unit="fp32", length=5),), latency=5, issuer=Issuer.WARPGROUP)
    edges = tuple(Edge(src="load", dst="window", latency=50, distance=d, blocking=True, carrier=Carrier.SMEM)
                  for d in (0, 1))
    return build_problem(LoopBody("window", (load, window), edges), arch)


def window_schedule(p: Problem, copies: int) -> Schedule:
    # load lives from 0 until window of the next iteration has read it: 50 + 20 + 5 = 75 -> 4 slots
    return hand_schedule(p, 20, {"load": 0, "window": 50}, {"load": 0, "window": 1}, {0: (1, 24), 1: (4, 24)},
                         (Buffer(value="load", memory="smem", copies=copies, bytes=1024 * copies),))


def test_window_with_enough_slots_runs_at_ii() -> None:
    p = window_problem()
    s = window_schedule(p, 4)
    assert validate(p, s) == []
    r = simulate(p, s, iterations=12)
    assert r.achieved_ii == 20.0 and r.warnings == []
    assert [r.trace.issue("window", k) for k in range(3)] == [50, 70, 90]


def test_ring_of_one_slot_deadlocks() -> None:
    """load(1) needs slot 0 back, which window(1) still has to read; window(1) needs load(1)."""
    p = window_problem()
    s = window_schedule(p, 1)
    assert {v.rule for v in validate(p, s)} == {"buffers"}
    with pytest.raises(SimulationError) as err:
        simulate(p, s, iterations=4)
    assert err.value.waiting == (
        "group 0 waits for op load iteration 1 on ring buffer load (depth 1): reader window iteration 1 of slot "
        "iteration 0 has not issued",
        "group 1 waits for op window iteration 1 on dependence: producer load iteration 1 has not issued",
    )
    assert str(err.value).startswith("deadlock at cycle 50: group 0 waits")  # after window(0), nothing can issue


def test_cross_iteration_wait_behind_itself_deadlocks() -> None:
    """In one in-order group, A(1) (cycle 20) waits for B(0) (cycle 25), which issues after it."""
    arch = get_arch(H100)
    body = LoopBody("behind", (
        Op(name="A", uses=(Use(unit="fp32", length=2),), latency=5, issuer=Issuer.WARPGROUP),
        Op(name="B", uses=(Use(unit="mufu", length=2),), latency=5, issuer=Issuer.WARPGROUP),
    ), (Edge(src="A", dst="B", latency=5), Edge(src="B", dst="A", latency=5, distance=1)))
    p = build_problem(body, arch)
    s = hand_schedule(p, 20, {"A": 0, "B": 25}, {"A": 0, "B": 0}, {0: (4, 24)})
    assert [v.rule for v in validate(p, s)] == ["dependence"]
    with pytest.raises(SimulationError) as err:
        simulate(p, s, iterations=3)
    assert err.value.waiting == ("group 0 waits for op A iteration 1 on dependence: producer B iteration 0 has "
                                 "not issued",)


# -- solver schedules replay at their II ---------------------------------------------------------
@pytest.mark.parametrize(("program", "arch_name"), [("toy", "h100"), ("gemm", "h100"), ("toy", "b200"),
                                                    ("gemm", "b200")])
def test_solver_schedule_achieves_ii(program: str, arch_name: str) -> None:
    p, s = solved(program, arch_name)
    r = simulate(p, s, iterations=16)
    assert r.achieved_ii == pytest.approx(s.ii, rel=0.01)
    assert r.achieved_ii == s.ii  # no jitter: every op issues at exactly its scheduled cycle
    assert all(r.trace.issue(o.id, k) == o.start + k * s.ii for o in s.ops for k in range(16))
    assert all(sum(c.values()) == 0 for c in r.stalls.values())
    assert r.warnings == []


@pytest.mark.slow
def test_fa_fwd_achieves_ii() -> None:
    p, s = solved("fa_fwd", "h100", subtiles=2)
    r = simulate(p, s, iterations=16)
    assert s.ii == 2048
    assert r.achieved_ii == pytest.approx(s.ii, rel=0.01)
    assert all(r.trace.issue(o.id, k) == o.start + k * s.ii for o in s.ops for k in range(16))
    assert r.warnings == []


def test_jitter_is_deterministic_and_stalls_the_consumer() -> None:
    p, s = gemm_schedule()
    a = simulate(p, s, iterations=24, jitter=0.2, seed=7)
    b = simulate(p, s, iterations=24, jitter=0.2, seed=7)
    c = simulate(p, s, iterations=24, jitter=0.2, seed=8)
    assert a.trace == b.trace and a.stalls == b.stalls
    assert a.trace != c.trace
    # B's 2 slots have 2 x 1367 - 2391 = 343 cycles of slack, more than 20% of its 1351-cycle latency:
    # the loads keep their schedule and only the MMA waits for late tiles
    assert all(a.trace.issue("load_a", k) == 1367 * k for k in range(24))
    assert a.stalls[0] == {"dependence": 0, "unit": 0, "ring": 0, "handoff": 0}
    assert a.stalls[1]["dependence"] > 0 and a.stalls[1]["ring"] == 0
    assert 1367 <= a.achieved_ii < 1367 * 1.05
    # 30% (up to 405 cycles) exceeds that slack: the loads now wait for B's slots, and the TMA,
    # busy every cycle of II, never wins the time back
    d = simulate(p, s, iterations=24, jitter=0.3, seed=7)
    assert d.stalls[0]["ring"] > 0
    assert d.trace.issue("load_a", 23) > 1367 * 23


def test_too_few_iterations_is_reported() -> None:
    p, s = gemm_schedule()
    r = simulate(p, s, iterations=2)
    assert r.achieved_ii == 1367.0
    assert r.warnings == ["2 iterations do not reach the steady state of a 2-stage schedule; the achieved interval "
                          "is measured on prologue and epilogue"]
    with pytest.raises(ValueError):
        simulate(p, s, iterations=1)
