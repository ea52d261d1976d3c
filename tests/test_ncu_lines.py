"""bench/gpu/ncu_lines.py on a recorded profile: every loop cycle lands on one line of the generated kernel, the
library reductions on the line that calls them (issue 21, session 69)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import ncu_lines  # noqa: E402

PROFILE = ROOT / "bench" / "results" / "h100" / "lines" / "ncu_fa_opt"


def _loops() -> list[dict[str, float]]:
    """Each loop's cycles per step by op name."""
    out = []
    for loop in ncu_lines.per_line(str(PROFILE), 2592):
        ops: dict[str, float] = {}
        for op, cycles, _ in loop.values():
            ops[op] = ops.get(op, 0.0) + cycles
        out.append(ops)
    return out


def test_each_consumer_loop_is_shared_out_over_its_ops():
    loops = _loops()
    assert len(loops) == 2  # fa_opt's two consumers
    for ops in loops:
        assert abs(sum(ops.values()) - 2592) < 1e-6  # every sample on a line
    names = set(loops[0]) | set(loops[1])
    assert {"rowmax0", "rowmax1", "rowsum0", "rowsum1", "exp0", "exp1"} <= names  # the inlined reductions found


def test_the_exp_runs_near_its_rate_alone():
    """The recorded figures: exp0 538 and exp1 604 cycles per step (587 alone, 919 beside wgmmas)."""
    exps = sorted(round(ops[e]) for ops in _loops() for e in ("exp0", "exp1") if e in ops)
    assert exps == [538, 604]


def test_the_cli_prints_each_loop(capsys):
    assert ncu_lines.main([str(PROFILE), "--step", "2592"]) == 0
    out = capsys.readouterr().out
    assert out.count("cycles per step") == 2 and re.search(r"\bexp0\s+538\b", out)


def test_op_names_come_from_the_generated_comments():
    assert ncu_lines.op_name("    exp0 = gl.exp2(s0)  # exp0 of iteration t: group 1, stage 0") == "exp0"
    assert ncu_lines.op_name("    s0 = warpgroup_mma(a, b)  # qk0: group 1, stage 0, offset 1176") == "qk0"
    assert ncu_lines.op_name("    o0, s0 = warpgroup_mma_wait(0)  # retire qk0: 0 later wgmma issue(s)") == "retire qk0"
