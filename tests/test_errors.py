"""Bad input gives one clear line and exit status 2, never a traceback (issue 2, issue 5)."""

from __future__ import annotations

import json

import pytest

from twill.cli import main

GOOD_NODE = {"id": 1, "op_ref": "x", "op_kind": "k", "pipeline": "TC", "latency": 4, "occupancy": 2,
             "rrt": {"TC": [1, 1, 0, 0]}, "min_warps": 1, "regs": 0, "spill_cost": 0, "smem_footprint": 0,
             "tmem_footprint": 0, "variable_latency": False, "streaming": False}


def ddg(nodes, edges, **top):
    doc = {"schema_version": "curated-ddg-0.2", "curation_source": {}, "loops": [
        {"loop_id": 0, "trip_count": 4, "ddg": {"nodes": nodes, "edges": edges}}]}
    doc.update(top)
    return doc


def node(**kw):
    return {**GOOD_NODE, **kw}


def edge(src, dst, **kw):
    return {"src": src, "dst": dst, "distance": 0, "latency": 1, "blocking": False, **kw}


BAD_GRAPHS = {
    "schema": (ddg([node()], [], schema_version="curated-ddg-9"), "schema_version"),
    "unknown node in edge": (ddg([node()], [edge(1, 7)]), "op '7' is not in the loop body"),
    "negative latency": (ddg([node(id=1), node(id=2)], [edge(1, 2, latency=-3)]), "negative"),
    "zero-distance cycle": (ddg([node(id=1), node(id=2)], [edge(1, 2), edge(2, 1)]), "total distance 0"),
    "unknown unit": (ddg([node(pipeline="NPU", rrt={"NPU": [1, 0, 0, 0]})], []), "'NPU'"),
    "missing field": (ddg([{k: v for k, v in GOOD_NODE.items() if k != "regs"}], []), "'regs' is missing"),
    "wrong type": (ddg([node(latency="4")], []), "latency"),
    "rrt longer than latency": (ddg([node(rrt={"TC": [1] * 9})], []), "spans 9 cycles"),
    "duplicate ids": (ddg([node(id=1), node(id=1)], []), "used twice"),
    "streaming without variable latency": (ddg([node(streaming=True)], []), "streaming"),
    "not json": ("{nope", "not valid JSON"),
    "no loops": ({"schema_version": "curated-ddg-0.2", "loops": []}, "non-empty"),
    "min_warps zero": (ddg([node(min_warps=0)], []), "min_warps"),
}


@pytest.mark.parametrize("case", sorted(BAD_GRAPHS))
def test_malformed_graph_is_one_line_exit_2(case, tmp_path, capsys):
    """Each malformed graph names its problem on one stderr line and exits 2."""
    doc, expected = BAD_GRAPHS[case]
    path = tmp_path / "g.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    assert main(["show", str(path), "--arch", "b200"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("twill: error:") and expected in err, err


ARCH_OK = (__import__("pathlib").Path(__file__).resolve().parents[1] / "archs" / "h100.toml").read_text()

BAD_ARCHS = {
    "no source": (ARCH_OK.replace('sms = { value = 132, source = "V: NVIDIA H100 SXM5 specifications (132 SMs), '
                                  'restated by Lockwood\'s H100 page" }', "sms = { value = 132 }"), "no source"),
    "not toml": ("name = [", "not valid TOML"),
    "missing limit": (ARCH_OK.replace("warps_per_cta = {", "warps_per_ctx = {"), "missing warps_per_cta"),
    "zero capacity": (ARCH_OK.replace('[units.tma]\ncapacity = { value = 1,', '[units.tma]\ncapacity = { value = 0,'),
                      "positive integer"),
    "no name": (ARCH_OK.replace('name = "h100"', ""), "'name'"),
    "negative rate": (ARCH_OK.replace("mufu_ops_per_clk = { value = 16,", "mufu_ops_per_clk = { value = -16,"),
                      "negative"),
}


@pytest.mark.parametrize("case", sorted(BAD_ARCHS))
def test_malformed_arch_is_one_line_exit_2(case, tmp_path, capsys):
    """Each malformed arch file names its problem on one stderr line and exits 2."""
    text, expected = BAD_ARCHS[case]
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert main(["show", "toy", "--arch", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and expected in err, err


@pytest.mark.parametrize("argv, expected", [
    (["show", "nosuch", "--arch", "h100"], "unknown program 'nosuch'"),
    (["show", "toy", "--arch", "a100x"], "unknown arch 'a100x'"),
    (["show", "fa_fwd", "--arch", "h100", "-p", "tiles=2"], "unknown; this program takes"),
    (["show", "fa_fwd", "--arch", "h100", "-p", "subtiles=two"], "not a valid int"),
    (["show", "fa_fwd", "--arch", "h100", "-p", "subtiles=3"], "must divide"),
    (["validate", "/nonexistent.json"], "cannot read schedule"),
])
def test_bad_arguments(argv, expected, capsys):
    """Bad programs, archs, parameters and files give one clear line and exit 2."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and expected in err, err


def test_impossible_memory_is_reported_infeasible(tmp_path, capsys):
    """A buffer larger than shared memory is infeasible at every II, said at once."""
    doc = ddg([node(id=1, pipeline="TMA", rrt={"TMA": [1, 1, 0, 0]}, smem_footprint=10**7,
                    variable_latency=True, streaming=True)], [])
    path = tmp_path / "big.json"
    path.write_text(json.dumps(doc))
    assert main(["solve", str(path), "--arch", "b200", "-q"]) == 2
    assert "shared-memory buffer needs 10000000 B" in capsys.readouterr().err
