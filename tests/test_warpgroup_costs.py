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


def _busy(arch_name: str, **params) -> dict[str, int]:
    arch = _arch(arch_name)
    problem = build_problem(load_program("fa_fwd", arch, {"subtiles": 2, **params}), arch)
    return {op.name: op.busy_cycles for op in problem.ops}


def test_the_variant_charges_the_measured_warpgroup_rates():
    """fa_fwd on the h200 variant with the warpgroup rates: each softmax op costs its tile at the rate
    fa_consumer.cu measured beside wgmma."""
    # given
    arch = _arch("h200-warpgroup-rates")
    busy = _busy("h200-warpgroup-rates")
    # then
    assert busy["exp0"] == math.ceil(TILE / arch.rate("mufu_ops_per_clk_warpgroup"))
    assert busy["rowmax0"] == math.ceil(TILE / arch.rate("alu_reduce_ops_per_clk_warpgroup"))
    assert busy["rowsum0"] == math.ceil(TILE / arch.rate("fp32_reduce_ops_per_clk_warpgroup"))
    assert busy["rescale0"] == math.ceil(TILE / arch.rate("fp32_ops_per_clk_warpgroup"))
    assert busy["cast0"] == math.ceil(TILE / 2 / arch.rate("convert_ops_per_clk_warpgroup"))
    assert 900 < busy["exp0"] < 950 and 350 < busy["rowmax0"] < 400


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
