"""Save and read a ``LoopBody`` as a graph file (``twill.body/1``, the format schedules embed).

``twill import`` writes an imported Triton loop this way, and every command reads it back as a
PROGRAM (``twill show graph.json``), so a kernel is compiled once and scheduled many times; a
schedule file embeds its loop body in the same format. It sits beside the IR, below both the front
end and the schedule (tests/test_layering.py).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from twill.errors import GraphError
from twill.ir import Carrier, Edge, Issuer, LoopBody, Op, Use
from twill.jsonfile import read_json

__all__ = ["BODY_FORMAT", "body_document", "body_from_document", "write_body", "read_body", "is_body_document"]

BODY_FORMAT = "twill.body/1"


def body_document(body: LoopBody) -> dict[str, Any]:
    """The JSON document of ``body``."""
    def op(o: Op) -> dict[str, Any]:
        d = asdict(o)
        d["uses"] = [asdict(u) for u in o.uses]
        d["issuer"] = o.issuer.value
        for name in ("waits", "max_warps", "sync_hold"):
            if not d[name]:
                del d[name]  # fields at their default are left out: older files stay byte-identical
        return d

    def edge(e: Edge) -> dict[str, Any]:
        d = {**asdict(e), "carrier": e.carrier.value}
        if e.cross_latency is None:
            del d["cross_latency"]
        return d

    out = {"format": BODY_FORMAT, "name": body.name, "params": dict(body.params), "trip_count": body.trip_count,
           "ops": [op(o) for o in body.ops], "edges": [edge(e) for e in body.edges]}
    if body.static_smem:
        out["static_smem"] = body.static_smem
    return out


def is_body_document(data: Any) -> bool:
    return isinstance(data, dict) and data.get("format") == BODY_FORMAT


def body_from_document(d: Any, where: str = "graph") -> LoopBody:
    """Rebuild a ``LoopBody``; every field is checked again by the IR's constructors."""
    if not is_body_document(d):
        raise GraphError(f"{where}: not a {BODY_FORMAT} document")
    try:
        ops = tuple(Op(**{**o, "uses": tuple(Use(**u) for u in o["uses"]), "issuer": Issuer(o["issuer"])})
                    for o in d["ops"])
        edges = tuple(Edge(**{**e, "carrier": Carrier(e["carrier"])}) for e in d["edges"])
        return LoopBody(str(d["name"]), ops, edges, d.get("params", {}), d.get("trip_count"), d.get("static_smem", 0))
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise GraphError(f"{where}: malformed loop body ({type(err).__name__}: {' '.join(str(err).split())[:200]})") from None


def write_body(body: LoopBody, path: str | Path) -> None:
    Path(path).write_text(json.dumps(body_document(body), indent=1) + "\n", encoding="utf-8")


def read_body(path: str | Path) -> LoopBody:
    p = Path(path)
    return body_from_document(read_json(p, "graph", GraphError), where=str(p))
