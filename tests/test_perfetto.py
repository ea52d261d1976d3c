"""Chrome trace-event export: metadata tracks, complete events, units of time."""

from __future__ import annotations

import json

import pytest

from twill.arch.registry import get_arch
from twill.frontend.programs import load_program
from twill.problem import build_problem
from twill.solver import SolveOptions, solve
from twill.timeline import Span, static_spans
from twill.viz.perfetto import trace_events, write_trace


@pytest.fixture(scope="module")
def toy_spans():
    arch = get_arch("h100")
    p = build_problem(load_program("toy", arch), arch)
    return static_spans(p, solve(p, SolveOptions(time_limit=10)), iterations=3)


def test_toy_trace(toy_spans, tmp_path):
    path = write_trace(toy_spans, tmp_path / "toy.json", clock_mhz=1830, name="toy on h100")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["displayTimeUnit"] == "ns"
    events = data["traceEvents"]
    meta = [e for e in events if e["ph"] == "M"]
    names = sorted(e["args"]["name"] for e in meta if e["name"] == "thread_name")
    assert names == ["group 0", "unit mufu", "unit tc"]  # one per group and per unit
    assert [e["args"]["name"] for e in meta if e["name"] == "process_name"] == ["toy on h100"]
    assert len([e for e in meta if e["name"] == "thread_sort_index"]) == 3
    xs = [e for e in events if e["ph"] == "X"]
    assert len(xs) == 3 * 4  # 3 iterations x (S, P, O busy + P's hold)
    assert all(e["ts"] >= 0 and e["dur"] >= 0 for e in xs)
    assert {e["args"]["iteration"] for e in xs} == {0, 1, 2}
    tids = {e["tid"] for e in meta if e["name"] == "thread_name"}
    assert {e["tid"] for e in xs} <= tids


def test_cycles_become_microseconds():
    spans = [Span("mma", 1, 2, "tc", 1830, 1830 + 915, "busy"), Span("exp", 1, 2, None, 3660, 3660, "hold")]
    data = trace_events(spans, clock_mhz=1830.0, name="k", labels={2: "group 2 (consumer)"}, units=["tma"])
    xs = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert (xs[0]["ts"], xs[0]["dur"], xs[0]["args"]) == (1.0, 0.5, {"op": "mma", "iteration": 1, "cycles": 915})
    assert (xs[1]["ts"], xs[1]["dur"], xs[1]["cat"]) == (2.0, 0.0, "hold")
    threads = {e["tid"]: e["args"]["name"] for e in data["traceEvents"] if e["name"] == "thread_name"}
    assert list(threads.values()) == ["unit tma", "unit tc", "group 2 (consumer)"]  # idle tma still listed
    with pytest.raises(ValueError):
        trace_events(spans, clock_mhz=0, name="k")
