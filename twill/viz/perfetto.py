"""Chrome trace-event JSON of a timeline, for https://ui.perfetto.dev and chrome://tracing.

A PNG Gantt chart stops being readable past a few iterations; a trace viewer zooms and searches.
The trace has one process (the kernel's CTA) with one track (a "thread") per functional unit and
one per warp group, and one complete ("X") event per ``Span``. Trace-event timestamps are in
microseconds, so cycles are converted with the arch's clock; the cycle counts stay in ``args``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from twill.errors import UsageError
from twill.timeline import Span

__all__ = ["trace_events", "write_trace"]

PID = 1


def _us(cycles: int, clock_mhz: float) -> float:
    """Cycles to microseconds: at f MHz one microsecond is f cycles."""
    return round(cycles / clock_mhz, 6)


def _tracks(spans: Sequence[Span], units: Iterable[str], groups: Iterable[int]) -> list[tuple[str, str | int]]:
    """Units first (in the order given, then as met), then groups by id: the Gantt chart's order."""
    unit_list = list(dict.fromkeys([*units, *(s.unit for s in spans if s.unit is not None)]))
    group_set = set(groups) | {s.group for s in spans if s.unit is None and s.group is not None}
    return [("unit", u) for u in unit_list] + [("group", g) for g in sorted(group_set)]


def _metadata(name: str, tracks: list[tuple[str, str | int]], labels: Mapping[int | str, str]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [{"ph": "M", "pid": PID, "name": "process_name", "args": {"name": name}}]
    for tid, (kind, key) in enumerate(tracks, start=1):
        label = labels.get(key, f"{kind} {key}")
        events.append({"ph": "M", "pid": PID, "tid": tid, "name": "thread_name", "args": {"name": label}})
        events.append({"ph": "M", "pid": PID, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}})
    return events


def trace_events(spans: Sequence[Span], *, clock_mhz: float, name: str, labels: Mapping[int | str, str] | None = None,
                 units: Iterable[str] = (), groups: Iterable[int] = ()) -> dict[str, Any]:
    """The trace as a JSON-ready dict ``{"traceEvents": [...], "displayTimeUnit": "ns"}``.

    A span goes on its unit's track when it names a unit, else on its group's. ``labels`` maps
    group ids and unit names to track names; ``units`` and ``groups`` add tracks that have no span
    (an idle unit is worth seeing). Events are named by op, so the viewer colours an op alike in
    every iteration; ``cat`` is the span's kind (busy, hold, issue, wait).
    """
    if clock_mhz <= 0:
        raise UsageError(f"clock_mhz {clock_mhz}: must be positive")
    spans = list(spans)
    tracks = _tracks(spans, units, groups)
    tid = {key: i for i, key in enumerate(tracks, start=1)}
    events = _metadata(name, tracks, labels or {})
    for s in sorted(spans, key=lambda s: (s.start, s.end, s.op, s.iteration)):
        track = tid[("unit", s.unit)] if s.unit is not None else tid.get(("group", s.group))
        if track is None:
            continue  # neither unit nor group: nowhere to draw it
        events.append({
            "ph": "X", "pid": PID, "tid": track, "name": s.op, "cat": s.kind,
            "ts": _us(s.start, clock_mhz), "dur": _us(s.cycles, clock_mhz),
            "args": {"op": s.op, "iteration": s.iteration, "cycles": s.cycles},
        })
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def write_trace(spans: Sequence[Span], path: str | Path, *, clock_mhz: float, name: str,
                labels: Mapping[int | str, str] | None = None, units: Iterable[str] = (),
                groups: Iterable[int] = ()) -> Path:
    """Write the trace as JSON; open it at https://ui.perfetto.dev (or chrome://tracing)."""
    p = Path(path)
    data = trace_events(spans, clock_mhz=clock_mhz, name=name, labels=labels, units=units, groups=groups)
    p.write_text(json.dumps(data, separators=(",", ":")) + "\n", encoding="utf-8")
    return p
