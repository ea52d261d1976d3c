"""The fuzzer of the input boundary (bench/fuzz.py), CI-sized: a few hundred mutated inputs give
no crash, traceback, hang, stray exit status or multi-line error; and the harness itself catches
each of those."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parents[1] / "bench" / "fuzz.py"


@pytest.fixture(scope="module")
def fuzz():
    spec = importlib.util.spec_from_file_location("twill_bench_fuzz", FUZZ)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_a_few_hundred_mutated_inputs_behave(fuzz):
    """300 inputs (graphs, schedules, arch files, parameters, program files, TTGIR) from a fixed seed:
    each exits 0, 2 or (validate) 1 with at most one error line, within 20 s or three times what an ordinary
    ``twill show`` takes on this machine (``hang_limit``: a fixed 20 s flagged ordinary shows on a slow machine)."""
    flagged, tally, seconds = fuzz.fuzz(count=300, seed=7, timeout=20.0, out=None, calibrate=True)
    assert not flagged, "\n".join(f"#{i} {c.kind} {c.argv} {c.mutations}: {o.problem}\n{o.stderr[-800:]}"
                                  for i, c, o in flagged)
    assert sum(tally.values()) == 300
    kinds = {kind for kind, _ in tally}
    assert kinds == {"graph", "schedule", "arch", "params", "program", "ttgir"}
    assert any(status == "0" for _, status in tally) and any(status == "2" for _, status in tally)


def test_generation_is_deterministic(fuzz):
    """The same seed gives the same inputs, so a flagged run can be replayed."""
    import random

    seeds = fuzz.build_seeds()
    a = [fuzz.generate(random.Random(3), seeds) for _ in range(1)]
    b = [fuzz.generate(random.Random(3), seeds) for _ in range(1)]
    assert [(c.argv, c.files) for c in a] == [(c.argv, c.files) for c in b]


def test_harness_flags_a_crash(fuzz, tmp_path, monkeypatch):
    """An exception escaping the CLI is a crash, with its type in the report."""
    import twill.cli

    def boom(argv):
        raise KeyError("ghost")

    monkeypatch.setattr(twill.cli, "main", boom)
    outcome = fuzz.run_case(fuzz.Case("graph", ["show", "g.json"]), tmp_path, timeout=5)
    assert outcome.status == "crash" and outcome.problem.startswith("KeyError")


def test_harness_flags_a_hang(fuzz, tmp_path, monkeypatch):
    """An input that runs past its time budget is stopped by the alarm and flagged."""
    import twill.cli

    def slow(argv):
        time.sleep(3)
        return 0

    monkeypatch.setattr(twill.cli, "main", slow)
    outcome = fuzz.run_case(fuzz.Case("graph", ["show", "g.json"]), tmp_path, timeout=0.3)
    assert outcome.status == "hang" and outcome.seconds < 2


def test_the_hang_limit_follows_the_machine(fuzz, monkeypatch):
    """``hang_limit``: three times the reference input's time here, never under the given limit; the reference runs
    the real ``twill show`` argv."""
    seen: list[list[str]] = []

    def timed(seconds):
        def run(case, workdir, timeout):
            seen.append(case.argv)
            return fuzz.Outcome(0, seconds, "", "", "")
        return run

    monkeypatch.setattr(fuzz, "run_case", timed(27.0))
    assert fuzz.hang_limit(20.0) == pytest.approx(81.0)
    monkeypatch.setattr(fuzz, "run_case", timed(2.0))
    assert fuzz.hang_limit(20.0) == 20.0
    assert seen == [fuzz.REFERENCE, fuzz.REFERENCE] and seen[0][0] == "show"


@pytest.mark.parametrize("status, stderr, problem", [
    (2, "twill: error: bad\n", ""),
    (2, "usage: twill show [-h]\n       PROGRAM\ntwill show: error: the following arguments are required\n", ""),
    (2, "twill: error: bad\nmore\n", "2 error lines on stderr"),
    (2, "", "0 error lines on stderr"),
    (1, "x: 2 violation(s)\n", "exit status 1"),
    (3, "", "exit status 3"),
    (0, "Traceback (most recent call last):\n", "printed a traceback"),
    (2, "twill: error: op '\ud800'\n", "stderr is not encodable as UTF-8 (a real terminal would raise)"),
])
def test_judge(fuzz, status, stderr, problem):
    """Exit 0/2 (1 only for validate), one error line on failure, and never a traceback."""
    assert fuzz.judge(fuzz.Case("graph", ["show", "g.json"]), status, "", stderr) == problem
