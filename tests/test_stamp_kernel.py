"""bench/gpu/stamp_kernel.py and stamp_report.py: clock stamps between a generated kernel's loop statements, and
the record of one device run read back (issue 21, session 70)."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import stamp_kernel  # noqa: E402
import stamp_report  # noqa: E402

KERNEL = ROOT / "bench" / "results" / "h100" / "war" / "fa_war.py"
RECORD = ROOT / "bench" / "results" / "h100" / "stamps" / "stamps_fa_war.json"


def test_every_loop_statement_of_each_consumer_gets_one_stamp_and_nothing_else_changes():
    source = KERNEL.read_text()
    stamped, points = stamp_kernel.stamp(source)
    assert set(points) == {1, 2}  # the two 4-warp consumers; the loader (group 0) is left alone
    lines = source.splitlines()
    for g, names in points.items():
        head = lines.index(next(ln for ln in lines if ln.startswith(f"def partition_g{g}(")))
        top = next(i for i in range(head, len(lines)) if lines[i].startswith("    for t in range("))
        body = [ln.strip() for ln in itertools.takewhile(lambda ln: ln.startswith("        "), lines[top + 1:])]
        assert names == ["loop top", *[ln for ln in body if not ln.startswith("#")]]
    assert stamped.count("# stamp ") == sum(len(p) for p in points.values())
    kept = [ln for ln in stamped.splitlines() if "stamp" not in ln and "st_" not in ln and "STAMPS" not in ln]
    assert kept == [ln for ln in source.splitlines() if "_kernel(" not in ln and "args = (" not in ln
                    and "_kernel[grid](" not in ln and not ln.startswith("def partition_g")]


def test_raising_budgets_touches_only_the_consumers():
    text = "    gl.warp_specialize([(a, args), (b, args)], [1, 4], [24, 192])  # x"
    assert stamp_kernel.raise_budgets(text, 240).startswith("    gl.warp_specialize([(a, args), (b, args)], [1, 4], "
                                                             "[24, 240])")


def test_the_recorded_war_kernel_spends_its_step_in_exp_and_retires_not_at_the_turn():
    rec, names, stamps = stamp_report.load(RECORD)
    assert rec["ok"] and rec["rel_l2"]["stamped"] <= 4e-3
    for g in stamps:
        rows = stamp_report.per_statement(names[g], stamps[g])
        assert sum(c for _, c, _ in rows) == pytest.approx(rec["stamped_cycles_per_step"], rel=0.01)
        row = {label: cycles for label, cycles, _ in rows}
        assert 700 < row[f"exp{g - 1}"] < 900
        assert row["turn wait (bar.sync)"] < 30  # with stamps in, no consumer waits at its turn
        assert row[f"retire qk{g - 1}"] > 250
