"""The generalization suite (bench/suite/) is frozen: every case's loop body still hashes to what
its manifest recorded, so a change to a random profile, a program, a cost model or an arch that
would silently alter a measured case fails here, before bench/suite/run.py refuses to run it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

from suite.cases import HALVES, CaseUnavailable, body_hash, build_case, manifest_path, read_manifest  # noqa: E402


@pytest.mark.parametrize("half", HALVES)
def test_every_case_still_has_its_frozen_body(half):
    if not manifest_path(half).is_file():
        pytest.skip(f"{manifest_path(half)} is not in this checkout")
    changed, built = [], 0
    for case in read_manifest(half)["cases"]:
        try:
            problem = build_case(case)
        except CaseUnavailable:
            continue  # a shared graph, absent without ../shared
        built += 1
        if body_hash(problem.body) != case["sha256"]:
            changed.append(case["id"])
    assert built >= 40
    assert not changed, f"cases whose bodies changed after the suite was frozen: {', '.join(changed)}"


def test_the_halves_share_no_case_and_each_has_at_least_40():
    if not all(manifest_path(h).is_file() for h in HALVES):
        pytest.skip("the suite's manifests are not in this checkout")
    tuned, fresh = (read_manifest(h)["cases"] for h in HALVES)
    assert len(tuned) >= 40 and len(fresh) >= 40
    assert not {c["sha256"] for c in tuned} & {c["sha256"] for c in fresh}
    assert not {c["id"] for c in tuned} & {c["id"] for c in fresh}


def _tree(root: Path, solver_text: str) -> Path:
    (root / "twill" / "solver").mkdir(parents=True)
    (root / "archs").mkdir()
    (root / "twill" / "solver" / "search.py").write_text(solver_text)
    (root / "archs" / "h100.toml").write_text("[limits]\n")
    (root / "README.md").write_text("not code\n")
    return root


def test_a_rows_code_version_follows_the_solver_and_arch_files_not_the_checkout(tmp_path):
    from suite.cases import code_version

    a = code_version(_tree(tmp_path / "a", "II = 1\n"))
    assert a == code_version(_tree(tmp_path / "b", "II = 1\n"))  # the same tree elsewhere (a worktree, a clone)
    (tmp_path / "b" / "README.md").write_text("docs change\n")
    assert code_version(tmp_path / "b") == a  # documentation is not code
    (tmp_path / "b" / "archs" / "h100.toml").write_text("[limits]\nwarps = 32\n")
    assert code_version(tmp_path / "b") != a
    assert code_version(_tree(tmp_path / "c", "II = 2\n")) != a


def test_the_summary_names_the_code_behind_a_half():
    from suite.report import code_versions

    assert code_versions([{"code": "abc"}, {"code": "abc"}], "abc") == "abc (this checkout's)"
    assert code_versions([{"code": "abc"}], "def") == "abc"
    assert code_versions([{}, {}], "def") == "unrecorded"
    assert code_versions([{"code": "abc"}, {"code": "def"}, {}], "def") == "3 versions; 1/3 rows this checkout's (def)"
