"""Issue 2: the IR, the arch models, the programs, the importer, the bounds and the CLI's front door."""

from __future__ import annotations

import pytest

from tests.conftest import problem, shared_graph
from twill.arch.registry import available_archs, get_arch
from twill.bounds import compute_bounds
from twill.errors import GraphError
from twill.frontend.programs import list_programs, load_program
from twill.ir import Edge, Issuer, LoopBody, Op, Use
from twill.problem import build_problem


def test_builtin_archs_have_sources():
    """h100, h200 and b200 are found, and every fact names its source."""
    names = {a.name for a in available_archs()}
    assert {"h100", "h200", "b200"} <= names
    for arch in available_archs():
        for key, fact in arch.all_facts().items():
            assert fact.source.strip(), key


def test_fa_forward_tensor_cost_matches_datasheet_arithmetic():
    """Two GEMMs of 128*128*128*2 FLOP at 4096 FLOP/clk/SM take 1024 cycles each on h100."""
    p = problem("fa_fwd", "h100")
    gemms = [op for op in p.ops if op.kind.startswith("mma")]
    assert [op.work("tc") for op in gemms] == [1024, 1024]
    b = compute_bounds(p)
    assert b.res_mii == 2048 and b.units[0].unit == "tc"


def test_fa_forward_on_b200_halves_tensor_time_and_mufu_binds():
    """On b200 the tensor cores are twice as fast, so MUFU becomes the tighter unit."""
    p = problem("fa_fwd", "b200")
    assert sum(op.work("tc") for op in p.ops) == 1024
    b = compute_bounds(p)
    assert b.units[0].unit == "mufu" and b.units[0].ii == 1032


def test_toy_bounds():
    """The paper's toy loop: two TC ops on one TC give ResMII 2; the accumulator gives RecMII 1."""
    b = compute_bounds(problem("toy", "h100"))
    assert (b.res_mii, b.rec_mii, b.mii) == (2, 1, 2)


@pytest.mark.parametrize("name, rec_mii, ops, edges", [
    ("fa_fwd", 1325, 29, 37), ("fa_fwd_subtiled", 1033, 53, 71), ("fa_bwd", 1166, 36, 43)])
def test_shared_graph_bounds(name, rec_mii, ops, edges, b200):
    """The imported Triton graphs keep their node ids and give the README's bounds."""
    body = load_program(str(shared_graph(name)), b200)
    assert (len(body.ops), len(body.edges)) == (ops, edges)
    assert body.ops[0].name == str(2) if name == "fa_fwd" else body.ops[0].name.isdigit()
    b = compute_bounds(build_problem(body, b200))
    assert b.rec_mii == rec_mii
    if name == "fa_bwd":
        assert b.res_mii == 1280 and b.units[0].unit == "tc"


def test_shared_graph_fields_are_honoured(b200):
    """Reservation tables, footprints, flags and blocking edges survive the import."""
    body = load_program(str(shared_graph("fa_fwd")), b200)
    tma = body.op("2")
    assert tma.variable_latency and tma.streaming and tma.smem_bytes == 16384 and tma.is_async
    assert tma.uses == (Use(unit="tma", offset=0, length=96, amount=1),) and tma.latency == 556
    mma = body.op("7")
    assert mma.tmem_cols == 64 and mma.uses[0].unit == "tc" and mma.uses[0].length == 256
    assert body.op("8").min_warps == 4 and body.op("8").regs == 8192 and body.op("8").handoff_cycles == 30
    assert any(e.blocking and e.src == "7" and e.dst == "8" for e in body.edges)


def test_every_program_builds_on_every_arch():
    """Programs ask the arch for costs, so each one runs on every arch."""
    for arch in available_archs():
        for info in list_programs():
            body = load_program(info.name, arch)
            assert body.ops, (info.name, arch.name)


def test_zero_distance_cycle_names_the_cycle():
    """A dependence cycle whose total distance is 0 is refused, and the error carries the cycle."""
    ops = (Op(name="a"), Op(name="b"))
    with pytest.raises(GraphError, match="total distance 0") as err:
        LoopBody("bad", ops, (Edge(src="a", dst="b", latency=1), Edge(src="b", dst="a", latency=1)))
    assert set(err.value.cycle) == {"a", "b"}


def test_recurrence_reports_its_ops():
    """RecMII is the exact maximum cycle ratio, reported with the critical ops."""
    ops = (Op(name="a", latency=5), Op(name="b", latency=3), Op(name="c", latency=1))
    edges = (Edge(src="a", dst="b", latency=5), Edge(src="b", dst="a", latency=3, distance=2),
             Edge(src="c", dst="c", latency=7, distance=1))
    arch = get_arch("h100")
    b = compute_bounds(build_problem(LoopBody("r", ops, edges), arch))
    assert b.rec_mii == 7 and b.recurrence.ops == ("c",)


def test_a_warp_cap_below_the_need_is_refused():
    """``max_warps`` bounds the issuing group from above, so it cannot sit below ``min_warps``."""
    with pytest.raises(GraphError, match="max_warps 2 is below the 4 warps it needs"):
        Op(name="mma", issuer=Issuer.WARPGROUP, max_warps=2)
    assert Op(name="mma", issuer=Issuer.WARPGROUP, max_warps=4).warp_cap(16) == 4
    assert Op(name="load").warp_cap(16) == 16
