"""Register work issued by one warpgroup beside the tensor cores (issue 21): the cost model charges an arch's
measured warpgroup rates where it has them (bench/codegen/h200_warpgroup_rates.toml), and the per-SM pipe rates
elsewhere (archs/h100, h200, b200 unchanged)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from twill.arch.model import Fact
from twill.arch.registry import get_arch
from twill.arch.toml import load_arch_toml
from twill.frontend.programs import load_program
from twill.problem import build_problem

TILE = 64 * 128  # elements of one consumer's S tile
VARIANT = Path(__file__).resolve().parents[1] / "bench" / "codegen" / "h200_warpgroup_rates.toml"


def _arch(name: str):
    return load_arch_toml(VARIANT, origin="file") if name == "h200-warpgroup-rates" else get_arch(name)


def _ops(arch_name: str, **params):
    arch = _arch(arch_name)
    problem = build_problem(load_program("fa_fwd", arch, {"subtiles": 2, **params}), arch)
    return {op.name: op for op in problem.ops}


def _busy(arch_name: str, **params) -> dict[str, int]:
    return {name: op.busy_cycles for name, op in _ops(arch_name, **params).items()}


def test_the_variant_holds_the_group_at_the_measured_warpgroup_rates():
    """fa_fwd on the h200 variant with the warpgroup rates: each softmax op holds its warpgroup for its tile at
    the rate fa_consumer.cu measured beside wgmma, its result follows that, and its unit stays busy only at the
    SM's pipe rate (another warpgroup's work shares the pipe meanwhile)."""
    # given
    arch = _arch("h200-warpgroup-rates")
    ops = _ops("h200-warpgroup-rates")
    # then
    for name, key, pipe, work in (("exp0", "mufu_ops_per_clk_warpgroup", "mufu_ops_per_clk", TILE),
                                  ("rowmax0", "alu_reduce_ops_per_clk_warpgroup", "alu_ops_per_clk", TILE),
                                  ("rowsum0", "fp32_reduce_ops_per_clk_warpgroup", "fp32_ops_per_clk", TILE),
                                  ("rescale0", "fp32_ops_per_clk_warpgroup", "fp32_ops_per_clk", TILE),
                                  ("cast0", "convert_ops_per_clk_warpgroup", "convert_ops_per_clk", TILE // 2)):
        op = ops[name]
        assert op.sync_hold == op.hold_cycles == math.ceil(work / arch.rate(key)), name
        assert max(u.length for u in op.uses) == math.ceil(work / arch.rate(pipe)) < op.sync_hold, name
        assert op.latency >= op.sync_hold
    assert 900 < ops["exp0"].sync_hold < 950 and 350 < ops["rowmax0"].sync_hold < 400
    assert [(u.unit, u.length) for u in ops["exp0"].uses] == [("mufu", 512), ("fp32", 71)]


def test_two_warpgroups_share_a_pipe_that_neither_fills():
    """fa_consumer.cu ran the exp2 step in two warpgroups at once: 1140 cycles each, where one beside the
    tensor cores takes 918 and the serialised pair would take 1836. On the variant the MUFU is reserved at its
    pipe rate (512 per tile), so both exps fit in 1140 cycles of the unit; each group is still held 919."""
    exp0 = _ops("h200-warpgroup-rates")["exp0"]
    mufu = next(u.length for u in exp0.uses if u.unit == "mufu")
    assert 2 * mufu <= 1140 < 2 * exp0.hold_cycles
    for name in ("h100", "h200"):
        assert all(op.sync_hold == 0 for op in _ops(name).values())


@pytest.mark.parametrize("name", ["h100", "h200"])
def test_archs_without_warpgroup_rates_keep_the_pipe_rates(name):
    """h100 and h200 have no warpgroup facts (h200's are in the variant only, docs/benchmarks.md says why): a row
    reduction costs what the elementwise op on its unit costs, as before."""
    # given
    arch = get_arch(name)
    busy = _busy(name)
    # then
    assert not any(k.endswith("_warpgroup") for k in arch.rates)
    assert busy["rowmax0"] == arch.cost.alu(TILE).busy == math.ceil(TILE / arch.rate("alu_ops_per_clk"))
    assert busy["rowsum0"] == arch.cost.fp32(TILE).busy == math.ceil(TILE / arch.rate("fp32_ops_per_clk"))
    assert busy["exp0"] == math.ceil(TILE / arch.rate("mufu_ops_per_clk"))


def test_a_warpgroup_rate_above_the_pipe_rate_is_not_charged():
    """The lower of the two rates applies: a warpgroup cannot issue faster than the SM's pipe."""
    # given
    h200 = _arch("h200-warpgroup-rates")
    fast = replace(h200, rates={**h200.rates, "mufu_ops_per_clk_warpgroup": Fact(1000.0, "test"),
                                "alu_reduce_ops_per_clk_warpgroup": Fact(1000.0, "test")})
    # then
    assert fast.cost.exp(TILE).busy == math.ceil(TILE / h200.rate("mufu_ops_per_clk"))
    assert fast.cost.reduce(TILE, "alu").busy == math.ceil(TILE / h200.rate("alu_ops_per_clk"))


def test_the_variant_charges_the_measured_wgmma_issue():
    """Each wgmma holds its warpgroup for the measured issue cost on the variant (latencies.mma_issue, 24 cycles,
    fa_consumer.cu's own-group records), and one cycle where the arch has no such fact: a consumer's P.V and
    Q.K^T (8 wgmma m64n128k16 each) hold it 192 cycles, not 8, while their tensor-core work is unchanged."""
    # given
    variant, h200 = _arch("h200-warpgroup-rates"), get_arch("h200")
    ops = {a.name: {op.name: op for op in build_problem(load_program("fa_fwd", a, {"subtiles": 2}), a).ops}
           for a in (variant, h200)}
    # then
    assert variant.latency("mma_issue") == 24 and "mma_issue" not in h200.latencies
    for name in ("qk0", "pv0"):
        assert ops[variant.name][name].issue_cycles == 8 * 24
        assert ops[h200.name][name].issue_cycles == 8
        assert ops[variant.name][name].busy_cycles == ops[h200.name][name].busy_cycles


def test_sync_hold_is_checked_and_survives_a_body_file(tmp_path):
    """``Op.sync_hold`` is a synchronous op's issue span: refused on an asynchronous op and beyond the op's
    latency; written to a twill.body/1 file only where set, and read back."""
    from twill.body_json import read_body, write_body
    from twill.errors import GraphError
    from twill.ir import Issuer, Op, Use

    with pytest.raises(GraphError, match="asynchronous op's is issue_cycles"):
        Op(name="a", uses=(Use(unit="tc", length=4),), latency=8, is_async=True, sync_hold=6)
    with pytest.raises(GraphError, match="holds its group for 9 cycles but its latency is 8"):
        Op(name="s", uses=(Use(unit="fp32", length=4),), latency=8, sync_hold=9)
    op = Op(name="s", uses=(Use(unit="fp32", length=4),), latency=8, sync_hold=6, issuer=Issuer.WARPGROUP)
    assert op.hold_cycles == 6 and op.busy_cycles == 4
    arch = _arch("h200-warpgroup-rates")
    body = load_program("fa_fwd", arch, {"subtiles": 2})
    write_body(body, tmp_path / "b.json")
    again = {o.name: o for o in read_body(tmp_path / "b.json").ops}
    assert again["exp0"].sync_hold == 919 and again["exp0"] == {o.name: o for o in body.ops}["exp0"]
    plain = tmp_path / "h100.json"
    write_body(load_program("fa_fwd", get_arch("h100"), {"subtiles": 2}), plain)
    assert "sync_hold" not in plain.read_text()
