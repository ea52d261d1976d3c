"""The z3 backend: each constraint family on a graph it alone decides, real programs, time limits, CLI.

Every family test builds a 2-3 op body whose optimal II that family raises, and checks that z3,
CP-SAT and the exhaustive search (from II = 1, its verdict the validator's) all find that II.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.conftest import problem
from twill.cli import main
from twill.errors import InfeasibleError
from twill.ir import Carrier, Edge, Issuer, LoopBody, Op, Use
from twill.problem import Problem, build_problem
from twill.random_loops import tiny_arch
from twill.solver import SolveOptions, solve, z3_backend
from twill.solver.exhaustive import solve_exhaustive
from twill.solver.z3_backend import solve_z3
from twill.validate import validate

ARCH = tiny_arch(0)  # 5 warps per CTA, 544 registers, 192 B of SMEM, 8 TMEM columns


def _problem(ops, edges) -> Problem:
    return build_problem(LoopBody("t", tuple(ops), tuple(edges)), ARCH)


def _sync(name, unit, length, *, regs=0, issuer=Issuer.WARP, latency=None):
    return Op(name=name, kind="sync", uses=(Use(unit=unit, length=length),), latency=latency or length,
              issuer=issuer, regs=regs)


def _optimal_ii(p: Problem, options: SolveOptions) -> int:
    """The II z3 proves, after checking that CP-SAT and exhaustive search prove the same."""
    z = solve_z3(p, options)
    c = solve(p, replace(options, workers=1))
    e = solve_exhaustive(p, options, ii_from=1)
    for s in (z, c, e):
        assert s.status == "optimal" and validate(p, s) == []
    assert z.ii == c.ii == e.ii
    return z.ii


def test_the_toy_loop_matches_the_paper_and_cpsat():
    """The paper's toy loop: II = 2 on one warp group, with CP-SAT's objective values."""
    p = problem("toy", "h100")
    z = solve_z3(p, SolveOptions())
    c = solve(p, SolveOptions(workers=1))
    assert (z.ii, z.status, len(z.groups)) == (2, "optimal", 1) and validate(p, z) == []
    assert z.objective_values == c.objective_values


def test_fa_forward_swp_only_is_tensor_core_bound():
    """Pure modulo scheduling of FlashAttention forward on h100: the tensor-core bound, proven."""
    p = problem("fa_fwd", "h100")
    z = solve_z3(p, SolveOptions(swp_only=True, objective=("ii",)))
    assert (z.ii, z.status) == (2048, "optimal") and validate(p, z) == []


def test_gemm_joint_has_a_producer_and_a_consumer():
    """The GEMM main loop, joint problem: the same optimal II as CP-SAT, a load group and an MMA group."""
    p = problem("gemm", "h100")
    z = solve_z3(p, SolveOptions(objective=("ii", "groups")))
    c = solve(p, SolveOptions(time_limit=60))
    assert z.status == c.status == "optimal" and z.ii == c.ii and validate(p, z) == []
    assert sorted(g.role for g in z.groups) == ["load", "mma"]


def test_a_gap_in_a_reservation_table_fragments_the_unit():
    """Unit capacity: op a holds tc at [0, 2) and [3, 5), op b needs tc for 2 cycles. ResMII is 6,
    but at II 6 the free cycles 2 and 5 are not adjacent, so II is 7."""
    a = Op(name="a", uses=(Use(unit="tc", length=2), Use(unit="tc", offset=3, length=2)), latency=5)
    b = _sync("b", "tc", 2)
    assert _optimal_ii(_problem([a, b], []), SolveOptions(swp_only=True)) == 7


def test_a_segment_longer_than_ii_wraps_around():
    """Unit capacity, wrap-around: on the 2-instance alu, a 7-cycle segment is a full turn plus an
    arc; with a 3-cycle and a 1-cycle segment beside it the total 11 gives ResMII 6, met exactly
    only because the arcs can be laid out disjointly on the circle."""
    ops = [_sync("a", "alu", 7), _sync("b", "alu", 3), _sync("c", "alu", 1)]
    assert _optimal_ii(_problem(ops, []), SolveOptions(swp_only=True)) == 6
    # both instances for 4 cycles: at II 6 (ResMII) the 2 cycles left are too few for a 3-cycle op
    wide = Op(name="w", uses=(Use(unit="alu", length=4, amount=2),), latency=4)
    assert _optimal_ii(_problem([wide, _sync("b", "alu", 3)], []), SolveOptions(swp_only=True)) == 7


def test_a_recurrence_bounds_ii():
    """Dependences: a loop-carried chain a -> b -> a of latency 4 + 3 over distance 1 forces II 7."""
    ops = [_sync("a", "alu", 1, latency=4), _sync("b", "tc", 1, latency=3)]
    edges = [Edge(src="a", dst="b", latency=4), Edge(src="b", dst="a", latency=3, distance=1)]
    assert _optimal_ii(_problem(ops, edges), SolveOptions(swp_only=True)) == 7


def test_in_order_issue_serialises_one_group():
    """In-order issue: two 3-cycle synchronous warpgroup ops on different units overlap freely when
    software-pipelined, but 5 warps hold only one warpgroup, which issues them one after the other."""
    ops = [_sync("a", "alu", 3, issuer=Issuer.WARPGROUP), _sync("b", "tc", 3, issuer=Issuer.WARPGROUP)]
    p = _problem(ops, [])
    assert _optimal_ii(p, SolveOptions(swp_only=True)) == 3
    assert _optimal_ii(p, SolveOptions()) == 6


def test_variable_latency_isolation_needs_its_own_group():
    """Variable-latency isolation: with one warp in the CTA a load and a synchronous op cannot sit
    in separate groups, so no II exists; without the isolation rule one group issues both, and
    its holds (1 + 2 cycles) make II 3."""
    load = Op(name="load", kind="load", uses=(Use(unit="tma", length=2),), latency=3, is_async=True,
              issuer=Issuer.THREAD, variable_latency=True, streaming=True)
    p = _problem([load, _sync("s", "alu", 2)], [Edge(src="load", dst="s", latency=3, carrier=Carrier.SMEM)])
    one_warp = SolveOptions(max_warps=1)
    for backend in (solve_z3, solve_exhaustive):
        with pytest.raises(InfeasibleError, match="no schedule exists"):
            backend(p, one_warp)
    assert _optimal_ii(p, SolveOptions(max_warps=1, isolate_variable_latency=False)) == 3


def test_register_budgets_raise_ii():
    """Registers: a 200-word result read 8 cycles after it is made needs two copies below II 8,
    and 400 words exceed the 384 that a 4-warp group can hold at 4 registers per thread (the
    reader emits no instructions, so in-order issue does not interfere)."""
    ops = [_sync("a", "alu", 1, regs=200), Op(name="b")]
    p = _problem(ops, [Edge(src="a", dst="b", latency=8)])
    assert _optimal_ii(p, SolveOptions(swp_only=True)) == 1
    assert _optimal_ii(p, SolveOptions()) == 8


def test_smem_ring_slots_raise_ii():
    """SMEM: a 100-byte load buffer read from cycle 6 to 8 (a synchronous reader reads shared
    memory for its busy span) needs ceil(8 / II) slots, and 192 bytes hold one, so II is 8."""
    load = Op(name="load", kind="load", uses=(Use(unit="tma", length=1),), latency=1, is_async=True,
              issuer=Issuer.THREAD, smem_bytes=100, variable_latency=True, streaming=True)
    reader = _sync("s", "alu", 2)
    p = _problem([load, reader], [Edge(src="load", dst="s", latency=6, carrier=Carrier.SMEM)])
    assert _optimal_ii(p, SolveOptions(swp_only=True)) == 1
    assert _optimal_ii(p, SolveOptions()) == 8


def test_tmem_columns_raise_ii():
    """TMEM: a 6-column tile alive 6 cycles (5 until its reader issues, 1 while it reads) cannot
    overlap its next copy in 8 columns, so II is 6."""
    mma = Op(name="mma", kind="mma", uses=(Use(unit="tc", length=1),), latency=1, is_async=True,
             issuer=Issuer.THREAD, tmem_cols=6)
    p = _problem([mma, _sync("s", "alu", 1)], [Edge(src="mma", dst="s", latency=5, carrier=Carrier.TMEM)])
    assert _optimal_ii(p, SolveOptions(swp_only=True)) == 1
    assert _optimal_ii(p, SolveOptions()) == 6


def test_a_register_handoff_between_groups_costs_cycles_and_smem():
    """Hand-off: when in-order issue splits a chain over two groups, the register value crossing
    them pays the hand-off cost; all three backends agree on the II that results."""
    ops = [_sync("a", "alu", 3, regs=16, issuer=Issuer.WARPGROUP), _sync("b", "tc", 3, issuer=Issuer.WARP),
           _sync("c", "alu", 3, issuer=Issuer.WARP)]
    edges = [Edge(src="a", dst="b", latency=3), Edge(src="b", dst="c", latency=3),
             Edge(src="c", dst="a", latency=3, distance=2)]
    p = _problem(ops, edges)
    assert _optimal_ii(p, SolveOptions()) > _optimal_ii(p, SolveOptions(swp_only=True))


def test_strategy_restrictions_match_cpsat():
    """The baselines' restrictions (Triton's fixed split, no cross-iteration pipelining) give
    the same optimal II in z3, CP-SAT and exhaustive search."""
    from twill.solver.strategies import producer_consumer_split

    load = Op(name="load", kind="load", uses=(Use(unit="tma", length=2),), latency=4, is_async=True,
              issuer=Issuer.THREAD, variable_latency=True, streaming=True)
    ops = [load, _sync("a", "alu", 2, regs=32), _sync("b", "tc", 3)]
    edges = [Edge(src="load", dst="a", latency=4, carrier=Carrier.SMEM), Edge(src="a", dst="b", latency=2),
             Edge(src="b", dst="b", latency=3, distance=1)]
    p = _problem(ops, edges)
    free = _optimal_ii(p, SolveOptions())
    assert _optimal_ii(p, SolveOptions(fixed_groups=producer_consumer_split(p))) >= free
    assert _optimal_ii(p, SolveOptions(single_stage=True)) > free


def test_a_time_limit_gives_feasible_never_optimal(monkeypatch):
    """When a check runs out of time the first undecided II is the proven bound and the result is
    only "feasible"; with no schedule at all before the limit, InfeasibleError says so."""
    p = problem("toy", "h100")
    real = z3_backend._check
    calls = []

    def first_undecided(v, seconds):
        calls.append(v.ii)
        return z3_backend.z3.unknown if len(calls) == 1 else real(v, seconds)

    monkeypatch.setattr(z3_backend, "_check", first_undecided)
    s = solve_z3(p, SolveOptions(objective=("ii",)))
    assert (s.status, s.ii, s.ii_lower_bound) == ("feasible", 3, 2) and "time limit" in s.proof
    assert validate(p, s) == []
    monkeypatch.setattr(z3_backend, "_check", lambda v, seconds: z3_backend.z3.unknown)
    with pytest.raises(InfeasibleError, match="no schedule within"):
        solve_z3(p, SolveOptions(time_limit=0.5))


def test_the_cli_solves_with_z3(capsys):
    """``twill solve --solver z3`` prints the same summary and passes the validator."""
    assert main(["solve", "toy", "--arch", "h100", "--solver", "z3", "-q"]) == 0
    out = capsys.readouterr().out
    assert "II = 2 cycles (optimal)" in out and "validator: the schedule passes every check" in out
