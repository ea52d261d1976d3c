"""Fuzz twill's input boundary: every bad input must give one error line and exit 2 (issue 5).

Run from the repository root:

    python bench/fuzz.py --count 10000 --seed 1

Each input is a valid seed with random structural mutations: a curated-ddg graph (the shared
Triton graphs in ../shared/ddg when present, and graphs generated here from the built-in programs
and at random, so the fuzzer needs nothing outside the repository), a ``twill.schedule/1`` file
with its embedded ``twill.body/1``, an arch TOML file from ``archs/``, program parameters
(``-p name=value``), or a program ``.py`` file that raises or returns garbage. Mutations drop,
duplicate and retype keys, put in wrong types, huge, negative, NaN and infinite numbers, unicode,
deep nesting, zero-distance cycles and unknown units, and truncate or corrupt the text.

Each input runs the real CLI entry point, ``twill.cli.main(argv)``, in-process, with stdout and
stderr captured, and is flagged when it

* raises anything but ``SystemExit`` out of ``main``, or prints a traceback (``crash``);
* exits with a status other than 0, 2, or 1 from ``validate`` (``exit``);
* runs longer than ``--timeout`` seconds (``hang``; solve commands get ``--time-limit 1``);
* fails with other than exactly one error line on stderr (``lines``).

Flagged inputs are written to ``--out`` (argv and files) for replay with ``--replay DIR``. The run
is deterministic for a given ``--seed``; the exit status is 1 when anything was flagged. Never
run as a test (tests/test_fuzz.py runs a few hundred inputs of the same generator).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
import tomllib
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "ddg"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("MPLBACKEND", "Agg")

SOLVE_LIMIT = ["--time-limit", "1", "--workers", "1"]
HUGE = [2**31, 2**63, 10**30, -(2**63), 10**400]
WEIRD_STRINGS = ["", " ", "a b", "ü", "名前", "\u200b", "\u202e", "\ud800", "x" * 2000, "NaN", "1e999", "-1", "0x10",
                 "TC", "tma", "../x", "\n", "None"]


# -- inputs -----------------------------------------------------------------------------------
@dataclass
class Case:
    """One fuzz input: the CLI arguments and the files they name (relative to a scratch dir)."""

    kind: str
    argv: list[str]
    files: dict[str, bytes] = field(default_factory=dict)
    mutations: list[str] = field(default_factory=list)


def _weird_value(rng: random.Random, like: Any) -> Any:
    """A value of the wrong type or an extreme magnitude, often related to ``like``."""
    choices: list[Callable[[], Any]] = [
        lambda: None, lambda: True, lambda: False, lambda: 0, lambda: -1, lambda: rng.choice(HUGE),
        lambda: float("nan"), lambda: float("inf"), lambda: -float("inf"), lambda: 0.5, lambda: 1e308,
        lambda: rng.choice(WEIRD_STRINGS), lambda: [], lambda: {}, lambda: [like], lambda: {"value": like},
        lambda: str(like),
    ]
    if isinstance(like, bool):
        choices.append(lambda: int(like))
    elif isinstance(like, int):
        choices += [lambda: like + 1, lambda: -like, lambda: like * 1000, lambda: float(like), lambda: like * 2**20]
    elif isinstance(like, str):
        choices += [lambda: like.upper(), lambda: like + " ", lambda: like[::-1]]
    return rng.choice(choices)()


def _paths(tree: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (sequence of keys and indices) to a node of a JSON-like tree."""
    out = [prefix]
    if isinstance(tree, dict):
        for k, v in tree.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            out += _paths(v, (*prefix, i))
    return out


def _get(tree: Any, path: tuple) -> Any:
    for k in path:
        tree = tree[k]
    return tree


def mutate_tree(rng: random.Random, tree: Any) -> str:
    """One generic structural mutation of ``tree`` in place; returns what it did."""
    paths = [p for p in _paths(tree) if p]
    if not paths:
        return "nothing to mutate"
    path = rng.choice(paths)
    parent, key = _get(tree, path[:-1]), path[-1]
    old = parent[key]
    op = rng.choice(["drop", "retype", "retype", "retype", "duplicate", "nest", "empty", "unknown_key", "swap"])
    if op == "drop":
        del parent[key]
    elif op == "retype":
        parent[key] = _weird_value(rng, old)
    elif op == "duplicate" and isinstance(parent, list):
        parent.insert(key, json.loads(json.dumps(old)))
    elif op == "nest":
        depth = rng.choice([2, 50, 400])  # deeper nesting comes from the text-level "deep" mutation
        value = old
        for _ in range(depth):
            value = [value]
        parent[key] = value
    elif op == "empty":
        parent[key] = type(old)() if isinstance(old, (list, dict, str)) else None
    elif op == "unknown_key" and isinstance(old, dict):
        old[rng.choice(["extra", "ü", "", "value"])] = _weird_value(rng, 1)
    elif op == "swap" and isinstance(parent, list) and len(parent) > 1:
        j = rng.randrange(len(parent))
        parent[key], parent[j] = parent[j], parent[key]
    else:
        parent[key] = _weird_value(rng, old)
        op = "retype"
    return f"{op} {'/'.join(map(str, path))}"


def mutate_text(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """One text-level corruption: truncation, byte flips, invalid UTF-8, a huge literal, ..."""
    op = rng.choice(["truncate", "flip", "utf8", "huge_literal", "deep", "empty", "dup_line", "drop_line"])
    if op == "truncate" and data:
        return data[: rng.randrange(len(data))], op
    if op == "flip" and data:
        b = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b), op
    if op == "utf8":
        i = rng.randrange(len(data) + 1)
        return data[:i] + b"\xff\xfe\xc3" + data[i:], op
    if op == "huge_literal":
        digits = [i for i, c in enumerate(data) if chr(c).isdigit()]
        if digits:
            i = rng.choice(digits)
            return data[:i] + rng.choice([b"9" * 5000, b"1e999", b"-0", b"1" * 40]) + data[i:], op
    if op == "deep":
        return b"[" * 100000 + b"]" * 100000, op
    if op == "empty":
        return b"", op
    lines = data.split(b"\n")
    if lines:
        i = rng.randrange(len(lines))
        if op == "dup_line":
            lines.insert(i, lines[i])
        else:
            del lines[i]
    return b"\n".join(lines), op


# -- seeds ------------------------------------------------------------------------------------
def _curated(body: Any, arch: Any) -> dict:
    """A ``LoopBody`` written as a curated-ddg-0.2 document (the importer's input format)."""
    ids = {op.name: i + 1 for i, op in enumerate(body.ops)}
    nodes = []
    for op in body.ops:
        rrt: dict[str, list[int]] = {}
        for u in op.uses:
            alias = (arch.unit(u.unit).aliases or (u.unit.upper(),))[0]
            row = rrt.setdefault(alias, [0] * max(op.latency, 1))
            for c in range(u.offset, min(u.end, len(row))):
                row[c] += u.amount
        nodes.append({
            "id": ids[op.name], "op_ref": op.name, "op_kind": op.kind,
            "pipeline": next(iter(rrt), "NONE"), "latency": max(op.latency, 1 if rrt else 0),
            "occupancy": op.busy_cycles, "rrt": rrt, "min_warps": op.min_warps, "regs": op.regs,
            "spill_cost": op.handoff_cycles or 0, "smem_footprint": op.smem_bytes, "tmem_footprint": op.tmem_cols,
            "variable_latency": op.variable_latency, "streaming": op.streaming})
    edges = [{"src": ids[e.src], "dst": ids[e.dst], "distance": e.distance, "latency": e.latency,
              "blocking": e.blocking} for e in body.edges]
    return {"schema_version": "curated-ddg-0.2", "curation_source": {"fuzz": body.name},
            "loops": [{"loop_id": 0, "trip_count": 16, "ddg": {"nodes": nodes, "edges": edges}}]}


def _random_graph(rng: random.Random) -> dict:
    """A small valid curated graph: a random DAG plus loop-carried edges of distance >= 1."""
    n = rng.randint(1, 8)
    pipelines = ["TC", "TMA", "SFU", "CUDA", "TMEM", "NONE"]
    nodes = []
    for i in range(1, n + 1):
        pipe = rng.choice(pipelines)
        latency = rng.randint(1, 40)
        rrt = {} if pipe == "NONE" else {pipe: [1] * rng.randint(1, latency) + [0] * 0}
        variable = pipe == "TMA" and rng.random() < 0.7
        nodes.append({"id": i, "op_ref": f"op{i}", "op_kind": "k", "pipeline": pipe, "latency": latency,
                      "occupancy": len(rrt.get(pipe, [])), "rrt": rrt, "min_warps": rng.choice([1, 1, 4]),
                      "regs": rng.choice([0, 0, 128, 4096]), "spill_cost": rng.choice([0, 30]),
                      "smem_footprint": rng.choice([0, 0, 1024]), "tmem_footprint": rng.choice([0, 0, 64]),
                      "variable_latency": variable, "streaming": variable and rng.random() < 0.5})
    edges = []
    for _ in range(rng.randint(0, 2 * n)):
        a, b = sorted(rng.sample(range(1, n + 1), 2)) if n > 1 else (1, 1)
        distance = 0 if a < b else 1
        if rng.random() < 0.3:
            a, b, distance = b, a, rng.randint(1, 3)
        edges.append({"src": a, "dst": b, "distance": distance, "latency": rng.randint(0, 50),
                      "blocking": rng.random() < 0.3})
    return {"schema_version": "curated-ddg-0.2", "curation_source": {},
            "loops": [{"loop_id": 0, "trip_count": 8, "ddg": {"nodes": nodes, "edges": edges}}]}


@dataclass
class Seeds:
    graphs: list[dict]
    schedules: list[dict]
    archs: list[str]
    programs: dict[str, dict[str, Any]]
    ttgir: list[str] = field(default_factory=list)  # the checked-in TTGIR fixtures (examples/triton/ttgir)


def build_seeds() -> Seeds:
    """Valid inputs to mutate, made from the repository alone (plus ../shared/ddg when present)."""
    from twill.arch.registry import archs_dir, get_arch
    from twill.frontend.programs import list_programs, load_program
    from twill.problem import build_problem
    from twill.solver.ims import ims_swp, ims_triton_split

    graphs = [json.loads(p.read_text()) for p in sorted(SHARED.glob("*.json"))] if SHARED.is_dir() else []
    schedules = []
    for arch_name in ("h100", "b200"):
        arch = get_arch(arch_name)
        for name, params in (("toy", {}), ("gemm", {}), ("fa_fwd", {}), ("fa_bwd", {})):
            body = load_program(name, arch, params)
            graphs.append(_curated(body, arch))
            p = build_problem(body, arch)
            for run in (ims_triton_split, ims_swp):
                sched = run(p).schedule
                if sched is not None:
                    schedules.append(sched.to_dict())
    archs = [p.read_text() for p in sorted(archs_dir().glob("*.toml"))]
    programs = {info.name: dict(info.parameters) for info in list_programs()}
    ttgir = [p.read_text() for p in sorted((ROOT / "examples" / "triton" / "ttgir").glob("*/*.ttgir"))]
    return Seeds(graphs, schedules, archs, programs, ttgir)


# -- generators, one per input kind -------------------------------------------------------------
def _dump_json(tree: Any) -> bytes:
    return json.dumps(tree, allow_nan=True).encode("utf-8", "surrogatepass")


def _graph_mutation(rng: random.Random, doc: dict) -> str:
    """A mutation that knows the curated-ddg schema: cycles, unknown units, bad references."""
    try:
        ddg = doc["loops"][0]["ddg"]
        nodes, edges = ddg["nodes"], ddg["edges"]
        node = rng.choice([n for n in nodes if isinstance(n, dict)])
    except (KeyError, IndexError, TypeError):
        return mutate_tree(rng, doc)
    if not isinstance(edges, list):
        return mutate_tree(rng, doc)
    op = rng.choice(["zero_cycle", "unknown_unit", "dangling", "dup_id", "rrt_long", "rrt_amount", "flags",
                     "self_loop", "field"])
    ids = [n.get("id") for n in nodes if isinstance(n, dict)]
    if op == "zero_cycle" and edges:
        e = rng.choice(edges)
        edges.append({**e, "src": e.get("dst"), "dst": e.get("src"), "distance": 0})
    elif op == "unknown_unit":
        node["pipeline"] = rng.choice(["NPU", "tc", "", "ü"])
        node["rrt"] = {node["pipeline"]: [1]}
    elif op == "dangling":
        edges.append({"src": rng.choice(ids), "dst": 10**6, "distance": 0, "latency": 1, "blocking": False})
    elif op == "dup_id" and len(nodes) > 1:
        rng.choice(nodes)["id"] = node.get("id")
    elif op == "rrt_long":
        node["rrt"] = {k: [1] * (node.get("latency", 1) + rng.randint(1, 5)) for k in node.get("rrt") or {"TC": 0}}
    elif op == "rrt_amount":
        node["rrt"] = {k: [rng.choice([2, 64, 2**40, -1])] for k in node.get("rrt") or {"TC": 0}}
    elif op == "flags":
        node["streaming"], node["variable_latency"] = rng.choice([(True, False), (True, True), (False, True)])
    elif op == "self_loop":
        edges.append({"src": node.get("id"), "dst": node.get("id"), "distance": rng.choice([0, 1, 10**9]),
                      "latency": rng.choice([0, 5, 10**9]), "blocking": True})
    else:
        key = rng.choice(sorted(node))
        node[key] = _weird_value(rng, node[key])
        return f"node field {key}"
    return op


def _mutate(rng: random.Random, doc: Any, aimed: Callable[[random.Random, Any], str]) -> str:
    """A schema-aware mutation half the time, a generic one otherwise; an aimed mutation that
    trips over an earlier one's damage falls back to the generic kind."""
    if rng.random() < 0.5:
        try:
            return aimed(rng, doc)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            pass
    return mutate_tree(rng, doc)


def gen_graph(rng: random.Random, seeds: Seeds) -> Case:
    doc = json.loads(json.dumps(rng.choice(seeds.graphs))) if rng.random() < 0.8 else _random_graph(rng)
    mutations = []
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        mutations.append(_mutate(rng, doc, _graph_mutation))
    data = _dump_json(doc)
    if rng.random() < 0.15:
        data, what = mutate_text(rng, data)
        mutations.append(what)
    arch = rng.choice(["b200", "b200", "h100"])
    command = rng.random()
    if command < 0.7:
        argv = ["show", "g.json", "--arch", arch]
    elif command < 0.85:
        argv = ["solve", "g.json", "--arch", arch, "-q", "--swp-only", *SOLVE_LIMIT]
    else:
        argv = ["solve", "g.json", "--arch", arch, "-q", "--objective", "ii", *SOLVE_LIMIT]
    return Case("graph", argv, {"g.json": data}, mutations)


def _restage(doc: dict) -> None:
    """Recompute every op's stage and offset from its start: the file stays well-formed, so the
    validator's rules and the simulator (not the reader) meet the change."""
    for o in doc["ops"]:
        o["stage"], o["offset"] = divmod(o["start"], doc["ii"])


def _schedule_mutation(rng: random.Random, doc: dict) -> str:
    op = rng.choice(["ii", "start", "group", "body_cycle", "unknown_op", "format", "tree",
                     "shift", "retime", "regroup", "warps", "regs"])
    ops = [o for o in doc.get("ops", []) if isinstance(o, dict)] if isinstance(doc.get("ops"), list) else []
    groups = [g for g in doc.get("groups", []) if isinstance(g, dict)] if isinstance(doc.get("groups"), list) else []
    if op == "shift" and ops:  # a well-formed schedule that breaks rules: an op moved in time
        rng.choice(ops)["start"] = rng.randrange(0, 3 * doc["ii"])
        _restage(doc)
    elif op == "retime":  # every op kept, II changed within a factor of 2 (stages stay few)
        doc["ii"] = rng.randint(max(1, doc["ii"] // 2), 2 * doc["ii"])
        _restage(doc)
    elif op == "regroup" and ops and groups:  # an op moved to another group, its lists kept in step
        o, g = rng.choice(ops), rng.choice(groups)
        for other in groups:
            if o["id"] in other.get("ops", []):
                other["ops"].remove(o["id"])
        o["group"] = g["id"]
        g.setdefault("ops", []).append(o["id"])
    elif op == "warps" and groups:
        rng.choice(groups)["warps"] = rng.choice([0, 1, 2, 3, 4, 8, 64])
    elif op == "regs" and groups:
        rng.choice(groups)["regs_per_thread"] = rng.choice([None, 0, 7, 24, 256, 10**6])
    elif op == "ii":
        doc["ii"] = rng.choice([0, -1, 1, doc.get("ii", 1) - 1, 10**12, 2**63, 0.5, "2048"])
    elif op == "start" and ops:
        rng.choice(ops)["start"] = _weird_value(rng, 0)
    elif op == "group" and ops:
        rng.choice(ops)["group"] = rng.choice([-1, 99, None, "0"])
    elif op == "body_cycle":
        body = doc.get("body") if isinstance(doc.get("body"), dict) else {}
        edges = body.get("edges") if isinstance(body.get("edges"), list) else []
        dicts = [e for e in edges if isinstance(e, dict)]
        if dicts:
            e = rng.choice(dicts)
            edges.append({**e, "src": e.get("dst"), "dst": e.get("src"), "distance": 0})
    elif op == "unknown_op" and ops:
        doc["ops"].append({**rng.choice(ops), "id": "ghost"})
    elif op == "format":
        doc[rng.choice(["format", "arch"])] = _weird_value(rng, "x")
    else:
        return mutate_tree(rng, doc)
    return op


def gen_schedule(rng: random.Random, seeds: Seeds) -> Case:
    doc = json.loads(json.dumps(rng.choice(seeds.schedules)))
    mutations = []
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        mutations.append(_mutate(rng, doc, _schedule_mutation))
    data = _dump_json(doc)
    if rng.random() < 0.1:
        data, what = mutate_text(rng, data)
        mutations.append(what)
    command = rng.random()
    if command < 0.5:
        argv = ["validate", "s.json"]
    elif command < 0.8:
        argv = ["simulate", "s.json", "-n", "3"]
    elif command < 0.9:
        argv = ["estimate", "s.json"]
    else:
        argv = ["gantt", "s.json", "-o", "s.svg"]
    return Case("schedule", argv, {"s.json": data}, mutations)


def _toml_key(key: str) -> str:
    return key if key and all(c.isalnum() or c in "_-" for c in key) and key.isascii() else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):  # loops, not generators: one frame per level of a deeply nested value
        parts = []
        for v in value:
            parts.append(_toml_value(v))
        return "[" + ", ".join(parts) + "]"
    if isinstance(value, dict):
        parts = []
        for k, v in value.items():
            parts.append(f"{_toml_key(str(k))} = {_toml_value(v)}")
        return "{ " + ", ".join(parts) + " }"
    return json.dumps(str(value))


def to_toml(doc: dict) -> str:
    """A parsed arch file written back as TOML (scalars first, then one table per section)."""
    lines = [f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    for section, table in doc.items():
        if not isinstance(table, dict):
            continue
        if section == "units":
            for name, unit in table.items():
                if isinstance(unit, dict):
                    lines.append(f"\n[units.{_toml_key(str(name))}]")
                    lines += [f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in unit.items()]
                else:
                    lines.append(f"\n[units]\n{_toml_key(str(name))} = {_toml_value(unit)}")
            continue
        lines.append(f"\n[{_toml_key(str(section))}]")
        lines += [f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def _arch_mutation(rng: random.Random, doc: dict) -> str:
    """A mutation aimed at the arch schema: a fact's value or source, a limit, a unit."""
    sections = [s for s in ("limits", "rates", "latencies", "sync", "chip", "features") if isinstance(doc.get(s), dict)]
    if not sections:
        return mutate_tree(rng, doc)
    table = doc[rng.choice(sections)]
    key = rng.choice(sorted(table)) if table else "x"
    fact = table.get(key)
    value = fact.get("value") if isinstance(fact, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and rng.random() < 0.4:
        # a plausible-looking number that the loader accepts: exercises the solver on odd costs
        scaled = value * rng.choice([0, 0.01, 0.5, 2, 10, 1000])
        fact["value"] = int(scaled) if isinstance(value, int) else scaled
        return f"{key}.value scaled"
    if isinstance(fact, dict) and rng.random() < 0.8:
        part = "value" if rng.random() < 0.8 else "source"
        fact[part] = _weird_value(rng, fact.get(part, 1))
        return f"{key}.{part}"
    table[key] = _weird_value(rng, fact)
    return key


def gen_arch(rng: random.Random, seeds: Seeds) -> Case:
    text = rng.choice(seeds.archs)
    mutations = []
    if rng.random() < 0.8:
        doc = tomllib.loads(text)
        for _ in range(rng.choice([1, 1, 2, 3])):
            mutations.append(_mutate(rng, doc, _arch_mutation))
        data = to_toml(doc).encode("utf-8", "surrogatepass")
    else:
        data = text.encode()
    if rng.random() < 0.2 or not mutations:
        data, what = mutate_text(rng, data)
        mutations.append(what)
    program = rng.choice(["toy", "gemm", "fa_fwd", "fa_bwd"])
    command = rng.random()
    if command < 0.75:
        argv = ["show", program, "--arch", "a.toml"]
    else:
        argv = ["solve", rng.choice(["toy", "gemm"]), "--arch", "a.toml", "-q", *SOLVE_LIMIT]
    return Case("arch", argv, {"a.toml": data}, mutations)


PARAM_VALUES = ["0", "-1", "1", "2", "3", "4", "64", "100", "1e3", "999999999999", "2147483648", "nan", "inf", "",
                "abc", "ü", "1.5", "true", "fp64", "bf16", "fp8", "fp32", " 2", "0x10", "1_000",
                "8", "16", "32", "128", "256", "512", "1024", "4096", "65536"]


def gen_params(rng: random.Random, seeds: Seeds) -> Case:
    program = rng.choice(sorted(seeds.programs))
    names = [*seeds.programs[program], "tiles", "", "ü"]
    params = []
    for _ in range(rng.randint(1, 3)):
        shape = rng.random()
        if shape < 0.85:
            params.append(f"{rng.choice(names)}={rng.choice(PARAM_VALUES)}")
        else:
            params.append(rng.choice(["subtiles", "=5", "a=b=c", "=", "block_m==2"]))
    argv = ["show" if rng.random() < 0.8 else "solve", program, "--arch", rng.choice(["h100", "b200"])]
    for p in params:
        argv += ["-p", p]
    if argv[0] == "solve":
        argv += ["-q", *SOLVE_LIMIT]
    return Case("params", argv, {}, params)


PROGRAM_TEMPLATES = [
    "raise ValueError('broken at import')\n",
    "import sys\nsys.exit(3)\n",
    "import sys\ndef build(arch):\n    sys.exit(0)\n",
    "def build(arch):\n    return {ret}\n",
    "build = 5\n",
    "DESCRIPTION = 'no build'\n",
    "PARAMETERS = {params}\ndef build(arch, **kw):\n    return None\n",
    "def build():\n    return None\n",
    "def build(arch):\n    raise RuntimeError('build failed')\n",
    "def build(arch):\n    return build(arch)\n",
    "def build(arch\n",
    "from twill import LoopBuilder, Use\n"
    "def build(arch):\n    b = LoopBuilder({name})\n    b.op({op}, kind={kind}, uses=[Use(unit={unit}, length={length})], "
    "latency={latency}, regs={regs})\n    b.edge({op}, {op}, distance={distance})\n    return b.build()\n",
    "from twill import LoopBody, Op\n"
    "def build(arch):\n    return LoopBody({name}, ({ops}), (), params={bodyparams})\n",
]


def gen_program(rng: random.Random, seeds: Seeds) -> Case:
    template = rng.choice(PROGRAM_TEMPLATES)

    def lit() -> str:
        return repr(_weird_value(rng, rng.choice([1, "x", 7])))

    text = template.format(
        ret=rng.choice(["None", "5", "'body'", "[1, 2]", "{'ops': []}", "object()"]),
        params=rng.choice(["5", "[1]", "{'x': None}", "{'x': [1]}", "{1: 2}", "{'n': 4}", "'abc'"]),
        name=rng.choice(["'p'", lit()]), op=rng.choice(["'a'", lit()]), kind=rng.choice(["'k'", lit()]),
        unit=rng.choice(["'tc'", "'mufu'", lit()]), length=rng.choice(["4", lit()]), latency=rng.choice(["8", lit()]),
        regs=rng.choice(["0", lit()]), distance=rng.choice(["1", lit()]),
        ops=rng.choice(["Op(name='a'),", "Op(name='a', uses=[1, 2]),", "Op(name='a', kind=5),",
                        "Op(name='a', is_async='yes'),", "Op(name='a', latency=2**70),", "'op',", ""]),
        bodyparams=rng.choice(["{}", "{'a': object()}", "{1: 2}", "{'b': float('nan')}", "5"]),
    )
    data = text.encode("utf-8", "surrogatepass")
    if rng.random() < 0.1:
        data, _ = mutate_text(rng, data)
    command = rng.random()
    if command < 0.7:
        argv = ["show", "p.py", "--arch", "h100"]
    else:
        argv = ["solve", "p.py", "--arch", "h100", "-q", "--out", "out.json", *SOLVE_LIMIT]
    if rng.random() < 0.2:
        argv += ["-p", rng.choice(["n=3", "x=1", "n=abc"])]
    return Case("program", argv, {"p.py": data}, [template.split("\n", 1)[0]])


TTGIR_OPS = ["arith.mulf", "arith.remf", "math.exp2", "tt.dot", "ttng.warp_group_dot", "ttng.tc_gen5_mma", "scf.if",
             "scf.for", "tt.reduce", "ttg.convert_layout", "ttng.tmem_load", "tt.load", "foo.bar", "ttng.wait_barrier"]
TTGIR_TOKENS = ["f16", "f32", "i8", "xyz", "!tt.ptr<f16>", "0", "-1", "99999999999", "%", "{", "}", "(", ")", "<", ">",
                "loc(", "#loc999", "#mma", ":", "->", "iter_args(", "scf.yield"]


def _ttgir_mutation(rng: random.Random, lines: list[str]) -> str:
    """One structural change to TTGIR text: an op renamed, a token swapped, a line dropped, moved or
    duplicated, a region opened or closed, a shape changed."""
    if not lines:
        return "empty"
    i = rng.randrange(len(lines))
    what = rng.choice(["rename_op", "token", "drop", "dup", "move", "brace", "shape", "loc"])
    if what == "rename_op":
        names = re.findall(r"\b[a-z_]+\.[a-z_0-9.]+\b", lines[i])
        if names:
            lines[i] = lines[i].replace(rng.choice(names), rng.choice(TTGIR_OPS), 1)
    elif what == "token":
        words = lines[i].split(" ")
        words[rng.randrange(len(words))] = rng.choice(TTGIR_TOKENS)
        lines[i] = " ".join(words)
    elif what == "drop":
        del lines[i]
    elif what == "dup":
        lines.insert(i, lines[i])
    elif what == "move":
        lines.insert(rng.randrange(len(lines)), lines.pop(i))
    elif what == "brace":
        lines.insert(i, rng.choice(["}", "{", "      scf.if %true {", "  }) : (f32) -> f32", "^bb0(%a: f32):"]))
    elif what == "shape":
        lines[i] = re.sub(r"\d+x", lambda m: rng.choice(["0x", "1x", "3x", "65536x", "999999999999x"]), lines[i], count=1)
    else:
        lines[i] = lines[i].replace("loc(", rng.choice(["loc(((", "loc(#loc", "loc(\"", ""]), 1)
    return f"{what}@{i}"


def gen_ttgir(rng: random.Random, seeds: Seeds) -> Case:
    """A checked-in TTGIR fixture with line-level mutations, read as a .ttgir program."""
    text = rng.choice(seeds.ttgir) if seeds.ttgir else "module {\n}\n"
    lines = text.splitlines()
    mutations = [_ttgir_mutation(rng, lines) for _ in range(rng.choice([1, 1, 2, 3, 5]))]
    data = "\n".join(lines).encode("utf-8", "surrogatepass")
    if rng.random() < 0.2:
        data, what = mutate_text(rng, data)
        mutations.append(what)
    arch = rng.choice(["h100", "b200"])
    command = rng.random()
    if command < 0.6:
        argv = ["show", "k.ttgir", "--arch", arch]
    elif command < 0.8:
        argv = ["import", "k.ttgir", "--arch", arch, "--out", "g.json"]
    else:
        argv = ["solve", "k.ttgir", "--arch", arch, "-q", "--swp-only", *SOLVE_LIMIT]
    return Case("ttgir", argv, {"k.ttgir": data}, mutations)


GENERATORS: dict[str, tuple[float, Callable[[random.Random, Seeds], Case]]] = {
    "graph": (0.3, gen_graph),
    "schedule": (0.2, gen_schedule),
    "arch": (0.2, gen_arch),
    "params": (0.1, gen_params),
    "program": (0.1, gen_program),
    "ttgir": (0.1, gen_ttgir),
}


def generate(rng: random.Random, seeds: Seeds) -> Case:
    kinds = list(GENERATORS)
    kind = rng.choices(kinds, weights=[GENERATORS[k][0] for k in kinds])[0]
    return GENERATORS[kind][1](rng, seeds)


# -- running one input --------------------------------------------------------------------------
class _Timeout(BaseException):
    """Raised by the per-input alarm; a BaseException so no ``except Exception`` swallows it."""


@dataclass
class Outcome:
    status: int | str  # exit status, or "crash" / "hang"
    seconds: float
    stdout: str
    stderr: str
    problem: str = ""  # why the input is flagged; empty when it behaved


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout()


def error_lines(stderr: str) -> list[str]:
    """The error lines of stderr, without argparse's usage block (``usage:`` and its continuation)."""
    lines, in_usage = [], False
    for line in stderr.splitlines():
        if line.startswith("usage:"):
            in_usage = True
            continue
        if in_usage and line.startswith(" "):
            continue
        in_usage = False
        if line.strip():
            lines.append(line)
    return lines


def run_case(case: Case, workdir: Path, timeout: float) -> Outcome:
    """Run ``case`` through ``twill.cli.main`` in ``workdir`` and judge what it did."""
    from twill.cli import main

    for name, data in case.files.items():
        (workdir / name).write_bytes(data)
    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    start = time.monotonic()
    cwd = os.getcwd()
    status: int | str
    problem = ""
    try:
        os.chdir(workdir)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(case.argv)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 2
    except _Timeout:
        status, problem = "hang", f"no answer within {timeout:g} s"
    except BaseException as exc:  # noqa: BLE001 - anything escaping main is what we look for
        status, problem = "crash", f"{type(exc).__name__}: {str(exc)[:300]}"
        err.write(traceback.format_exc())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        os.chdir(cwd)
    seconds = time.monotonic() - start
    stdout, stderr = out.getvalue(), err.getvalue()
    if not problem:
        problem = judge(case, status, stdout, stderr)
    return Outcome(status, seconds, stdout, stderr, problem)


def judge(case: Case, status: int | str, stdout: str, stderr: str) -> str:
    """Why an input that returned from ``main`` misbehaved, or "" when it did not."""
    if "Traceback (most recent call last)" in stdout + stderr:
        return "printed a traceback"
    for name, text in (("stdout", stdout), ("stderr", stderr)):
        try:  # in-process capture accepts any str; a real UTF-8 terminal would raise here
            text.encode("utf-8")
        except UnicodeEncodeError:
            return f"{name} is not encodable as UTF-8 (a real terminal would raise)"
    allowed = {0, 2} | ({1} if case.argv[0] == "validate" else set())
    if status not in allowed:
        return f"exit status {status}"
    if status == 2:
        lines = error_lines(stderr)
        if len(lines) != 1:
            return f"{len(lines)} error lines on stderr"
        if "error:" not in lines[0]:
            return f"error line without 'error:': {lines[0][:120]!r}"
    return ""


def _error_class(stderr: str) -> str:
    """An error line with its numbers and quoted names folded, to count distinct kinds of error."""
    lines = error_lines(stderr)
    text = lines[-1] if lines else ""
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", text)
    text = re.sub(r"\S*/\S*|\b[\w.-]+\.(json|toml|py)\b", "FILE", text)
    return re.sub(r"-?\d[\d.e+]*", "N", text)[:110]


def save(case: Case, outcome: Outcome, out: Path, index: int) -> Path:
    """Write a flagged input where ``--replay`` can find it."""
    d = out / f"{index:06d}-{case.kind}"
    d.mkdir(parents=True, exist_ok=True)
    for name, data in case.files.items():
        (d / name).write_bytes(data)
    (d / "case.json").write_text(json.dumps({
        "kind": case.kind, "argv": case.argv, "mutations": case.mutations, "status": str(outcome.status),
        "problem": outcome.problem, "stderr": outcome.stderr[-2000:]}, indent=1))
    return d


REFERENCE = ["show", "fa_fwd", "--arch", "b200"]  # an ordinary input among the slowest: show's two bounded floors
HANG_FACTOR = 3.0


def hang_limit(least: float) -> float:
    """Seconds an input may run before it counts as a hang: ``least``, or ``HANG_FACTOR`` times what ``REFERENCE`` (an
    input twill answers normally) takes on this machine now, whichever is longer. A fixed limit judges the machine,
    not twill: ``twill show`` runs the structure and unrolled floors, each capped at 60 s of wall clock, and on session
    64's machine (about 5x slower than earlier sessions') ``REFERENCE`` took 27 s alone, so ordinary shows passed 20 s."""
    with tempfile.TemporaryDirectory() as tmp:
        reference = run_case(Case("reference", list(REFERENCE)), Path(tmp), 600.0)
    return max(least, HANG_FACTOR * reference.seconds)


def fuzz(count: int, seed: int, timeout: float, out: Path | None, report: Callable[[str], None] | None = None,
         calibrate: bool = False) -> tuple[list[tuple[int, Case, Outcome]], Counter, float]:
    """Run ``count`` generated inputs; returns the flagged ones, a tally of outcomes, and seconds. With ``calibrate``
    the hang limit is ``hang_limit(timeout)``, else ``timeout``."""
    if calibrate:
        timeout = hang_limit(timeout)
        if report:
            report(f"hang limit {timeout:.1f} s ({HANG_FACTOR:g}x twill {' '.join(REFERENCE)} here, at least the given)")
    rng = random.Random(seed)
    seeds = build_seeds()
    flagged: list[tuple[int, Case, Outcome]] = []
    tally: Counter = Counter()
    messages: Counter = Counter()
    slowest = (0.0, "")
    start = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="twill-fuzz-"))
    try:
        for i in range(count):
            case = generate(rng, seeds)
            workdir = scratch / "cur"
            shutil.rmtree(workdir, ignore_errors=True)
            workdir.mkdir()
            outcome = run_case(case, workdir, timeout)
            tally[(case.kind, str(outcome.status))] += 1
            if outcome.status == 2 and not outcome.problem:
                messages[_error_class(outcome.stderr)] += 1
            if outcome.seconds > slowest[0]:
                slowest = (outcome.seconds, f"{case.kind}: {' '.join(case.argv)}")
            if outcome.problem:
                flagged.append((i, case, outcome))
                where = save(case, outcome, out, i) if out else None
                if report:
                    report(f"#{i} {case.kind} {' '.join(case.argv)}: {outcome.problem}"
                           + (f" -> {where}" if where else ""))
            if report and (i + 1) % 500 == 0:
                report(f"{i + 1} inputs, {len(flagged)} flagged, {time.monotonic() - start:.0f} s")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if report:
        report(f"slowest input: {slowest[0]:.1f} s ({slowest[1]})")
        report(f"{len(messages)} distinct error messages (numbers and quoted names folded); the most frequent:")
        for text, n in messages.most_common(15):
            report(f"  {n:5d}  {text}")
    return flagged, tally, time.monotonic() - start


def replay(directory: Path, timeout: float) -> int:
    """Run one saved input again and print what happens."""
    meta = json.loads((directory / "case.json").read_text())
    files = {p.name: p.read_bytes() for p in directory.iterdir() if p.name != "case.json"}
    case = Case(meta["kind"], meta["argv"], files, meta["mutations"])
    with tempfile.TemporaryDirectory() as tmp:
        outcome = run_case(case, Path(tmp), timeout)
    print(f"argv: {case.argv}\nstatus: {outcome.status} in {outcome.seconds:.2f} s\nproblem: {outcome.problem or '-'}")
    print(f"stderr:\n{outcome.stderr}")
    return 1 if outcome.problem else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=1000, help="inputs to run (default %(default)s)")
    ap.add_argument("--seed", type=int, default=1, help="random seed; the run is deterministic (default %(default)s)")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds per input before it counts as a hang")
    ap.add_argument("--calibrate", action="store_true",
                    help=f"hang limit at least {HANG_FACTOR:g}x this machine's time for 'twill {' '.join(REFERENCE)}'")
    ap.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "twill-fuzz-failures"),
                    help="folder for flagged inputs (default %(default)s)")
    ap.add_argument("--replay", help="run one saved input folder again")
    args = ap.parse_args()
    if args.replay:
        return replay(Path(args.replay), args.timeout)
    flagged, tally, seconds = fuzz(args.count, args.seed, args.timeout, Path(args.out),
                                   report=lambda msg: print(msg, file=sys.stderr, flush=True), calibrate=args.calibrate)
    print(f"{args.count} inputs, seed {args.seed}: {len(flagged)} flagged, {seconds:.0f} s "
          f"({args.count / max(seconds, 1e-9):.1f} inputs/s)")
    by_kind: Counter = Counter()
    for (kind, _status), n in sorted(tally.items()):
        by_kind[kind] += n
    for kind, n in sorted(by_kind.items()):
        statuses = ", ".join(f"exit {s}: {m}" for (k, s), m in sorted(tally.items()) if k == kind)
        print(f"  {kind}: {n} ({statuses})")
    if flagged:
        print(f"flagged inputs saved under {args.out}; replay one with python bench/fuzz.py --replay DIR")
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())
