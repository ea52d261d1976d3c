"""bench/suite/heldout.py draws held-out random bodies and tabulates a change's effect on them: the set is a
pure function of its first seed, covers the suite's profiles and archs, never reuses a suite seed, and the
table counts proofs gained and lost against the base."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

from suite import heldout  # noqa: E402
from suite.cases import HALVES, manifest_path, read_manifest  # noqa: E402
from suite.generate import RANDOM_PROFILES  # noqa: E402


def test_a_set_is_a_pure_function_of_its_first_seed_and_covers_every_profile():
    first = heldout.bodies(17139, 32, 39)
    assert first == heldout.bodies(17139, 32, 39)
    assert [b[0] for b in first] == list(range(17139, 17171))
    assert {b[2] for b in first} == set(RANDOM_PROFILES)
    assert all(8 <= b[1] <= 39 for b in first)
    assert {b[3] for b in first if b[2] == "tmem"} == {"b200"}  # h100 has no tensor memory
    assert {b[3] for b in first if b[2] == "regs"} == {"h100", "b200"}
    assert heldout.bodies(17139, 32, 20) != first  # the size cap names the set too


def test_held_out_seeds_are_not_the_suites():
    if not all(manifest_path(h).is_file() for h in HALVES):
        pytest.skip("the suite's manifests are not in this checkout")
    suite = {c["source"]["seed"] for h in HALVES for c in read_manifest(h)["cases"]
             if c["source"]["kind"] == "random"}
    assert not suite & {b[0] for b in heldout.bodies(17101, 70, 39)}


def _row(seed, code, status, ii, bound):
    return {"seed": seed, "ops": 12, "profile": "regs", "arch": "h100", "code": code, "status": status, "ii": ii,
            "bound": bound}


def test_the_table_counts_proofs_gained_and_lost_and_marks_bodies_the_base_skipped():
    rows = [_row(1, "this", "optimal", 100, 100), _row(1, "abc", "feasible", 100, 99),
            _row(2, "this", "feasible", 200, 190), _row(2, "abc", "optimal", 200, 200),
            _row(3, "this", "optimal", 300, 300)]
    text = heldout.table(rows, "abc")
    assert "| 1 | regs | 12 | h100 | 100 optimal | 100 >= 99 |" in text
    assert "| 2 | regs | 12 | h100 | 200 >= 190 | 200 optimal |" in text
    assert "| 3 | regs | 12 | h100 | 300 optimal | as this checkout (not run) |" in text
    assert "this checkout: 2/3 proven optimal" in text
    assert "base abc ran on 2: proofs gained 1, lost 1" in text


def test_an_unknown_base_revision_is_one_line_and_exit_2(capsys, tmp_path):
    code = heldout.main(["--seed", "17139", "--count", "1", "--base", "no-such-revision-xyz",
                         "--out", str(tmp_path / "h.jsonl")])
    assert code == 2
    assert capsys.readouterr().err.strip() == "heldout: error: cannot read revision 'no-such-revision-xyz' with git archive"
    assert not (tmp_path / "h.jsonl").exists()


def test_bad_counts_exit_2():
    with pytest.raises(SystemExit) as err:
        heldout.main(["--seed", "17139", "--count", "0"])
    assert err.value.code == 2
