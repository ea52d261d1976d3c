"""Baseline strategies beside the optimum: never better than it, always valid, one table."""

from __future__ import annotations

import pytest

from tests.conftest import problem
from twill.cli import main
from twill.compare import HEADER, compare, swp_reference, table, triton_split
from twill.solver import SolveOptions, lower_bound
from twill.validate import validate


@pytest.mark.parametrize("name, arch", [("toy", "h100"), ("gemm", "h100"), ("gemm", "b200")])
def test_baselines_never_beat_the_optimum(name, arch):
    """Every baseline, the heuristic included, gives II >= the proven optimum, and every schedule validates.
    The toy is the paper's (II 2; 3 in order without a pipeline, Fig. 1g); GEMM streams its tiles
    at the optimum, which the fixed split also reaches and the heuristic within 1% on b200 (its
    as-early-as-possible loads need a fourth slot in both rings at 548, which the C tile's SMEM
    staging leaves no room for: 552 with rings of 3), while without a pipeline each iteration's
    loads, MMA and hand-offs run back to back. On b200 the optimum is the static bound; on h100 the
    rings the loaded latency's tail asks for do not fit beside the C tile below 1428, above the feed's
    1160 (tests/test_tma_sharing.py), and the heuristic, placing loads as early as it can, ends 9% over
    it at 1557."""
    p = problem(name, arch)
    results = compare(p, SolveOptions(time_limit=60, workers=1))
    iis = [r.schedule.ii for r in results]
    assert results[0].schedule.status == "optimal"
    assert [r.heuristic for r in results] == [False, True, False, False]
    assert all(ii >= iis[0] for ii in iis)
    if name == "toy":
        assert iis == [2, 2, 2, 3]
    else:
        optimum = {"h100": 1428, "b200": lower_bound(p, SolveOptions())}[arch]
        assert iis[0] == iis[2] == optimum and iis[3] > iis[0]
        assert iis[1] == {"h100": 1557, "b200": 552}[arch]
    for r in results:
        assert validate(p, r.schedule) == []


def test_triton_split_holds_a_tile_only_where_its_warpgroups_hold_the_rows():
    """Triton's split gives one consumer group everything but the loads. On one 128-row FA tile
    (h100) that group is 8 warps, one warpgroup per 64 accumulator rows, and Rau's IMS under it is
    valid and above the bound. With 2 sub-tiles of 64 rows each wgmma keeps its accumulator in
    the warpgroup that issues it (``Op.max_warps`` 4), so the one consumer is a single warpgroup
    holding both sub-tiles: no II gives it room (41344 live words > 4 x (248 - 24) x 32 = 28672)."""
    from twill.compare import _heuristic
    from twill.solver.ims import ims_triton_split

    p = problem("fa_fwd", "h100")
    row = _heuristic("ims", ims_triton_split(p))
    assert [g.warps for g in row.schedule.groups] == [1, 8]
    assert row.schedule.ii >= lower_bound(p, SolveOptions()) == 2048 and validate(p, row.schedule) == []
    result = ims_triton_split(problem("fa_fwd", "h100", subtiles=2))
    assert result.schedule is None
    assert result.attempts[-1][1] == "group 1 needs 41344 live register words, more than any legal group holds"


def test_swp_reference_rows_agree_on_the_toy():
    """Warps ignored, IMS and CP-SAT both reach the toy's II 2; the CP-SAT one is proven."""
    ims, exact = swp_reference(problem("toy", "h100"), SolveOptions(workers=1))
    assert ims.schedule.ii == exact.schedule.ii == 2 and exact.schedule.status == "optimal"
    assert ims.heuristic and not exact.heuristic


def test_table_marks_an_unproven_joint_row():
    """When the joint row is only feasible, the note says the percentages are relative to its II."""
    from dataclasses import replace

    p = problem("toy", "h100")
    results = compare(p, SolveOptions(workers=1))
    unproven = replace(results[0], schedule=replace(results[0].schedule, status="feasible", ii_lower_bound=1))
    rows, notes = table(p, [unproven, *results[1:]])
    assert rows[0][3] == "feasible" and "not proven optimal" in notes[0]
    rows, notes = table(p, [replace(results[0], schedule=None, note="time limit"), *results[1:]])
    assert rows[0][1] == "-" and rows[1][2] == "<= 100.0%" and "upper bounds" in notes[0]


def test_compare_command_prints_one_table(capsys):
    """`twill compare` prints the header, the optimum's row first, one row per strategy, and notes."""
    assert main(["compare", "toy", "--arch", "h100", "--workers", "1", "--time-limit", "30"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split("  ")[0] == HEADER[0] and "throughput vs optimum" in lines[1]
    assert lines[3].startswith("twill (joint optimum)") and "100.0%" in lines[3]
    assert lines[4].startswith("Rau IMS") and "heuristic" in lines[4]
    assert any("warps ignored" in line and "Rau IMS II 2" in line for line in lines)


def test_triton_split_puts_loads_on_a_producer():
    """Triton's split: the TMA loads in one group, every other op in the other."""
    split = dict(triton_split(problem("fa_fwd", "h100", subtiles=2)))
    assert {split["load_k"], split["load_v"]} == {0}
    assert {g for op, g in split.items() if not op.startswith("load")} == {1}


def test_a_row_below_a_proven_optimum_is_an_internal_error():
    """If a valid row ever beat a proven optimum, the solver or the validator would be wrong:
    compare refuses to print such a table."""
    from dataclasses import replace

    from twill.compare import _cross_check
    from twill.errors import TwillError

    p = problem("toy", "h100")
    results = compare(p, SolveOptions(workers=1))
    claimed = replace(results[0].schedule, ii=3, ii_lower_bound=3)  # a (wrong) claim: II 3 is optimal
    with pytest.raises(TwillError, match="internal error: .* found a valid II 2 below the exact search's proven bound 3"):
        _cross_check(p, results, claimed)
