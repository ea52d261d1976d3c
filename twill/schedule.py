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

from .errors import GraphError, ScheduleError
from .ir import Carrier, Edge, Issuer, LoopBody, Op, Use

__all__ = ["ScheduledOp", "Group", "Buffer", "Schedule", "body_to_dict", "body_from_dict", "FORMAT"]

FORMAT = "twill.schedule/1"
BODY_FORMAT = "twill.body/1"


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
            "proof": self.proof,
            "swp_only": self.swp_only,
            "objective": list(self.objective),
            "objective_values": dict(self.objective_values),
            "options": dict(self.options),
            "ops": [asdict(o) for o in self.ops],
            "groups": [{**asdict(g), "ops": list(g.ops)} for g in self.groups],
            "buffers": [asdict(b) for b in self.buffers],
            "body": body_to_dict(self.body),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=False)

    def write(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n", encoding="utf-8")

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "schedule") -> Schedule:
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ScheduleError(f"{where}: not a {FORMAT} file (format is {d.get('format') if isinstance(d, dict) else None!r})")
        try:
            return cls(
                program=str(d["program"]),
                arch=str(d["arch"]),
                arch_path=d.get("arch_path"),
                status=str(d["status"]),
                ii=int(d["ii"]),
                ii_lower_bound=int(d["ii_lower_bound"]),
                length=int(d["length"]),
                solve_seconds=float(d.get("solve_seconds", 0.0)),
                proof=str(d.get("proof", "")),
                swp_only=bool(d.get("swp_only", False)),
                objective=tuple(d.get("objective", ())),
                objective_values=dict(d.get("objective_values", {})),
                options=dict(d.get("options", {})),
                ops=tuple(ScheduledOp(**o) for o in d["ops"]),
                groups=tuple(Group(**{**g, "ops": tuple(g["ops"])}) for g in d["groups"]),
                buffers=tuple(Buffer(**b) for b in d["buffers"]),
                body=body_from_dict(d["body"], where),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ScheduleError(f"{where}: malformed schedule ({type(err).__name__}: {err})") from err

    @classmethod
    def read(cls, path: str | Path) -> Schedule:
        p = Path(path)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except OSError as err:
            raise ScheduleError(f"{p}: cannot read schedule ({err.strerror})") from err
        except json.JSONDecodeError as err:
            raise ScheduleError(f"{p}: not valid JSON ({err.msg} at line {err.lineno})") from err
        return cls.from_dict(data, str(p))


def body_to_dict(body: LoopBody) -> dict[str, Any]:
    def op(o: Op) -> dict[str, Any]:
        d = asdict(o)
        d["uses"] = [asdict(u) for u in o.uses]
        d["issuer"] = o.issuer.value
        return d

    return {
        "format": BODY_FORMAT,
        "name": body.name,
        "params": dict(body.params),
        "trip_count": body.trip_count,
        "ops": [op(o) for o in body.ops],
        "edges": [{**asdict(e), "carrier": e.carrier.value} for e in body.edges],
    }


def body_from_dict(d: dict[str, Any], where: str = "body") -> LoopBody:
    if not isinstance(d, dict) or d.get("format") != BODY_FORMAT:
        raise ScheduleError(f"{where}: the embedded loop body is not {BODY_FORMAT}")
    try:
        ops = tuple(
            Op(**{**o, "uses": tuple(Use(**u) for u in o["uses"]), "issuer": Issuer(o["issuer"])}) for o in d["ops"]
        )
        edges = tuple(Edge(**{**e, "carrier": Carrier(e["carrier"])}) for e in d["edges"])
        return LoopBody(str(d["name"]), ops, edges, d.get("params", {}), d.get("trip_count"))
    except (KeyError, TypeError, ValueError) as err:
        raise GraphError(f"{where}: malformed loop body ({type(err).__name__}: {err})") from err
