"""Baseline strategies on the same model: never better than the optimum, always valid."""

from __future__ import annotations

import pytest

from tests.conftest import problem
from twill.compare import compare, triton_split
from twill.solver import SolveOptions
from twill.validate import validate


@pytest.mark.parametrize("name, arch, expected", [
    ("toy", "h100", [2, 2, 3]),      # in-order issue without a pipeline: one iteration per 3 cycles (paper Fig. 1g)
    ("gemm", "h100", [1367, 1367, 2847]),
    ("gemm", "b200", [548, 548, None]),
])
def test_baselines_never_beat_the_optimum(name, arch, expected):
    """Fixed-split SWP and unpipelined WS give II >= the proven optimum, and their schedules validate."""
    p = problem(name, arch)
    results = compare(p, SolveOptions(time_limit=60))
    iis = [r.schedule.ii for r in results]
    assert iis[0] == expected[0] and results[0].schedule.status == "optimal"
    assert all(ii >= iis[0] for ii in iis)
    for want, got in zip(expected, iis, strict=True):
        if want is not None:
            assert got == want
    for r in results:
        assert validate(p, r.schedule) == []


def test_triton_split_puts_loads_on_a_producer():
    """Triton's split: the TMA loads in one group, every other op in the other."""
    split = dict(triton_split(problem("fa_fwd", "h100", subtiles=2)))
    assert {split["load_k"], split["load_v"]} == {0}
    assert {g for op, g in split.items() if not op.startswith("load")} == {1}
