"""Gantt charts: rows, bar labels and the files they are written to."""

from __future__ import annotations

import pytest

from twill.arch.registry import get_arch
from twill.frontend.programs import load_program
from twill.problem import build_problem
from twill.solver import SolveOptions, solve
from twill.timeline import Span, static_spans
from twill.viz.gantt import gantt_figure, group_label, render_gantt, schedule_gantt


@pytest.fixture(scope="module")
def toy():
    arch = get_arch("h100")
    p = build_problem(load_program("toy", arch), arch)
    return p, solve(p, SolveOptions(time_limit=10))


def _texts(fig) -> list[str]:
    return [t.get_text() for t in fig.axes[0].texts]


def test_static_spans_of_toy(toy):
    p, s = toy
    spans = static_spans(p, s, iterations=3)
    # 3 busy segments and one hold (P; S and O issue for free) per iteration
    assert len(spans) == 3 * 4
    assert sum(sp.kind == "hold" for sp in spans) == 3
    p2 = next(sp for sp in spans if sp.op == "P" and sp.iteration == 2 and sp.kind == "busy")
    assert (p2.unit, p2.start, p2.end) == ("mufu", s.start("P") + 2 * s.ii, s.start("P") + 2 * s.ii + 1)


def test_toy_rows_and_labels(toy):
    p, s = toy
    fig = schedule_gantt(p, s)
    ax = fig.axes[0]
    rows = [t.get_text() for t in ax.get_yticklabels()]
    assert rows == ["unit tc", "unit mufu", group_label(s.groups[0])]
    assert rows[2].startswith("group 0 (4 warps, 24 regs): ")  # a narrower group would hold a warpgroup's budget
    iterations = s.stages + 2
    texts = _texts(fig)
    assert f"steady state (II = {s.ii} cycles)" in texts
    # every bar is wide enough for its op/iteration label: 4 spans per iteration
    bar_labels = [t for t in texts if "/" in t]
    assert len(bar_labels) == 4 * iterations
    assert {f"{op}/{i}" for op in ("S", "P", "O") for i in range(iterations)} <= set(bar_labels)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == [f"iteration {i}" for i in range(iterations)]


def test_height_grows_with_rows():
    few = [Span("a", 0, 0, "tc", 0, 10, "busy")]
    many = few + [Span(f"b{g}", 0, g, None, 0, 10, "hold") for g in range(8)]
    h_few = gantt_figure(few, ii=10, title="few").get_size_inches()[1]
    h_many = gantt_figure(many, ii=10, title="many").get_size_inches()[1]
    assert h_many > h_few + 8 * 0.2


def test_overlaps_stack_and_narrow_bars_stay_unlabelled():
    spans = [Span("wide", 0, None, "tc", 0, 1000, "busy"), Span("wide", 1, None, "tc", 500, 1500, "busy"),
             Span("thin", 0, None, "alu", 10, 11, "busy"), Span("stall", 0, 3, None, 0, 400, "wait")]
    fig = gantt_figure(spans, ii=500, title="t", window_start=500, labels={3: "group 3: consumer"})
    rows = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert rows == ["unit tc", "unit alu", "group 3: consumer"]
    tc, alu, group = (t for t in fig.axes[0].get_yticks())
    assert alu - tc > group - alu  # tc's overlapping bars sit in two lanes
    texts = _texts(fig)
    assert {"wide/0", "wide/1"} <= set(texts)
    assert not any(t.startswith("thin") for t in texts)
    assert "wait (stalled)" in [t.get_text() for t in fig.legends[0].get_texts()]


def test_render_png_and_svg(toy, tmp_path):
    p, s = toy
    fig = schedule_gantt(p, s)
    png = render_gantt(fig, tmp_path / "toy.png")
    svg = render_gantt(fig, tmp_path / "toy.svg")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = svg.read_text(encoding="utf-8")
    assert "<svg" in text and "steady state" in text
    with pytest.raises(ValueError, match=r"\.png or \.svg"):
        render_gantt(fig, tmp_path / "toy.pdf")


def test_render_gemm(tmp_path):
    arch = get_arch("h100")
    p = build_problem(load_program("gemm", arch), arch)
    s = solve(p, SolveOptions(time_limit=30))
    fig = schedule_gantt(p, s, iterations=3)
    rows = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert rows[:2] == ["unit tma", "unit tc"]
    assert len(rows) == 2 + len(s.groups)
    out = render_gantt(fig, tmp_path / "gemm.png")
    assert out.stat().st_size > 1000


def test_importing_does_not_touch_the_backend():
    import matplotlib

    before = matplotlib.rcParams["backend"]
    import twill.viz.gantt  # noqa: F401

    assert matplotlib.rcParams["backend"] == before
