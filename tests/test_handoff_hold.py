"""Issue 21: a register hand-off's SMEM store and load occupy the producer's and the reader's warp
groups (design.md §2.7), at the arch's shared-memory rate, wherever the edge crosses groups; every
backend, the validator and the simulator charge it alike, and archs without the rate charge nothing."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import pytest

from twill.arch.model import Arch
from twill.arch.registry import get_arch
from twill.frontend.programs import load_program
from twill.ir import Carrier, Edge, Issuer, LoopBody, Op, Use
from twill.problem import Problem, build_problem
from twill.random_loops import tiny_arch
from twill.schedule import Schedule
from twill.sim.gpu import simulate
from twill.solver import SolveOptions, solve
from twill.solver.exhaustive import solve_exhaustive
from twill.solver.z3_backend import solve_z3
from twill.validate import validate

RATE = "smem_bytes_per_clk_beside_wgmma"
HANDOFF_SCHEDULE = Path(__file__).resolve().parents[1] / "bench" / "results" / "h200" / "handoff" / "fa_handoff.json"
WARPGROUP_RATES = Path(__file__).resolve().parents[1] / "bench" / "codegen" / "h200_warpgroup_rates.toml"


def _without_rate(arch: Arch) -> Arch:
    return replace(arch, rates=MappingProxyType({k: f for k, f in arch.rates.items() if k != RATE}))


def _copy_body(words: int, arch: Arch) -> Problem:
    """a (3 ALU cycles) hands ``words`` register words to b (3 ALU cycles); nothing else binds."""
    def sync(name: str, regs: int = 0) -> Op:
        return Op(name=name, kind="sync", uses=(Use(unit="alu", length=3),), latency=3, issuer=Issuer.WARP, regs=regs)
    body = LoopBody("copy", (sync("a", words), sync("b")), (Edge(src="a", dst="b", latency=3, carrier=Carrier.REGISTERS),))
    return build_problem(body, arch)


def _agreed(p: Problem) -> Schedule:
    """CP-SAT's optimum, after checking that z3 and exhaustive search prove the same II and that
    every one of the three passes the validator."""
    options = SolveOptions(workers=1)
    c, z, e = solve(p, options), solve_z3(p, options), solve_exhaustive(p, options, ii_from=1)
    for s in (c, z, e):
        assert s.status == "optimal" and validate(p, s) == []
    assert c.ii == z.ii == e.ii
    return c


def test_the_copy_is_charged_at_the_smem_rate_where_the_edge_crosses():
    """On the H200 (63.1 B/clk beside the wgmmas) FA forward's P (16 KiB fp16) costs its producer
    ceil(16384 / 63.1) = 260 cycles and P·V, a wgmma reading its slot in place, nothing; exp's fp32
    result (32 KiB) costs both ends 520. The H100, the same SM, measured the same rate (bench/results/h100/
    issue21/smem.json) and charges the same; the B200 model, which records no rate, nothing."""
    h200 = get_arch("h200")
    p = build_problem(load_program("fa_fwd", h200, {"subtiles": 2}), h200)
    edge = {(e.src, e.dst): e for e in p.edges}
    assert p.handoff_holds(edge["cast0", "pv0"]) == (260, 0)
    assert p.handoff_holds(edge["exp0", "cast0"]) == (520, 520)
    apart = {op.name: 0 for op in p.ops} | {"pv0": 1}
    assert p.hold_in("cast0", apart) == p.hold("cast0") + 260
    assert p.hold_in("cast0", {op.name: 0 for op in p.ops}) == p.hold("cast0")
    h100 = get_arch("h100")
    q = build_problem(load_program("fa_fwd", h100, {"subtiles": 2}), h100)
    assert {(e.src, e.dst): q.handoff_holds(e) for e in q.edges} == {(e.src, e.dst): p.handoff_holds(e) for e in p.edges}
    b200 = get_arch("b200")
    r = build_problem(load_program("fa_fwd", b200, {"subtiles": 2}), b200)
    assert all(r.handoff_holds(e) == (0, 0) for e in r.edges)


@pytest.mark.parametrize(("words", "ii", "groups"), [(32, 5, 2), (64, 6, 1)])
def test_the_copy_decides_the_grouping(words, ii, groups):
    """At 64 B/clk a 32-word (128 B) hand-off costs each end 2 cycles: two groups at II 3 + 2 = 5
    beat one group at 3 + 3 = 6; a 64-word one costs 4, and one group at 6 wins. CP-SAT, z3 and
    exhaustive search agree; without the rate the two groups run at II 3."""
    arch = tiny_arch(1)
    assert arch.rate(RATE) == 64
    s = _agreed(_copy_body(words, arch))
    assert (s.ii, len(s.groups)) == (ii, groups)
    free = _agreed(_copy_body(words, _without_rate(arch)))
    assert (free.ii, len(free.groups)) == (3, 2)


def test_the_validator_and_the_simulator_charge_the_copy():
    """The warpgroup-rate variant's hand-off schedule (II 2445, found before the copy was charged)
    now overlaps, in each softmax group, the cast's store of P (135 + 260 cycles) with the row sum;
    without the rate it is valid again. The simulator holds the group for the same 395 cycles."""
    arch = get_arch(str(WARPGROUP_RATES))
    s = Schedule.read(HANDOFF_SCHEDULE)
    p = build_problem(s.body, arch)
    found = validate(p, s)
    assert sorted((v.rule, v.ops) for v in found) == [("in_order_issue", ("rowsum0", "cast0")),
                                                     ("in_order_issue", ("rowsum1", "cast1"))]
    assert validate(build_problem(s.body, _without_rate(arch)), s) == []
    groups = {o.id: o.group for o in s.ops}
    assert p.hold_in("cast0", groups) == 395
    run = simulate(p, s, iterations=2)
    assert {sp.cycles for sp in run.trace.spans if sp.op == "cast0" and sp.kind == "hold"} == {395}
