"""Import ``curated-ddg-0.2`` JSON (dependence graphs dumped from Triton) as a ``LoopBody``.

Every field is honoured: reservation tables become ``Use`` segments (one per run of equal,
non-zero usage), ``latency`` is the result latency, ``min_warps`` the issuing width, ``regs`` /
``smem_footprint`` / ``tmem_footprint`` the footprints, ``spill_cost`` the cross-group hand-off
cost, ``variable_latency`` / ``streaming`` the flags, and every edge (parallel ones included)
with its ``blocking`` flag (a self-loop at distance 1 on an op with a result footprint is an
accumulator chain, read in place). Node ids are kept as op names. Pipelines map to the arch's units
through their aliases (``TC`` -> ``tc``); an op is asynchronous when its unit is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twill.arch.model import Arch
from twill.errors import GraphError, ProblemError
from twill.ir import Carrier, Edge, Issuer, LoopBody, Op, Use
from twill.jsonfile import read_json

__all__ = ["read_ddg", "ddg_from_dict", "SCHEMA"]

SCHEMA = "curated-ddg-0.2"
NODE_FIELDS = {
    "id": int, "op_ref": str, "op_kind": str, "pipeline": str, "latency": int, "occupancy": int,
    "rrt": dict, "min_warps": int, "regs": int, "spill_cost": int, "smem_footprint": int,
    "tmem_footprint": int, "variable_latency": bool, "streaming": bool,
}
EDGE_FIELDS = {"src": int, "dst": int, "distance": int, "latency": int, "blocking": bool}


def _typed(where: str, raw: Any, fields: dict[str, type]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise GraphError(f"{where}: expected an object, got {type(raw).__name__}")
    for name, kind in fields.items():
        if name not in raw:
            raise GraphError(f"{where}: field {name!r} is missing")
        value = raw[name]
        ok = isinstance(value, bool) if kind is bool else isinstance(value, kind) and not isinstance(value, bool)
        if not ok:
            raise GraphError(f"{where}: field {name!r} must be {kind.__name__}, got {value!r}")
    return raw


def _segments(where: str, unit: str, usage: Any) -> list[Use]:
    """Run-length encode one reservation-table row into ``Use`` segments."""
    if not isinstance(usage, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in usage):
        raise GraphError(f"{where}: rrt[{unit!r}] must be a list of non-negative integers")
    out: list[Use] = []
    i = 0
    while i < len(usage):
        j = i
        while j < len(usage) and usage[j] == usage[i]:
            j += 1
        if usage[i] > 0:
            out.append(Use(unit=unit, offset=i, length=j - i, amount=usage[i]))
        i = j
    return out


def _op(raw: Any, arch: Arch, index: int) -> Op:
    n = _typed(f"node #{index}", raw, NODE_FIELDS)
    where = f"node {n['id']}"
    if not isinstance(n["rrt"], dict):
        raise GraphError(f"{where}: rrt must be an object")
    uses: list[Use] = []
    is_async = False
    for pipeline, usage in sorted(n["rrt"].items()):
        unit = arch.unit_for_pipeline(pipeline)
        if unit is None:
            raise ProblemError(f"{where}: pipeline {pipeline!r} has no unit in arch {arch.name!r} "
                               f"(units: {', '.join(arch.unit_names())})")
        if isinstance(usage, list) and len(usage) > n["latency"]:
            raise GraphError(f"{where}: rrt[{pipeline!r}] spans {len(usage)} cycles but latency is {n['latency']}")
        segs = _segments(where, unit.name, usage)
        uses.extend(segs)
        is_async |= unit.is_async and bool(segs)
    if n["pipeline"] != "NONE" and arch.unit_for_pipeline(n["pipeline"]) is None:
        raise ProblemError(f"{where}: pipeline {n['pipeline']!r} has no unit in arch {arch.name!r}")
    if n["min_warps"] < 1:
        raise GraphError(f"{where}: min_warps {n['min_warps']} must be at least 1")
    issuer = Issuer.WARPGROUP if n["min_warps"] == 4 else Issuer.THREAD if is_async else Issuer.WARP
    return Op(
        name=str(n["id"]),
        kind=n["op_kind"],
        ref=n["op_ref"],
        uses=tuple(uses),
        latency=n["latency"],
        is_async=is_async,
        issuer=issuer,
        warps=n["min_warps"],
        regs=n["regs"],
        smem_bytes=n["smem_footprint"],
        tmem_cols=n["tmem_footprint"],
        variable_latency=n["variable_latency"],
        streaming=n["streaming"],
        handoff_cycles=n["spill_cost"],
    )


def _carrier(src: Op) -> Carrier:
    """What carries a value out of ``src``: where its result lives."""
    if src.regs > 0:
        return Carrier.REGISTERS
    if src.tmem_cols > 0:
        return Carrier.TMEM
    if src.smem_bytes > 0:
        return Carrier.SMEM
    return Carrier.ORDER


def _accumulates(edge: dict[str, Any], src: Op) -> bool:
    """Whether ``edge`` is an accumulator chain: an op reading its own result of the previous
    iteration (D += A x B on the tensor core, whose D stays in the same TMEM columns or
    registers). The next instance takes the storage over in place, so the value is held one II,
    not one II plus the reader's latency; the format has no flag for this, the self-loop says it."""
    return edge["src"] == edge["dst"] and edge["distance"] == 1 and (src.tmem_cols > 0 or src.regs > 0)


def ddg_from_dict(data: Any, arch: Arch, name: str = "ddg", loop: int = 0) -> LoopBody:
    """Build a ``LoopBody`` from a parsed curated-ddg document."""
    if not isinstance(data, dict):
        raise GraphError(f"{name}: the top level must be an object")
    if data.get("schema_version") != SCHEMA:
        raise GraphError(f"{name}: schema_version is {data.get('schema_version')!r}; expected {SCHEMA!r}")
    loops = data.get("loops")
    if not isinstance(loops, list) or not loops:
        raise GraphError(f"{name}: 'loops' must be a non-empty list")
    if not 0 <= loop < len(loops):
        raise GraphError(f"{name}: loop index {loop} out of range (the file has {len(loops)})")
    entry = loops[loop]
    ddg = entry.get("ddg") if isinstance(entry, dict) else None
    if not isinstance(ddg, dict) or not isinstance(ddg.get("nodes"), list) or not isinstance(ddg.get("edges"), list):
        raise GraphError(f"{name}: loops[{loop}].ddg must hold 'nodes' and 'edges' lists")
    ops = [_op(raw, arch, i) for i, raw in enumerate(ddg["nodes"])]
    by_name = {op.name: op for op in ops}
    edges = []
    for i, raw in enumerate(ddg["edges"]):
        e = _typed(f"edge #{i}", raw, EDGE_FIELDS)
        src = by_name.get(str(e["src"]))
        if src is None:
            raise GraphError(f"edge #{i} {e['src']} -> {e['dst']}: node {e['src']} is not in the graph")
        edges.append(Edge(src=str(e["src"]), dst=str(e["dst"]), latency=e["latency"], distance=e["distance"],
                          blocking=e["blocking"], carrier=_carrier(src), in_place=_accumulates(e, src)))
    trip = entry.get("trip_count")  # informational: a missing or malformed count is dropped, not fatal
    valid_trip = isinstance(trip, int) and not isinstance(trip, bool) and trip >= 0
    return LoopBody(name, tuple(ops), tuple(edges), {"source": name}, trip if valid_trip else None)


def read_ddg(path: str | Path, arch: Arch, loop: int = 0) -> LoopBody:
    """Read one loop of a curated-ddg JSON file."""
    p = Path(path)
    return ddg_from_dict(read_json(p, "graph", GraphError), arch, name=p.name.split(".")[0] or "ddg", loop=loop)


