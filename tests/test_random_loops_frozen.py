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
