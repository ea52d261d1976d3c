"""Gantt charts of a modulo schedule or a simulated trace: what each unit and warp group does when.

The chart has one row per functional unit and one per warp group; every ``Span`` (see
``twill.timeline``) is a bar coloured by its loop iteration, so overlapping iterations (the
software pipeline) show as interleaved colours. One steady-state window of length II is marked:
everything inside it repeats every II cycles, so it is the whole kernel's inner loop at a glance.
Drawing uses matplotlib's object-oriented API (``Figure`` + ``FigureCanvasAgg``), never pyplot,
so importing or calling this module does not change matplotlib's global backend.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.patches import Patch

from twill.errors import UsageError
from twill.problem import Problem
from twill.schedule import Group, Schedule
from twill.timeline import Span, static_spans

__all__ = ["gantt_figure", "schedule_gantt", "render_gantt", "group_label"]

RowKey = tuple[int, str | int]  # (0, unit name) sorts units above (1, group id)

FONT_SIZE = 6.5  # points; bar labels and row labels
LANE_IN = 0.26  # height of one lane of a row, inches
ROW_GAP_IN = 0.08  # blank space between rows, inches
MAX_LABEL_CHARS = 60  # row labels longer than this are cut (a role can list many op kinds)
PALETTE = "tab10"
WAIT_HATCH = "////"


@dataclass(frozen=True, slots=True)
class _Row:
    key: RowKey
    label: str
    lanes: int
    top: float  # inches from the top of the plot area


def group_label(group: Group) -> str:
    """The row label of a warp group: its size and register budget say what the solver chose."""
    regs = f", {group.regs_per_thread} regs" if group.regs_per_thread is not None else ""
    warps = f"{group.warps} warp{'s' if group.warps != 1 else ''}"
    return f"group {group.id} ({warps}{regs}): {group.role}"


def _row_key(span: Span) -> RowKey | None:
    """A span sits on its unit's row when it names a unit, else on its group's row."""
    if span.unit is not None:
        return (0, span.unit)
    if span.group is not None:
        return (1, span.group)
    return None


def _ordered_keys(spans: Sequence[Span], labels: Mapping[int | str, str], unit_order: Sequence[str]) -> list[RowKey]:
    """Units first (in ``unit_order``, then as first met), then groups by id; labelled rows show even when idle."""
    met = [k for k in map(_row_key, spans) if k is not None]
    met += [(0, k) if isinstance(k, str) else (1, k) for k in labels]
    units = list(dict.fromkeys([*unit_order, *(name for kind, name in met if kind == 0)]))
    present = set(met)
    groups = sorted({name for kind, name in met if kind == 1}, key=int)
    return [(0, u) for u in units if (0, u) in present] + [(1, g) for g in groups]


def _assign_lanes(spans: Iterable[Span]) -> tuple[dict[Span, int], int]:
    """Greedy interval partitioning, so spans that overlap on one row (a unit of capacity > 1,
    several iterations of a simulated trace) are stacked instead of drawn over each other."""
    lane_of: dict[Span, int] = {}
    lane_end: list[int] = []
    for s in sorted(set(spans), key=lambda s: (s.start, s.end, s.op, s.iteration, s.kind)):
        for lane, end in enumerate(lane_end):
            if end <= s.start:
                lane_end[lane] = s.end
                lane_of[s] = lane
                break
        else:
            lane_of[s] = len(lane_end)
            lane_end.append(s.end)
    return lane_of, max(1, len(lane_end))


def _row_label(key: RowKey, labels: Mapping[int | str, str]) -> str:
    kind, name = key
    text = labels.get(name, f"unit {name}" if kind == 0 else f"group {name}")
    return text if len(text) <= MAX_LABEL_CHARS else text[: MAX_LABEL_CHARS - 1] + "…"


def _layout_rows(spans: Sequence[Span], labels: Mapping[int | str, str],
                 unit_order: Sequence[str]) -> tuple[list[_Row], dict[Span, tuple[RowKey, int]]]:
    by_row: dict[RowKey, list[Span]] = defaultdict(list)
    for s in spans:
        key = _row_key(s)
        if key is not None:
            by_row[key].append(s)
    rows, place, top = [], {}, ROW_GAP_IN / 2
    for key in _ordered_keys(spans, labels, unit_order):
        lane_of, lanes = _assign_lanes(by_row.get(key, []))
        rows.append(_Row(key, _row_label(key, labels), lanes, top))
        place.update({s: (key, lane) for s, lane in lane_of.items()})
        top += lanes * LANE_IN + ROW_GAP_IN
    return rows, place


def _colour(iteration: int) -> tuple[float, float, float, float]:
    cmap = matplotlib.colormaps[PALETTE]
    return cmap(iteration % cmap.N)


def _text_colour(rgba: tuple[float, float, float, float]) -> str:
    """Black on light bars, white on dark ones (relative luminance), so labels stay legible."""
    r, g, b, _ = rgba
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"


def _default_window(spans: Sequence[Span]) -> int:
    """Without a given window, take the first issue of the middle iteration: by then the pipeline
    is full for any trace of at least ``stages`` + 1 iterations (the static chart passes its own)."""
    iterations = sorted({s.iteration for s in spans})
    middle = iterations[len(iterations) // 2]
    return min(s.start for s in spans if s.iteration == middle)


class _Canvas:
    """A figure whose plot area is placed in inches, so a bar's width in inches (and whether its
    label fits) is known before drawing."""

    def __init__(self, rows: list[_Row], width: float, title: str) -> None:
        self.font = FontProperties(size=FONT_SIZE)
        self.fig = Figure(figsize=(width, 1.0), dpi=100)
        FigureCanvasAgg(self.fig)
        self.renderer = self.fig.canvas.get_renderer()
        label_in = max((self.text_width(r.label) for r in rows), default=0.5)
        self.left, self.right, self.top_m, self.bottom = label_in + 0.25, 0.25, 0.6, 0.75
        self.plot_h = rows[-1].top + rows[-1].lanes * LANE_IN + ROW_GAP_IN / 2 if rows else 0.5
        self.plot_w = max(width - self.left - self.right, 1.0)
        height = self.plot_h + self.top_m + self.bottom
        self.fig.set_size_inches(width, height)
        self.ax = self.fig.add_axes((self.left / width, self.bottom / height, self.plot_w / width, self.plot_h / height))
        self.fig.suptitle(title, fontsize=9, y=1 - 0.1 / height, va="top")

    def text_width(self, text: str) -> float:
        """Width of ``text`` in inches at the label font."""
        w, _, _ = self.renderer.get_text_width_height_descent(text, self.font, ismath=False)
        return w / self.fig.dpi


def _draw_rows(c: _Canvas, rows: list[_Row]) -> None:
    ax = c.ax
    ax.set_ylim(c.plot_h, 0)
    ax.set_yticks([r.top + r.lanes * LANE_IN / 2 for r in rows], [r.label for r in rows], fontsize=FONT_SIZE)
    ax.tick_params(axis="y", length=0)
    for r, nxt in zip(rows, rows[1:], strict=False):
        boundary = r.key[0] != nxt.key[0]  # units above, groups below
        y = nxt.top - ROW_GAP_IN / 2
        ax.axhline(y, color="0.3" if boundary else "0.85", lw=0.8 if boundary else 0.4, zorder=1)


def _bar_label(c: _Canvas, s: Span, width_in: float) -> str | None:
    """``op/iteration`` when it fits the bar, else the bare op name, else nothing (no text soup)."""
    for text in (f"{s.op}/{s.iteration}", s.op):
        if c.text_width(text) + 0.04 <= width_in:
            return text
    return None


def _draw_bars(c: _Canvas, rows: list[_Row], place: Mapping[Span, tuple[RowKey, int]], x_scale: float) -> None:
    """One bar per span; ``x_scale`` is inches per cycle."""
    top = {r.key: r.top for r in rows}
    lane_h = LANE_IN * 0.86
    for s, (key, lane) in sorted(place.items(), key=lambda kv: (kv[0].start, kv[0].op)):
        y = top[key] + lane * LANE_IN + (LANE_IN - lane_h) / 2
        colour = _colour(s.iteration)
        waiting = s.kind == "wait"
        c.ax.barh(y, max(s.cycles, 0), left=s.start, height=lane_h, align="edge", zorder=3,
                  color=(*colour[:3], 0.35) if waiting else colour, hatch=WAIT_HATCH if waiting else None,
                  edgecolor=colour if waiting else "black", linewidth=0.6 if waiting else 0.3)
        text = None if waiting else _bar_label(c, s, s.cycles * x_scale)
        if text:
            c.ax.text(s.start + s.cycles / 2, y + lane_h / 2, text, ha="center", va="center", fontsize=FONT_SIZE,
                      color=_text_colour(colour), zorder=4, clip_on=True)


def _draw_window(c: _Canvas, window_start: int, ii: int, x_range: tuple[float, float]) -> None:
    """The steady-state band; dotted lines every II on both sides show the period of the pipeline."""
    ax = c.ax
    lo, hi = x_range
    k0 = -int((window_start - lo) // ii) if ii > 0 else 0
    for k in range(k0, int((hi - window_start) // ii) + 2 if ii > 0 else 0):
        x = window_start + k * ii
        if lo <= x <= hi and k not in (0, 1):
            ax.axvline(x, color="0.6", lw=0.5, ls=":", zorder=2)
    ax.axvspan(window_start, window_start + ii, color="#ffe9a8", alpha=0.45, zorder=0, lw=0)
    for x in (window_start, window_start + ii):
        ax.axvline(x, color="0.15", lw=1.0, ls="--", zorder=3.5)  # under the bar labels
    ax.text(window_start + ii / 2, 1.005, f"steady state (II = {ii} cycles)", transform=ax.get_xaxis_transform(),
            ha="center", va="bottom", fontsize=FONT_SIZE + 1, clip_on=False)


def _draw_legend(c: _Canvas, spans: Sequence[Span]) -> None:
    iterations = sorted({s.iteration for s in spans})
    n = matplotlib.colormaps[PALETTE].N
    if len(iterations) <= n:
        handles = [Patch(color=_colour(i), label=f"iteration {i}") for i in iterations]
    else:  # colours repeat: say which iterations share one
        handles = [Patch(color=_colour(i), label=f"iterations ≡ {i} (mod {n})") for i in range(n)]
    if any(s.kind == "wait" for s in spans):
        handles.append(Patch(facecolor="white", edgecolor="0.3", hatch=WAIT_HATCH, label="wait (stalled)"))
    c.fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 8), fontsize=FONT_SIZE + 0.5,
                 frameon=False, bbox_to_anchor=(0.5, 0.0))


def gantt_figure(spans: Sequence[Span], *, ii: int, title: str, window_start: int | None = None,
                 labels: Mapping[int | str, str] | None = None, unit_order: Sequence[str] = (),
                 width: float = 16.0) -> Figure:
    """A Gantt chart of ``spans`` with the steady-state window ``[window_start, window_start + ii)``.

    ``labels`` maps group ids (int) and unit names (str) to row labels; a labelled row is drawn
    even when idle, so a group that only issues free async ops still shows. ``unit_order`` fixes
    the order of the unit rows (the arch's order reads best). Width is in inches; the height
    grows with the rows, so a 50-op graph keeps its rows legible.
    """
    labels = dict(labels or {})
    spans = list(spans)
    rows, place = _layout_rows(spans, labels, unit_order)
    c = _Canvas(rows, width, title)
    if not rows:
        c.ax.set_axis_off()
        return c.fig
    lo = min((s.start for s in spans), default=0)
    hi = max((s.end for s in spans), default=max(ii, 1))
    if window_start is None and spans:
        window_start = _default_window(spans)
    pad = max((hi - lo) * 0.005, 0.5)
    c.ax.set_xlim(lo - pad, hi + pad)
    c.ax.set_xlabel("cycle", fontsize=FONT_SIZE + 1)
    c.ax.tick_params(axis="x", labelsize=FONT_SIZE)
    _draw_rows(c, rows)
    _draw_bars(c, rows, place, c.plot_w / (hi - lo + 2 * pad))
    if window_start is not None and ii > 0:
        _draw_window(c, window_start, ii, (lo - pad, hi + pad))
    _draw_legend(c, spans)
    return c.fig


def schedule_gantt(problem: Problem, schedule: Schedule, iterations: int | None = None) -> Figure:
    """The static schedule as a Gantt chart: ``stages + 2`` iterations by default, enough to show
    the prologue, a full steady state starting at ``(stages - 1) * II``, and the start of the drain."""
    n = schedule.stages + 2 if iterations is None else iterations
    spans = static_spans(problem, schedule, n)
    used = [u for u in problem.arch.unit_names() if any(seg.unit == u for op in problem.ops for seg in op.uses)]
    labels: dict[int | str, str] = {g.id: group_label(g) for g in schedule.groups}
    for u in used:
        cap = problem.capacity.get(u, 1)
        labels[u] = f"unit {u}" + (f" (x{cap})" if cap > 1 else "")
    title = (f"{schedule.program} on {schedule.arch}: II = {schedule.ii} cycles ({schedule.status}), "
             f"{schedule.stages} stages, {len(schedule.groups)} warp group{'s' if len(schedule.groups) != 1 else ''}, "
             f"{n} iterations")
    return gantt_figure(spans, ii=schedule.ii, title=title, window_start=(schedule.stages - 1) * schedule.ii,
                        labels=labels, unit_order=used)


def render_gantt(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as PNG or SVG, chosen by the file's suffix (other formats are refused so a
    typo does not silently produce a PDF named .pgn)."""
    p = Path(path)
    fmt = p.suffix.lower().lstrip(".")
    if fmt not in ("png", "svg"):
        raise UsageError(f"{p}: a Gantt chart is written as .png or .svg, not {p.suffix or 'no suffix'!r}")
    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    fig.savefig(p, format=fmt, dpi=150)
    return p
