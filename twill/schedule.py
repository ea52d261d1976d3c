"""A schedule: what the solver claims, as a value and as ``twill.schedule/1`` JSON (stage 5).

The JSON carries the loop body it schedules (format ``twill.body/1``) and the arch's name or
file, so the validator and the simulator can check it without the program that produced it.
``start`` is the cycle of an op in iteration 0; iteration i runs it at ``start + i * ii``;
``stage = start // ii`` and ``offset = start % ii``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from twill.body_json import BODY_FORMAT, body_document, body_from_document, is_body_document
from twill.errors import ScheduleError
from twill.ir import LoopBody
from twill.jsonfile import read_json

__all__ = ["ScheduledOp", "Group", "Buffer", "Schedule", "FORMAT", "TIMINGS"]

FORMAT = "twill.schedule/1"
TIMINGS = ("solve_seconds", "ii_seconds", "first_seconds")  # wall-clock fields: they vary with the machine
# The checks walk every cycle of II (plain loops over modular time, on purpose), so a file's II is
# bounded: 4M cycles is ~2 ms per iteration, far beyond any tile-level loop.
MAX_II = 1 << 22


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduledOp:
    id: str
    name: str
    unit: str | None
    start: int
    stage: int
    offset: int
    group: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Group:
    id: int
    warps: int
    regs_per_thread: int | None
    role: str
    ops: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Buffer:
    value: str
    memory: str  # "smem" | "tmem" | "regs"
    copies: int
    bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    program: str
    arch: str
    status: str  # "optimal" | "feasible"
    ii: int
    ii_lower_bound: int
    length: int
    solve_seconds: float
    ops: tuple[ScheduledOp, ...]
    groups: tuple[Group, ...]
    buffers: tuple[Buffer, ...]
    body: LoopBody
    proof: str = ""
    swp_only: bool = False
    objective: tuple[str, ...] = ()
    objective_values: dict[str, int] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    arch_path: str | None = None
    ii_seconds: float | None = None  # when the search settled II (proven or given up); the rest is secondary objectives
    first_seconds: float | None = None  # when the search first held a valid schedule (at most ii_seconds when no heuristic had one)
    work: float | None = None  # CP-SAT deterministic work the solve spent (machine-independent, unlike seconds)

    def op(self, name: str) -> ScheduledOp:
        for o in self.ops:
            if o.id == name:
                return o
        raise ScheduleError(f"schedule: no op {name!r}")

    def start(self, name: str) -> int:
        return self.op(name).start

    def group_of(self, name: str) -> int:
        return self.op(name).group

    @property
    def stages(self) -> int:
        return max(o.stage for o in self.ops) + 1

    def reproducible_dict(self) -> dict[str, Any]:
        """The JSON document less its wall-clock fields (``TIMINGS``): what the same input, options
        and worker count reproduce on any machine (design.md §3)."""
        return {k: v for k, v in self.to_dict().items() if k not in TIMINGS}

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "program": self.program,
            "arch": self.arch,
            "arch_path": self.arch_path,
            "status": self.status,
            "ii": self.ii,
            "ii_lower_bound": self.ii_lower_bound,
            "length": self.length,
            "solve_seconds": round(self.solve_seconds, 3),
            "ii_seconds": None if self.ii_seconds is None else round(self.ii_seconds, 3),
            "first_seconds": None if self.first_seconds is None else round(self.first_seconds, 3),
            "work": None if self.work is None else round(self.work, 3),
            "proof": self.proof,
            "swp_only": self.swp_only,
            "objective": list(self.objective),
            "objective_values": dict(self.objective_values),
            "options": dict(self.options),
            "ops": [asdict(o) for o in self.ops],
            "groups": [{**asdict(g), "ops": list(g.ops)} for g in self.groups],
            "buffers": [asdict(b) for b in self.buffers],
            "body": body_document(self.body),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=False)

    def write(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n", encoding="utf-8")

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "schedule") -> Schedule:
        """Read a ``twill.schedule/1`` document, checking every field's type and that the ops and
        groups refer to the embedded body and to each other, so the validator, the simulator and
        the pictures can trust its shape. Whether the numbers obey the hardware rules is the
        validator's question, not this one's."""
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            found = d.get("format") if isinstance(d, dict) else None
            raise ScheduleError(f"{where}: not a {FORMAT} file (format is {_short(found)})")
        try:
            sched = cls(
                program=_typed(where, "program", d["program"], str),
                arch=_typed(where, "arch", d["arch"], str),
                arch_path=_typed(where, "arch_path", d.get("arch_path"), str, optional=True),
                status=_typed(where, "status", d["status"], str),
                ii=_typed(where, "ii", d["ii"], int),
                ii_lower_bound=_typed(where, "ii_lower_bound", d["ii_lower_bound"], int),
                length=_typed(where, "length", d["length"], int),
                solve_seconds=_seconds(where, d.get("solve_seconds", 0.0)),
                ii_seconds=None if d.get("ii_seconds") is None else _seconds(where, d["ii_seconds"], "ii_seconds"),
                first_seconds=None if d.get("first_seconds") is None else _seconds(where, d["first_seconds"],
                                                                                   "first_seconds"),
                work=None if d.get("work") is None else _seconds(where, d["work"], "work"),
                proof=_typed(where, "proof", d.get("proof", ""), str),
                swp_only=_typed(where, "swp_only", d.get("swp_only", False), bool),
                objective=tuple(_items(where, "objective", d.get("objective", []), str)),
                objective_values=dict(_typed(where, "objective_values", d.get("objective_values", {}), dict)),
                options=dict(_typed(where, "options", d.get("options", {}), dict)),
                ops=tuple(_scheduled_op(f"{where}: ops[{i}]", o) for i, o in enumerate(_items(where, "ops", d["ops"], dict))),
                groups=tuple(_group(f"{where}: groups[{i}]", g) for i, g in enumerate(_items(where, "groups", d["groups"], dict))),
                buffers=tuple(_buffer(f"{where}: buffers[{i}]", b)
                              for i, b in enumerate(_items(where, "buffers", d["buffers"], dict))),
                body=_body(d["body"], where),
            )
        except KeyError as err:
            raise ScheduleError(f"{where}: malformed schedule (field {err} is missing)") from err
        if not 1 <= sched.ii <= MAX_II:
            raise ScheduleError(f"{where}: ii is {_short(sched.ii)}; an initiation interval is 1 to {MAX_II} cycles")
        _check_references(sched, where)
        _check_starts(sched, where)
        return sched

    @classmethod
    def read(cls, path: str | Path) -> Schedule:

        p = Path(path)
        return cls.from_dict(read_json(p, "schedule", ScheduleError), str(p))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _typed(where: str, name: str, value: Any, kind: type | tuple[type, ...], optional: bool = False) -> Any:
    """``value`` if it has JSON type ``kind`` (a bool is not a number here), else a ScheduleError."""
    if value is None and optional:
        return None
    kinds = kind if isinstance(kind, tuple) else (kind,)
    is_bool = isinstance(value, bool)
    if not isinstance(value, kinds) or (is_bool and bool not in kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise ScheduleError(f"{where}: field {name!r} must be {names}, got {_short(value)}")
    return value


def _seconds(where: str, value: Any, key: str = "solve_seconds") -> float:
    number = _typed(where, key, value, (int, float))
    try:
        return float(number)
    except OverflowError:
        raise ScheduleError(f"{where}: field {key!r} is {_short(number)}, too large for a time") from None


def _items(where: str, name: str, value: Any, kind: type) -> list[Any]:
    return [_typed(where, f"{name}[{i}]", v, kind) for i, v in enumerate(_typed(where, name, value, list))]


def _fields(where: str, d: dict[str, Any], kinds: dict[str, tuple[type, bool]]) -> dict[str, Any]:
    """The fields of one JSON object, each checked against (type, may be null); no others allowed."""
    unknown = sorted(set(d) - set(kinds))
    if unknown:
        raise ScheduleError(f"{where}: unknown fields {unknown}")
    return {k: _typed(where, k, d[k], kind, optional) for k, (kind, optional) in kinds.items()}


def _scheduled_op(where: str, d: dict[str, Any]) -> ScheduledOp:
    return ScheduledOp(**_fields(where, d, {"id": (str, False), "name": (str, False), "unit": (str, True),
                                           "start": (int, False), "stage": (int, False), "offset": (int, False),
                                           "group": (int, False)}))


def _group(where: str, d: dict[str, Any]) -> Group:
    f = _fields(where, d, {"id": (int, False), "warps": (int, False), "regs_per_thread": (int, True),
                           "role": (str, False), "ops": (list, False)})
    return Group(**{**f, "ops": tuple(_items(where, "ops", f["ops"], str))})


def _buffer(where: str, d: dict[str, Any]) -> Buffer:
    return Buffer(**_fields(where, d, {"value": (str, False), "memory": (str, False), "copies": (int, False),
                                       "bytes": (int, False)}))


def _check_starts(sched: Schedule, where: str) -> None:
    """Starts count cycles from the loop's first issue (>= 0), and stage and offset restate the
    start (start = stage * II + offset): readers use whichever is handy, so they must agree."""
    for o in sched.ops:
        if o.start < 0:
            raise ScheduleError(f"{where}: op {o.id!r} starts at {o.start}; starts are cycles >= 0")
        if (o.stage, o.offset) != divmod(o.start, sched.ii):
            raise ScheduleError(f"{where}: op {o.id!r}: start {o.start} at II {sched.ii} is stage "
                                f"{o.start // sched.ii} offset {o.start % sched.ii}, but the file says stage {o.stage} "
                                f"offset {o.offset}")


def _check_references(sched: Schedule, where: str) -> None:
    """Ops name body ops once each and sit in defined groups; groups list known ops. These are the
    file's internal consistency (a dangling name), which every reader relies on."""
    body = {op.name for op in sched.body.ops}
    ids = [o.id for o in sched.ops]
    for name in ids:
        if name not in body:
            raise ScheduleError(f"{where}: op {name!r} is not in the embedded loop body {sched.body.name!r}")
        if ids.count(name) > 1:
            raise ScheduleError(f"{where}: op {name!r} is scheduled {ids.count(name)} times")
    missing = sorted(body - set(ids))
    if missing:
        raise ScheduleError(f"{where}: body ops {missing} are not scheduled")
    group_ids = [g.id for g in sched.groups]
    for o in sched.ops:
        if o.group not in group_ids:
            raise ScheduleError(f"{where}: op {o.id!r} is in group {o.group}, which the file does not define")
    for g in sched.groups:
        if group_ids.count(g.id) > 1:
            raise ScheduleError(f"{where}: group {g.id} is defined {group_ids.count(g.id)} times")
        for name in g.ops:
            if name not in body:
                raise ScheduleError(f"{where}: group {g.id} lists op {name!r}, which is not in the loop body")


def _body(d: Any, where: str) -> LoopBody:
    if not is_body_document(d):
        raise ScheduleError(f"{where}: the embedded loop body is not {BODY_FORMAT}")
    return body_from_document(d, where)
